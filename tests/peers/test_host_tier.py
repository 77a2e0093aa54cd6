"""TS-L2-*: the Host tier of the observable contract. Each rule keeps on a legal crafted cachetrace/1 and fires on
a crafted violation (at its line); each also fires on the real TokenSpeed wheel's plans perturbed by one
injected fault (tests at the end, skipped without the wheel).

Crafted traces use P = 4, a full-attention group "full" (index 0) and a sliding-window group "swa" (index 1,
window 8), 20 Device pages each, 16 Host pages. Request a prefills 9 tokens (full blocks 1-3, swa 4-6); its
pages 0 and 1 are complete after plan 0.
"""

from __future__ import annotations

import pytest

from kvsim.kvmodel.cache.prefix_hash import prefix_hashes
from kvsim.sim.peers.cachetrace import store_policy
from kvsim.sim.peers.cachetrace.contract import Contract
from kvsim.sim.peers.cachetrace.host_tier import RULES
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import all_rules

A = [1, 2, 3, 4, 5, 6, 7, 8, 9]
B = [1, 2, 3, 4, 5, 6, 7, 8, 40, 41]
H = prefix_hashes(A, 4)  # a's two whole pages
WB, LB = "WriteBackOp", "LoadBackOp"


def contract(replayable=False):
    return Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=20, num_host_pages=16,
                              num_snapshot_pages=4, max_retracted_requests=2,
                              groups=[ct.Group("full", 4, 20), ct.Group("swa", 4, 20, "sliding", 8,
                                                                        replayable=replayable)]))


def plan(n, ids=(), ext=0, inl=(), pfx=(), full=None, swa=None, zero=None, cache=(), copy=None):
    tables = {k: v for k, v in (("full", full), ("swa", swa)) if v}
    return ct.Plan(n, ct.Batch(list(ids), ext, list(inl), list(pfx), [len(A) if r == "a" else len(B) for r in ids]),
                   tables, zero or {}, copy or {}, list(cache))


def wb(oid, pairs, groups, keys=None, pinned=True):
    return ct.CacheOp(WB, [oid], pairs, groups=groups, keys=keys if keys is not None else [""] * len(pairs),
                      offsets=[0] * len(pairs), pinned=pinned)


def lb(oid, pairs, groups, keys=None):
    return ct.CacheOp(LB, [oid], pairs, groups=groups, keys=keys if keys is not None else [""] * len(pairs),
                      offsets=[0] * len(pairs))


STORE = wb(1, [(1, 1), (2, 2), (4, 3), (5, 4)], [0, 0, 1, 1], [H[0], H[1], H[0], H[1]])


def prefix(store=STORE, done1=(1,), finish1=()):
    """a computes its prompt (plan 0), decodes once while its pages 0, 1 stream to Host (plan 1)."""
    return [(ct.Submit("a", A, 5), 2), (ct.Submit("b", B, 1), 3),
            (plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3]}, {"a": [4, 5, 6]}, {"full": [1, 2, 3], "swa": [4, 5, 6]}), 4),
            (ct.Result(0, [[50]]), 5),
            (plan(1, ["a"], 0, [1], [], cache=[store] if store else []), 6),
            (ct.Result(1, [[51]], list(finish1), list(done1)), 7)]


def load_b(load=None, extra=()):
    """b (sharing a's first 8 tokens) is admitted with a 8-token hit loaded from Host into fresh pages."""
    load = load or lb(2, [(1, 7), (2, 8), (3, 10), (4, 11)], [0, 0, 1, 1])
    return [(plan(2, ["b"], 1, [2], [8], {"b": [7, 8, 9]}, {"b": [10, 11, 12]}, {"full": [9], "swa": [12]},
                  [load, *extra]), 8),
            (ct.Result(2, [[60]], ["b"], [load.op_ids[0]] + [op.op_ids[0] for op in extra]), 9)]


def run(steps, c=None):
    c = c or contract()
    for rec, line in steps:
        c.apply(rec, line)
    c.finish(999)
    return c


def found(c, rule=None):
    return sorted({(f.rule, f.line) for f in c.findings if rule is None or f.rule == rule})


