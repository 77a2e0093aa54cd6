"""TRACE-*: the engine's results against the contract, and stale handles.

DESIGN §6: a request's result that contradicts what the contract requires is a divergence (TRACE-1);
"A reference to an unknown or ended sequence, unit, checkpoint or transfer is a violation (a
stale-handle bug)" (TRACE-2; seed: "generation 防止 release/reuse 后的 stale handle").
"""

from __future__ import annotations

import pytest

from tests.rules.builders import assert_kept, assert_violation, committed, retained, run, small

# -- TRACE-1 --------------------------------------------------------------------------------------

@pytest.mark.rule("TRACE-1", "keeps")
def test_trace1_keeps_agreeing_observations():
    st = small()
    committed(st, "a", 100, budget=28)
    c = st.pool_counters("main")
    run(st, ("observe_pool", "main", c["allocated"], c["reserved"], c["available"]),
        ("observe_pool", "main", {"available": c["available"]}),
        ("observe_row", "a", "main", {"table": [0, 1], "frontier": 100}))
    assert_kept(st, "TRACE-1")


@pytest.mark.rule("TRACE-1", "fires")
def test_trace1_fires_on_diverging_pool_counters():
    st = small()
    committed(st, "a", 100, budget=28)
    c = st.pool_counters("main")
    assert_violation(st, "TRACE-1", "observe_pool", "main", c["allocated"] + 1, c["reserved"] - 1, c["available"])


def test_trace1_fires_on_diverging_results():
    st = small()
    committed(st, "a", 100, budget=28)
    assert_violation(st, "TRACE-1", "observe_row", "a", "main", frontier=90)
    retained(st, "c", 128)
    ids = [p.device for p in st.checkpoints["c"].spaces["main"].pages]
    run(st, ("observe_checkpoint", "c", "main", {"table": ids}))  # the engine's ids, sighted
    assert_violation(st, "TRACE-1", "activate", "s", 128, 0, source="c", pages={"main": [ids[0], 7]})


# -- TRACE-2 --------------------------------------------------------------------------------------

@pytest.mark.rule("TRACE-2", "keeps")
def test_trace2_keeps_live_references():
    st = small(host_pages=4)
    retained(st, "c", 100)
    run(st, ("activate", "s", 100, 28, {"source": "c"}), ("map", "s", "main", 128),
        ("xfer", "x", "d2h", "c", "main", [0], "reserve"), ("xfer", "x", "d2h", "c", "main", [0], "copy"),
        ("launch", "u", [("s", "main", (100, 128))]), ("complete", "u", [("s", "main", 128)]),
        ("xfer", "x", "d2h", "c", "main", [0], "verify"), ("finish", "s", None), ("release", "c"))
    assert_kept(st, "TRACE-2")


@pytest.mark.rule("TRACE-2", "fires")
def test_trace2_fires_on_ended_handles():
    st = small(host_pages=4)
    committed(st, "a", 100, budget=28)
    run(st, ("finish", "a", None))
    assert_violation(st, "TRACE-2", "map", "a", "main", 128)  # finished sequence
    assert_violation(st, "TRACE-2", "finish", "a", None)
    assert_violation(st, "TRACE-2", "complete", "u-a", [])  # ended unit
    assert_violation(st, "TRACE-2", "fail", "never")
    retained(st, "c", 100)
    run(st, ("activate", "m", 100, 28, {"source": "c", "keep_source": False}))
    assert_violation(st, "TRACE-2", "release", "c")  # consumed by the Move
    assert_violation(st, "TRACE-2", "offload", "c", "main", [0])
    assert_violation(st, "TRACE-2", "xfer", "x", "d2h", "c", "main", [0], "copy")  # never reserved
