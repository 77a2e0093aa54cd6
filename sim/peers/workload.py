"""Request workloads as token prompts: Mooncake JSON Lines rows turned into deterministic token lists.

A Mooncake row (``input_length``, ``output_length``, ``hash_ids``) names one id per 512-token prompt block;
equal ids at the same position are a shared prefix. Block i becomes 512 tokens drawn from splitmix64 keyed by
(id, j), truncated to ``input_length``: a well-mixed generator, so distinct ids never alias (a weak formula
inflates hit ratios). ``synthetic:prefix-stress[:SEED]`` rows (``sim.workloads.prefix_stress``) are expanded
segment by segment with the same generator: ``length`` tokens of content block ``id`` from ``start``, so a
segment copied after another prefix repeats its tokens exactly. Knows nothing of schedulers. It sits at the top of
``sim.peers``: every engine room is given the same token ids, so none owns it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from kvsim.sim.files import label, open_source
from kvsim.sim.workloads.request import Request as WorkloadRequest

__all__ = ["Request", "MOONCAKE_BLOCK", "VOCAB", "REQUESTS_FORMAT", "block_tokens", "read_mooncake",
           "read_prefix_stress", "read_requests", "read_stress", "read_workload", "requests_jsonl",
           "is_requests_header", "WorkloadError", "PROGRESS_EVERY"]

REQUESTS_FORMAT = "kvsim-requests/1"
"""Requests as token ids (what ``--shrink`` writes): a header line ``{"format": "kvsim-requests/1", ...}``, then one
``{"id", "tokens", "max_new_tokens"[, "arrive"]}`` per request."""

MOONCAKE_BLOCK = 512
MAX_TOKENS = 1 << 28  # a larger token count is a typo in the workload, refused at its line
VOCAB = 151_936  # a real tokenizer's vocabulary size: token ids stay in [0, VOCAB)


class WorkloadError(Exception):
    """A workload file that cannot be read; ``str()`` is ``path:line: reason``."""


class _Row(msgspec.Struct):
    input_length: int
    output_length: int
    hash_ids: list[int]
    timestamp: int = 0


@dataclass(frozen=True)
class Request:
    id: str
    tokens: np.ndarray  # int64 token ids (a list of 145M Python ints would not fit in memory)
    max_new_tokens: int
    blocks: tuple[int, ...]
    arrival_step: int = 0  # the engine step before which a driver submits it (0: at the start)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def block_tokens(block_ids: list[int], length: int) -> np.ndarray:
    """The prompt of a row: block i is 512 tokens keyed by ``block_ids[i]``, the whole cut to ``length``."""
    ids = np.asarray(block_ids, dtype=np.uint64)
    j = np.arange(MOONCAKE_BLOCK, dtype=np.uint64)
    keys = (ids[:, None] << np.uint64(10)) | j[None, :]
    return (_splitmix64(keys.ravel()) % np.uint64(VOCAB)).astype(np.int64)[:length]


def read_mooncake(path: str | Path, limit: int | None = None, max_output: int | None = None,
                  stream=None) -> list[Request]:
    """The first ``limit`` rows of a Mooncake trace as requests ``m0, m1, ...``. ``path`` ``-`` reads standard
    input; ``stream`` is the input already opened (a `sim.files.Source`, read once), which ``path`` names."""
    dec = msgspec.json.Decoder(_Row)
    out: list[Request] = []
    if stream is None:
        try:
            stream = open_source(path)
        except OSError as exc:
            raise WorkloadError(f"{label(path)}:0: cannot read: {exc.strerror or exc}") from None
    path = stream.name
    with io.BufferedReader(stream) as f:
        for n, raw in enumerate(f, start=1):
            if limit is not None and len(out) >= limit:
                break
            if not raw.strip():
                continue
            try:
                row = dec.decode(raw)
            except msgspec.DecodeError as exc:
                raise WorkloadError(f"{path}:{n}: not a Mooncake row: {exc}") from None
            if row.input_length <= 0 or len(row.hash_ids) * MOONCAKE_BLOCK < row.input_length:
                raise WorkloadError(f"{path}:{n}: hash_ids do not cover input_length {row.input_length}")
            if min(row.hash_ids, default=0) < 0 or row.output_length < 0:
                raise WorkloadError(f"{path}:{n}: negative hash id or output length")
            if row.output_length > MAX_TOKENS:
                raise WorkloadError(f"{path}:{n}: output_length {row.output_length} is beyond the {MAX_TOKENS:,} "
                                    "tokens a request may have")
            out_len = max(1, row.output_length if max_output is None else min(row.output_length, max_output))
            out.append(Request(f"m{len(out)}", block_tokens(row.hash_ids, row.input_length), out_len,
                               tuple(row.hash_ids)))
    return out


def read_prefix_stress(seed: int, limit: int | None = None, max_output: int | None = None,
                       progress: Callable[[int], None] | None = None) -> list[Request]:
    """The first ``limit`` rows of ``synthetic:prefix-stress:SEED`` as requests ``s0, s1, ...`` (its default
    count when None), each submitted at its row's step. Linear in ``limit``; ``progress(n)`` hears of every
    ``PROGRESS_EVERY`` requests made."""
    return read_stress("prefix-stress", seed, limit, max_output, progress)


def read_stress(name: str, seed: int, limit: int | None = None, max_output: int | None = None,
                progress: Callable[[int], None] | None = None) -> list[Request]:
    """The first ``limit`` rows of ``synthetic:NAME:SEED`` (``prefix-stress``: requests ``s0, s1, ...``;
    ``hybrid-stress``: ``h0, h1, ...``), its default count when None, each submitted at its row's step. Linear in
    ``limit``; ``progress(n)`` hears of every ``PROGRESS_EVERY`` requests made."""
    from kvsim.sim.workloads import hybrid_stress as hs
    from kvsim.sim.workloads import prefix_stress as ps

    gen, tag = (hs, "h") if name == hs.NAME else (ps, "s")
    memo: dict[int, np.ndarray] = {}
    out: list[Request] = []
    for row in gen.rows(gen.DEFAULT_REQUESTS if limit is None else limit, seed):
        if progress is not None and len(out) % PROGRESS_EVERY == 0 and out:
            progress(PROGRESS_EVERY)
        parts = []
        for cid, start, length in row.segments:
            blk = memo.get(cid)
            if blk is None:
                blk = memo[cid] = block_tokens([cid], MOONCAKE_BLOCK)
            parts.append(blk[start:start + length])
        out_len = max(1, row.output if max_output is None else min(row.output, max_output))
        out.append(Request(f"{tag}{row.rid}", np.concatenate(parts), out_len, row.request().hash_ids, row.step))
    return out


PROGRESS_EVERY = 1000
"""Requests made between two progress calls of a generated workload."""


def read_workload(requests: Iterable[WorkloadRequest], limit: int | None = None, max_output: int | None = None,
                  progress: Callable[[int], None] | None = None) -> list[Request]:
    """Any workload `kvsim simulate` reads (``sim.workloads.open``: an Azure CSV, a bundled ``excerpt:NAME``,
    ``synthetic[:SEED]``), as token prompts ``m0, m1, ...`` submitted at the start: each row's prompt blocks
    become tokens by their ids exactly as a Mooncake row's do (`block_tokens`), so a Mooncake excerpt named
    ``excerpt:conversation`` gives the same requests as its file; a row with an empty prompt is left out.
    Linear in ``limit``; ``progress(n)`` hears
    of every ``PROGRESS_EVERY`` requests made."""
    out: list[Request] = []
    for row in requests:
        if limit is not None and len(out) >= limit:
            break
        if progress is not None and len(out) % PROGRESS_EVERY == 0 and out:
            progress(PROGRESS_EVERY)
        if row.prompt <= 0:  # an empty prompt is nothing to serve (kvsim simulate rejects it on arrival)
            continue
        out_len = max(1, row.output if max_output is None else min(row.output, max_output))
        out.append(Request(f"m{len(out)}", block_tokens(list(row.hash_ids), row.prompt), out_len,
                           tuple(row.hash_ids)))
    return out


class _Explicit(msgspec.Struct):
    id: str
    tokens: list[int]
    max_new_tokens: int
    arrive: int = 0


def is_requests_header(first_line: bytes) -> bool:
    """Whether a file's first line is a kvsim-requests/1 header (a look, not a parse)."""
    return f'"format":"{REQUESTS_FORMAT}"'.encode() in first_line.replace(b" ", b"")