def test_every_l2_rule_is_catalogued_and_tested_both_ways():
    from kvsim.sim.peers.cachetrace import l3_reads
    from tests.peers import test_scheduler_clauses  # TS-L2-13/14 and the Host room of L3 prefetches
    ids = {r.id for r in all_rules() if r.id.startswith("TS-L2-")}
    assert ids == set(RULES) | set(store_policy.RULES) | set(l3_reads.RULES)
    marks = {(m.args[0], m.args[1]) for ns in (globals(), vars(test_scheduler_clauses)) for f in ns.values()
             if callable(f) for m in getattr(f, "pytestmark", []) if m.name == "rule"}
    assert {(rid, k) for rid in ids for k in ("keeps", "fires")} <= marks


@pytest.mark.rule("TS-L2-1", "keeps")
@pytest.mark.rule("TS-L2-4", "keeps")
@pytest.mark.rule("TS-L2-5", "keeps")
@pytest.mark.rule("TS-L2-6", "keeps")
@pytest.mark.rule("TS-L2-7", "keeps")
def test_store_then_load_is_clean():
    c = run(prefix() + load_b())
    assert c.findings == []
    assert c.l2.stats["pages_written_back"] == 4 and c.l2.stats["pages_loaded"] == 4
    for rid in ("TS-L2-1", "TS-L2-4", "TS-L2-5", "TS-L2-6"):
        assert c.l2.exercised[rid] or rid == "TS-L2-1", rid


@pytest.mark.rule("TS-L2-1", "keeps")
def test_pinned_source_regranted_after_its_ack_is_clean():
    # a finishes in plan 1; the store is acknowledged in plan 2's answer; plan 3 re-grants block 1 to b
    steps = prefix(done1=(), finish1=("a",)) + [
        (plan(2), 8), (ct.Result(2, [], [], [1]), 9),
        (plan(3, ["b"], 1, [10], [0], {"b": [1, 13, 14]}, {"b": [15, 16, 17]},
              {"full": [1, 13, 14], "swa": [15, 16, 17]}), 10)]
    assert found(run(steps)) == []


@pytest.mark.rule("TS-L2-1", "fires")
def test_pinned_source_regranted_before_its_ack_fires():
    steps = prefix(done1=(), finish1=("a",)) + [
        (plan(2, ["b"], 1, [10], [0], {"b": [1, 13, 14]}, {"b": [15, 16, 17]},
              {"full": [1, 13, 14], "swa": [15, 16, 17]}), 8)]
    assert found(run(steps)) == [("PEER-3", 999), ("TS-L2-1", 8)]  # (and the op is never acknowledged)


@pytest.mark.rule("TS-L2-1", "fires")
def test_forward_writing_a_pinned_source_fires():
    # the store copies a's partial tail block 3 while a's decode writes into it (beside a's whole pages)
    store = wb(1, [(1, 1), (2, 2), (4, 3), (5, 4), (3, 5)], [0, 0, 1, 1, 0], [H[0], H[1], H[0], H[1], ""])
    assert found(run(prefix(store))) == [("TS-L2-1", 6)]


@pytest.mark.rule("TS-L2-1", "fires")
def test_host_page_rewritten_while_a_load_reads_it_fires():
    load = lb(2, [(1, 7), (2, 8), (3, 10), (4, 11)], [0, 0, 1, 1])
    again = wb(3, [(1, 1)], [0], [H[0]])
    steps = prefix() + [(plan(2, ["b"], 1, [2], [8], {"b": [7, 8, 9]}, {"b": [10, 11, 12]},
                              {"full": [9], "swa": [12]}, [load, again]), 8), (ct.Result(2, [[60]], ["b"], [2, 3]), 9)]
    assert found(run(steps)) == [("TS-L2-1", 8)]


@pytest.mark.rule("TS-L2-2", "keeps")
def test_retraction_snapshot_store_is_unpinned_and_its_sources_regranted():
    snap = ct.CacheOp("SnapshotOp", [3], request="a", pool_index=1, slot=1)
    store = wb(2, [(3, 9), (6, 10)], [0, 1], pinned=False)
    steps = prefix() + [(plan(2, ["b"], 1, [10], [0], {"b": [3, 13, 14]}, {"b": [6, 16, 17]},
                              {"full": [3, 13, 14], "swa": [6, 16, 17]}, [store, snap]), 8),
                        (ct.Result(2, [[60]], [], [2, 3]), 9)]
    c = run(steps)
    assert found(c) == [] and c.l2.exercised["TS-L2-2"] == 1 and c.l2.stats["snapshots"] == 1


