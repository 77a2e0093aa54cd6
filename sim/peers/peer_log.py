"""kvsim-peer/1: a real engine's run written as a log that kvsim re-judges without the engine.

``kvsim peer vllm|sglang ... --record F`` writes it; ``kvsim replay F`` (or ``kvsim events F``) reads it back
through the same judge and gives the same findings -- decisions, the engine's structures and counters, its KV
events -- with the same roots and consequences, the engine gone. JSON Lines:

* line 1, the header: ``{"format": "kvsim-peer/1", "engine": "vllm", "config": {...}}`` -- the driver's
  config (block size, pool, limits), the judge's parameters, and ``run``: the exact command line, the engine's and
  kvsim's versions and the workload's name and SHA-256;
* one ``{"request": {"id", "tokens", "max_new_tokens"[, "arrive"]}}`` line per request, as the driver got it;
* every line the engine's driver wrote, in order, less its wall-clock fields (``engine_s``, ``probe_s``,
  ``import_s``: the same run writes the same bytes): ``hello``, one ``step`` per engine step (its decisions, its
  KV-event batches, the ledger of frames and structures, its counters), ``stalled``, ``crash``, ``done``.

Findings name lines of this file (a step's findings its step line), with or without ``--record``: a live run
names ``(vllm run):LINE``, the lines the same deterministic run writes.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import IO, Any

import msgspec

__all__ = ["FORMAT", "Writer", "is_peer_log", "read"]

FORMAT = "kvsim-peer/1"
TIMING = frozenset({"engine_s", "probe_s", "import_s"})  # wall-clock fields a log leaves out

def is_peer_log(first_line: bytes) -> bool:
    """Whether a file's first line is a kvsim-peer/1 header (a look, not a parse)."""
    return b'"format":"kvsim-peer/1"' in first_line.replace(b" ", b"")


class Writer:
    """Counts lines (the judge names them) and writes them when given a binary stream."""

    def __init__(self, stream: IO[bytes] | None) -> None:
        self.stream = stream
        self.line = 0
        self._enc = msgspec.json.Encoder()

    def header(self, engine: str, config: dict, judge: dict, run: dict) -> int:
        return self.write({"format": FORMAT, "engine": engine, "config": config, "judge": judge, "run": run})

    def request(self, req: dict) -> int:
        return self.write({"request": req})

    def write(self, obj: Any) -> int:
        self.line += 1
        if self.stream is not None:
            self.stream.write(self._enc.encode(obj) + b"\n")
        return self.line

    def message(self, msg: dict) -> int:
        """A driver's message, without its wall-clock fields (the same run writes the same bytes)."""
        self.line += 1
        if self.stream is not None:
            if "step" in msg:
                msg = {k: v for k, v in msg.items() if k not in TIMING}
            elif "hello" in msg:
                msg = {"hello": {k: v for k, v in msg["hello"].items() if k not in TIMING}}
            self.stream.write(self._enc.encode(msg) + b"\n")
        return self.line


class PeerLogError(ValueError):
    """Not a readable kvsim-peer/1 log; ``str()`` is ``path:line: reason``."""


def read(name: str, stream: IO[bytes]) -> tuple[dict, list[dict], Iterator[tuple[int, dict]]]:
    """(header, requests, the driver's messages with their line numbers) of a kvsim-peer/1 log."""
    dec = msgspec.json.Decoder()
    lines = iter(io.BufferedReader(stream, 1 << 20) if isinstance(stream, io.RawIOBase) else stream)
    try:
        head = dec.decode(next(lines))
    except (StopIteration, msgspec.DecodeError) as exc:
        raise PeerLogError(f"{name}:1: not a kvsim-peer/1 header: {exc}") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise PeerLogError(f"{name}:1: not a kvsim-peer/1 header")
    for key in ("engine", "config", "judge"):
        if not isinstance(head.get(key), (str, dict)):
            raise PeerLogError(f"{name}:1: header without {key!r}")
    reqs: list[dict] = []
    n = 1
    first: tuple[int, dict] | None = None
    for raw in lines:
        n += 1
        try:
            obj = dec.decode(raw)
        except msgspec.DecodeError as exc:
            raise PeerLogError(f"{name}:{n}: not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise PeerLogError(f"{name}:{n}: not an object")
        if "request" in obj:
            reqs.append(obj["request"])
            continue
        first = (n, obj)
        break

    def rest() -> Iterator[tuple[int, dict]]:
        line = n
        if first is not None:
            yield first
        for raw in lines:
            line += 1
            try:
                obj = dec.decode(raw)
            except msgspec.DecodeError as exc:
                raise PeerLogError(f"{name}:{line}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise PeerLogError(f"{name}:{line}: not an object")
            yield line, obj
    return head, reqs, rest()
