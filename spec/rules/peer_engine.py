"""PEER-5 ... PEER-9, PEER-11: the engine under test (vLLM, SGLang) judged step by step by `kvsim peer vllm|sglang`.

The checkers are the step judge's (sim.peers.judges.engine_judge.EngineJudge, named by dotted path: the catalogue
never imports sim). PEER-5 ... PEER-8 restate for engines whose unit is a block of block_size tokens what PEER-1 ...
PEER-4 and TS-PFX-1 say of TokenSpeed's plans (spec.rules.peer_contract); each decision says how the rule reads the
seed for such engines. PEER-9 is each engine's own counters, read by each judge in its own way (its readings).
The driver in the engine's venv classifies an exception for PEER-11 from its traceback
(sim/peers/vllm/driver.py, sim/peers/sglang/driver.py: ``crash_facts``); TokenSpeed's internal error is PEER-10.
"""

from __future__ import annotations

from kvsim.spec.catalogue import Reading, transition_rule

_J = "kvsim.sim.peers.judges.engine_judge.EngineJudge"
_SEED = "seed 002 (cache concepts)"
_T = "tests/peers/test_engine_judge.py::"
_LEGAL = f"{_T}test_legal_run_keeps_every_rule"
_CRAFTED = f"{_T}test_crafted_violation_fires_its_rule"


def _rule(rule_id: str, title: str, clause: str, checker: str, decisions: str, context: tuple[str, ...],
          tests: tuple[str, ...] = ()) -> None:
    transition_rule(rule_id, title, clause, f"{_J}.{checker}", decisions, scope="cache", context=context,
                    tests=(_LEGAL, _CRAFTED, *tests))


_rule("PEER-5", "Every block id lies in the pool and live requests never name more blocks than it holds",
      f'{_SEED} l.264: "a replicated group translates to itself minus the null block"; l.272: the '
      'allocator "counts all nonnull refs in the request table"', "_name",
      "The block size plays prefix_granularity's part. vLLM's block 0 (its null block) and SGLang's page 0 "
      "(its padding slot) are the reserved null block: a pool of N blocks has N - 1 usable, the capacity "
      "EV-6 applies to the stream.", ("request", "slot", "block", "live", "capacity"),
      (f"{_T}test_capacity_over_the_pool_fires",))
_rule("PEER-6", "Prefix hits are whole blocks and leave the prompt's last token to compute",
      f'{_SEED} l.13: "two requests share cache only at multiples of this many tokens"', "_hit",
      "A hit is the computed-token count a request is first scheduled with (vLLM's num_computed_tokens "
      "of a new request, SGLang's matched prefix length). The prompt's last token is always computed "
      "(its logits are needed), so a hit stops short of it.", ("request", "hit"),
      (f"{_T}test_a_new_request_hitting_its_whole_prompt_fires_peer6",))
_rule("PEER-7", "A hit names blocks holding exactly that prefix, computed by an earlier or the same forward, "
      "and live in the engine's event stream",
      f'{_SEED} l.183: "the FIFO data plane orders any hitter\'s forward after the writer"; l.193: "one '
      'externally visible prefix event"', "_hit",
      "Publication at the scheduled window end: vLLM caches a block's hash when it allocates the block "
      "for the tokens being computed, so a request admitted in the same step may hit it; every layer "
      "writes the batch's KV before attending, so the hitter's forward reads it after the writer. SGLang "
      "inserts after the forward, so its hits name blocks of earlier steps only. The stream check reads "
      "the batches published up to the end of the step (vLLM publishes a step's events after it).",
      ("request", "slot", "block", "hit"),
      (f"{_T}test_same_step_hit_on_blocks_the_forward_computes_is_legal",
       f"{_T}test_a_new_request_may_hit_a_block_a_running_request_was_handed_in_the_same_step"))