@pytest.mark.rule("TS-L2-2", "fires")
def test_unpinned_store_outside_a_retraction_fires():
    store = wb(1, [(1, 1), (2, 2), (4, 3), (5, 4)], [0, 0, 1, 1], [H[0], H[1], H[0], H[1]], pinned=False)
    assert found(run(prefix(store))) == [("TS-L2-2", 6)]


@pytest.mark.rule("TS-L2-2", "fires")
def test_unpinned_store_launched_after_a_load_into_its_source_fires():
    snap = ct.CacheOp("SnapshotOp", [4], request="a", pool_index=1, slot=1)
    load = lb(2, [(1, 3)], [0])  # writes a's block 3 before the snapshot store reads it
    store = wb(3, [(3, 9)], [0], pinned=False)
    steps = prefix() + [(plan(2, cache=[load, store, snap]), 8), (ct.Result(2, [], [], [2, 3, 4]), 9)]
    assert ("TS-L2-2", 8) in found(run(steps))


@pytest.mark.rule("TS-L2-3", "keeps")
def test_op_hygiene_keeps_on_legal_ops():
    c = run(prefix() + load_b())
    assert found(c, "TS-L2-3") == [] and c.l2.stats["write_backs"] == 1


@pytest.mark.rule("TS-L2-3", "fires")
@pytest.mark.parametrize("store", [
    wb(1, [], []),                                             # no transfer
    wb(1, [(1, 1), (1, 1)], [0, 0], [H[0], H[0]]),             # (group, source, destination) twice
    wb(1, [(1, 1)], [5], [H[0]]),                              # group id out of range
    wb(1, [(1, 16)], [0], [H[0]]),                             # Host page out of range
    wb(1, [(20, 1)], [0], [""]),                               # Device page out of range
])
def test_op_hygiene_fires(store):
    assert ("TS-L2-3", 6) in found(run(prefix(store)))


@pytest.mark.rule("TS-L2-4", "fires")
def test_key_stored_twice_while_in_flight_fires():
    again = wb(2, [(1, 9)], [0], [H[0]])
    steps = prefix(done1=()) + [(plan(2, ["a"], 0, [1], [], cache=[again]), 8), (ct.Result(2, [[52]], [], [1, 2]), 9)]
    assert found(run(steps)) == [("TS-L2-4", 8)]


@pytest.mark.rule("TS-L2-4", "keeps")
def test_key_stored_again_after_its_ack_is_clean():
    again = wb(2, [(1, 9)], [0], [H[0]])
    steps = prefix() + [(plan(2, ["a"], 0, [1], [], cache=[again]), 8), (ct.Result(2, [[52]], [], [2]), 9)]
    assert found(run(steps)) == []


@pytest.mark.rule("TS-L2-5", "fires")
@pytest.mark.parametrize("load,done1", [
    (lb(2, [(9, 7)], [0]), (1,)),                 # Host page 9 was never written back
    (lb(2, [(1, 7)], [0]), ()),                   # its write-back is not acknowledged yet
    (lb(2, [(1, 7)], [0], [H[0]]), (1,)),         # a Host-only load carrying a key
    (lb(2, [(3, 7)], [0]), (1,)),                 # Host page 3 holds group swa's copy, not full's
])
def test_load_provenance_fires(load, done1):
    late = [1] if not done1 else []
    steps = prefix(done1=done1) + [(plan(2, cache=[load]), 8), (ct.Result(2, [], [], [2] + late), 9)]
    assert ("TS-L2-5", 8) in found(run(steps))


@pytest.mark.rule("TS-L2-6", "fires")
@pytest.mark.parametrize("keys", [[H[1], H[0], H[0], H[1]],     # pages 0 and 1 stored under each other's hash
                                  [H[0], H[1], "00" * 32, H[1]]])  # a made-up hash
def test_write_back_key_fires(keys):
    store = wb(1, [(1, 1), (2, 2), (4, 3), (5, 4)], [0, 0, 1, 1], keys)
    assert found(run(prefix(store))) == [("TS-L2-6", 6)]


