"""The KV-event rules as data, and the engine presets.

``CATALOGUE`` holds each rule EV-1 ... EV-8 (``events`` lists what each checks): its one-line title, the seed
clause it comes from, and what was decided where an engine's documented behaviour meets it. ``PRESETS`` says
what an engine's stream promises -- block size, hash scheme, tail policy, per-group keys and the allowances the
catalogue argues for. Kept apart from the checker (``events.EventChecker``) so the rules read as a table: the
report and ``kvsim rules`` print them from here, the checker counts its findings by these ids.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOGUE", "RULES", "EvRule", "PRESETS", "Preset"]

_SEED_PREFIX = ('cache concepts (seed 002, l.13): "prefix_granularity ... two requests share cache only at '
                'multiples of this many tokens"')
_SEED_EVENTS = ('cache concepts (seed 002, l.193 and l.309): "folds them into one externally visible prefix event"; '
                '"a second, independent block-hash implementation for external KV events"')


@dataclass(frozen=True)
class EvRule:
    """A catalogue entry: id, one-line title, where the rule comes from, and what was decided."""
    id: str
    title: str
    clause: str
    decisions: str = ""


CATALOGUE: dict[str, EvRule] = {r.id: r for r in (
    EvRule("EV-1", "a removal names a live block (not one never stored or already removed)", _SEED_EVENTS,
           "Under the vLLM preset a hash stored twice is two copies, and each removal drops one (see EV-2)."),
    EvRule("EV-2", "no double store of a live block without a removal", _SEED_EVENTS,
           "Allowed behind the vLLM preset, as vLLM documents both: (a) a second copy -- vLLM's block pool "
           "keeps duplicate blocks under one hash (BlockPool.get_cached_block: 'If there are duplicated blocks, "
           "we return the first block'), e.g. when a fully cached, block-aligned prompt recomputes its last "
           "block (KVCacheManager.get_computed_blocks: 'we must recompute the last token'), and publishes one "
           "BlockRemoved per copy, so the stream is consistent read as a multiset: the checker counts copies "
           "and EV-1 fires only when removals outnumber them (a consumer that keeps a set instead forgets a "
           "block the engine still holds at the first removal); (b) a reuse report -- with a request's "
           "kv_cache_report_mode='full' vLLM re-announces the prefix-cache hit as a BlockStored from block 0 "
           "with no parent (BlockPool.emit_cached_block_events: 'does NOT modify block state'); a parent-less "
           "store of two or more blocks, all live, can only be that (a new copy of a prefix's first block is "
           "impossible: blocks are cached at allocation, so a later request hits them), and changes nothing. "
           "A one-block report cannot be told from the recompute of a one-block prompt; it counts as a copy "
           "(never a false EV-1; at worst one phantom copy). Without the preset both fire EV-2 "
           "(reproducers: sim/peers/samples/findings/vllm_*)."),
    EvRule("EV-3", "parent hash chains resolve to live, full blocks", _SEED_EVENTS,
           "The parent is looked up in the same medium and group first, then in any. Two classes of orphan are "
           "told apart. (1) Contract: where the stream's engine folds a published non-prefix-closed group "
           "(sliding-window, or state) into each prefix event, seed 002 L193 (\"the scheduler folds them into one "
           "externally visible prefix event\"; TokenSpeed emits a store \"once every group has cached all of its "
           "child blocks for that prefix page\", research/tokenspeed.md §6) makes a store under a parent the "
           "stream does not hold designed behaviour: the window group never holds the pages that slid out, so "
           "those are never announced (or were removed when that group evicted them) while their children are. "
           "Decided: no contract violation, so the verdict passes; but a KV-aware router that drops orphan "
           "stores (research/kv-events.md: llm-d before PR #663) loses each such chain, so it is reported as a "
           "router-compatibility hazard, once per cause: the first orphan is the hazard (kvreport `hazards`), "
           "every later one its consequence (`consequences`, `stats.consequences`), as replay's error recovery "
           "does. Reproducer: sim/peers/samples/findings/swa_orphans.* (one 700-token request, --swa-window "
           "128); the first 500 Mooncake rows give 1 hazard and 1,317 consequences where 1,318 EV-3 findings "
           "were reported before. The fold applies when the cachetrace/1 header (or the peer run) has a "
           "non-replayable sliding or state group, or `kvsim events --folded-groups` says so; a partial-tail "
           "parent, or any orphan without such a group, stays a violation. (2) Router compatibility without a "
           "fold: after a retraction's restore TokenSpeed 0.1.42 removes the request's blocks and later stores "
           "the next tail under one of them (sim/peers/samples/README.md, restore_orphans.*): no group "
           "explains it, so it stays a failing finding."),
    EvRule("EV-4", "token counts agree with the block size (a partial tail only where the engine documents it)",
           _SEED_PREFIX,
           "len(token_ids) == blocks x block_size. With --block-size the size is pinned; otherwise each medium "
           "and group keeps the size its first store declared (a hybrid model may use one per group), except "
           "that a group whose blocks are wider than vLLM's hash block size may also publish a partial prefix "
           "entry of whole hash blocks (BlockPool.cache_partial_block). Only the "
           "TokenSpeed preset (--partial-tails) accepts a last block shorter than the block size: TokenSpeed "
           "publishes its growing tail page and re-hashes it as it grows."),
    EvRule("EV-5", "AllBlocksCleared empties everything", _SEED_EVENTS,
           "A clear of an empty cache changes nothing and is no finding: SGLang's RadixCache publishes "
           "AllBlocksCleared first in every stream (its reset() at construction), which a consumer applies "
           "as a no-op (reproducer: sim/peers/samples/findings/sglang_initial_clear.jsonl)."),
    EvRule("EV-6", "live blocks never exceed the capacity", _SEED_EVENTS,
           "Counted per medium and group (each group has its own pages); copies count."),
    EvRule("EV-7", "every hash recomputes from its parent and tokens under the known scheme", _SEED_PREFIX,
           "Events carry 64 bits of a vLLM or SGLang digest: the checker keeps each live block's full digest "
           "and chains the next from it. A block it cannot recompute (LoRA, salted namespaces, a parent whose "
           "digest it never saw) is counted as unverifiable, not as a finding."),
    EvRule("EV-8", "sequence numbers are contiguous: no batch lost without a replay", _SEED_EVENTS,
           "vLLM's publisher numbers batches 0, 1, 2, ... (8-byte big-endian frame) and keeps the last "
           "buffer_steps for replay on its ROUTER socket. A gap the subscriber could not replay, or a number "
           "that goes back (a publisher restart), leaves the consumer's view diverged; batches before the "
           "first one seen are not a gap (a late join says so in a note)."),
)}
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
    note: str = ""
    alt_schemes: tuple[str, ...] = ()  # recognised instead when the first root block recomputes only under one


PRESETS: dict[str, Preset] = {
    "tokenspeed": Preset("tokenspeed", 64, "fnv1a64", True,
                         note="block size 64, growing partial tails, FNV-1a 64 event hashes"),
    "vllm": Preset("vllm", None, "vllm-sha256", False, duplicate_copies=True, reuse_reports=True,
                   note="block size per cache group (vLLM's default 16), sha256 over pickle with NONE_HASH "
                        "'vllm-none-hash' (sha256_cbor recognised), live blocks per group_idx, duplicate copies "
                        "and reuse reports allowed", alt_schemes=("vllm-sha256-cbor",)),
    "sglang": Preset("sglang", None, "sglang-sha256", False,
                     note="block size = page size (from the first store), chained sha256 over u32 tokens"),
}
