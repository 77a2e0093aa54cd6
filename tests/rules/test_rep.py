"""REP-*: replacement publication order, pins, Host arena geometry, the last replica.

Seed: "reserve destination -> copy page payload -> verify epoch and committed coverage -> publish replica
-> release source", "Copy 进行时 source 与 destination 都被 pin", "Plan 必须针对完整 release/allocation
recipe 验证 extent geometry；free_bytes 只是占用摘要" and "唯一有效 source 也不能先释放".
"""

from __future__ import annotations

import pytest

from kvsim.spec.checking import Checker
from tests.rules.builders import (
    PAGE_BYTES_BF16,
    assert_detected,
    assert_kept,
    assert_violation,
    audit_clean,
    retained,
    run,
    small,
    touch,
)

PHASES = ("reserve", "copy", "verify", "publish", "release_source")


def xfer_steps(xid, direction, ckpt, blocks, phases=PHASES):
    return [("xfer", xid, direction, ckpt, "main", blocks, phase) for phase in phases]


# -- REP-1 ----------------------------------------------------------------------------------------

@pytest.mark.rule("REP-1", "keeps")
def test_rep1_keeps_publication_order_both_ways():
    st = small(host_pages=8)
    retained(st, "c", 200)
    pages = st.checkpoints["c"].spaces["main"].pages
    run(st, *xfer_steps("d", "d2h", "c", [0, 1]))
    assert all(p.device < 0 and p.host_valid(p.committed) for p in pages[:2])  # moved to the Host
    run(st, *xfer_steps("h", "h2d", "c", [0, 1]))
    assert all(p.device >= 0 and p.host is None and p.device_valid(p.committed) for p in pages[:2])
    run(st, ("offload", "c", "main", [2, 3]))  # the same order as one fact
    assert all(p.host_valid(p.committed) and p.device >= 0 for p in pages[2:])
    assert_kept(st, "REP-1")


@pytest.mark.rule("REP-1", "fires")
def test_rep1_fires_on_publication_before_verification():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, *xfer_steps("d", "d2h", "c", [0], PHASES[:2]))
    assert_violation(st, "REP-1", "xfer", "d", "d2h", "c", "main", [0], "publish")


def test_rep1_fires_on_releasing_the_source_before_publication():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, *xfer_steps("d", "d2h", "c", [0], PHASES[:3]))
    assert_violation(st, "REP-1", "xfer", "d", "d2h", "c", "main", [0], "release_source")


# -- REP-2 ----------------------------------------------------------------------------------------

@pytest.mark.rule("REP-2", "keeps")
def test_rep2_keeps_pins_while_copying():
    st = small(host_pages=8)
    retained(st, "c", 200)
    page = st.checkpoints["c"].spaces["main"].pages[0]
    pins = []
    for step in xfer_steps("d", "d2h", "c", [0]):
        run(st, step)
        pins.append(page.pins)
        if step[-1] == "copy":  # copy pins forbid releasing the source, not reading it: a Fork is legal
            run(st, ("activate", "s", 200, 0, {"source": "c"}), ("finish", "s", None))
    assert pins == [2, 2, 2, 0, 0]  # decision 24: source and destination pinned from reserve until publish
    assert_kept(st, "REP-2")


@pytest.mark.rule("REP-2", "fires")
def test_rep2_fires_on_a_pin_no_transfer_accounts_for():
    st = small(host_pages=8)
    retained(st, "c", 200)
    page = st.checkpoints["c"].spaces["main"].pages[0]
    page.pins += 1  # a copy that never unpinned
    touch(st, pages=[page])
    assert_detected(st, "REP-2")


@pytest.mark.rule("REP-2", "fires")
def test_rep2_fires_on_dropping_a_source_reserved_but_not_yet_copied():
    """Decision 24: "唯一有效 source 也不能先释放" holds from `reserve`, before the copy has started."""
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [0]), *xfer_steps("h", "d2h", "c", [0, 1], PHASES[:1]))
    assert_violation(st, "REP-2", "drop_device", "c", "main", [0])


def test_rep2_fires_on_dropping_a_pinned_page():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [0]), *xfer_steps("h", "d2h", "c", [1], PHASES[:2]))
    assert_violation(st, "REP-2", "drop_device", "c", "main", [1])


# -- REP-3 ----------------------------------------------------------------------------------------

