"""PAGE-*: one replica per lease, stale handles, replica validity, reclamation and leaks, identity.

Seed: "每个 Device page-group lease 在所属 pool 中至多承载一个 logical page replica", "generation 防止
release/reuse 后的 stale handle", "replica.epoch=page.epoch \\land replica.coverage\\ge n", "只有当
references、replicas 和 transaction pins 均为零时，descriptor 才能回收并推进 generation" and "Logical page
identity、content epoch与physical page ID彼此独立".
"""

from __future__ import annotations

import pytest

from kvsim.spec.checking import Checker
from tests.rules.builders import (
    assert_detected,
    assert_kept,
    assert_violation,
    audit_clean,
    committed,
    retained,
    rules_of,
    run,
    small,
    touch,
)

# -- PAGE-1 ---------------------------------------------------------------------------------------

@pytest.mark.rule("PAGE-1", "keeps")
def test_page1_keeps_one_replica_per_lease():
    st = small()
    run(st, ("activate", "a", 200, 0), ("map", "a", "main", 200, {"pages": [7, 3, 9, 1]}))  # engine's choice
    retained(st, "c", 130)
    run(st, ("activate", "b", 130, 64, {"source": "c", "pages": {"main": [0, 2, 11]}}))  # 2 shared + COW tail
    ids = [p.device for p in st.space_of("a", "main").pages + st.space_of("b", "main").pages]
    assert ids == [7, 3, 9, 1, 0, 2, 11]
    assert_kept(st, "PAGE-1")


@pytest.mark.rule("PAGE-1", "fires")
def test_page1_fires_when_two_pages_claim_one_lease():
    st = small()
    committed(st, "a", 128)
    first, second = st.space_of("a", "main").pages
    second.device = first.device  # page group 0 now "carries" two logical pages
    touch(st, pages=[second])
    assert_detected(st, "PAGE-1")


def test_page1_fires_when_the_engine_maps_a_leased_page():
    st = small()
    committed(st, "a", 128)
    run(st, ("activate", "b", 64, 64))
    run(st, ("observe_row", "a", "main", {"table": [p.device for p in st.space_of("a", "main").pages]}))
    assert_violation(st, "PAGE-1", "map", "b", "main", 64, pages=[st.space_of("a", "main").pages[1].device])


# -- PAGE-2 ---------------------------------------------------------------------------------------

@pytest.mark.rule("PAGE-2", "keeps")
def test_page2_keeps_generations_on_release_and_reuse():
    st = small()
    committed(st, "a", 128)
    pool = st.pools["main"]
    old = pool.handle(st.space_of("a", "main").pages[0].device)
    run(st, ("finish", "a", None))
    assert not pool.is_current(old)  # released: the old handle is stale
    committed(st, "b", 64)
    new = pool.handle(st.space_of("b", "main").pages[0].device)
    assert new.page_id == old.page_id and new.generation > old.generation
    assert pool.is_current(new) and not pool.is_current(old)
    run(st, ("observe_row", "b", "main", {"table": [new.page_id, -1]}))
    audit_clean(st)
    assert st.cov.counts("PAGE-2")[2] == 0


@pytest.mark.rule("PAGE-2", "keeps")
def test_page2_is_counted_when_tables_are_observed():
    st = small()
    committed(st, "b", 64)
    run(st, ("observe_row", "b", "main", {"table": [st.space_of("b", "main").pages[0].device]}))
    assert_kept(st, "PAGE-2", exercised=False)


@pytest.mark.rule("PAGE-2", "fires")
def test_page2_fires_on_a_table_naming_a_released_page():
    st = small()
    committed(st, "a", 128, budget=128)
    released = st.space_of("a", "main").pages[1].device
    run(st, ("truncate", "a", "main", 64))
    assert st.pools["main"].is_free(released)
    assert_violation(st, "PAGE-2", "observe_row", "a", "main", table=[0, released])


def test_page2_descriptor_generation_advances_on_reclaim():
    st = small()
    committed(st, "a", 64)
    page = st.space_of("a", "main").pages[0]
    handle = page.handle
    store = st.page_stores["main"]
    run(st, ("finish", "a", None))
    assert not store.is_current(handle) and page.generation == handle[2] + 1


# -- PAGE-3 ---------------------------------------------------------------------------------------

