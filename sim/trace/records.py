"""kvtrace/1: typed records for one trace line (the header or one event), and its JSON Schema.

A kvtrace/1 file is JSON Lines: the header, then one event per line.  Each Struct below types one line
shape, so a msgspec decoder both parses and validates a line in one pass, and the published JSON Schema
(``spec/kvtrace.schema.json``) is generated from the same source.  kvtrace/1 is a contract: fields may be
added (optional, with defaults), never renamed.

Conventions enforced here:

* every integer field is a JSON integer in [0, 2^63) (``U63``); block-table entries are in [-1, 2^63)
  (-1 is a hole); a float, a bool, or an out-of-range integer is a wrong-type input error;
* ids (sequence, unit, checkpoint, transfer) are non-empty JSON strings;
* an unknown field is an input error (``forbid_unknown_fields``);
* an optional field that is absent and one that is ``null`` mean the same; writing omits defaults.

This module knows the shape of a line, not what it means: no store rules, no replay, no file handling.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "FORMAT", "U63", "TableEntry", "Id", "Pool", "KVProfile", "OPS", "REQUEST_OPS", "EVENT_TYPES",
    "Header", "Config", "Model", "KVCapacity", "AutoCapacity", "KVLeaseGrowth",
    "Backend", "BackendOff", "BackendMTP", "BackendDFlash", "BackendDFlash2",
    "Replica", "Event", "EventBase", "Activate", "Map", "Grow", "Launch", "Complete", "Fail", "Truncate", "Finish",
    "Release", "Offload", "DropDevice", "DropHost", "Xfer", "Observe",
    "ActivateResult", "MapResult", "GrowResult", "FactResult", "Cow", "CowResult", "LaunchRow", "CommitRow",
    "schema_document", "schema_text", "SCHEMA_PATH", "main",
]

FORMAT = "kvtrace/1"

U63 = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A JSON integer in [0, 2^63).  (msgspec takes the bound as ``le``; ``lt=2**63`` does not fit int64.)"""
TableEntry = Annotated[int, msgspec.Meta(ge=-1, le=2**63 - 1)]
"""A block-table entry: a page id, or -1 for a hole."""
Positive = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
ContentKey = Annotated[int, msgspec.Meta(ge=0)]
"""A 64-bit content key, in [0, 2^64) (msgspec cannot bound above int64; ``Observe`` checks the top)."""
Id = Annotated[str, msgspec.Meta(min_length=1)]
"""A sequence, unit, checkpoint or transfer id."""

Pool = Literal["main", "mtp", "draft_full"]
"""The growing pools (store contract, "Speculative backends 在一个 Engine 内互斥，因此当前最多有两个
growing pools"): Main Text, MTP, Draft Full."""
KVProfile = Literal["bf16", "int8", "fp8", "nvfp4", "k8v4"]
"""The closed KV profiles (store contract, "Main Text 与 MTP 使用 Engine 选择的 BF16、INT8-G64、
FP8-E4M3FN-row256、NVFP4-G16 或 K8V4")."""

_STRUCT = dict(forbid_unknown_fields=True, omit_defaults=True, frozen=True, gc=False)
"""Line records are frozen and hold only str/int/bool/tuples/other records, so they cannot form reference
cycles; ``gc=False`` keeps the collector off millions of decoded events (measurably faster decoding).
Records holding a mutable dict (Header's ``meta``, ActivateResult's ``rows``/``pages``) keep ``gc=True``."""
_STRUCT_WITH_DICT = {**_STRUCT, "gc": True}


# ----------------------------------------------------------------------------------------- header

class Model(msgspec.Struct, **_STRUCT):
    """Target model dimensions that size the Main pool's typed planes."""
    full_attention_layers: U63
    kv_heads: U63
    head_dim: U63