@pytest.mark.rule("TS-L2-7", "keeps")
def test_replayable_group_snapshot_to_the_snapshot_pool_is_clean():
    store = wb(1, [(1, 1), (2, 2)], [0, 0], [H[0], H[1]])
    snap = ct.CacheOp("SnapshotOp", [3], [(6, 1)], groups=[1], request="a", pool_index=1, slot=1)
    steps = prefix(store) + [(plan(2, cache=[snap]), 8), (ct.Result(2, [], [], [3]), 9)]
    assert found(run(steps, contract(replayable=True))) == []


@pytest.mark.rule("TS-L2-7", "fires")
def test_replayable_group_in_a_write_back_fires():
    assert found(run(prefix(), contract(replayable=True))) == [("TS-L2-7", 6)]


@pytest.mark.rule("TS-L2-8", "keeps")
def test_clear_refused_in_flight_then_accepted_is_clean():
    steps = prefix(done1=()) + [(ct.Clear(1, False), 8), (plan(2), 9), (ct.Result(2, [], [], [1]), 10),
                                (ct.Clear(2, True), 11)]
    c = run(steps)
    assert found(c) == [] and c.l2.exercised["TS-L2-8"] == 1 and c.l2.stats["clears_accepted"] == 1


@pytest.mark.rule("TS-L2-8", "fires")
def test_clear_accepted_with_a_write_back_in_flight_fires():
    steps = prefix(done1=()) + [(ct.Clear(1, True), 8), (plan(2), 9), (ct.Result(2, [], [], [1]), 10)]
    assert found(run(steps)) == [("TS-L2-8", 8)]


def test_accepted_clear_forgets_every_cached_page():
    steps = prefix(finish1=("a",)) + [(plan(2), 8), (ct.Result(2, []), 9), (ct.Clear(2, True), 10),
                                      (plan(3, ["b"], 1, [2], [8], {"b": [1, 2, 13]}, {"b": [4, 5, 14]},
                                            {"full": [13], "swa": [14]}), 11)]
    assert ("PEER-4", 11) in found(run(steps))


def _decode_to_page_2(store_plan4):
    """a decodes tokens 10, 11, 12 (plans 1-3), completing its page 2 (block 3) during decode."""
    steps = prefix()
    for n in (2, 3):
        steps += [(plan(n, ["a"], 0, [1], []), 6 + 2 * n), (ct.Result(n, [[50 + n]]), 7 + 2 * n)]
    steps += [(plan(4, ["a"], 0, [1], [], cache=[store_plan4]), 20), (ct.Result(4, [[60]], [], [9]), 21)]
    return steps


@pytest.mark.rule("TS-L2-9", "keeps")
def test_sliding_window_decode_page_may_stream():
    c = contract()
    steps = _decode_to_page_2(wb(9, [(6, 9)], [1], [prefix_hashes(A + [50, 51, 52], 4)[2]]))
    assert found(run(steps, c)) == [] and c.l2.stats["pages_written_back"] == 5


@pytest.mark.rule("TS-L2-9", "fires")
def test_full_attention_decode_page_streamed_during_decode_fires():
    steps = _decode_to_page_2(wb(9, [(3, 9)], [0], [prefix_hashes(A + [50, 51, 52], 4)[2]]))
    assert found(run(steps)) == [("TS-L2-9", 20)]


DRAINED = [(plan(90), 90), (ct.Result(90, []), 91)]  # a last plan that schedules nothing and issues no op


@pytest.mark.rule("TS-L2-12", "keeps")
def test_prefill_pages_stored_at_the_first_decode_and_decode_pages_after_finish_are_clean():
    # plan 1 (a's first decode admission) stores its prompt pages 0, 1; a decodes page 2 and finishes in plan 4;
    # plan 5 stores page 2 (block 3) of the full group; the sliding group's page 2 streamed in plan 4
    key2 = prefix_hashes(A + [50, 51, 52], 4)[2]
    steps = _decode_to_page_2(wb(9, [(6, 9)], [1], [key2]))
    steps[-1] = (ct.Result(4, [[60]], ["a"], [9]), 21)
    steps += [(plan(5, cache=[wb(10, [(3, 10)], [0], [key2])]), 22), (ct.Result(5, [], [], [10]), 23)] + DRAINED
    c = run(steps)
    assert found(c) == [] and c.exercised["TS-L2-12"] == 2
    assert (c.stores.stats["pages_due"], c.stores.stats["pages_stored"]) == (6, 6)


