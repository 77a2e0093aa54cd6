"""EV-*: an engine's KV-event stream (BlockStored, BlockRemoved, AllBlocksCleared), judged by `kvsim events` and
by every `kvsim peer` run.

The checker is the event judge's (sim.peers.judges.events.EventChecker, named by dotted path: the catalogue never
imports sim); its engine presets (sim.peers.judges.event_rules.PRESETS) say what each engine's stream promises.
Decisions record what was decided where an engine's documented behaviour meets a rule.
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_EC = "kvsim.sim.peers.judges.events.EventChecker"
_SEED_PREFIX = ('cache concepts (seed 002, l.13): "prefix_granularity ... two requests share cache only at '
                'multiples of this many tokens"')
_SEED_EVENTS = ('cache concepts (seed 002, l.193 and l.309): "folds them into one externally visible prefix event"; '
                '"a second, independent block-hash implementation for external KV events"')
_KEEPS = ("tests/peers/test_events.py::test_samples_are_clean",
          "tests/peers/test_engine_events.py::test_real_logs_are_clean_with_their_preset_and_every_hash_recomputes")
_FIRES = ("tests/peers/test_events.py::test_faulty_log_gives_its_finding_at_its_line",
          "tests/peers/test_events.py::test_cli_reports_the_finding")


def _rule(rule_id: str, title: str, clause: str, checker: str, decisions: str, context: tuple[str, ...],
          tests: tuple[str, ...] = ()) -> None:
    transition_rule(rule_id, title, clause, f"{_EC}.{checker}", decisions, scope="cache", context=context,
                    tests=_KEEPS + _FIRES + tests)


_rule("EV-1", "A removal names a live block (not one never stored or already removed)", _SEED_EVENTS, "_removed",
      "Under the vLLM preset a hash stored twice is two copies, and each removal drops one (see EV-2).", ("block",),
      ("tests/peers/test_engine_events.py::test_duplicate_copies_still_catch_one_removal_too_many",))
_rule("EV-2", "No double store of a live block without a removal", _SEED_EVENTS, "_stored",
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
      "(never a false EV-1; at worst one phantom copy). That reading holds for one cache group only: in a "
      "hybrid model a request whose common hit a sliding-window or state group lowered (to 0, say) "
      "recomputes blocks live in the full group and stores second copies of them from block 0, parent-less "
      "-- the same shape (a hybrid `kvsim peer vllm` run showed it as EV-1 false alarms). `kvsim peer vllm` "
      "never sets the report mode and judges its stream without the reuse-report allowance; `kvsim events "
      "--engine vllm --no-reuse-reports` does the same for a log it recorded. Without the preset both fire EV-2 "
      "(reproducers: sim/peers/samples/findings/vllm_restore_live.jsonl and "
      "sim/peers/samples/findings/vllm_report_full.jsonl).", ("block",),
      ("tests/peers/test_engine_events.py::test_vllm_restore_of_a_live_hash_is_a_second_copy",
       "tests/peers/test_engine_events.py::test_vllm_reuse_report_changes_nothing_under_the_preset",
       "tests/peers/test_engine_events.py::test_hybrid_groups_need_per_group_keys"))
_rule("EV-3", "Parent hash chains resolve to live, full blocks", _SEED_EVENTS, "_stored",
      "The parent is looked up in the same medium and group first, then in any. Two classes of orphan are "
      "told apart. (1) Contract: where the stream's engine folds a published non-prefix-closed group "
      "(sliding-window, or state) into each prefix event, seed 002 L193 (\"the scheduler folds them into one "
      "externally visible prefix event\"; TokenSpeed's kv_cache_events.cpp emits a store only once every group "
      "has cached all of its child blocks for that prefix page) makes a store under a parent the "
      "stream does not hold designed behaviour: the window group never holds the pages that slid out, so "
      "those are never announced (or were removed when that group evicted them) while their children are. "
      "Decided: no contract violation, so the verdict passes; but a KV-aware router that drops orphan "
      "stores (llm-d-kv-cache before its PR #663) loses each such chain, so it is reported as a "
      "router-compatibility hazard, once per cause: the first orphan is the hazard (kvreport `hazards`), "
      "every later one its consequence (`consequences`, `stats.consequences`), as replay's error recovery "
      "does. Reproducer: sim/peers/samples/findings/swa_orphans.events.jsonl (one 700-token request, --swa-window "
      "128); the first 500 Mooncake rows give 1 hazard and 1,317 consequences where 1,318 EV-3 findings "
      "were reported before. The fold applies when the cachetrace/1 header (or the peer run) has a "
      "non-replayable sliding or state group, or `kvsim events --folded-groups` says so; a partial-tail "
      "parent, or any orphan without such a group, stays a violation. (2) Router compatibility without a "
      "fold: after a retraction's restore TokenSpeed 0.1.42 removes the request's blocks and later stores "
      "the next tail under one of them (sim/peers/samples/README.md, "
      "sim/peers/samples/findings/restore_orphans.events.jsonl): no group explains it, so it stays a failing "
      "finding. (3) Forward reference (vLLM preset): a store whose parent is stored later in the "
      "same batch is no orphan -- vLLM's offloading connector publishes a job's completed blocks in the order "
      "of its key set and documents its stores as self-contained (OffloadingEventsTracker: 'Events are "
      "self-contained (own parent), so key order is free'); the batch as a whole chains, so it is counted "
      "(forward_parents), not reported; a consumer applying events one by one sees an orphan there. A Host "
      "store completing after its parent left both tiers (vLLM's CPU policy evicts an idle parent before its "
      "in-flight child) stays a violation: the seed's index is prefix-closed (L155) and vLLM's own "
      "left-to-right lookup can never reach that chunk (sim/peers/samples/README.md, Host tier).", ("parent",),
      ("tests/peers/test_events.py::test_partial_tail_never_a_parent",
       "tests/peers/test_fold_hazard.py::test_without_a_fold_every_orphan_is_an_ev3_violation",
       "tests/peers/test_fold_hazard.py::test_a_fold_is_one_hazard_with_its_consequences_counted_apart",
       "tests/peers/test_fold_hazard.py::test_a_partial_tail_parent_stays_a_violation_under_a_fold",
       "tests/peers/test_vllm_event_shapes.py::test_a_parent_later_in_the_batch_is_a_forward_reference_not_an_orphan"))
_rule("EV-4", "Token counts agree with the block size (a partial tail only where the engine documents it)",
      _SEED_PREFIX, "_stored",
      "len(token_ids) == blocks x block_size. With --block-size the size is pinned; otherwise each medium "
      "and group keeps the size its first store declared (a hybrid model may use one per group), except "
      "that a group whose blocks are wider than vLLM's hash block size may also publish a partial prefix "
      "entry of whole hash blocks (BlockPool.cache_partial_block), and a sparse store (vLLM preset): a "
      "group that keeps only some of its blocks -- a Mamba state group in align mode keeps the checkpoint "
      "block and nulls the states before it -- publishes one store whose block_hashes name the blocks it "
      "keeps while its token_ids cover every block since the parent (BlockPool.cache_full_blocks skips "
      "null and masked-out blocks for the hashes, not for the tokens); each named hash must be the chain "
      "digest at one of those blocks, in order (EV-7), and the store is counted (sparse_stores). Decided: "
      "allowed behaviour -- the event is self-consistent (reproducer "
      "sim/peers/samples/findings/vllm_mamba_sparse_store.events.jsonl) and vLLM tags every store with "
      "kv_cache_spec_kind so consumers can tell such groups apart -- but a consumer reading len(token_ids) == "
      "blocks x block_size misreads it. Only the "
      "TokenSpeed preset (--partial-tails) accepts a last block shorter than the block size: TokenSpeed "
      "publishes its growing tail page and re-hashes it as it grows. A placeholder store -- block size 0, no "
      "token ids, the hash alone -- is vLLM's offloading connector's legacy payload "
      "(OffloadingEventsTracker: 'Other shapes retain the legacy placeholder payload so consumers can ignore "
      "them'): counted (placeholders) and accepted for a group that is not full attention or a medium whose "
      "stores never carried tokens; a full-attention block's placeholder in a medium whose stores describe "
      "themselves (self_describing_kv_events) lost its payload -- vLLM's own warning says it 'indicates "
      "missing store metadata' -- and is this rule's finding "
      "(sim/peers/samples/findings/vllm_cpu_placeholder.events.jsonl).",
      ("block_size", "expected", "blocks", "tokens", "medium"),
      ("tests/peers/test_engine_events.py::test_a_partial_prefix_entry_of_whole_hash_blocks_is_accepted_in_a_wide_"
       "group",
       "tests/peers/test_sparse_stores.py::test_the_recorded_sparse_store_is_clean_under_the_vllm_preset_and_recomputes",
       "tests/peers/test_sparse_stores.py::test_without_the_preset_the_sparse_store_is_ev_4",
       "tests/peers/test_vllm_event_shapes.py::test_placeholders_where_vllm_documents_them_and_where_a_payload_was_lost"))
_rule("EV-5", "AllBlocksCleared empties everything", _SEED_EVENTS, "_removed",
      "A clear of an empty cache changes nothing and is no finding: SGLang's RadixCache publishes "
      "AllBlocksCleared first in every stream (its reset() at construction), which a consumer applies "
      "as a no-op (reproducer: sim/peers/samples/findings/sglang_initial_clear.jsonl).", ("block", "parent"),
      ("tests/peers/test_engine_events.py::test_sglang_initial_clear_is_no_finding",))
_rule("EV-6", "Live blocks never exceed the capacity", _SEED_EVENTS, "_stored",
      "Counted per medium and group (each group has its own pages); copies count.", ("live", "capacity", "medium"))
_rule("EV-7", "Every hash recomputes from its parent and tokens under the known scheme", _SEED_PREFIX, "_recompute",
      "Events carry 64 bits of a vLLM or SGLang digest: the checker keeps each live block's full digest "
      "and chains the next from it. A block it cannot recompute (LoRA, salted namespaces, a parent whose "
      "digest it never saw) is counted as unverifiable, not as a finding.", ("block", "expected"),
      ("tests/peers/test_engine_events.py::test_one_token_changed_exits_1_at_its_line",
       "tests/peers/test_events.py::test_fnv1a64_bulk_equals_one_by_one_and_finds_a_bad_hash"))
_rule("EV-8", "Sequence numbers are contiguous: no batch lost without a replay", _SEED_EVENTS, "sequence",
      "vLLM's publisher numbers batches 0, 1, 2, ... (8-byte big-endian frame) and keeps the last "
      "buffer_steps for replay on its ROUTER socket. A gap the subscriber could not replay, or a number "
      "that goes back (a publisher restart), leaves the consumer's view diverged; batches before the "
      "first one seen are not a gap (a late join says so in a note).", ("first", "last", "seq", "previous"),
      ("tests/peers/test_events_live.py::test_ev8_fires_on_a_restart_and_keeps_on_contiguous_numbers",
       "tests/peers/test_events_live.py::test_a_lost_batch_is_ev8_at_the_next_batch",
       "tests/peers/test_events_live.py::test_a_replayed_batch_is_no_finding"))