class AutoCapacity(msgspec.Struct, **_STRUCT):
    """Automatic kv_capacity: free Device bytes F after weights load and the headroom R to keep
    (store contract, "Automatic policy 在权重加载后")."""
    free_bytes: U63
    headroom_bytes: U63


class KVCapacity(msgspec.Struct, **_STRUCT):
    """kv_capacity policy: exactly one of ``tokens`` (explicit, store contract "kv_capacity 的 explicit policy
    解析为") or ``auto``."""
    tokens: U63 | None = None
    auto: AutoCapacity | None = None

    def __post_init__(self) -> None:
        if (self.tokens is None) == (self.auto is None):
            raise ValueError("kv_capacity needs exactly one of 'tokens' or 'auto'")


class KVLeaseGrowth(msgspec.Struct, **_STRUCT):
    """kv_lease_growth: lease the frontier plus a bounded window plus a per-lane cushion (store contract,
    "启用 ContextCacheOptions::kv_lease_growth")."""
    window: U63 = 4096
    cushion_pages: U63 = 2


class BackendOff(msgspec.Struct, tag_field="kind", tag="off", **_STRUCT):
    """No speculative backend: only the Main pool grows."""


class BackendMTP(msgspec.Struct, tag_field="kind", tag="mtp", **_STRUCT):
    """MTP with draft window K (store contract, "MTP with draft window K"): adds the MTP pool."""
    draft_window: U63
    layers: U63 = 1


class BackendDFlash(msgspec.Struct, tag_field="kind", tag="dflash", **_STRUCT):
    """DFlash: its full-attention layers use the Draft Full pool (BF16)."""
    full_layers: U63
    kv_heads: U63 = 8
    head_dim: U63 = 128


class BackendDFlash2(msgspec.Struct, tag_field="kind", tag="dflash2", **_STRUCT):
    """DFlash2: officially all local attention, so no Draft Full pool (store contract, "官方 DFlash2
    配置的五层全部是 local attention")."""
    full_layers: U63 = 0
    kv_heads: U63 = 8
    head_dim: U63 = 128


Backend = BackendOff | BackendMTP | BackendDFlash | BackendDFlash2


class Config(msgspec.Struct, **_STRUCT):
    """The store configuration the trace was recorded under.  ``page_size`` is typed here; the replay
    decides which values it supports (the store contract fixes "(P=64)").  ``prefill_chunk`` and
    ``reserved_bytes`` (the non-pool part of the runtime reservation B(M), store contract
    "B(M)=B_{min}+(M-M_{min})B_{step}") are extensions the replay needs."""
    max_context: Positive
    max_concurrency: Positive
    page_size: U63
    kv_profile: KVProfile
    backend: Backend
    model: Model
    kv_capacity: KVCapacity | None = None
    host_arena_bytes: U63 = 0
    kv_lease_growth: KVLeaseGrowth | None = None
    prefill_chunk: U63 = 2048
    reserved_bytes: U63 = 0


class Header(msgspec.Struct, **_STRUCT_WITH_DICT):
    """Line 1 of a kvtrace/1 file."""
    format: Literal["kvtrace/1"]
    config: Config
    meta: dict[str, Any] | None = None


# ----------------------------------------------------------------------------------------- results

class ActivateResult(msgspec.Struct, **_STRUCT_WITH_DICT):
    """What the engine answered to ``activate``: rows and pages it chose, or a refusal reason."""
    ok: bool
    rows: dict[Pool, U63] | None = None
    pages: dict[Pool, tuple[U63, ...]] | None = None
    error: str | None = None


class MapResult(msgspec.Struct, **_STRUCT):
    """What the engine answered to ``map``: the new page ids, or a refusal reason."""
    ok: bool
    pages: tuple[U63, ...] | None = None
    error: str | None = None


class GrowResult(msgspec.Struct, **_STRUCT):
    """What the engine answered to ``grow``; a refusal says the frontier where growth is bounded.  Extension:
    an accepted growth may say the new ``entitlement`` in pages per pool (the contract fixes no step size)."""
    ok: bool
    bounded_at: U63 | None = None
    entitlement: dict[Pool, U63] | None = None


