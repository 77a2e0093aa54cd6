"""TS-L2-*: the Host (L2) tier, retraction snapshots and ClearCache, judged on a real scheduler's plans (and TS-L2-1,
-3, -4, -5 on vLLM's CPU offloading too: ``VLLM`` says how each reads there).

The checkers are the peer judge's (sim.peers.cachetrace.host_tier.HostTier, named by dotted path: the catalogue never
imports sim); they read cachetrace/1 records, so every one is evidence about the scheduler that made the
plans. Quotes are from the cache concepts (seed 002), with its line numbers.
"""

from __future__ import annotations

from kvsim.spec.catalogue import Reading, transition_rule

_HT = "kvsim.sim.peers.cachetrace.host_tier.HostTier"
_HJ = "kvsim.sim.peers.judges.host_judge.HostTierJudge"
VLLM_CHECKER = {"TS-L2-1": "forward", "TS-L2-3": "_hygiene", "TS-L2-4": "_store", "TS-L2-5": "_load"}
_ON_VLLM = " On vLLM (kvsim peer vllm --offload-blocks, judged by sim.peers.judges.host_judge.HostTierJudge): "
# how each rule reads on vLLM's CPU offloading (its OffloadingConnector and CPUOffloadingManager), the same clause
VLLM: dict[str, str] = {
    "TS-L2-1": "a store job's GPU source blocks may not be written by a forward from the step after the one that "
               "issued it (the worker copies them at the next step's start) until the job completes -- vLLM "
               "flushes a job whose block it hands out again (jobs_to_flush) before that forward; a load's GPU "
               "destinations may not be written, and its CPU chunks not evicted or stored into, before it completes.",
    "TS-L2-3": "every store or load job carries at least one transfer, GPU block ids lie in [1, num_blocks) and CPU "
               "chunk ids in [0, chunks), and no (source, destination) repeats among one step's jobs.",
    "TS-L2-4": "a store job's key (the block hash and group of the OffloadKey) must not be in flight in another store "
               "nor held on the tier already (prepare_store offers only keys it does not hold), and a chunk it fills "
               "must hold no key that no eviction removed.",
    "TS-L2-5": "a load job reads CPU chunks whose store completed, each under the load's key; the GPU blocks it fills "
               "then hold the content that store copied (a failed load leaves them without content), and the "
               "request's hit over them is PEER-7's.",
}


def _rule(rule_id: str, title: str, clause: str, checker: str, decisions: str, tests: tuple[str, ...] = (),
          context: tuple[str, ...] = ()) -> None:
    readings: tuple[Reading, ...] = ()
    if rule_id in VLLM:
        decisions += _ON_VLLM + VLLM[rule_id]
        readings = (Reading("engine", f"{_HJ}.{VLLM_CHECKER[rule_id]}"),)
    transition_rule(rule_id, title, clause, f"{_HT}.{checker}", decisions, scope="cache", tests=tests, context=context,
                    readings=readings)


_rule("TS-L2-1", "Pinned sources are not re-granted, overwritten or written before their op's ACK",
      'cache concepts L108: "A pinned op\'s sources stay cached and unevictable until the ACK, so its copy overlaps '
      'whatever the round does next"; L187: "every store but a retraction\'s snapshot pins its Device sources '
      'until the ACK"', "_grant",
      "A pinned write-back's Device sources may not be zeroed, copy destinations, load-back or restore "
      "destinations, nor written by a forward, from the plan that issues it until its acknowledgement (the same "
      "plan included: a pinned op is not fenced). A load-back's or restore's Host sources may not be written "
      "back into before its acknowledgement (the Host side of the same ticket); likewise the Host pages an L3 get "
      "fills or an L3 put reads, until that op's outcome -- a cancelled get too, whose bytes may still land.",
      tests=("tests/peers/test_host_tier.py::test_store_then_load_is_clean",
             "tests/peers/test_host_tier.py::test_pinned_source_regranted_after_its_ack_is_clean",
             "tests/peers/test_host_tier.py::test_pinned_source_regranted_before_its_ack_fires",
             "tests/peers/test_host_tier.py::test_forward_writing_a_pinned_source_fires",
             "tests/peers/test_host_tier.py::test_host_page_rewritten_while_a_load_reads_it_fires",
             "tests/peers/test_host_tier.py::test_write_back_into_a_host_page_a_get_fills_fires",
             "tests/peers/test_host_judge.py::test_legal_run_keeps_every_rule",
             "tests/peers/test_host_judge.py::test_a_forward_writing_a_store_source_before_its_ack_fires_ts_l2_1",
             "tests/peers/test_host_judge.py::test_an_eviction_of_a_chunk_a_load_reads_fires_ts_l2_1"),
      context=("op_id", "page", "group", "block", "request", "chunk", "job", "key"))