@pytest.mark.rule("TS-L2-12", "keeps")
def test_page_stored_some_plans_after_it_fell_due_is_clean():
    # the store queue drains at its own pace: a's page 1 (both groups) is stored two plans late
    late = wb(2, [(2, 5), (5, 6)], [0, 1], [H[1], H[1]])
    steps = prefix(wb(1, [(1, 1), (4, 3)], [0, 1], [H[0], H[0]])) + [
        (plan(2), 8), (ct.Result(2, []), 9), (plan(3, cache=[late]), 10), (ct.Result(3, [], [], [2]), 11)] + DRAINED
    c = run(steps)
    assert found(c) == [] and c.stores.stats["pages_stored"] == 4


@pytest.mark.rule("TS-L2-12", "keeps")
def test_page_evicted_before_its_store_is_not_judged():
    # a finishes; its unstored page 1 (blocks 2, 5) is handed to b before any store: evicted while queued (b
    # computes the same page again, and that copy is stored after b finishes)
    steps = prefix(wb(1, [(1, 1), (4, 3)], [0, 1], [H[0], H[0]]), finish1=("a",)) + [
        (plan(2, ["b"], 1, [10], [0], {"b": [2, 13, 14]}, {"b": [5, 16, 17]},
              {"full": [2, 13, 14], "swa": [5, 16, 17]}), 8), (ct.Result(2, [[60]], ["b"]), 9),
        (plan(3, cache=[wb(2, [(13, 5), (16, 6)], [0, 1], [H[1], H[1]])]), 10), (ct.Result(3, [], [], [2]), 11)] \
        + DRAINED
    c = run(steps)
    assert found(c, "TS-L2-12") == [] and c.stores.stats["pages_evicted_unstored"] == 2


@pytest.mark.rule("TS-L2-12", "keeps")
def test_pages_left_while_the_host_tier_is_full_are_not_judged():
    # 3 Host pages (2 usable): the store takes both, so a's other two pages waited through a full Host tier
    c = Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=20, num_host_pages=3,
                           groups=[ct.Group("full", 4, 20), ct.Group("swa", 4, 20, "sliding", 8)]))
    assert found(run(prefix(wb(1, [(1, 1), (4, 2)], [0, 1], [H[0], H[0]])) + DRAINED, c)) == []
    assert c.stores.stats["capacity_bound"] == 2


@pytest.mark.rule("TS-L2-12", "keeps")
def test_a_trace_that_does_not_end_drained_is_not_judged():
    c = run(prefix(wb(1, [(1, 1), (4, 3)], [0, 1], [H[0], H[0]])))  # ends on a's decode
    assert found(c) == [] and c.stores.stats["pages_unsettled_at_end"] == 2


@pytest.mark.rule("TS-L2-12", "fires")
def test_prefill_page_never_stored_fires_at_the_drained_end():
    c = run(prefix(wb(1, [(1, 1), (4, 3)], [0, 1], [H[0], H[0]])) + DRAINED)
    assert found(c) == [("TS-L2-12", 999)] and {(f.context["group"], f.context["slot"]) for f in c.findings} == \
        {("full", 1), ("swa", 1)}


@pytest.mark.rule("TS-L2-12", "fires")
def test_decode_page_never_stored_after_finish_fires():
    steps = _decode_to_page_2(wb(9, [(6, 9)], [1], [prefix_hashes(A + [50, 51, 52], 4)[2]]))
    steps[-1] = (ct.Result(4, [[60]], ["a"], [9]), 21)
    steps += [(plan(5), 22), (ct.Result(5, []), 23)]
    c = run(steps)
    assert found(c) == [("TS-L2-12", 999)]
    assert c.findings[0].context == {"request": "a", "group": "full", "slot": 2, "plan": 3}