class FactResult(msgspec.Struct, **_STRUCT):
    """On a fact, ``ok: false`` means the engine says the fact did not take effect; an ``xfer`` ``verify`` that
    failed ends its transfer unpublished (the copy is abandoned, its destination freed).  Extensions: an h2d
    ``xfer`` (phase ``reserve``) may carry the destination Device ``pages`` the engine chose; an ``offload`` or
    a d2h ``xfer`` (phase ``reserve``) may carry the Host ``offsets`` of the copied pages (one per block, in
    the order of ``blocks``)."""
    ok: bool
    error: str | None = None
    pages: tuple[U63, ...] | None = None
    offsets: tuple[U63, ...] | None = None


class LaunchRow(msgspec.Struct, **_STRUCT):
    """One row of a GPU unit: writes positions [a, b) (``write``) and reads [0, b); ``write`` null = read only."""
    seq: Id
    pool: Pool
    write: tuple[U63, U63] | None = None

    def __post_init__(self) -> None:
        if self.write is not None and self.write[0] > self.write[1]:
            raise ValueError(f"write [{self.write[0]}, {self.write[1]}] needs a <= b")


class CommitRow(msgspec.Struct, **_STRUCT):
    """One frontier a completed unit publishes."""
    seq: Id
    pool: Pool
    frontier: U63


# ----------------------------------------------------------------------------------------- events

class EventBase(msgspec.Struct, tag_field="op", **_STRUCT):
    """Common base of the event union; ``op`` is the tag on the wire."""

    @property
    def op(self) -> str:
        """The event's ``op`` tag."""
        return type(self).__struct_config__.tag  # type: ignore[return-value]


class Activate(EventBase, tag="activate"):
    """Request: activate a sequence, optionally continuing checkpoint ``from`` (``from_`` in Python)."""
    seq: Id
    prompt: U63
    budget: U63
    from_: Id | None = msgspec.field(default=None, name="from")
    keep_source: bool = True
    result: ActivateResult | None = None


class Map(EventBase, tag="map"):
    """Request: ensure_mapped_to_tokens(seq, pool, tokens)."""
    seq: Id
    pool: Pool
    tokens: U63
    result: MapResult | None = None


class Grow(EventBase, tag="grow"):
    """Request: extend a kv_lease_growth window at a decode-round boundary."""
    seq: Id
    result: GrowResult | None = None


class CowResult(msgspec.Struct, **_STRUCT):
    """What the engine answered to a ``cow`` request: the private destination page it chose."""
    ok: bool
    page: U63 | None = None
    error: str | None = None


class Cow(EventBase, tag="cow"):
    """Request (extension): replace the shared member at ``block`` of a sequence's pool with a private
    copy of the columns it has committed there, before writing it (store contract, "需要写入 shared
    partial tail 时必须先 COW")."""
    seq: Id
    pool: Pool
    block: U63
    result: CowResult | None = None


class Launch(EventBase, tag="launch"):
    """Fact: a GPU execution unit starts."""
    unit: Id
    rows: tuple[LaunchRow, ...]
    result: FactResult | None = None


class Complete(EventBase, tag="complete"):
    """Fact: the unit succeeded and publishes these frontiers."""
    unit: Id
    commit: tuple[CommitRow, ...]
    result: FactResult | None = None


class Fail(EventBase, tag="fail"):
    """Fact: the unit formed no legal commit."""
    unit: Id
    result: FactResult | None = None


class Truncate(EventBase, tag="truncate"):
    """Fact: explicit, destructive truncate of a pool's committed frontier."""
    seq: Id
    pool: Pool
    frontier: U63
    result: FactResult | None = None