_rule("TS-L2-2", "Only a retraction's snapshot store is unpinned, and it is launched first",
      'cache concepts L187: "the snapshot store is stream-ordered instead, because its sources are re-granted in '
      'the same round"; L108: "An unpinned op\'s sources may be re-granted in the same plan, so it is launched '
      'first"', "_unpinned",
      "A write-back with source_pinned false must copy pages of a request a SnapshotOp of the same plan retracts "
      "(its rows, or its image when it is retracted again before rejoining a batch), and no op listed before it "
      "in the plan may write into one of its sources. Its sources are then free to be re-granted in that plan.",
      tests=("tests/peers/test_host_tier.py::test_retraction_snapshot_store_is_unpinned_and_its_sources_regranted",
             "tests/peers/test_host_tier.py::test_unpinned_store_outside_a_retraction_fires",
             "tests/peers/test_host_tier.py::test_unpinned_store_launched_after_a_load_into_its_source_fires"),
      context=("op_id", "group", "block"))
_rule("TS-L2-3", "Every op carries a transfer; no (group, source, destination) twice in a plan; ids in range",
      'cache concepts L112: "every op on the wire carries at least one transfer, and no (group, source, '
      'destination) repeats within one plan"; "the runtime refuses an op with nothing to copy"; L189: "Existence '
      'and prefetch are skipped when L3 is unset"', "ops",
      "Write-back, load-back and restore ops list at least one page pair; a snapshot (and a restore of a "
      "request whose every page is still cached) moves the request image, its snapshot slot, instead. Group "
      "ids index the configured groups, Device ids lie in [1, total_pages), Host ids in [1, num_host_pages), "
      "snapshot slots in [1, max_retracted_requests]; a snapshot names a live request. An L3 op lists at least one "
      "object key, a get or put one Host page per key (each once, in range); a StorageCancelOp names an L3 op in "
      "flight; no L3 op at all when the header says the configuration has no L3 tier (enable_l3_storage false).",
      tests=("tests/peers/test_host_tier.py::test_op_hygiene_keeps_on_legal_ops",
             "tests/peers/test_host_tier.py::test_l3_ops_with_l3_configured_are_clean",
             "tests/peers/test_host_tier.py::test_cancelled_get_answered_later_is_clean",
             "tests/peers/test_host_tier.py::test_op_hygiene_fires",
             "tests/peers/test_host_tier.py::test_l3_ops_without_an_l3_tier_fire",
             "tests/peers/test_host_tier.py::test_l3_op_hygiene_fires",
             "tests/peers/test_host_judge.py::test_legal_run_keeps_every_rule",
             "tests/peers/test_host_judge.py::test_a_job_without_transfers_or_out_of_range_fires_ts_l2_3"),
      context=("op_id", "page", "group", "block", "chunk", "destination", "job", "source"))
_rule("TS-L2-4", "No key is stored twice while its store is in flight",
      'cache concepts L112: "a store skips keys already in flight"', "_write_back",
      "A keyed write-back's (group, content hash, page offset) must not be the key of another unacknowledged "
      "write-back, in the same plan or an earlier one.",
      tests=("tests/peers/test_host_tier.py::test_store_then_load_is_clean",
             "tests/peers/test_host_tier.py::test_key_stored_again_after_its_ack_is_clean",
             "tests/peers/test_host_tier.py::test_key_stored_twice_while_in_flight_fires",
             "tests/peers/test_host_judge.py::test_legal_run_keeps_every_rule",
             "tests/peers/test_host_judge.py::test_a_key_stored_again_while_on_the_tier_fires_ts_l2_4"),
      context=("op_id", "group", "chunk", "held", "job", "key"))
