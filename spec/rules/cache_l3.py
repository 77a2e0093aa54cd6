"""TS-L2-13 and TS-L2-14: what an L3 prefetch may read, judged on a real scheduler's plans
(sim.peers.cachetrace.l3_reads.L3Reads, named by dotted path: the catalogue never imports sim)."""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_R = "kvsim.sim.peers.cachetrace.l3_reads.L3Reads.plan"

transition_rule(
    "TS-L2-13", "An L3 get names only keys a query answered earlier found to exist",
    'cache concepts L189: "A later Host miss that is known to exist in L3 allocates a Host page, batch_get_intos it, '
    'then runs the ordinary H2D load"; "Immediately before next_execution_plan, the event loop re-probes prefix '
    'hashes of waiting requests ... so a queued hit cannot survive deletion, eviction, or a lost object"', _R,
    decisions="The probe is a plan's StorageQueryOp, answered per key (the object exists); the prefetch a "
              "StorageGetOp. Every (group, content hash, offset) a get names must have been found by a query "
              "answered before the get's plan, with no later answer (a query finding it missing, a get failing "
              "to read it) since -- the title's claim, nothing weaker: a successful put of the key by this "
              "instance does not make it known (an earlier reading accepted it, so the title claimed more than "
              "the check), since L189 has the event loop re-probe so that a queued hit cannot survive deletion "
              "or a lost object, and another instance's flush (\"a fleet-wide wipe is an operator flush of every "
              "instance\") or the store's own eviction may remove what this one put. On the wheel every get "
              "follows a query (the bundled L3 runs stay clean). Whether the probe ran in the same round, and "
              "that waiting work which cannot be admitted is not probed (L189), are not judged: the plans do not "
              "say which requests could take a batch slot.",
    scope="cache",
    tests=("tests/peers/test_scheduler_clauses.py::test_get_of_queried_keys_is_clean",
           "tests/peers/test_scheduler_clauses.py::test_get_of_keys_no_query_found_fires"),
    context=("op_id",))

transition_rule(
    "TS-L2-14", "A key whose L3 get failed is not fetched again before a put stores it",
    'cache concepts L189: "Only pages whose replica-converged batch_get_into missed stay unread: a later '
    'batch_exists hit must not re-register them and retry the same prefetch"; "A later Host backup forgets an '
    'unread entry only when the object was absent and this put created it"', _R,
    decisions="A key a get failed to read is unread until a StoragePutOp of it succeeds; a later get naming it "
              "before then fires. cachetrace/1 does not say whether a put created its object or skipped an "
              "existing unreadable one (which keeps the key unread), so any successful put clears it -- the "
              "lenient reading. On the wheel a failed page is recomputed and put again before any later get, so "
              "the premise needs the injected fault (refetch-failed-key).",
    scope="cache",
    tests=("tests/peers/test_scheduler_clauses.py::test_a_failed_key_stored_again_may_be_fetched_again",
           "tests/peers/test_scheduler_clauses.py::test_a_failed_key_fetched_again_without_a_put_fires"),
    context=("op_id",))