_rule("PEER-8", "A fresh block is named by no other live request; no request computes into a block another "
      "live request named",
      f'{_SEED} l.167: "publishing a table\'s completed blocks may replace one with the key\'s existing '
      'canonical block"', "_name",
      "A computed block may be swapped for the cache's canonical copy of the same content (SGLang's "
      "checkpoint adopts the tree's pages and frees its duplicates): the new block must hold that "
      "content. Requests preempted in a step give their blocks back before the step allocates.",
      ("request", "slot", "block", "group", "other_group"),
      (f"{_T}test_write_into_a_block_another_request_named_fires",
       "tests/peers/test_group_judge.py::test_one_block_in_two_groups_fires_peer_8"))

_P = "tests/peers/test_engine_probes.py::"
transition_rule(
    "PEER-9", "The scheduler's own counters agree with each other, with its decisions and with its event stream",
    f'{_SEED} l.193: the scheduler "keeps no residency counters of its own" beyond what the event carries; l.38: '
    'leak checks ask the index; l.36: "its capacity belongs to the global empty-parent FIFO rather than any group"',
    f"{_J}._stats",
    decisions="Each engine exposes different counters, so each judge reads the rule for its own (the readings): "
              "vLLM's and SGLang's step judge their stats, block counts and deep counters against the judge's own "
              "tables and the event stream; TokenSpeed's contract judge the wheel's pool counters against each "
              "other.",
    scope="cache",
    context=("reported", "observed", "evictable", "protected", "total", "cached", "stream", "free", "named",
             "usable", "free_walk", "free_count", "free_referenced", "blocks", "ref_sum", "lock_mismatch",
             "nodes", "locks_off_tree", "walked", "counter", "kind", "listed", "active", "available", "empty",
             "snapshot_free", "snapshot_usable", "group", "node", "tree_only", "component", "tree_holds"),
    readings=(
        Reading("engine", f"{_J}._stats",
                title="The scheduler's prefix-cache stats and block counts agree with its decisions and its event "
                      "stream",
                clause=f'{_SEED} l.193: the scheduler "keeps no residency counters of its own" beyond what the '
                       'event carries; l.38: leak checks ask the index',
                decisions="vLLM: PrefixCacheStats (requests, queried tokens, hit tokens of newly admitted requests) "
                          "per step; free blocks (its free queue, evictable cached blocks included) plus the blocks "
                          "live requests name equal the usable pool; hashes in its cached-block map equal the "
                          "stream's live blocks. SGLang: free plus evictable pages plus the pages live rows name "
                          "equal the pool; the tree's evictable plus protected tokens equal its total; its total in "
                          "pages equals the stream's live blocks. Deeper counters, read by the driver from the "
                          "engine's own structures every probe_every steps: vLLM's free queue walked from its head "
                          "has num_free_blocks blocks, none with ref_cnt > 0, and ref_cnt summed over the pool "
                          "equals the (request, block) names of the live tables; SGLang's lock_ref of every tree "
                          "node equals the locks the driver holds at or below it, and the tree walked gives the "
                          "evictable and protected sizes its counters report (sim/peers/vllm/counters.py, "
                          "sim/peers/sglang/counters.py). SGLang with --kv-groups (UnifiedRadixCache: one pool per "
                          "component): per pool, its free slots plus the slots only the tree holds plus those live "
                          "requests name equal the usable pool; per component, the tree's evictable plus protected "
                          "counters equal what the tree holds (full and SWA tokens, Mamba states)."),
        Reading("tokenspeed", "kvsim.sim.peers.tokenspeed.counters.check",
                title="The scheduler's own pool counters agree with each other (active + available parents never "
                      "exceed the usable pool, short only by parents pinned outside the tables, by none once "
                      "drained; empty <= available; no snapshot block held with no request retracted)",
                clause='seed 002 L42: "cache-only residency is the remainder total - empty - active"; L36: "its '
                       'capacity belongs to the global empty-parent FIFO rather than any group"; L38: who holds a '
                       'child "is a CacheBlockRef ownership fact that lives with the holders"',
                decisions="Read after every answer from the wheel's bindings (sim/peers/tokenspeed/counters.py): "
                          "active + available LCM parents never exceed the usable pool (num_device_pages less the "
                          "null page) and fall short only by parents kvsim knows a holder outside the tables pins -- "
                          "a Host tier's ops in flight, one parent per internal state checkpoint of the plan or the "
                          "plan before -- and by none once the run has drained; empty <= available; no snapshot "
                          "block held with no request retracted. Decided (issue 31): the equality active + available "
                          "= usable, judged before, is not the seed's -- L42 splits the pool into empty, active (the "
                          "live requests' block tables) and cache-only residency, and L38 lets holders other than a "
                          "table (a prefix-cache entry, an in-flight transfer) pin a cache-only parent, which the "
                          "wheel's available count (empty or fully evictable parents) leaves out. On "
                          "state_workload.jsonl with 512-token chunks it failed 9 readings, one parent short after "
                          "each plan that writes an internal checkpoint and the plan after: the wheel keeps the "
                          "checkpoint out of the request's table while the row it emits names it, and pinned until "
                          "its publication. That half is the wheel's (its gauge counts the checkpoint as cache-only: "
                          "TS-POOL-5, L42/L74), the rest the rule's; a leak still fires, at the latest once the run "
                          "has drained. The wheel exposes no lock counts or free list, so nothing deeper is read."),
    ),
    tests=(_LEGAL, _CRAFTED, f"{_P}test_vllm_probe_consistent_with_the_live_tables_passes",
           f"{_P}test_vllm_probe_inconsistency_fires_peer_9", f"{_P}test_sglang_probe_inconsistency_fires_peer_9",
           "tests/peers/test_tokenspeed_probes.py::test_clean_run_keeps_peer_9_and_counts_its_paths",
           "tests/peers/test_tokenspeed_probes.py::test_planted_counter_drift_fires_peer_9",
           "tests/peers/test_engine_faults.py::test_vllm_free_counter_drift_fires_the_walk",
           "tests/peers/test_engine_faults.py::test_sglang_missed_unlock_fires_lock_ref",
           "tests/peers/test_group_judge.py::test_a_free_count_off_by_one_fires_peer_9",
           "tests/peers/test_group_judge.py::test_a_group_holding_more_hashes_than_its_stream_fires_peer_9"))