@pytest.mark.rule("TS-L2-10", "keeps")
def test_failed_load_destination_handed_out_again_is_clean():
    steps = prefix() + [(plan(2, cache=[lb(2, [(1, 7)], [0])]), 8), (ct.Result(2, [], [], [2], failed=[2]), 9),
                        (plan(3, ["b"], 1, [10], [0], {"b": [7, 13, 14]}, {"b": [15, 16, 17]},
                              {"full": [7, 13, 14], "swa": [15, 16, 17]}), 10)]
    c = run(steps)
    assert found(c) == [] and c.l2.stats["failed_loads"] == 1


@pytest.mark.rule("TS-L2-10", "fires")
def test_failed_load_destination_named_as_cached_fires():
    steps = prefix() + [(plan(2, cache=[lb(2, [(1, 7)], [0])]), 8), (ct.Result(2, [], [], [2], failed=[2]), 9),
                        (plan(3, ["b"], 1, [6], [4], {"b": [7, 13, 14]}, {"b": [15, 16, 17]},
                              {"full": [13, 14], "swa": [15, 16, 17]}), 10)]
    assert ("TS-L2-10", 10) in found(run(steps))


def test_failed_but_unacknowledged_is_an_input_error():
    steps = prefix() + [(plan(2, cache=[lb(2, [(1, 7)], [0])]), 8), (ct.Result(2, [], [], [], failed=[2]), 9)]
    with pytest.raises(ValueError, match="failed but not"):
        run(steps)


# -- the L3 tier: StorageGetOp / StoragePutOp answered per key (the released wheel's prefetch) -------------------

GET, PUT, QUERY, CANCEL = "StorageGetOp", "StoragePutOp", "StorageQueryOp", "StorageCancelOp"
KEYS = dict(groups=[0, 0, 1, 1], keys=[H[0], H[1], H[0], H[1]], offsets=[0, 0, 0, 0])


def l3(kind, oid, pages=(5, 6, 7, 8), **kw):
    return ct.CacheOp(kind, [oid], host_blocks=list(pages) if kind != QUERY else [], **{**KEYS, **kw})


# the keys of KEYS found in L3 by a query answered in plan 2 (a get reads only keys known to exist: TS-L2-13)
QUERIED = [(plan(2, cache=[ct.CacheOp(QUERY, [90], **KEYS)]), 8),
           (ct.Result(2, storage=[ct.StorageDone(90, [True] * 4)]), 9)]


def fetched(success=(True, True, True, True), load=None, hit=8, zero=None, get=None):
    """a's pages reach L3 (put 1: L3 ids are their own namespace, beside write-back 1); b's prefix is queried
    and read back into Host pages 5-8 (get 2, answered per key in plan 3's result), then loaded for b."""
    load = load or lb(3, [(5, 7), (6, 8), (7, 10), (8, 11)], [0, 0, 1, 1])
    zero = zero or {"full": [9], "swa": [12]}
    return prefix() + [
        (plan(2, cache=[l3(PUT, 1, (1, 2, 3, 4)), l3(QUERY, 2)]), 8),
        (ct.Result(2, storage=[ct.StorageDone(1, [True] * 4), ct.StorageDone(2, [True] * 4)]), 9),
        (plan(3, cache=[get or l3(GET, 3)]), 10),
        (ct.Result(3, storage=[ct.StorageDone(3, list(success))]), 11),
        (plan(4, ["b"], 1, [len(B) - hit], [hit], {"b": [7, 8, 9]}, {"b": [10, 11, 12]}, zero, [load] if load.pages
              else []), 12),
        (ct.Result(4, [[60]], ["b"], [3] if load.pages else []), 13)]


@pytest.mark.rule("TS-L2-5", "keeps")
@pytest.mark.rule("TS-L2-11", "keeps")
def test_l3_get_then_load_is_clean():
    c = run(fetched())
    assert found(c) == []
    assert c.l2.stats["storage_gets"] == 1 and c.l2.stats["host_served_hits"] == 1
    assert c.l2.stats["query_hits"] == 4 and c.l2.exercised["TS-L2-11"] == 1


def _l3_said(enabled):
    return Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=20, num_host_pages=16,
                              num_snapshot_pages=4, max_retracted_requests=2, enable_l3_storage=enabled,
                              groups=[ct.Group("full", 4, 20), ct.Group("swa", 4, 20, "sliding", 8)]))


@pytest.mark.rule("TS-L2-3", "keeps")
def test_l3_ops_with_l3_configured_are_clean():
    assert found(run(fetched(), _l3_said(True))) == []


