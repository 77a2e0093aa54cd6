"""The KV-event rules as the event judge reports them, and the engine presets.

``CATALOGUE`` holds each rule EV-1 ... EV-8 (``events`` lists what each checks) as its report lists it: title,
seed clause and decisions, read from the rule's entry in the one catalogue (spec.rules.kv_events), which says
what was decided where an engine's documented behaviour meets it. ``PRESETS`` says what an engine's stream
promises -- block size, hash scheme, tail policy, per-group keys and the allowances the entries argue for. Kept
apart from the checker (``events.EventChecker``), which counts its findings by these ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.spec.catalogue import get

__all__ = ["CATALOGUE", "IDS", "RULES", "EvRule", "PRESETS", "Preset"]

IDS = tuple(f"EV-{i}" for i in range(1, 9))


@dataclass(frozen=True)
class EvRule:
    """A rule as the event judge's report lists it: id, title (a phrase), where the rule comes from, and what was
    decided (spec.catalogue.Rule.stated)."""
    id: str
    title: str
    clause: str
    decisions: str = ""


CATALOGUE: dict[str, EvRule] = {rid: EvRule(rid, *get(rid).stated("events")) for rid in IDS}
RULES: dict[str, str] = {rid: r.title for rid, r in CATALOGUE.items()}


@dataclass(frozen=True)
class Preset:
    """What an engine's stream promises: ``block_size`` None means each group's first store sets it."""
    engine: str
    block_size: int | None
    hash_scheme: str
    partial_tails: bool
    group_keys: bool = True
    duplicate_copies: bool = False
    reuse_reports: bool = False
    sparse_stores: bool = False  # vLLM: a sparse group's store names only the blocks it keeps (EV-4's entry)
    forward_parents: bool = False  # vLLM: a store's parent may be stored later in the same batch (EV-3's entry)
    note: str = ""
    alt_schemes: tuple[str, ...] = ()  # recognised instead when the first root block recomputes only under one


PRESETS: dict[str, Preset] = {
    "tokenspeed": Preset("tokenspeed", 64, "fnv1a64", True,
                         note="block size 64, growing partial tails, FNV-1a 64 event hashes"),
    "vllm": Preset("vllm", None, "vllm-sha256", False, duplicate_copies=True, reuse_reports=True,
                   sparse_stores=True, forward_parents=True,
                   note="block size per cache group (vLLM's default 16), sha256 over pickle with NONE_HASH "
                        "'vllm-none-hash' (sha256_cbor recognised), live blocks per group_idx, duplicate copies, "
                        "reuse reports, sparse (state-group) stores and forward parents allowed",
                   alt_schemes=("vllm-sha256-cbor",)),
    "sglang": Preset("sglang", None, "sglang-sha256", False,
                     note="block size = page size (from the first store), chained sha256 over u32 tokens"),
}
