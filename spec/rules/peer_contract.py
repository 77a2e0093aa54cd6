"""PEER-1 ... PEER-4, PEER-10: the TokenSpeed scheduler's plans against the cachetrace/1 contract, judged by
`kvsim peer tokenspeed` (and `kvsim replay` of a recorded cachetrace/1 file).

The checkers are the contract judge's (sim.peers.cachetrace, named by dotted path: the catalogue never imports
sim). Each rule is what the cache concepts (seed 002) require of the plans a real scheduler makes, read from the
records alone: block ids, fresh pages, cache-op acknowledgements, prefix hits, the scheduler's own errors. The
same judge checks the TS-* rules of the cache concepts on those plans (spec.rules.cache_*) and TokenSpeed's
reading of PEER-9 (spec.rules.peer_engine).
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_C = "kvsim.sim.peers.cachetrace.contract.Contract"
_T = "tests/peers/test_contract.py::"
_LEGAL = (f"{_T}test_legal_hit_through_the_same_key", f"{_T}test_legal_swap_to_canonical_and_tail_copy")

transition_rule(
    "PEER-1", "Every block id lies within its group's pages (capacity never exceeded)",
    'cache concepts L36: "A parent with zero occupants is unbound, so its capacity belongs to the global '
    'empty-parent FIFO rather than any group"; L264: "Virtual block 0 is the null block"',
    f"{_C}._check_ids",
    decisions="Every block a plan names -- in a table, as a page to zero, as a copy's source or destination -- "
              "lies below its group's page count (block 0, the null block, is TS-POOL-4's).",
    scope="cache", context=("group", "block", "request"),
    tests=(*_LEGAL, f"{_T}test_block_beyond_the_pool_fires_peer_1"))

transition_rule(
    "PEER-2", "Pages to zero and copy destinations are fresh: no other live table names them",
    'cache concepts L112: "a store skips keys already in flight, a load targets freshly acquired pages"',
    f"{_C}._fresh_list",
    decisions="A page a plan zeroes, or a copy writes into, is handed out fresh: no live table other than the "
              "receiver's names it, and it is listed once per plan.",
    scope="cache", context=("group", "block"),
    tests=(*_LEGAL, f"{_T}test_zeroing_a_live_block_fires_peer_2",
           f"{_T}test_page_zeroed_twice_in_a_plan_fires_peer_2"))

transition_rule(
    "PEER-3", "Every cache op is issued once and acknowledged exactly once",
    'cache concepts L112: "neither side dedups or invents an acknowledgement, because an op that never completes a '
    'copy would hold its tickets forever"',
    f"{_C}.result",
    decisions="An op id is issued by one plan only; each answer acknowledges ops in flight, each once; an op still "
              "unacknowledged when a drained trace ends is a finding at the end (its first id named). L3 ops "
              "answer with their outcome the same way.",
    scope="cache", context=("op_id",),
    tests=(f"{_T}test_cache_op_acknowledgement_peer_3", f"{_T}test_load_back_brings_the_written_back_content",
           "tests/peers/test_host_tier.py::test_l3_op_unanswered_or_answered_twice_is_peer_3"))

transition_rule(
    "PEER-4", "A prefix hit covers only pages some request computed in an earlier plan",
    'cache concepts L183: "NumComputedTokens is the scheduled window end; the FIFO data plane orders any hitter\'s '
    'forward after the writer"',
    "kvsim.sim.peers.cachetrace.hits.PrefixHits.first_extend",
    decisions="Every whole page of a first extend's hit has a prefix key some request computed in an earlier plan; "
              "a hit ending inside a page reuses a partial page whose last write holds this prompt's tokens.",
    scope="cache", context=("request", "page", "hit", "group", "block"),
    tests=(*_LEGAL, f"{_T}test_hit_on_a_page_computed_in_the_same_plan_fires_peer_4",
           f"{_T}test_tail_hit_with_other_content_fires_peer_4"))

transition_rule(
    "PEER-10", "The scheduler completes every call on a legal sequence of answers, without an internal error",
    'cache concepts L108: "A pinned op\'s sources stay cached and unevictable until the ACK, so its copy overlaps '
    'whatever the round does next" (acknowledgements may come plans after their op: every answer a trace shows is '
    'legal); L112: "The scheduler asserts both when batching a plan\'s ops"',
    f"{_C}.engine_error",
    decisions="A cachetrace/1 `error` record (the wheel raised from one of its calls -- its own invariant check -- "
              "on answers the trace shows to be legal) is a finding naming the call; the trace ends there, and "
              "what it left open (an unacknowledged op) is no further finding.",
    scope="cache", context=("call",),
    tests=(f"{_T}test_an_engine_error_record_is_peer_10_and_ends_the_judgement", f"{_T}test_a_clean_run_keeps_peer_10",
           "tests/peers/test_tokenspeed_probes.py::test_any_exception_the_wheel_raises_is_peer_10"))
