"""AS-*: execution rows, token-exact frontiers, the block-table mirror, atomic activation, Main/backend apart.

Seed: "Inactive address space不占execution row；execution row不拥有logical pages", "Valid frontier精确到
token", "block table只是 active Device mapping 的执行镜像", "Activation 必须为全部 enabled pools 原子取得"
and "Main与backend pools分别reserve、materialize、commit和truncate".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.kvmodel.store.tables import HOLE
from kvsim.sim.replay import replay_trace
from tests.rules.builders import (
    assert_detected,
    assert_kept,
    assert_refused,
    assert_violation,
    committed,
    retained,
    run,
    small,
    touch,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

# -- AS-1 -----------------------------------------------------------------------------------------


@pytest.mark.rule("AS-1", "keeps")
def test_as1_keeps_rows_for_active_spaces_only():
    st = small()
    committed(st, "a", 100)
    retained(st, "c", 70)  # s-c used row 1, then released it
    ck = st.checkpoints["c"].spaces["main"]
    assert ck.row == -1 and not ck.active
    run(st, ("finish", "a", None), ("activate", "b", 70, 10, {"source": "c", "rows": {"main": 1}}))
    assert st.space_of("b", "main").row == 1 and st.tables["main"].owner[0] is None
    assert_kept(st, "AS-1")


@pytest.mark.rule("AS-1", "fires")
def test_as1_fires_when_a_checkpoint_keeps_a_row():
    st = small()
    retained(st, "c", 70)
    space = st.checkpoints["c"].spaces["main"]
    space.row = 0  # finish forgot to release the execution row
    touch(st, spaces=[space])
    assert_detected(st, "AS-1")


def test_as1_fires_when_the_engine_reuses_a_leased_row():
    st = small()
    committed(st, "a", 100)
    assert_violation(st, "AS-1", "activate", "b", 10, 10, rows={"main": st.space_of("a", "main").row})


# -- AS-2 -----------------------------------------------------------------------------------------

@pytest.mark.rule("AS-2", "keeps")
def test_as2_keeps_token_exact_frontiers_below_the_mapped_extent():
    st = small()
    run(st, ("activate", "a", 1000, 24), ("map", "a", "main", 1024),  # membership beyond the frontier
        ("launch", "u", [("a", "main", (0, 1000))]), ("complete", "u", [("a", "main", 1000)]))
    space = st.space_of("a", "main")
    assert space.committed == 1000 and space.mapped_tokens == 1024 == st.L * 64
    run(st, ("observe_row", "a", "main", {"frontier": 1000}), ("finish", "a", "c"))
    assert st.checkpoints["c"].spaces["main"].protected == 1000  # never rounded to 960
    assert_kept(st, "AS-2")


@pytest.mark.rule("AS-2", "fires")
def test_as2_fires_when_the_frontier_passes_the_mapped_extent():
    st = small()
    committed(st, "a", 100)
    space = st.space_of("a", "main")
    space.committed = 129  # committed beyond the two mapped pages
    touch(st, spaces=[space])
    assert_detected(st, "AS-2")


def test_as2_fires_on_an_engine_frontier_rounded_to_a_page():
    st = small()
    committed(st, "a", 1000)
    assert_violation(st, "AS-2", "observe_row", "a", "main", frontier=960)


# -- AS-3 -----------------------------------------------------------------------------------------

@pytest.mark.rule("AS-3", "keeps")
def test_as3_keeps_the_table_mirroring_membership():
    st = small()
    committed(st, "a", 200, budget=100)
    ids = [p.device for p in st.space_of("a", "main").pages]
    run(st, ("observe_row", "a", "main", {"table": ids + [HOLE]}), ("truncate", "a", "main", 100),
        ("observe_row", "a", "main", {"table": ids[:2] + [HOLE, HOLE]}))
    assert_kept(st, "AS-3")


@pytest.mark.rule("AS-3", "fires")
def test_as3_fires_on_a_stale_entry_past_the_membership():
    st = small()
    committed(st, "a", 200, budget=100)
    ids = [p.device for p in st.space_of("a", "main").pages]
    run(st, ("truncate", "a", "main", 100))
    space = st.space_of("a", "main")
    st.tables["main"].table[space.row][2] = ids[2]  # truncate unmapped block 2 but left its entry
    touch(st, rows=[("main", space.row)])
    assert_detected(st, "AS-3")


def test_as3_fires_on_an_engine_table_with_another_page():
    st = small()
    committed(st, "a", 100)
    committed(st, "b", 100)
    other = st.space_of("b", "main").pages[0].device  # leased, but to b
    mine = [p.device for p in st.space_of("a", "main").pages]
    run(st, ("observe_row", "a", "main", {"table": mine}))  # sighted: no longer the model's guess
    assert_violation(st, "AS-3", "observe_row", "a", "main", table=[other])


# -- AS-4 -----------------------------------------------------------------------------------------

@pytest.mark.rule("AS-4", "keeps")
def test_as4_keeps_activation_atomic_over_pools():
    st = small(backend="mtp", draft_window=3)
    retained(st, "c", 130, pools=("main", "mtp"))
    run(st, ("activate", "a", 130, 894, {"source": "c", "rows": {"main": 0, "mtp": 0},
                                          "pages": {"main": [0, 1, 5], "mtp": [0, 1, 5]}}),
        ("activate", "x", 128, 0))
    assert set(st.bundles["a"].spaces) == {"main", "mtp"}
    # b needs 14 Main pages (13 left) and 14 MTP pages (14 left): refused whole, no MTP reservation taken
    assert (st.pools["main"].available, st.pools["mtp"].available) == (13, 14)
    source = list(st.checkpoints["c"].spaces["main"].pages)
    assert_refused(st, "capacity", "activate", "b", 1024, 0, source="c")
    assert st.checkpoints["c"].spaces["main"].pages == source and "b" not in st.bundles
    assert_kept(st, "AS-4")


@pytest.mark.rule("AS-4", "fires")
def test_as4_fires_on_a_partial_bundle():
    st = small(backend="mtp", draft_window=3)
    committed(st, "a", 100, pools=("main", "mtp"))
    bundle = st.bundles["a"]
    del bundle.spaces["mtp"]  # published without its backend space
    touch(st, spaces=[st.space_of("a", "main")])
    assert_detected(st, "AS-4")


def test_as4_fires_on_an_engine_result_for_some_pools():
    st = small(backend="mtp", draft_window=3)
    assert_violation(st, "AS-4", "activate", "a", 64, 0, rows={"main": 0})


# -- AS-5 -----------------------------------------------------------------------------------------

@pytest.mark.rule("AS-5", "keeps")
def test_as5_keeps_main_and_backend_separate():
    st = small(backend="mtp", draft_window=3)
    run(st, ("activate", "a", 100, 100),
        ("map", "a", "main", 100), ("map", "a", "mtp", 140),  # MTP mapped ahead of Main
        ("launch", "u", [("a", "main", (0, 100)), ("a", "mtp", (0, 140))]),
        ("complete", "u", [("a", "main", 100), ("a", "mtp", 103)]),  # separate accepted frontiers
        ("truncate", "a", "mtp", 100))  # trimmed on its own
    main, mtp = st.space_of("a", "main"), st.space_of("a", "mtp")
    assert (main.committed, len(main.pages), mtp.committed, len(mtp.pages)) == (100, 2, 100, 2)
    assert_kept(st, "AS-5")


@pytest.mark.rule("AS-5", "fires")
def test_as5_fires_when_pools_share_one_space():
    st = small(backend="mtp", draft_window=3)
    committed(st, "a", 100, pools=("main", "mtp"))
    bundle = st.bundles["a"]
    bundle.spaces["mtp"] = bundle.spaces["main"]  # the backend writes into Main's address space
    touch(st, spaces=[bundle.spaces["main"]])
    assert_detected(st, "AS-5")


def test_as5_fires_on_a_pool_the_bundle_lacks():
    st = small()
    committed(st, "a", 64)
    assert_violation(st, "AS-5", "map", "a", "mtp", 64)


# -- AS-6 -----------------------------------------------------------------------------------------

@pytest.mark.rule("AS-6", "keeps")
def test_as6_keeps_activations_up_to_s():
    st = small()  # S = 1024
    run(st, ("activate", "a", 1000, 24), ("map", "a", "main", 1024), ("launch", "u", [("a", "main", (0, 1024))]),
        ("complete", "u", [("a", "main", 1024)]))
    assert_refused(st, "context", "activate", "b", 1025, 0)
    assert_kept(st, "AS-6")


@pytest.mark.rule("AS-6", "keeps")
def test_as6_keeps_a_raw_budget_clamped_to_s():
    """Decision 18: prompt + budget > S is legal; the entitlement covers prompt + min(budget, S - prompt)."""
    st = small()  # S = 1024, L = 16
    run(st, ("activate", "a", 1000, 500))
    space = st.bundles["a"].spaces["main"]
    assert st.bundles["a"].ceiling == 1024 and space.entitlement == 16
    run(st, ("map", "a", "main", 1024), ("launch", "u", [("a", "main", (0, 1024))]),
        ("complete", "u", [("a", "main", 1024)]))
    assert_kept(st, "AS-6")


@pytest.mark.rule("AS-6", "fires")
def test_as6_fires_on_an_engine_admitting_a_prompt_beyond_s():
    result = replay_trace(SCENARIOS / "violations" / "AS-6_activation_beyond_max_context.jsonl")
    assert [(v["rule"], v["event"]) for v in result.violations] == [("AS-6", 0)]


@pytest.mark.rule("AS-6", "fires")
def test_as6_fires_at_the_write_beyond_s_of_a_clamped_budget():
    result = replay_trace(SCENARIOS / "violations" / "AS-6_clamped_budget_write_beyond_s.jsonl")
    assert [(v["rule"], v["op"]) for v in result.violations] == [("AS-6", "launch")]
