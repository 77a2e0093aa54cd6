"""ENT-*: entitlement accounting, ensure_mapped_to_tokens, round-boundary growth, truncate returns.

Seed: "Active entitlement在terminal release前不进入global available capacity", "ensure_mapped_to_tokens()
的参数是本阶段所需覆盖范围的下界", "每个 launch 在 round boundary 上要求 entitlement 覆盖该步所需 pages"
(kv_lease_growth and bounded completion) and "对 active address space，解除的 Device leases 回到 同一
active reservation" with "最后一个部分页保留".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.kvmodel.store import GrowthConfig, Refusal
from kvsim.sim.replay import replay_trace
from tests.rules.builders import (
    assert_detected,
    assert_kept,
    assert_refused,
    assert_violation,
    committed,
    new_store,
    retained,
    run,
    small,
    touch,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

# -- ENT-1 ----------------------------------------------------------------------------------------

@pytest.mark.rule("ENT-1", "keeps")
def test_ent1_keeps_entitlement_until_terminal_release():
    st = small()
    pool = st.pools["main"]
    run(st, ("activate", "a", 100, 300))  # entitlement ceil(400/64) = 7 pages
    space = st.space_of("a", "main")
    assert (space.entitlement, space.reservation, pool.available) == (7, 7, 25)
    run(st, ("map", "a", "main", 256), ("launch", "u", [("a", "main", (0, 100))]),
        ("complete", "u", [("a", "main", 100)]), ("truncate", "a", "main", 100))
    assert (space.entitlement, len(space.pages), pool.available) == (7, 2, 25)  # map/trim never touch available
    run(st, ("finish", "a", None))
    assert pool.available == pool.capacity
    assert_kept(st, "ENT-1")


@pytest.mark.rule("ENT-1", "fires")
def test_ent1_fires_when_an_inactive_space_keeps_a_reservation():
    st = small()
    retained(st, "c", 100)
    space = st.checkpoints["c"].spaces["main"]
    space.reservation = 2  # finish kept unmaterialized entitlement on the checkpoint
    st.pools["main"].reserved += 2
    touch(st, spaces=[space], pools=["main"])
    assert_detected(st, "ENT-1")


def test_ent1_audit_fires_when_a_reservation_returns_early():
    st = small()
    run(st, ("activate", "a", 100, 300))
    st.pools["main"].reserved -= 1  # one reserved unit went back to global available while active
    assert_detected(st, "ENT-1", incremental=False)


def test_ent1_incremental_sees_a_reservation_returned_early():
    st = small()
    run(st, ("activate", "a", 100, 300))
    st.pools["main"].reserved -= 1
    touch(st, spaces=[st.space_of("a", "main")], pools=["main"])
    assert_detected(st, "ENT-1")


# -- ENT-2 ----------------------------------------------------------------------------------------

@pytest.mark.rule("ENT-2", "keeps")
def test_ent2_keeps_ensure_mapped_as_a_lower_bound():
    st = small()
    run(st, ("activate", "a", 100, 100))  # entitlement 4 pages
    space = st.space_of("a", "main")
    assert run(st, ("map", "a", "main", 100)) == [[0, 1]]
    assert run(st, ("map", "a", "main", 30), ("map", "a", "main", 128)) == [[], []]  # covered: no trim, no-op
    assert run(st, ("map", "a", "main", 129)) == [[2]]
    assert (space.committed, space.entitlement, len(space.pages)) == (0, 4, 3)  # frontier and entitlement kept
    assert_refused(st, "entitlement", "map", "a", "main", 257)  # 5 pages > entitlement 4
    assert_kept(st, "ENT-2")


@pytest.mark.rule("ENT-2", "fires")
def test_ent2_fires_when_the_engine_maps_pages_already_covered():
    st = small()
    run(st, ("activate", "a", 100, 100), ("map", "a", "main", 128))
    assert_violation(st, "ENT-2", "map", "a", "main", 100, pages=[5])


def test_ent2_fires_when_the_engine_maps_too_many_pages():
    st = small()
    run(st, ("activate", "a", 100, 100))
    assert_violation(st, "ENT-2", "map", "a", "main", 100, pages=[5, 6, 7])


# -- ENT-3 ----------------------------------------------------------------------------------------

def growth_store(tokens=None):
    """kv_lease_growth with a 4096-token window and 2 cushion pages; L = 128 pages per sequence."""
    return new_store(max_context=8192, max_concurrency=2, tokens=tokens,
                     growth=GrowthConfig(window=4096, cushion_pages=2))


@pytest.mark.rule("ENT-3", "keeps")
def test_ent3_keeps_launches_covered_and_growth_at_round_boundaries():
    st = growth_store()
    run(st, ("activate", "a", 100, 8000))  # window: ceil((100 + 4096)/64) + 2 cushion = 68 of 127 pages
    main = st.space_of("a", "main")
    assert main.entitlement == 68
    run(st, ("map", "a", "main", 4200), ("launch", "u1", [("a", "main", (0, 4200))]),
        ("complete", "u1", [("a", "main", 4200)]))
    assert run(st, ("grow", "a")) == [{"main": 127}]  # ceil(min(8100, 4200 + 4096)/64) + 2, capped at 127
    run(st, ("map", "a", "main", 8100), ("launch", "u2", [("a", "main", (4200, 8100))]),
        ("complete", "u2", [("a", "main", 8100)]))
    assert_kept(st, "ENT-3")


def bounded(st):
    """Two lanes in a 140-page pool: a grows by one rung, then cannot grow and completes at 4480."""
    run(st, ("activate", "a", 100, 8000), ("activate", "b", 100, 8000))
    assert st.pools["main"].available == 140 - 2 * 68
    run(st, ("map", "a", "main", 4200), ("launch", "u1", [("a", "main", (0, 4200))]),
        ("complete", "u1", [("a", "main", 4200)]))
    assert run(st, ("grow", "a")) == [{"main": 70}]  # the window rung does not fit; the 128-token rung does
    run(st, ("map", "a", "main", 4480), ("launch", "u2", [("a", "main", (4200, 4480))]),
        ("complete", "u2", [("a", "main", 4480)]))


@pytest.mark.rule("ENT-3", "keeps")
def test_ent3_keeps_bounded_completion_at_the_covered_frontier():
    st = growth_store(tokens=140 * 64)
    bounded(st)
    before = st.snapshot()
    refused = st.grow("a", bounded_at=4480)
    assert isinstance(refused, Refusal) and refused.bounded_at == 4480 == st.space_of("a", "main").entitlement * 64
    assert st.bundles["a"].bounded_at == 4480 and st.snapshot() != before
    run(st, ("truncate", "a", "main", 4470), ("launch", "u3", [("a", "main", (4470, 4480))]),
        ("complete", "u3", [("a", "main", 4480)]), ("finish", "a", None))  # completes with `length` at 4480
    assert_kept(st, "ENT-3")


@pytest.mark.rule("ENT-3", "fires")
def test_ent3_fires_on_a_launch_beyond_the_entitlement():
    st = growth_store(tokens=140 * 64)
    bounded(st)
    assert isinstance(st.grow("a"), Refusal)
    assert_violation(st, "ENT-3", "launch", "u3", [("a", "main", (4480, 4481))])


def test_ent3_fires_on_growth_inside_a_unit():
    st = growth_store()
    run(st, ("activate", "a", 100, 8000), ("map", "a", "main", 100), ("launch", "u", [("a", "main", (0, 100))]))
    assert_violation(st, "ENT-3", "grow", "a")


def test_ent3_fires_on_a_bounded_completion_at_the_wrong_frontier():
    st = growth_store(tokens=140 * 64)
    bounded(st)
    assert_violation(st, "ENT-3", "grow", "a", bounded_at=4416)


def test_ent3_fires_on_a_launch_beyond_a_root_entitlement():
    st = small()
    run(st, ("activate", "a", 100, 28), ("map", "a", "main", 128))  # entitlement 2 pages
    assert_violation(st, "ENT-3", "launch", "u", [("a", "main", (0, 129))])


# -- ENT-5 ----------------------------------------------------------------------------------------

def decoding(st):
    """a: prompt 100 under a 4096-token window (68 pages), committed to 4200: the bound is
    ceil(min(8100, 4200 + 4096)/64) + 2 = 127 pages."""
    run(st, ("activate", "a", 100, 8000), ("map", "a", "main", 4200), ("launch", "u1", [("a", "main", (0, 4200))]),
        ("complete", "u1", [("a", "main", 4200)]))


@pytest.mark.rule("ENT-5", "keeps")
def test_ent5_keeps_growth_up_to_frontier_window_and_cushion():
    """Decision 25: any step up to the bound is the engine's choice, stated or read from its counters."""
    st = growth_store()
    decoding(st)
    run(st, ("grow", "a", None, (True, {"main": 100})))  # the engine's own step
    assert st.space_of("a", "main").entitlement == 100
    run(st, ("grow", "a", None, (True, None)))  # unstated: the model's guess is the bound, 127
    c = st.pool_counters("main")
    run(st, ("observe_pool", "main", c["allocated"], c["reserved"] - 7, c["available"] + 7))  # 120 <= 127
    assert st.space_of("a", "main").entitlement == 120
    run(st, ("grow", "a", None, (True, {"main": 127})))  # exactly the bound
    assert_kept(st, "ENT-5")