@pytest.mark.rule("TS-L2-3", "fires")
def test_l3_ops_without_an_l3_tier_fire():
    """L189: "Existence and prefetch are skipped when L3 is unset": the header says no L3, yet a put and a
    query are issued in plan 2 and a get in plan 3."""
    assert found(run(fetched(), _l3_said(False)), "TS-L2-3") == [("TS-L2-3", 8), ("TS-L2-3", 10)]


@pytest.mark.rule("TS-L2-10", "keeps")
def test_failed_get_key_recomputed_is_clean():
    """get 3 fails to read full page 1: b loads page 0 only, its hit stops at 4 and the rest is computed."""
    load = lb(3, [(5, 7), (7, 10)], [0, 1])
    c = run(fetched((True, False, True, True), load, hit=4, zero={"full": [8, 9], "swa": [11, 12]}))
    assert found(c) == [] and c.l2.stats["get_keys_failed"] == 1 and c.l2.exercised["TS-L2-10"] >= 1


@pytest.mark.rule("TS-L2-10", "fires")
def test_failed_get_page_loaded_and_hit_fires():
    c = run(fetched((True, False, True, True)))
    assert found(c) == [("TS-L2-10", 12)]
    assert len([f for f in c.findings if f.rule == "TS-L2-10"]) == 2  # the load, and the hit over its slot


@pytest.mark.rule("TS-L2-10", "fires")
def test_hit_over_a_failed_key_without_a_load_fires():
    """the scheduler loads page 0 but keeps the 8-token hit: slot 1 is a zeroed page whose key failed."""
    load = lb(3, [(5, 7), (7, 10), (8, 11)], [0, 1, 1])
    c = run(fetched((True, False, True, True), load, zero={"full": [8, 9], "swa": [12]}))
    assert found(c) == [("TS-L2-10", 12)]


@pytest.mark.rule("TS-L2-10", "fires")
def test_put_of_a_failed_get_page_fires():
    steps = fetched((False, True, True, True), lb(3, [], []), hit=0, zero={"full": [7, 8, 9], "swa": [10, 11, 12]})
    steps += [(plan(5, cache=[l3(PUT, 4, (5,), groups=[0], keys=[H[0]], offsets=[0])]), 14),
              (ct.Result(5, storage=[ct.StorageDone(4, [True])]), 15)]
    assert found(run(steps)) == [("TS-L2-10", 14)]


@pytest.mark.rule("TS-L2-11", "fires")
def test_host_hit_left_between_grains_fires():
    """every key was read, but the full group got only page 0 loaded while the hit still claims 8 tokens."""
    load = lb(3, [(5, 7), (7, 10), (8, 11)], [0, 1, 1])
    assert found(run(fetched(load=load, zero={"full": [8, 9], "swa": [12]}))) == [("TS-L2-11", 12)]


def test_host_hit_off_the_prefix_granularity_is_ts_pfx_1s_alone():
    load = lb(3, [(5, 7), (6, 8), (7, 10), (8, 11)], [0, 0, 1, 1])
    assert "TS-L2-11" not in {r for r, _ in found(run(fetched(load=load, hit=6)))}
    assert ("TS-PFX-1", 12) in found(run(fetched(load=load, hit=6)))


@pytest.mark.rule("TS-L2-1", "fires")
def test_write_back_into_a_host_page_a_get_fills_fires():
    steps = prefix() + QUERIED + [(plan(3, cache=[l3(GET, 1), wb(2, [(1, 6)], [0], [H[0]])]), 10),
                                  (ct.Result(3, [], [], [2], storage=[ct.StorageDone(1, [True] * 4)]), 11)]
    assert found(run(steps)) == [("TS-L2-1", 10)]


@pytest.mark.rule("TS-L2-3", "keeps")
def test_cancelled_get_answered_later_is_clean():
    steps = prefix() + QUERIED + [(plan(3, cache=[l3(GET, 1)]), 10), (ct.Result(3), 11),
                                  (plan(4, cache=[ct.CacheOp(CANCEL, [], cancels=1)]), 12),
                                  (ct.Result(4, storage=[ct.StorageDone(1, [True] * 4)]), 13)]
    c = run(steps)
    assert found(c) == [] and c.l2.stats["storage_cancels"] == 1