_rule("TS-L2-5", "A load's Host source was written back and acknowledged under its key; Host-only loads carry "
      "an empty key",
      'cache concepts L185: "Host-only L2 load-backs leave BlockTransfer.key empty and stay on the admit-time '
      'CacheFullBlocks path"; L80: "Host restores still use CacheFullBlocks"', "_load",
      "A load-back or L2 restore reads a Host page of its group that a write-back filled and that write-back "
      "was acknowledged. A load-back carries a key only when its Host page is an L3 prefetch destination; a "
      "restore's key, when given, is the key its page was written back with. Snapshot-pool sources are the "
      "request's own image and are not Host-tier content. A Host page an L3 get read successfully counts as "
      "filled and acknowledged under the get's key (cache concepts L189: a Host miss known to exist in L3 "
      "'batch_get_intos it, then runs the ordinary H2D load'); an L3 put reads an acknowledged Host page too.",
      tests=("tests/peers/test_host_tier.py::test_store_then_load_is_clean",
             "tests/peers/test_host_tier.py::test_l3_get_then_load_is_clean",
             "tests/peers/test_host_tier.py::test_load_provenance_fires",
             "tests/peers/test_host_tier.py::test_put_reads_an_acknowledged_host_page_under_its_key",
             "tests/peers/test_host_judge.py::test_legal_run_keeps_every_rule",
             "tests/peers/test_host_judge.py::test_a_failed_load_leaves_its_blocks_without_content_and_the_hit_over_them_is_peer_7",
             "tests/peers/test_host_judge.py::test_a_load_of_a_chunk_whose_store_has_not_completed_fires_ts_l2_5",
             "tests/peers/test_host_judge.py::test_a_load_under_another_key_fires_ts_l2_5"),
      context=("op_id", "group", "page", "chunk", "job", "key", "request"))
_rule("TS-L2-6", "A write-back's key is its source page's chained prefix hash and offset",
      'cache concepts L154: "Indices are pool-scoped: one index serves both the Device and Host tiers of its '
      'group"; research §3: CacheKey = {namespace_id=0, group_id, content_hash, page_offset}', "_write_back",
      "The key must equal the SHA-256 chain (kvmodel.cache.prefix_hash) of the page the source block holds, "
      "recomputed by the judge from the tokens, at the slot's offset in its prefix page -- or, for a published "
      "partial tail page, the chain over the tokens the tail held. An unkeyed write-back (a private page of a "
      "retraction) is not judged here. An L3 put (cache concepts L189: 'after D2H, the runtime batch_put_froms each "
      "packed Host CacheBlock') stores each Host page under the key it holds: the one its write-back or get named.",
      tests=("tests/peers/test_host_tier.py::test_store_then_load_is_clean",
             "tests/peers/test_host_tier.py::test_write_back_key_fires",
             "tests/peers/test_host_tier.py::test_put_reads_an_acknowledged_host_page_under_its_key"),
      context=("op_id", "group", "page", "block"))
_rule("TS-L2-7", "Replayable groups never appear in Host transfers",
      'cache concepts L185: "Replayable groups are outside match_order_ and skip publication on both tiers -- '
      'never registered, never streamed to Host"', "ops",
      "No page pair of a write-back, load-back or restore names a group declared replayable.",
      tests=("tests/peers/test_host_tier.py::test_store_then_load_is_clean",
             "tests/peers/test_host_tier.py::test_replayable_group_snapshot_to_the_snapshot_pool_is_clean",
             "tests/peers/test_host_tier.py::test_replayable_group_in_a_write_back_fires"),
      context=("op_id", "group"))