@pytest.mark.rule("PAGE-3", "keeps")
def test_page3_keeps_valid_replicas_through_offload_and_restore():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [0, 1, 2, 3]), ("drop_device", "c", "main", [0, 1, 2, 3]))
    pages = st.checkpoints["c"].spaces["main"].pages
    assert all(p.device < 0 and p.host_valid(p.committed) for p in pages)
    run(st, ("activate", "s", 200, 10, {"source": "c"}))  # restores the full pages from the Host
    assert all(p.device_valid(p.committed) for p in st.space_of("s", "main").pages)
    assert_kept(st, "PAGE-3")


@pytest.mark.rule("PAGE-3", "fires")
def test_page3_fires_on_a_stale_device_replica():
    st = small()
    committed(st, "a", 100)
    page = st.space_of("a", "main").pages[1]
    page.epoch = st.page_stores["main"].new_epoch()  # content changed; the Device replica kept the old epoch
    touch(st, pages=[page])
    assert_detected(st, "PAGE-3")


def test_page3_fires_on_offload_without_a_current_device_replica():
    st = small(host_pages=8)
    retained(st, "c", 100)
    page = st.checkpoints["c"].spaces["main"].pages[1]
    page.dev_cov = 10  # the Device copy covers fewer columns than committed (36)
    assert_violation(st, "PAGE-3", "offload", "c", "main", [1])


# -- PAGE-4 ---------------------------------------------------------------------------------------

@pytest.mark.rule("PAGE-4", "keeps")
def test_page4_keeps_reclaiming_at_the_last_reference():
    st = small(host_pages=8)
    retained(st, "c", 130)
    run(st, ("activate", "s", 130, 64, {"source": "c"}))
    shared = st.space_of("s", "main").pages[0]
    run(st, ("offload", "c", "main", [0]), ("release", "c"))
    assert shared.alive and shared.refs == 1 and shared.host is not None  # still referenced: kept
    gen = shared.generation
    run(st, ("finish", "s", None))
    assert not shared.alive and shared.generation == gen + 1 and shared.host is None and shared.device < 0
    assert st.pool_counters("main")["allocated"] == 0 and st.arena.free_bytes == st.arena.capacity
    assert_kept(st, "PAGE-4")


@pytest.mark.rule("PAGE-4", "fires")
def test_page4_fires_on_a_leaked_lease():
    st = small()
    run(st, ("activate", "a", 100, 100), ("map", "a", "main", 192),
        ("launch", "u", [("a", "main", (0, 100))]), ("complete", "u", [("a", "main", 100)]))
    space = st.space_of("a", "main")
    page = space.pages.pop()  # a trim of block 2 that unmapped it but never returned its lease
    page.holders.remove(space)
    page.writer = None
    st.tables["main"].unmap(space.row, 2)
    touch(st, pages=[page])
    assert_detected(st, "PAGE-4")


def test_page4_audit_finds_an_unreachable_lease():
    st = small()
    committed(st, "a", 64)
    st.pools["main"].lease(None)  # a lease no logical page carries
    assert "PAGE-4" in rules_of(Checker(st).audit())


# -- PAGE-5 ---------------------------------------------------------------------------------------

@pytest.mark.rule("PAGE-5", "keeps")
def test_page5_keeps_identity_across_physical_moves():
    st = small(host_pages=8)
    retained(st, "c", 128)
    pages = list(st.checkpoints["c"].spaces["main"].pages)
    before = [(p.handle, p.epoch, p.device) for p in pages]
    run(st, ("offload", "c", "main", [0, 1]), ("drop_device", "c", "main", [0, 1]))
    committed(st, "x", 128)  # takes the freed physical ids 0 and 1
    run(st, ("activate", "s", 128, 0, {"source": "c"}))
    after = [(p.handle, p.epoch, p.device) for p in st.space_of("s", "main").pages]
    assert [a[:2] for a in after] == [b[:2] for b in before]  # same identity and epoch
    assert [a[2] for a in after] != [b[2] for b in before]  # on other physical page groups
    assert_kept(st, "PAGE-5")


@pytest.mark.rule("PAGE-5", "fires")
def test_page5_fires_when_membership_order_is_scrambled():
    st = small()
    committed(st, "a", 128)
    space = st.space_of("a", "main")
    space.pages.reverse()  # block 0 now names the descriptor of block 1
    touch(st, pages=list(space.pages))
    assert_detected(st, "PAGE-5")