@pytest.mark.rule("REP-3", "keeps")
def test_rep3_keeps_disjoint_extents_and_split_releases():
    st = small(host_pages=6)
    retained(st, "c", 256)
    retained(st, "d", 128)
    run(st, ("offload", "c", "main", [0, 1, 2, 3]), ("drop_host", "c", "main", [1]))  # split the extent
    offsets = sorted(p.host.offset for p in st.checkpoints["c"].spaces["main"].pages if p.host is not None)
    assert offsets == [0, 2 * PAGE_BYTES_BF16, 3 * PAGE_BYTES_BF16]
    run(st, ("offload", "d", "main", [0, 1]))  # first fit: the freed slice is too small, the tail fits
    assert [p.host.offset for p in st.checkpoints["d"].spaces["main"].pages] == [4 * PAGE_BYTES_BF16,
                                                                                5 * PAGE_BYTES_BF16]
    run(st, ("offload", "c", "main", [1]))
    assert st.checkpoints["c"].spaces["main"].pages[1].host.offset == PAGE_BYTES_BF16
    assert st.arena.free_bytes == 0
    assert_kept(st, "REP-3")


@pytest.mark.rule("REP-3", "fires")
def test_rep3_fires_on_overlapping_host_extents():
    st = small(host_pages=8)
    retained(st, "c", 128)
    run(st, ("offload", "c", "main", [0, 1]))
    second = st.checkpoints["c"].spaces["main"].pages[1]
    del st.host_slices[second.host.offset]
    second.host.offset = PAGE_BYTES_BF16 // 2  # half over the first page's slice
    st.host_slices[second.host.offset] = second
    touch(st, pages=[second], host=[second.host.offset])
    assert_detected(st, "REP-3")


S = PAGE_BYTES_BF16


def _fragmented(st) -> None:
    """Engine-named offsets: c's block 1 at stride 1, d at stride 2; holes [0, 1) and [3, 4)."""
    retained(st, "c", 128)
    retained(st, "d", 64)
    retained(st, "e", 128)
    run(st, ("offload", "c", "main", [0, 1], [0, S]), ("offload", "d", "main", [0], [2 * S]),
        ("drop_host", "c", "main", [0]))


@pytest.mark.rule("REP-3", "keeps")
def test_rep3_keeps_plans_on_the_known_layout_and_counts_guessed_ones_partial():
    """Decision 23: a plan without offsets is judged on the extent layout when every extent is the engine's
    (any hole of its size will do); where the model's own guesses stand, only free bytes are certain and the
    check counts as partial."""
    st = small(host_pages=4)
    _fragmented(st)
    run(st, ("offload", "e", "main", [1]))  # a 1-stride hole exists: judged on geometry, not partial
    assert st.cov.partials == {}
    run(st, ("drop_host", "d", "main", [0]), ("offload", "d", "main", [0]))  # a guess stands in the layout
    assert st.cov.partials == {"REP-3": 1}
    assert_kept(st, "REP-3")


@pytest.mark.rule("REP-3", "fires")
def test_rep3_fires_on_a_plan_no_hole_of_the_known_layout_holds():
    st = small(host_pages=4)
    _fragmented(st)
    assert st.arena.free_bytes == 2 * S
    assert_violation(st, "REP-3", "offload", "e", "main", [0, 1])


@pytest.mark.rule("REP-3", "keeps")
def test_rep3_keeps_a_replica_packed_in_logical_order_whatever_the_listed_order():
    """Decision 22: "logical-order packed HostKVPageLayout"; the model's own guess packs in logical order too."""
    st = small(host_pages=8)
    retained(st, "c", 192)
    run(st, ("offload", "c", "main", [1, 0], [5 * S, 4 * S]), ("offload", "c", "main", [2]))
    pages = st.checkpoints["c"].spaces["main"].pages
    assert [p.host.offset for p in pages[:2]] == [4 * S, 5 * S]
    retained(st, "d", 128)
    run(st, ("xfer", "x", "d2h", "d", "main", [1, 0], "reserve"))
    assert st.xfers["x"].dest[1] < st.xfers["x"].dest[0]  # block 0 first in the extent
    assert_kept(st, "REP-3")


@pytest.mark.rule("REP-3", "fires")
def test_rep3_fires_on_a_replica_packed_in_listed_not_logical_order():
    st = small(host_pages=8)
    retained(st, "c", 128)
    assert_violation(st, "REP-3", "offload", "c", "main", [1, 0], [0, S])