@pytest.mark.rule("ENT-5", "fires")
def test_ent5_fires_on_a_stated_lease_beyond_the_window():
    st = growth_store()
    decoding(st)
    assert_violation(st, "ENT-5", "grow", "a", None, (True, {"main": 128}))  # within L, beyond the bound


@pytest.mark.rule("ENT-5", "fires")
def test_ent5_fires_on_counters_showing_a_lease_beyond_the_window():
    st = growth_store()
    decoding(st)
    run(st, ("grow", "a", None, (True, {"main": 100})), ("grow", "a", None, (True, None)))  # guess: 127
    c = st.pool_counters("main")
    assert_violation(st, "ENT-5", "observe_pool", "main", c["allocated"], c["reserved"] + 1, c["available"] - 1)


# -- ENT-4 ----------------------------------------------------------------------------------------

@pytest.mark.rule("ENT-4", "keeps")
def test_ent4_keeps_truncated_leases_in_the_same_reservation():
    st = small()
    pool = st.pools["main"]
    run(st, ("activate", "a", 100, 200), ("map", "a", "main", 256),
        ("launch", "u", [("a", "main", (0, 256))]), ("complete", "u", [("a", "main", 150)]))
    space = st.space_of("a", "main")
    tail = space.pages[2]
    before = (pool.available, space.entitlement, space.reservation)
    run(st, ("truncate", "a", "main", 150))  # speculative tail rejected: block 3 goes, block 2 (22 columns) stays
    assert len(space.pages) == 3 and space.pages[2] is tail and tail.committed == 22
    assert (pool.available, space.entitlement, space.reservation) == (before[0], before[1], before[2] + 1)
    run(st, ("truncate", "a", "main", 100))  # destructive: cuts the tail page, same reservation again
    assert len(space.pages) == 2 and space.reservation == before[2] + 2 and pool.available == before[0]
    assert_kept(st, "ENT-4")