_rule("TS-L2-8", "ClearCache is refused while write-backs are unacknowledged",
      'cache concepts L189: "ClearCache rejects in-flight Host writebacks (pause drain does not wait for '
      'those)"', "clear",
      "An accepted ClearCache (cachetrace/1 'clear' record) with an unacknowledged write-back is a violation; "
      "an accepted clear empties both tiers, so a later hit on a page computed before it is PEER-4.",
      tests=("tests/peers/test_host_tier.py::test_clear_refused_in_flight_then_accepted_is_clean",
             "tests/peers/test_host_tier.py::test_clear_accepted_with_a_write_back_in_flight_fires"),
      context=("op_id",))
_rule("TS-L2-9", "Full-attention pages do not stream to Host during decode",
      'cache concepts L187: "Ordinary decode publishes history-cache Device entries but no state entries; '
      'full-attention pages do not stream to Host during decode. At finish or retraction, eligible non-state '
      'Device pages ... are queued"; "Ordinary sliding-window entries always stream when published"', "_policy",
      "A pinned write-back of a full-attention page whose last writer completed it after its prompt (a decode "
      "page) is a violation while that request still holds rows (runs); once it finishes or is retracted the "
      "finish/retraction queue may stream it. Sliding-window pages are exempt. The other policy clauses (each "
      "prefill boundary queues its newly published pages; sliding entries always stream) state what must be "
      "queued, not when the drain runs, and are not judged.",
      tests=("tests/peers/test_host_tier.py::test_sliding_window_decode_page_may_stream",
             "tests/peers/test_host_tier.py::test_full_attention_decode_page_streamed_during_decode_fires"),
      context=("op_id", "group", "block"))
_rule("TS-L2-10", "A failed L3 prefetch copies nothing, publishes nothing, and its tokens are recomputed",
      'cache concepts L112: "An L3 prefetch failure is an explicit unsuccessful completion: it skips H2D and '
      'releases the failed load ... so the request can recompute. It never acknowledges or publishes a successful '
      'copy"; L185: "L3 prefetch destinations wait for LoadBackDone.success ... publishing them earlier would cache '
      'empty KV"; L189: "a miss unregisters the keys, skips H2D / skips publishing empty Host pages ..., skips '
      'Device prefix publication for those prefetch destinations ... so the next admit recomputes those tokens"',
      "named",
      "On the released wheel (0.1.42) an L3 prefetch is a StorageGetOp reading object keys into Host pages, answered "
      "per key by StorageDone(success) (cachetrace/1 result 'storage'); the seed's LoadBackDone(success=false) "
      "becomes a get key answered false, and the load-back that follows is an ordinary Host-only one. Judged: no "
      "load-back reads, and no StoragePutOp stores, a Host page whose get failed until a write-back or a later get "
      "refills it (copies / publishes nothing); a request's first extend served by Host loads covers no fresh slot "
      "whose key a get failed to read (those tokens are recomputed: the extend starts at or below the boundary). A "
      "load-back acknowledged unsuccessfully (result 'failed') leaves its Device destinations without content: a "
      "table naming one as cached, or a keyed write-back storing one, before it is handed out fresh again is a "
      "violation. A failed read is transient in kvsim's object store (the object stays; a later query finds it).",
      tests=("tests/peers/test_host_tier.py::test_failed_load_destination_handed_out_again_is_clean",
             "tests/peers/test_host_tier.py::test_failed_get_key_recomputed_is_clean",
             "tests/peers/test_host_tier.py::test_failed_load_destination_named_as_cached_fires",
             "tests/peers/test_host_tier.py::test_failed_get_page_loaded_and_hit_fires",
             "tests/peers/test_host_tier.py::test_hit_over_a_failed_key_without_a_load_fires",
             "tests/peers/test_host_tier.py::test_put_of_a_failed_get_page_fires"),
      context=("op_id", "group", "page", "block", "request", "slot"))
