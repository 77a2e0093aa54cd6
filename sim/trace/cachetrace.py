"""cachetrace/1: a scheduler's observable cache decisions, plan by plan, as JSON Lines.

A prefix-caching scheduler (TokenSpeed's, driven by ``sim.peers.tokenspeed``) is judged by what it shows
its runtime, never by its internals. cachetrace/1 records exactly that, one JSON object per line:

* line 1, the header: ``{"format": "cachetrace/1", "config": {...}, "meta": {...}}`` -- the scheduler,
  ``prefix_granularity``, the cache groups (``block_granularity``, ``total_pages`` counting the null block
  0, attention kind) and the batch limits;
* ``submit``: a request and its prompt ``tokens`` (the judge recomputes every page's prefix hash from them);
* ``plan``: one execution plan -- the forward ``batch`` (request ids in slot order, how many slots are
  extends, input lengths, extend prefix lengths, prefill lengths), the block-table ``tables`` of the requests
  whose row changed since it was last recorded (per group; a request's row is the one last recorded for it
  until it finishes or aborts; -1 is padding, 0 a null hole), the pages to ``zero`` and to ``copy``
  (``[src, dst]``) per group, the cache operations (``cache``, each with its op id) and ``aborts``.
  A plan's copies run before its zeroing, so a copy source may be re-granted fresh in the same plan
  (cache concepts: "an unpinned op's sources may be re-granted in the same plan, so it is launched first");
* ``result``: the runtime's answer to a plan -- the tokens each slot produced (``[]`` for an intermediate
  prefill chunk), the requests finished, and the op ids acknowledged (``done``);
* ``kv``: the KV events the scheduler emitted after that answer (``BlockStored`` / ``BlockRemoved`` /
  ``AllBlocksCleared``, the shape vLLM and SGLang publish);
* ``clear``: a ClearCache request after that answer and whether the scheduler ``accepted`` it.

Integers are JSON integers; an unknown field or op is an input error. The JSON Schema
(``spec/cachetrace.schema.json``) is generated from the Structs below (``python -m
kvsim.sim.trace.cachetrace --write-schema``). This module knows the shape of a line, not what it means: the
rules live in ``sim.peers.cachetrace`` (its ``contract`` and the parts it owns).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

import msgspec

from kvsim.sim.files import label, open_source
from kvsim.sim.trace.stream import TraceInputError

__all__ = [
    "FORMAT", "Header", "Config", "Group", "Submit", "Plan", "Batch", "CacheOp", "Abort", "Result", "StorageDone",
    "KvEvents", "KvEvent", "Clear", "EngineError", "BlockStored", "BlockRemoved", "AllBlocksCleared", "Line",
    "CacheTraceInputError", "read_cachetrace", "CacheTraceWriter", "is_cachetrace", "schema_document",
    "schema_text", "SCHEMA_PATH", "main",
]

FORMAT: Literal["cachetrace/1"] = "cachetrace/1"
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "spec" / "cachetrace.schema.json"

Nat = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Entry = Annotated[int, msgspec.Meta(ge=-1, le=2**63 - 1)]
Hash = int | str
"""A KV-event block hash: an integer (TokenSpeed's u64 FNV-1a) or a string (a hex digest)."""
Rid = Annotated[str, msgspec.Meta(min_length=1)]

_S = dict(forbid_unknown_fields=True, omit_defaults=True)


class Group(msgspec.Struct, **_S):
    """One cache group: what one block-table slot covers, how many pages (null block 0 included).
    ``block_granularity`` 0 is what TokenSpeed's State group declares (``attn_kind`` "mamba" only): a compact
    row of slot 0 the input state, slot 1 the final state and, when the extend materializes one, slot 2 its
    internal checkpoint -- not a row of absolute positions."""
    id: Rid
    block_granularity: Nat
    total_pages: Annotated[int, msgspec.Meta(ge=2)]
    attn_kind: Literal["full", "sliding", "mamba"] = "full"
    sliding_window_tokens: Nat | None = None
    cache_blocks_per_lcm_block: Annotated[int, msgspec.Meta(ge=1)] = 1
    replayable: bool = False


class Config(msgspec.Struct, **_S):
    """The configuration the scheduler ran under."""
    scheduler: str
    prefix_granularity: Annotated[int, msgspec.Meta(ge=1)]
    groups: list[Group]
    num_device_pages: Annotated[int, msgspec.Meta(ge=2)]
    num_host_pages: Nat = 0
    num_snapshot_pages: Nat = 0
    max_retracted_requests: Nat = 0
    max_batch_size: Nat = 0
    max_scheduled_tokens: Nat = 0
    enable_mixed_prefill_decode: bool = True
    enable_l3_storage: bool | None = None  # whether an L3 tier sits below Host (None: not said)
    # the most tokens (prompt + max_new_tokens) one request may ask for, by the scheduler's CapacityModel over
    # this pool (None: not said)
    max_single_request_tokens: Nat | None = None


class Header(msgspec.Struct, **_S):
    """Line 1."""
    format: Literal["cachetrace/1"]
    config: Config
    meta: dict = {}


class Submit(msgspec.Struct, tag_field="op", tag="submit", **_S):
    """A request handed to the scheduler: its prompt and how many new tokens it may produce. ``refused`` (the
    scheduler's message) says it was refused at submission and never runs."""
    request: Rid
    tokens: list[Nat]
    max_new_tokens: Nat = 0
    refused: str | None = None


class Batch(msgspec.Struct, **_S):
    """The plan's forward batch: extends first (``extends`` of them), then decodes. ``replay_lengths`` (per
    extend, absent: 0) are the tokens a replayable group re-feeds: the input starts at the prefix length and
    the prefix hit (the shared groups' write floor) lies that many tokens later. ``checkpoint_lengths`` (per
    extend, absent: 0; TokenSpeed's ``extend_state_checkpoint_lens``) place the internal state checkpoint the
    forward materializes that many tokens after the prefix length."""
    requests: list[Rid]
    extends: Nat
    input_lengths: list[Nat]
    prefix_lengths: list[Nat]
    prefill_lengths: list[Nat] = []
    replay_lengths: list[Nat] = []
    checkpoint_lengths: list[Nat] = []


class CacheOp(msgspec.Struct, **_S):
    """One cache operation of a plan (``kind`` is the scheduler's op type: ``WriteBackOp`` Device -> Host,
    ``LoadBackOp`` Host -> Device, ``SnapshotOp`` a retracted request's image, ``RestoreOp`` Host or
    snapshot pool -> Device, ``Storage{Query,Get,Put,Cancel}Op`` the L3 tier). ``op_ids`` are what the
    runtime acknowledges, ``pages`` the (src, dst) pairs it copies. Per pair, when the scheduler says:
    ``groups`` (index into the header's groups; absent: every pair in group 0), ``keys`` (the content hash,
    hex; "" for a Host-only transfer), ``offsets`` (the page offset inside the prefix page). ``pinned`` is a
    write-back's ``source_pinned``; ``request``, ``pool_index``, ``slot`` and ``tiers`` (per pair, "L2" or
    "snapshot") name a snapshot / restore; ``storage_keys`` (no longer written) is accepted so that older
    files still read. An L3 op (``StorageQueryOp``, ``StorageGetOp``, ``StoragePutOp``) lists its object keys
    per key as ``groups`` / ``keys`` / ``offsets`` (the CacheKey: group, content hash, page offset) and, for a
    get or a put, the Host page of each key in ``host_blocks``. L3 op ids are a namespace of their own,
    answered by the result's ``storage`` outcomes, never in ``done``; a ``StorageCancelOp`` carries no op id
    of its own and names the L3 op it cancels in ``cancels`` (that op is still answered once)."""
    kind: str
    op_ids: list[Nat]
    pages: list[tuple[Nat, Nat]] = []
    groups: list[Nat] = []
    keys: list[str] = []
    offsets: list[Nat] = []
    pinned: bool | None = None
    request: str | None = None
    pool_index: Nat | None = None
    slot: Nat | None = None
    tiers: list[Literal["L2", "snapshot"]] = []
    host_blocks: list[Nat] = []
    storage_keys: list[str] = []
    cancels: Nat | None = None


class Abort(msgspec.Struct, **_S):
    request: Rid
    reason: str = ""


class Plan(msgspec.Struct, tag_field="op", tag="plan", **_S):
    """One execution plan. ``tables`` lists only rows that changed since last recorded. ``gauge`` is the
    scheduler's page gauge once the plan is built: ``[empty LCM blocks, active LCM blocks]``."""
    plan: Nat
    batch: Batch
    tables: dict[str, dict[str, list[Entry]]] = {}
    zero: dict[str, list[Nat]] = {}
    copy: dict[str, list[tuple[Nat, Nat]]] = {}
    cache: list[CacheOp] = []
    aborts: list[Abort] = []
    gauge: list[Nat] = []


class StorageDone(msgspec.Struct, **_S):
    """The runtime's completion of an L3 op: per object key, in the op's key order, whether it succeeded (a
    query: the object exists; a get: it was read into its Host page; a put: it was stored) and whether the
    object itself is known bad (``object_failures``, only where ``success`` is false)."""
    op: Nat
    success: list[bool]
    object_failures: list[bool] = []


class Result(msgspec.Struct, tag_field="op", tag="result", **_S):
    """The runtime's answer to plan ``plan``: per batch slot the tokens produced, finished requests,
    acknowledged cache op ids (``done``; an acknowledgement may come plans after the op was issued) and,
    among them, those completed unsuccessfully (``failed``: a load-back whose L3 prefetch missed); ``storage``
    holds the outcome of each L3 op answered (its acknowledgement: L3 ids are their own namespace)."""
    plan: Nat
    tokens: list[list[Nat]] = []
    finish: list[Rid] = []
    done: list[Nat] = []
    failed: list[Nat] = []
    storage: list[StorageDone] = []


class BlockStored(msgspec.Struct, tag_field="type", tag="BlockStored", **_S):
    block_hashes: list[Hash]
    parent_block_hash: Hash | None
    token_ids: list[int]
    block_size: Annotated[int, msgspec.Meta(ge=1)]
    lora_id: int | None = None
    medium: str | None = None


class BlockRemoved(msgspec.Struct, tag_field="type", tag="BlockRemoved", **_S):
    block_hashes: list[Hash]
    medium: str | None = None


class AllBlocksCleared(msgspec.Struct, tag_field="type", tag="AllBlocksCleared", **_S):
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KvEvents(msgspec.Struct, tag_field="op", tag="kv", **_S):
    """KV events drained after the answer to plan ``plan``, in emission order."""
    plan: Nat
    events: list[KvEvent]


class Clear(msgspec.Struct, tag_field="op", tag="clear", **_S):
    """A ClearCache request made after the answer to plan ``plan``, and whether the scheduler accepted it
    (cache concepts: "ClearCache rejects in-flight Host writebacks")."""
    plan: Nat
    accepted: bool


class EngineError(msgspec.Struct, tag_field="op", tag="error", **_S):
    """The scheduler failed a call made after plan ``plan`` (``-1``: before the first plan) with an internal
    error -- its own invariant check refusing a legal sequence of calls; the run stops here."""
    plan: int
    call: str
    message: str


Line = Submit | Plan | Result | KvEvents | Clear | EngineError

_HEADER = msgspec.json.Decoder(Header)
_LINE = msgspec.json.Decoder(Line)
_ENC = msgspec.json.Encoder()


class CacheTraceInputError(TraceInputError):
    """Malformed cachetrace/1 input; ``str()`` is one line ``path:line: reason`` (exit 2, like kvtrace/1)."""


def _why(exc: Exception) -> str:
    text = str(exc).replace("`", "")
    return ("not JSON: " if not isinstance(exc, msgspec.ValidationError) else "") + text


def is_cachetrace_header(first: bytes) -> bool:
    """True when this first line is a cachetrace/1 header."""
    return b'"cachetrace/1"' in first and b'"format"' in first


def is_cachetrace(path: str | Path) -> bool:
    """True when the file's first line is a cachetrace/1 header (cheap: reads one line; never use it on a
    pipe, which it would consume: peek with `sim.files.Source.first_line` instead)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 16)
    except OSError:
        return False
    return is_cachetrace_header(first)


def read_cachetrace(path: str | Path, stream: BinaryIO | None = None) -> tuple[Header, Iterator[tuple[int, Line]]]:
    """Open a cachetrace/1 file (``-``: standard input; ``stream``: the input already opened, which ``path``
    names): its header, and an iterator of (line number, record)."""
    name = label(path)
    raw: Any = stream
    if raw is None:
        try:
            raw = open_source(path)
        except OSError as exc:
            raise CacheTraceInputError(name, 0, f"cannot read: {exc.strerror or exc}") from None
    f: Any = raw if isinstance(raw, io.BufferedIOBase) else io.BufferedReader(raw)
    first = f.readline()
    try:
        header = _HEADER.decode(first.removeprefix(b"\xef\xbb\xbf"))
    except Exception as exc:  # noqa: BLE001 - every decode failure is an input error
        f.close()
        raise CacheTraceInputError(name, 1, f"not a {FORMAT} header: {_why(exc)}") from None
    for g in header.config.groups:
        if g.block_granularity == 0 and g.attn_kind != "mamba":
            f.close()
            raise CacheTraceInputError(name, 1, f"group {g.id!r}: block_granularity 0 is only a state (mamba) "
                                       "group's compact row")

    def lines() -> Iterator[tuple[int, Line]]:
        with f:
            for n, raw in enumerate(f, start=2):
                if not raw.strip():
                    continue
                try:
                    yield n, _LINE.decode(raw)
                except Exception as exc:  # noqa: BLE001
                    raise CacheTraceInputError(name, n, _why(exc)) from None

    return header, lines()


class CacheTraceWriter:
    """Write a cachetrace/1 file line by line (header first)."""

    def __init__(self, path: str | Path, header: Header) -> None:
        self._f = open(path, "wb")
        self.lines = 0
        self.write(header)

    def write(self, record) -> None:
        self._f.write(_ENC.encode(record) + b"\n")
        self.lines += 1

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def schema_document() -> dict:
    """The JSON Schema of one cachetrace/1 line (header or record), generated from the Structs."""
    (header, line), defs = msgspec.json.schema_components((Header, Line), ref_template="#/$defs/{name}")
    defs = {k: ({**v, "description": " ".join(v["description"].split())} if "description" in v else v)
            for k, v in defs.items()}
    defs["Line"] = {"title": "Line", "description": "One record line; 'op' selects its shape.", **line}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": FORMAT,
        "title": "cachetrace/1 line",
        "description": "One line of a cachetrace/1 JSON Lines file: line 1 is the Header, every later line a "
                       "submit, plan, result or kv record.",
        "oneOf": [header, {"$ref": "#/$defs/Line"}],
        "$defs": defs,
    }


def schema_text() -> str:
    """schema_document() as committed: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m kvsim.sim.trace.cachetrace --write-schema [PATH]``: regenerate the committed schema."""
    p = argparse.ArgumentParser(prog="python -m kvsim.sim.trace.cachetrace")
    p.add_argument("--write-schema", nargs="?", const=str(SCHEMA_PATH), metavar="PATH")
    args = p.parse_args(argv)
    if args.write_schema is None:
        p.print_usage(sys.stderr)
        return 2
    Path(args.write_schema).write_text(schema_text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