def _offloaded(host_pages=8):
    st = small(host_pages=host_pages)
    retained(st, "c", 192)
    run(st, ("offload", "c", "main", [0, 1]))
    return st, st.checkpoints["c"].spaces["main"].pages


def _rekey(st, page, new):
    """A buggy placement records the page's slice at `new`, bookkeeping and all."""
    old = page.host.offset
    del st.host_slices[old]
    st.host_order.remove(old)
    page.host.offset = new
    st.host_slices[new] = page
    if new < st.arena.capacity:
        st.host_order.append(new)
        st.host_order.sort()
    else:
        st.host_live_bytes -= page.host.size


def test_rep3_fires_on_a_touched_extent_over_its_neighbour_or_a_free_extent():
    S = PAGE_BYTES_BF16
    st, pages = _offloaded()
    _rekey(st, pages[0], S // 2)  # over the second page's slice, the bytes it left counted nowhere
    touch(st, host=[S // 2])
    assert_detected(st, "REP-3")
    st, pages = _offloaded()
    _rekey(st, pages[1], S + S // 2)  # over the free extent after it
    touch(st, host=[S + S // 2])
    assert_detected(st, "REP-3")
    st, pages = _offloaded()
    st.arena.release(S, S)  # freed while the slice is live (a double allocation waiting to happen)
    touch(st, host=[S])
    assert_detected(st, "REP-3")


def test_rep3_fires_on_a_touched_extent_beyond_the_arena():
    st, pages = _offloaded()
    off = st.arena.capacity + 4 * PAGE_BYTES_BF16  # not a placeholder the model guessed
    _rekey(st, pages[1], off)
    touch(st, host=[off])
    assert_detected(st, "REP-3")


def test_rep3_fires_on_host_bytes_nobody_accounts_for():
    st, pages = _offloaded()
    page = pages[1]
    off, size = page.host.offset, page.host.size
    del st.host_slices[off]  # dropped, its bytes never given back to the arena
    st.host_order.remove(off)
    st.host_live_bytes -= size
    page.host = None
    touch(st, host={off: size})
    assert_detected(st, "REP-3")
    st, pages = _offloaded()
    st.arena.free_bytes -= 1  # the occupancy summary drifts from the extents
    touch(st, host=[pages[0].host.offset])
    assert_detected(st, "REP-3")


def test_rep3_checks_only_touched_extents_incrementally_and_everything_in_the_audit():
    st, pages = _offloaded()
    _rekey(st, pages[0], PAGE_BYTES_BF16 // 2)
    touch(st, host=[pages[1].host.offset])  # the corrupted extent's neighbour: the overlap is seen from it
    assert_detected(st, "REP-3")
    st.reset_touched()
    assert Checker(st).incremental() == []  # nothing touched, nothing checked
    assert "REP-3" in {f.rule for f in Checker(st).audit()}


def test_rep3_fires_when_free_bytes_suffice_but_no_extent_does():
    st = small(host_pages=4)
    retained(st, "c", 256)
    S = PAGE_BYTES_BF16
    run(st, ("offload", "c", "main", [0, 1, 2, 3], {"offsets": [0, S, 2 * S, 3 * S]}),
        ("drop_host", "c", "main", [0, 2]))
    assert st.arena.free_bytes == 2 * S and st.arena.largest_extent == S
    assert_violation(st, "REP-3", "offload", "c", "main", [0, 2], offsets=[0, S])  # over block 1's slice
    assert_violation(st, "REP-3", "offload", "c", "main", [0, 2], offsets=[0, 2 * S])  # not one packed extent
    assert_violation(st, "REP-3", "offload", "c", "main", [0, 2], offsets=[3 * S, 4 * S])  # beyond the arena


def test_rep3_without_offsets_fires_only_when_no_placement_can_hold():
    st = small(host_pages=4)
    retained(st, "c", 256)
    retained(st, "d", 192)
    run(st, ("offload", "c", "main", [0, 1, 2, 3]), ("drop_host", "c", "main", [0, 2]))
    run(st, ("offload", "d", "main", [0, 1]))  # the model's first fit cannot, an engine's placement can
    audit_clean(st)
    assert_violation(st, "REP-3", "offload", "d", "main", [2])  # free bytes are short: no placement holds it


# -- REP-4 ----------------------------------------------------------------------------------------

@pytest.mark.rule("REP-4", "keeps")
def test_rep4_keeps_the_last_replica():
    st = small(host_pages=8)
    retained(st, "c", 200)
    pages = st.checkpoints["c"].spaces["main"].pages
    run(st, ("offload", "c", "main", [0, 1, 2]), ("drop_device", "c", "main", [0, 1]),  # Host-only now
        ("drop_host", "c", "main", [2]))  # its Device replica stays: not the last
    assert [(p.device >= 0, p.host is not None) for p in pages] == [(False, True), (False, True), (True, False),
                                                                    (True, False)]
    run(st, ("activate", "s", 200, 0, {"source": "c"}))  # restored, the Host replicas kept
    assert all(p.device_valid(p.committed) for p in pages[:2])
    assert_kept(st, "REP-4")


@pytest.mark.rule("REP-4", "fires")
def test_rep4_fires_when_a_host_only_page_has_no_valid_replica():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [1]), ("drop_device", "c", "main", [1]))
    page = st.checkpoints["c"].spaces["main"].pages[1]
    page.host.coverage = 10  # the only replica no longer covers the 64 committed columns
    touch(st, pages=[page])
    assert_detected(st, "REP-4")


def test_rep4_fires_on_dropping_the_last_replica():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [1]), ("drop_device", "c", "main", [1]))
    assert_violation(st, "REP-4", "drop_host", "c", "main", [1])
    assert_violation(st, "REP-4", "drop_device", "c", "main", [0])  # no Host replica yet


def test_rep4_fires_on_dropping_a_device_replica_in_active_use():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [0]), ("activate", "s", 200, 0, {"source": "c"}))
    assert_violation(st, "REP-4", "drop_device", "c", "main", [0])


def test_rep4_fires_on_releasing_a_restores_host_source_after_its_device_copy_was_dropped():
    """h2d release_source frees the Host source; once the restored Device copy was dropped again, the Host
    replica is the only valid one and may not go ("唯一有效 source 也不能先释放")."""
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [1]), ("drop_device", "c", "main", [1]))
    for phase in ("reserve", "copy", "verify", "publish"):
        run(st, ("xfer", "r", "h2d", "c", "main", [1], phase))
    run(st, ("drop_device", "c", "main", [1]))  # the restored copy goes again (its Host replica is current)
    assert_violation(st, "REP-4", "xfer", "r", "h2d", "c", "main", [1], "release_source")