def pinned_and_truncated(st):
    """c (200 tokens, 4 pages) is being copied to the Host when a resumes it by Move and truncates to 128:
    blocks 2 and 3, private and pinned by the copy, are unmapped."""
    retained(st, "c", 200)
    run(st, ("xfer", "x", "d2h", "c", "main", [0, 1, 2, 3], "reserve"),
        ("xfer", "x", "d2h", "c", "main", [0, 1, 2, 3], "copy"),
        ("activate", "a", 200, 56, {"source": "c", "keep_source": False}))


@pytest.mark.rule("ENT-4", "keeps")
def test_ent4_keeps_a_truncated_copy_pinned_lease_in_the_same_reservation():
    """Decision 26: the lease goes back to the same reservation at once; the page group stays pinned."""
    st = small(host_pages=8)
    pinned_and_truncated(st)
    space, pool = st.space_of("a", "main"), st.pools["main"]
    before = st.pool_counters("main")
    run(st, ("truncate", "a", "main", 128))
    after = st.pool_counters("main")
    assert (after["allocated"], after["reserved"], after["available"]) == \
        (before["allocated"] - 2, before["reserved"] + 2, before["available"])
    assert space.entitlement == 4 and pool.draining == 2 and pool.free_ids == pool.capacity - 4
    run(st, ("map", "a", "main", 256))  # the entitlement is intact (ENT-2 would refuse otherwise)
    for phase in ("verify", "publish", "release_source"):
        run(st, ("xfer", "x", "d2h", "c", "main", [0, 1, 2, 3], phase))
    assert pool.draining == 0 and st.pool_counters("main")["allocated"] == 4
    assert_kept(st, "ENT-4")