transition_rule(
    "PEER-11", "The engine under test completes every call without raising",
    'cache concepts L112: "The scheduler asserts both when batching a plan\'s ops ... neither side dedups or '
    'invents an acknowledgement"; L319: "the pools and the coordinator assert on the same fields" -- an '
    "engine's own asserts guard the invariants the contract states, so an engine that raises has broken one",
    f"{_J}.crashed",
    decisions="An exception raised while the engine steps (its own assert included) is a finding of the engine "
              "under test when the traceback has a frame inside the engine's package and the innermost frame is "
              "not the driver script's own code: the finding names the exception type, its message, the "
              "innermost engine frame (path relative to site-packages, e.g. vllm/v1/core/block_pool.py:NNN in "
              "get_new_blocks), the step and the request being processed (the innermost engine frame's "
              "``request`` for vLLM, the request the driver was handling for SGLang). The run stops there; every "
              "earlier finding is kept and every report written (exit 1). SGLang answers the driver cannot go on "
              "from (the allocator short after eviction, a checkpoint the tree does not hold) are reported the "
              "same way, naming the driver line that found them. An exception with no engine frame, or raised in "
              "the driver's own code, is kvsim's bug (exit 3); one before the first step is a setup the engine "
              "refused (exit 2).",
    scope="cache", context=("exception", "frame", "request", "traceback", "block", "node"),
    tests=(_LEGAL, f"{_P}test_crash_is_one_peer_11_finding_after_the_earlier_ones",
           "tests/peers/test_engine_faults.py::test_vllm_crash_is_a_finding_with_the_engine_frame_and_earlier_"
           "findings_kept",
           "tests/peers/test_engine_faults.py::test_sglang_crash_names_the_radix_cache_frame"))