def requests_jsonl(reqs: list[Request], meta: dict) -> bytes:
    """``reqs`` as a kvsim-requests/1 file: the header (``meta`` added to it), then one line per request."""
    enc = msgspec.json.Encoder()
    out = [enc.encode({"format": REQUESTS_FORMAT, **meta})]
    for r in reqs:
        row: dict = {"id": r.id, "tokens": r.tokens.tolist(), "max_new_tokens": r.max_new_tokens}
        if r.arrival_step:
            row["arrive"] = r.arrival_step
        out.append(enc.encode(row))
    return b"\n".join(out) + b"\n"


def read_requests(stream, limit: int | None = None, max_output: int | None = None) -> list[Request]:
    """The first ``limit`` requests of a kvsim-requests/1 file (``stream``: a `sim.files.Source`, read once)."""
    dec = msgspec.json.Decoder(_Explicit)
    out: list[Request] = []
    path = stream.name
    seen: set[str] = set()
    with io.BufferedReader(stream) as f:
        for n, raw in enumerate(f, start=1):
            if n == 1 or not raw.strip():
                continue
            if limit is not None and len(out) >= limit:
                break
            try:
                row = dec.decode(raw)
            except msgspec.DecodeError as exc:
                raise WorkloadError(f"{path}:{n}: not a kvsim-requests/1 row: {exc}") from None
            if not row.tokens or min(row.tokens) < 0 or max(row.tokens) >= VOCAB:
                raise WorkloadError(f"{path}:{n}: tokens must be a non-empty list of ids in [0, {VOCAB})")
            if row.max_new_tokens < 1 or row.max_new_tokens > MAX_TOKENS or row.arrive < 0:
                raise WorkloadError(f"{path}:{n}: max_new_tokens must lie in [1, {MAX_TOKENS:,}], arrive >= 0")
            if row.id in seen:
                raise WorkloadError(f"{path}:{n}: request id {row.id!r} given twice")
            seen.add(row.id)
            out_len = row.max_new_tokens if max_output is None else min(row.max_new_tokens, max_output)
            out.append(Request(row.id, np.asarray(row.tokens, dtype=np.int64), out_len, (), row.arrive))
    return out