class Finish(EventBase, tag="finish"):
    """Fact: terminal settlement, optionally retaining checkpoint ``retain``."""
    seq: Id
    retain: Id | None = None
    state_image: bool = True
    result: FactResult | None = None


class Release(EventBase, tag="release"):
    """Fact: drop a retained checkpoint."""
    ckpt: Id
    result: FactResult | None = None


class Offload(EventBase, tag="offload"):
    """Fact: D2H copies of these blocks, published in the contract's order."""
    ckpt: Id
    pool: Pool
    blocks: tuple[U63, ...]
    result: FactResult | None = None


class DropDevice(EventBase, tag="drop_device"):
    """Fact: drop the Device replica of these blocks."""
    ckpt: Id
    pool: Pool
    blocks: tuple[U63, ...]
    result: FactResult | None = None


class DropHost(EventBase, tag="drop_host"):
    """Fact: drop the Host replica of these blocks."""
    ckpt: Id
    pool: Pool
    blocks: tuple[U63, ...]
    result: FactResult | None = None


class Xfer(EventBase, tag="xfer"):
    """Fact: one phase of a replica transfer, for engines that log transfer phases."""
    xfer: Id
    dir: Literal["d2h", "h2d"]
    ckpt: Id
    pool: Pool
    blocks: tuple[U63, ...]
    phase: Literal["reserve", "copy", "verify", "publish", "release_source"]
    result: FactResult | None = None


_COUNTERS = ("allocated", "reserved", "available")
_ROW_FIELDS = ("table", "frontier", "content")


Replica = Literal["device", "host", "both", "none"]
"""Where a checkpoint page has a replica valid for its committed columns."""


class Observe(EventBase, tag="observe"):
    """Fact: the engine's reported state.  Three forms: pool counters (no ``seq``/``ckpt``; any of
    allocated / reserved / available), a sequence's row (``seq`` with ``table``, ``frontier`` and/or
    ``content``), or (extension) a retained checkpoint (``ckpt`` with ``table``: its members' Device ids, -1
    for none; ``frontier``; ``replicas``: per block where a valid replica is; and/or ``content``).
    ``content`` (extension) lists the content keys of the committed positions [0, n) as the reporter
    expects them (a fuzzing oracle writes it); the model compares them with its own, read through a valid
    replica."""
    pool: Pool
    allocated: U63 | None = None
    reserved: U63 | None = None
    available: U63 | None = None
    seq: Id | None = None
    table: tuple[TableEntry, ...] | None = None
    frontier: U63 | None = None
    result: FactResult | None = None
    ckpt: Id | None = None
    replicas: tuple[Replica, ...] | None = None
    content: tuple[ContentKey, ...] | None = None

    def __post_init__(self) -> None:
        if self.content is not None and any(k >= 1 << 64 for k in self.content):
            raise ValueError("content keys are 64-bit: integers in [0, 2^64)")
        counters = [n for n in _COUNTERS if getattr(self, n) is not None]
        row = [n for n in _ROW_FIELDS if getattr(self, n) is not None]
        if self.ckpt is not None:
            if self.seq is not None:
                raise ValueError("observe names either 'seq' or 'ckpt', not both")
            if counters:
                raise ValueError("observe of a checkpoint cannot carry 'seq' or pool counters")
            if not row and self.replicas is None:
                raise ValueError("observe of a checkpoint needs 'table', 'frontier', 'replicas' and/or 'content'")
            return
        if self.replicas is not None:
            raise ValueError("'replicas' belongs to observe of a checkpoint ('ckpt')")
        if self.seq is None:
            if row:
                raise ValueError(f"observe without 'seq' cannot carry {row[0]!r}")
            if not counters:
                raise ValueError("observe needs pool counters (allocated/reserved/available) or 'seq'")
        else:
            if counters:
                raise ValueError(f"observe of a sequence cannot carry pool counter {counters[0]!r}")
            if not row:
                raise ValueError("observe of a sequence needs 'table' and/or 'frontier' (or 'content')")