_rule("TS-L2-11", "A Host-served prefix hit leaves no slot without content (clamped to what was loaded)",
      'cache concepts L179: "An L3 Host-prefetch shortage is different: Admit may return a shorter '
      'host_prefix_tokens than the probe, rounded down to prefix_granularity so every group keeps a reusable '
      'identity boundary. A finer block_granularity group that runs out of Host pages mid-prefix must not leave '
      'hit_tokens between grains ... schedulePrefillFirstChunk retries from that clamped boundary rather than '
      'forwarding a window that skips the discarded prefix"', "hit",
      "Judged at a request's first extend when any block of its rows within the hit was filled by a load-back of "
      "the same plan: every slot of a non-replayable group below the last whole prefix page of the hit whose block "
      "is fresh in that plan (zeroed or loaded) holds that slot's prefix key and page offset after the plan's "
      "loads -- a zeroed page, or a load from a Host page with no content, inside the hit is a prefix the forward "
      "skips without its KV. Device-hit slots (not fresh) are TS-TBL-1's. That the hit is a multiple of "
      "prefix_granularity is TS-PFX-1's: the wheel also serves published partial tails from Host (its documented "
      "tail-hit finding), which is not reported twice. The probe itself (how many keys a query found) is not "
      "observable per request, so 'shorter than "
      "the probe' is not judged; a shortage shows on the wheel as a get of fewer keys than the query found (the "
      "Host credits, StorageConfig.max_host_blocks) and a hit clamped to whole prefix pages.",
      tests=("tests/peers/test_host_tier.py::test_l3_get_then_load_is_clean",
             "tests/peers/test_host_tier.py::test_host_hit_left_between_grains_fires"),
      context=("request", "group", "slot", "block"))

transition_rule(
    "TS-L2-12", "Every newly published page is stored on Host before a drained trace ends, unless evicted first",
    'cache concepts L187: "During prefill, each completed scheduling boundary queues all newly published '
    'full-attention pages ... The first decode admission from PrefillDone applies the same policy to the final '
    'prompt boundary"; "At finish or retraction, eligible non-state Device pages ... are queued before request '
    'ownership is released. Ordinary sliding-window entries always stream when published"',
    "kvsim.sim.peers.cachetrace.store_policy.StorePolicy.check",
    decisions="With a Host tier: a whole page a prefill forward computed (full-attention or non-replayable sliding "
              "group) falls due at the request's next admission (its next chunk or first decode, where it is "
              "published); a whole page a decode computed, and any prefill page still owed, when the request "
              "finishes. A page that fell due is settled once some write-back (pinned or not, acknowledged or not, "
              "by any request) has copied a Device page holding its prefix key and page offset to the group's Host "
              "tier since it was computed, or once its Device block is handed out again (evicted while queued: not "
              "judged). When the trace ends drained (its last plan schedules nothing and issues no cache op), every "
              "page still unsettled is a finding, unless the Host tier was full while it waited (which subset a "
              "full tier keeps is the scheduler's choice). Not owed: a page swapped to the key's canonical block at "
              "publication, a sliding-window page that slid out before publication, anything of a request retracted "
              "or aborted or from before an accepted ClearCache; state groups are not judged here.",
    scope="cache",
    tests=("tests/peers/test_host_tier.py::test_prefill_pages_stored_at_the_first_decode_and_decode_pages_after_finish_are_clean",
           "tests/peers/test_host_tier.py::test_page_stored_some_plans_after_it_fell_due_is_clean",
           "tests/peers/test_host_tier.py::test_page_evicted_before_its_store_is_not_judged",
           "tests/peers/test_host_tier.py::test_pages_left_while_the_host_tier_is_full_are_not_judged",
           "tests/peers/test_host_tier.py::test_a_trace_that_does_not_end_drained_is_not_judged",
           "tests/peers/test_scheduler_clauses.py::test_host_pages_a_get_filled_are_held_until_their_load_back",
           "tests/peers/test_host_tier.py::test_prefill_page_never_stored_fires_at_the_drained_end",
           "tests/peers/test_host_tier.py::test_decode_page_never_stored_after_finish_fires"),
    context=("request", "group", "slot", "plan"))