def test_rep4_keeps_releasing_a_restores_host_source_while_its_device_copy_stands():
    st = small(host_pages=8)
    retained(st, "c", 200)
    run(st, ("offload", "c", "main", [1]), ("drop_device", "c", "main", [1]))
    for phase in ("reserve", "copy", "verify", "publish", "release_source"):
        run(st, ("xfer", "r", "h2d", "c", "main", [1], phase))
    page = st.checkpoints["c"].spaces["main"].pages[1]
    assert page.host is None and page.device_valid(page.committed)
    assert_kept(st, "REP-4")


def test_rep3_partial_checks_are_reported():
    """The report says where a plan could be judged only on free bytes (decision 23)."""
    from pathlib import Path

    from kvsim.sim.replay import replay_trace
    from kvsim.sim.report.build import build_report

    scenarios = Path(__file__).resolve().parents[2] / "scenarios"
    guessed = replay_trace(scenarios / "host_placement_engine_offsets.jsonl")
    known = replay_trace(scenarios / "host_plan_on_known_layout.jsonl")
    report = build_report([guessed, known])
    assert report["rules"]["REP-3"]["partial"] == guessed.coverage.partials["REP-3"] > 0
    assert not known.coverage.partials and "partial" not in build_report([known])["rules"]["REP-3"]


def test_rep3_partial_checks_show_in_the_markdown_summary():
    from pathlib import Path

    from kvsim.sim.replay import replay_trace
    from kvsim.sim.report.build import build_report
    from kvsim.sim.report.markdown import render_markdown

    scenarios = Path(__file__).resolve().parents[2] / "scenarios"
    report = build_report([replay_trace(scenarios / "host_placement_engine_offsets.jsonl")])
    assert f"({report['rules']['REP-3']['partial']} checks partial)" in render_markdown(report)