@pytest.mark.rule("TS-L2-3", "fires")
@pytest.mark.parametrize("op", [l3(GET, 1, (), groups=[], keys=[], offsets=[]),   # no object key
                                l3(GET, 1, (5, 16, 7, 8)),                          # Host page out of range
                                l3(PUT, 1, (1, 1, 3, 4)),                           # a Host page twice
                                ct.CacheOp(CANCEL, [], cancels=7)])                 # cancels no op in flight
def test_l3_op_hygiene_fires(op):
    done = [ct.StorageDone(1, [True] * len(op.keys))] if op.op_ids else []
    steps = prefix() + [(plan(2, cache=[op]), 8), (ct.Result(2, storage=done), 9)]
    assert ("TS-L2-3", 8) in found(run(steps))


@pytest.mark.rule("TS-L2-5", "fires")
@pytest.mark.rule("TS-L2-6", "fires")
@pytest.mark.parametrize("put,rule", [(l3(PUT, 1, (9,), groups=[0], keys=[H[0]], offsets=[0]), "TS-L2-5"),
                                      (l3(PUT, 1, (1,), groups=[0], keys=[H[1]], offsets=[0]), "TS-L2-6")])
def test_put_reads_an_acknowledged_host_page_under_its_key(put, rule):
    steps = prefix() + [(plan(2, cache=[put]), 8), (ct.Result(2, storage=[ct.StorageDone(1, [True])]), 9)]
    assert found(run(steps)) == [(rule, 8)]


def test_l3_op_unanswered_or_answered_twice_is_peer_3():
    steps = prefix() + [(plan(2, cache=[l3(QUERY, 1)]), 8), (ct.Result(2), 9)]
    assert found(run(steps)) == [("PEER-3", 999)]
    steps = prefix() + [(plan(2, cache=[l3(QUERY, 1)]), 8), (ct.Result(2, storage=[ct.StorageDone(1, [True] * 4)]), 9),
                        (plan(3), 10), (ct.Result(3, storage=[ct.StorageDone(1, [True] * 4)]), 11)]
    assert found(run(steps)) == [("PEER-3", 11)]


def test_l3_outcome_of_the_wrong_length_is_an_input_error():
    steps = prefix() + [(plan(2, cache=[l3(GET, 1)]), 8), (ct.Result(2, storage=[ct.StorageDone(1, [True])]), 9)]
    with pytest.raises(ValueError, match="1 flags for 4 keys"):
        run(steps)


# -- injected faults on the real wheel -------------------------------------------------------------------------

FAULT_RUNS = {
    "zero-pinned-source": {}, "unpinned-store": {}, "repeat-transfer": {}, "store-key-twice": {},
    "keyed-host-load": {}, "wrong-key": {}, "decode-stream": {}, "failed-load-published": {},
    "failed-get-loaded": {"host_pages": 16, "l3": True, "stagger": 8},
    "unclamped-host-prefix": {"host_pages": 16, "l3": True, "stagger": 8},
    "replayable-write-back": {"swa_replayable": True},
    "accept-clear": {"ack_delay": 3, "clear_every": 2}, "skip-store": {},
    "hit-served-as-copy": {}, "full-row-hole": {},
}


@pytest.mark.parametrize("name", sorted(FAULT_RUNS))
def test_injected_fault_fires_its_rule_on_the_wheel(name):
    pytest.importorskip("tokenspeed_scheduler")
    from pathlib import Path

    from kvsim.sim.peers import tokenspeed as T
    from kvsim.sim.peers.tokenspeed import faults
    from kvsim.sim.peers.workload import read_mooncake

    reqs = read_mooncake(Path(__file__).resolve().parents[2] / "sim" / "peers" / "samples" / "tiny_workload.jsonl")
    kw = {"pages": 40, "host_pages": 64, "swa_window": 128, "stagger": 3, **FAULT_RUNS[name]}
    clean = T.run(reqs, T.RunConfig(**kw))
    bad = T.run(reqs, T.RunConfig(**kw, fault=name))
    rule = faults.NAMES[name]
    assert clean.contract.counts[rule] == 0
    assert bad.contract.counts[rule] >= 1, (name, bad.contract.summary()["violations_by_rule"])