Event = (Activate | Map | Grow | Launch | Complete | Fail | Truncate | Finish | Release | Offload | DropDevice
         | DropHost | Xfer | Observe | Cow)
EVENT_TYPES: tuple[type[EventBase], ...] = Event.__args__
OPS: dict[str, type[EventBase]] = {t.__struct_config__.tag: t for t in EVENT_TYPES}  # type: ignore[misc]
REQUEST_OPS = frozenset({"activate", "map", "grow", "cow"})
"""Requests may be refused by a correct store; every other op is a fact."""


# ----------------------------------------------------------------------------------------- schema

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "spec" / "kvtrace.schema.json"  # the kvsim.spec package


def _present(name: str, kind: str) -> dict:
    return {"required": [name], "properties": {name: {"type": kind}}}


def _absent(*names: str) -> dict:
    """Absent or null: the decoder treats both the same."""
    return {"properties": {n: {"type": "null"} for n in names}}


def _tidy(d: dict) -> dict:
    """Docstrings become descriptions: fold their line breaks and indentation into single spaces."""
    return {**d, "description": " ".join(d["description"].split())} if "description" in d else d


def schema_document() -> dict:
    """The JSON Schema of one kvtrace/1 line (header or event), generated from the Structs above.

    Two cross-field rules are added by hand because msgspec cannot express them: kv_capacity's
    exactly-one-of, and observe's two forms.  ``write``'s a <= b is stated only in words."""
    (_, event), defs = msgspec.json.schema_components((Header, Event), ref_template="#/$defs/{name}")
    defs = {name: _tidy(d) for name, d in defs.items()}
    defs["Event"] = {"title": "Event", "description": "One event line; 'op' selects its shape.", **event}
    defs["KVCapacity"] = {**defs["KVCapacity"], "oneOf": [
        {"allOf": [_present("tokens", "integer"), _absent("auto")]},
        {"allOf": [_present("auto", "object"), _absent("tokens")]},
    ]}
    defs["Observe"] = {**defs["Observe"], "oneOf": [
        {"allOf": [_absent("seq", "ckpt", "replicas", *_ROW_FIELDS),
                   {"anyOf": [_present(n, "integer") for n in _COUNTERS]}]},
        {"allOf": [_present("seq", "string"), _absent("ckpt", "replicas", *_COUNTERS),
                   {"anyOf": [_present("table", "array"), _present("frontier", "integer"),
                              _present("content", "array")]}]},
        {"allOf": [_present("ckpt", "string"), _absent("seq", *_COUNTERS),
                   {"anyOf": [_present("table", "array"), _present("frontier", "integer"),
                              _present("replicas", "array"), _present("content", "array")]}]},
    ]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "kvtrace/1",
        "title": "kvtrace/1 line",
        "description": "One line of a kvtrace/1 JSON Lines file: line 1 is the Header, every later line an "
                       "Event.  Integers are JSON integers in [0, 2^63) (table entries may be -1); "
                       "a launch row's write [a, b] needs a <= b.",
        "oneOf": [{"$ref": "#/$defs/Header"}, {"$ref": "#/$defs/Event"}],
        "$defs": defs,
    }


def schema_text() -> str:
    """schema_document() as committed: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.trace.records --write-schema [PATH]``: regenerate the committed schema."""
    parser = argparse.ArgumentParser(prog="python -m sim.trace.records", description=__doc__.splitlines()[0])
    parser.add_argument("--write-schema", nargs="?", const=str(SCHEMA_PATH), metavar="PATH",
                        help=f"write the JSON Schema (default {SCHEMA_PATH.parent.name}/{SCHEMA_PATH.name})")
    args = parser.parse_args(argv)
    if args.write_schema is None:
        parser.print_usage(sys.stderr)
        return 2
    Path(args.write_schema).write_text(schema_text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