@pytest.mark.rule("REP-2", "keeps")
def test_rep2_keeps_a_map_waiting_while_only_a_pinned_page_group_is_left():
    """Decision 26: the reservation holds the unit, but its page group is the copy's until publish: a map
    that needs it waits (`busy`) and succeeds once the copy is published."""
    st = small(host_pages=8, tokens=20 * 64)  # M = 20
    pinned_and_truncated(st)
    run(st, ("activate", "b", 900, 124), ("map", "b", "main", 1024))  # b holds 16: allocated 20, available 0
    run(st, ("truncate", "a", "main", 128))  # 2 units back in a's reservation, their page groups still pinned
    assert st.pools["main"].free_ids == 0
    assert_refused(st, "busy", "map", "a", "main", 256)
    for phase in ("verify", "publish"):
        run(st, ("xfer", "x", "d2h", "c", "main", [0, 1, 2, 3], phase))
    run(st, ("map", "a", "main", 256))
    assert_kept(st, "REP-2")


@pytest.mark.rule("REP-2", "fires")
def test_rep2_fires_on_an_engine_mapping_onto_a_pinned_page_group():
    result = replay_trace(SCENARIOS / "violations" / "REP-2_map_onto_pinned_page_group.jsonl")
    assert [(v["rule"], v["op"]) for v in result.violations] == [("REP-2", "map")]


@pytest.mark.rule("ENT-4", "fires")
def test_ent4_fires_when_the_last_partial_page_is_trimmed():
    st = small()
    committed(st, "a", 150, budget=100)
    space = st.space_of("a", "main")
    st.drop_ref(space.pages.pop(), space, to_reservation=True)  # trim took the partial page holding 22 columns
    st.tables["main"].unmap(space.row, 2)
    touch(st, spaces=[space])
    assert_detected(st, "ENT-4")


@pytest.mark.rule("ENT-4", "keeps")
def test_ent4_truncated_shared_members_shrink_the_entitlement_deterministically():
    """Decision 16: unmapping a forked (shared) member frees no lease and the entitlement shrinks by it,
    whatever the pool has left; global available never changes."""
    st = small()
    retained(st, "c", 256)
    run(st, ("activate", "s", 256, 0, {"source": "c"}))  # 4 shared members, entitlement 4, reservation 0
    space = st.space_of("s", "main")
    before = st.pool_counters("main")
    run(st, ("truncate", "s", "main", 100))
    assert space.entitlement == 2 and st.pool_counters("main") == before
    assert_refused(st, "entitlement", "map", "s", "main", 256)
    run(st, ("map", "s", "main", 128))
