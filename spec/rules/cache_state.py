"""TS-ST-*: snapshot-state groups (seed 002 "Snapshot-state prefill checkpoints", L72-L90, and the coordinator's
publication and Host-tier clauses, L185, L187), judged on a real scheduler's plans.

The checkers are the peer judge's (sim.peers.cachetrace.state_group.StateGroups, named by dotted path: the catalogue
never imports sim); they read cachetrace/1 records, so every finding is evidence about the scheduler that made the
plans. ``kvsim peer tokenspeed --state-group`` drives the wheel with its State group.
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_SG = "kvsim.sim.peers.cachetrace.state_group.StateGroups"


def _rule(rule_id: str, title: str, clause: str, checker: str, decisions: str, tests: tuple[str, ...] = (),
          context: tuple[str, ...] = ()) -> None:
    transition_rule(rule_id, title, clause, f"{_SG}.{checker}", decisions, scope="cache", tests=tests, context=context)


_rule("TS-ST-1", "A published state block holds the state a prefill wrote at exactly its key's prefix boundary",
      'cache concepts L76: "Computed state publication requires an Endpoint or Promoted boundary and checkpoint '
      'provenance at that exact prefix boundary ... Allocated slots and completed hashes alone are not proof"; L74: '
      '"publishing an unwritten intermediate checkpoint would break position identity"; L185: "For Mamba-state '
      'groups, CacheCompletedBlocks publishes only explicitly listed materialized boundaries inside the newly hashed '
      'range"', "_published",
      "Publication is what a plan shows of it: a write-back of a state-group block under a key (the Host tier "
      "indexes only published checkpoints, L187) and a first extend whose prefix hit reuses a state block as its "
      "input. Either way the block must hold the state a prefill forward of some request wrote -- the final state "
      "of a chunk ending there, or the internal checkpoint it materialized -- after a number of tokens that is a "
      "multiple of prefix_granularity, and whose chained prefix key is the write-back's key (for a hit: the hitting "
      "request's own key at its hit, which is that boundary). A state written after a partial page is at no "
      "prefix boundary: the wheel publishes its prompt-end state under the partial tail's hash (the same cause as "
      "the TS-PFX-1 tail-hit finding), and this rule reports it. A block zeroed and never written holds no state. "
      "Host provenance follows write-backs and load-backs. A third view of publication is the KV events "
      "(sim.peers.cachetrace.state_events): with a state group the scheduler folds every group's insertion into "
      "one prefix event (L193) and announces a page only while every group holds it, so a stored page ending at L "
      "tokens is a state published on Device at L; it must end where some prefill wrote an aligned state (a page "
      "no tracked forward wrote a state for is not judged). Whether the boundary is Endpoint or Promoted (rather "
      "than an ordinary chunk end, L78) is not decided: the full group's match that makes a boundary Promoted is "
      "not in the plan. Findings whose state sits at its own partial page's end (stored under that page's key, "
      "hit there, or announced there) name the cause 'partial tail published' and group under its first (one "
      "cause, one finding).",
      tests=("tests/peers/test_state_group.py::test_checkpoint_at_the_aligned_boundary_stored_and_hit_is_clean",
             "tests/peers/test_state_group.py::test_absolute_state_rows_are_read_at_their_positions",
             "tests/peers/test_state_group.py::test_state_stored_under_the_key_of_a_partial_page_fires",
             "tests/peers/test_state_group.py::test_state_stored_under_another_boundarys_key_or_from_an_unwritten_block_fires",
             "tests/peers/test_state_group.py::test_a_stored_page_ending_at_a_prefill_checkpoint_is_clean",
             "tests/peers/test_state_group.py::test_a_stored_page_ending_where_a_decode_or_a_prompts_tail_wrote_fires"),
      context=("group", "block", "request", "slot", "cause"))
_rule("TS-ST-2", "No state a decode wrote is published or stored on Host under a key",
      'cache concepts L78: "PrefillDone can publish pending prefill state before decode or PD handoff; decode itself '
      'records and publishes no state checkpoints"; L187: "Ordinary decode publishes history-cache Device entries '
      'but no state entries"; "the newest existing prefill checkpoint per state group"', "_published",
      "A decode forward writes its request's running state into the output slot of its state row (slot 1 of the "
      "compact row; slot (after - 1) // block_granularity with absolute positions). That block may never be the "
      "source of a keyed state write-back nor the input state of a later request's hit, until it is handed out "
      "again, and no page the KV events announce may end where only a decode wrote a state (the fold: see TS-ST-1). "
      "The wheel's finish write-back of the running state (under the partial tail's key) is this rule's, and so "
      "is its Device publication of the running state at every grown tail the events show; both name the partial "
      "tail's cause. A decode state at a whole page (m5's at 704 tokens in state_workload.jsonl) has no such "
      "cause: a root of its own.",
      tests=("tests/peers/test_state_group.py::test_checkpoint_at_the_aligned_boundary_stored_and_hit_is_clean",
             "tests/peers/test_state_group.py::test_a_decode_state_stored_or_hit_fires",
             "tests/peers/test_state_group.py::test_a_stored_page_ending_at_a_prefill_checkpoint_is_clean",
             "tests/peers/test_state_group.py::test_a_stored_page_ending_where_a_decode_or_a_prompts_tail_wrote_fires"),
      context=("group", "block", "request", "cause"))
_rule("TS-ST-3", "An internal state checkpoint lies at floor(after/P)*P, strictly between before and after",
      'cache concepts L82: "the last internal reusable checkpoint is at floor(after / prefix_granularity) * '
      'prefix_granularity, strictly between before and after"; L74: "When the extent contains an internal '
      'checkpoint, one forward materializes it and the final output"', "forward",
      "An extend [before, after) whose checkpoint_lengths entry c is non-zero materializes a checkpoint at "
      "before + c: it must equal floor(after / P) * P and lie strictly inside the extent, and the row must name a "
      "block for it (slot 2 of the compact row, slot (checkpoint - 1) // block_granularity with absolute "
      "positions). An extent ending on a multiple of P has no internal reusable checkpoint: its final state is the "
      "aligned one. Whether an extent that contains a checkpoint must materialize it is TS-ST-4's question for the "
      "prompt's last one; the seed's 'at most one internal checkpoint per eligible request' leaves other chunks "
      "free.",
      tests=("tests/peers/test_state_group.py::test_checkpoint_at_the_aligned_boundary_stored_and_hit_is_clean",
             "tests/peers/test_state_group.py::test_a_checkpoint_off_the_last_aligned_boundary_fires"),
      context=("request", "checkpoint", "group", "slot"))
_rule("TS-ST-4", "The prompt's last aligned checkpoint is written before a short final tail",
      'cache concepts L78: "Newly completed prefill boundaries at the prompt\'s last aligned checkpoint are '
      'classified as Endpoint, unless already Promoted, including before a short final tail"; L76: "Scheduled local '
      'prefill records its last aligned checkpoint"', "_endpoint",
      "A prompt of n tokens, n not a multiple of P, with A = floor(n / P) * P > 0 beyond its prefix hit: by the "
      "extend that completes the prompt, some extend of the request wrote its state at A (a chunk ending at A, or "
      "an internal checkpoint at A). Without that state there is nothing to classify as Endpoint or publish, and a "
      "later request sharing the aligned prefix cannot hit it. Judged once per request, at the extend reaching n; a "
      "readmitted request's recomputation is not judged again. Its publication with a Host tier is TS-ST-5's "
      "(stored by a drained end) and TS-ST-1's (under the right key).",
      tests=("tests/peers/test_state_group.py::test_checkpoint_at_the_aligned_boundary_stored_and_hit_is_clean",
             "tests/peers/test_state_group.py::test_a_chunk_ending_at_the_aligned_checkpoint_is_its_endpoint",
             "tests/peers/test_state_group.py::test_a_short_final_tail_without_its_aligned_checkpoint_fires"),
      context=("request", "endpoint"))
_rule("TS-ST-5", "The newest prefill checkpoint is stored on Host after finish or retraction, unless evicted",
      'cache concepts L187: "At finish or retraction, eligible non-state Device pages and the newest existing '
      'prefill checkpoint per state group are queued before request ownership is released"; "The queue is drained '
      'by TierTransferManager::StartPendingStores(guard)"; L80: "All cached checkpoints remain subject to ordinary '
      'capacity eviction; Endpoint does not pin storage"', "finish",
      "With a Host tier: at a request's finish or retraction, the newest aligned state its prefill wrote (per state "
      "group, if its block still holds it) falls due. It is settled once a keyed write-back of the state group has "
      "stored that key on Host since the last accepted ClearCache (by any request: a key already on Host needs no "
      "second copy), or once its block is handed out again (evicted while queued). When the trace ends drained "
      "(its last plan schedules nothing and issues no cache op), a checkpoint still unsettled is a violation, "
      "unless the Host tier was full while it waited or the unsettled ones would not fit the free Host pages (the "
      "reading TS-L2-12 applies to history pages). Queue order and speed are not judged.",
      tests=("tests/peers/test_state_group.py::test_newest_checkpoint_stored_before_the_end_is_clean",
             "tests/peers/test_state_group.py::test_checkpoint_evicted_before_its_store_or_an_undrained_end_is_not_judged",
             "tests/peers/test_state_group.py::test_newest_checkpoint_never_stored_fires_at_a_drained_end"),
      context=("request", "group", "block"))
