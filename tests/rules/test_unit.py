"""UNIT-*: frozen state during a GPU unit, commits after success, legal writes, settle before trim.

Seed: "从 block-table publication 到 GPU unit 完成" (tables, memberships, frontiers frozen, rows not
recycled), "Unit 成功后，Program 才推进 corresponding committed frontiers", writes only into mapped
positions from the committed frontier on, and "不能为满足某个后续阶段更短的覆盖需求而提前裁剪 verify 的映射"
(seed 000 L241: a speculative round's mappings, never an ordinary prefill chunk's, L195/L240).
"""

from __future__ import annotations

import pytest

from tests.rules.builders import assert_detected, assert_kept, assert_violation, committed, run, small, touch

# -- UNIT-1 ---------------------------------------------------------------------------------------

@pytest.mark.rule("UNIT-1", "keeps")
def test_unit1_keeps_rows_frozen_during_a_unit():
    st = small(max_concurrency=3)
    committed(st, "a", 100, budget=100)
    committed(st, "r", 64)
    run(st, ("activate", "b", 64, 64), ("map", "a", "main", 192),
        ("launch", "u", [("a", "main", (100, 192)), ("r", "main", None)]))  # r is a read-only row
    a = st.space_of("a", "main")
    frozen = (len(a.pages), a.committed, a.row, a.reservation, list(st.tables["main"].table[a.row]))
    run(st, ("map", "b", "main", 64))  # a row outside the unit may change; the unit's rows may not
    assert (len(a.pages), a.committed, a.row, a.reservation, list(st.tables["main"].table[a.row])) == frozen
    run(st, ("complete", "u", [("a", "main", 192)]))
    assert a.unit is None and a.committed == 192
    assert_kept(st, "UNIT-1")


@pytest.mark.rule("UNIT-1", "fires")
def test_unit1_fires_when_a_frontier_moves_inside_a_unit():
    st = small()
    committed(st, "a", 100, budget=100)
    run(st, ("launch", "u", [("a", "main", (100, 128))]))
    space = st.space_of("a", "main")
    space.committed = 120  # published before the unit completed
    touch(st, spaces=[space])
    assert_detected(st, "UNIT-1")


def test_unit1_fires_on_a_truncate_during_a_read_only_unit():
    st = small()
    committed(st, "a", 128)
    run(st, ("launch", "r", [("a", "main", None)]))  # read-only row: still frozen (seed 000 L251, L254)
    assert_violation(st, "UNIT-1", "truncate", "a", "main", 100)
    run(st, ("complete", "r", []), ("truncate", "a", "main", 100))  # at the boundary it is legal


def test_unit1_fires_on_a_mapping_inside_a_unit():
    st = small()
    committed(st, "a", 100, budget=100)
    run(st, ("launch", "u", [("a", "main", (100, 128))]))
    assert_violation(st, "UNIT-1", "map", "a", "main", 192)
    assert_violation(st, "UNIT-1", "truncate", "a", "main", 100)
    assert_violation(st, "UNIT-1", "finish", "a", None)
    assert_violation(st, "UNIT-1", "launch", "v", [("a", "main", None)])


# -- UNIT-2 ---------------------------------------------------------------------------------------

@pytest.mark.rule("UNIT-2", "keeps")
def test_unit2_keeps_commits_after_success_only():
    st = small()
    run(st, ("activate", "a", 100, 100), ("map", "a", "main", 192),
        ("launch", "u1", [("a", "main", (0, 100))]), ("fail", "u1"))
    space = st.space_of("a", "main")
    assert space.committed == 0  # a failed unit commits nothing
    run(st, ("launch", "u2", [("a", "main", (0, 150))]), ("complete", "u2", [("a", "main", 120)]))
    assert space.committed == 120  # accepted prefix of the written extent
    run(st, ("launch", "u3", [("a", "main", None)]), ("complete", "u3", [("a", "main", 120)]))
    assert_kept(st, "UNIT-2")


@pytest.mark.rule("UNIT-2", "fires")
def test_unit2_fires_on_a_commit_beyond_the_written_extent():
    st = small()
    run(st, ("activate", "a", 100, 100), ("map", "a", "main", 192), ("launch", "u", [("a", "main", (0, 100))]))
    assert_violation(st, "UNIT-2", "complete", "u", [("a", "main", 101)])


def test_unit2_fires_on_commits_that_are_not_the_units():
    st = small()
    committed(st, "a", 100, budget=100)
    committed(st, "b", 100, budget=100)
    run(st, ("launch", "u", [("a", "main", (100, 128))]))
    assert_violation(st, "UNIT-2", "complete", "u", [("b", "main", 100)])  # not a row of u
    assert_violation(st, "UNIT-2", "complete", "u", [("a", "main", 90)])  # moves back
    assert_violation(st, "UNIT-2", "truncate", "b", "main", 110)  # a truncate never advances


# -- UNIT-3 ---------------------------------------------------------------------------------------

@pytest.mark.rule("UNIT-3", "keeps")
def test_unit3_keeps_writes_in_mapped_positions_from_the_frontier():
    st = small()
    committed(st, "a", 100, budget=100)
    run(st, ("map", "a", "main", 192), ("launch", "u", [("a", "main", (100, 192))]),
        ("complete", "u", [("a", "main", 192)]))
    assert_kept(st, "UNIT-3")


@pytest.mark.rule("UNIT-3", "fires")
def test_unit3_fires_on_a_write_below_the_frontier():
    st = small()
    committed(st, "a", 100, budget=100)
    assert_violation(st, "UNIT-3", "launch", "u", [("a", "main", (99, 128))])


def test_unit3_fires_on_a_write_beyond_the_mapped_extent():
    st = small()
    committed(st, "a", 100, budget=100)  # 2 pages mapped, entitlement 4
    assert_violation(st, "UNIT-3", "launch", "u", [("a", "main", (100, 129))])


# -- UNIT-4 ---------------------------------------------------------------------------------------

@pytest.mark.rule("UNIT-4", "keeps")
def test_unit4_keeps_settle_after_the_round_and_lets_a_prefill_chunk_go():
    st = small(backend="dflash2", full_layers=0)  # a speculative backend with Main only
    committed(st, "a", 100, budget=200)  # the prompt is committed: every later Main step is a verify
    run(st, ("map", "a", "main", 256), ("launch", "v", [("a", "main", (100, 256))]),  # speculative verify
        ("complete", "v", [("a", "main", 150)]), ("truncate", "a", "main", 150))  # commit accepted, then trim
    space = st.space_of("a", "main")
    assert space.committed == 150 and len(space.pages) == 3
    # seed 000 L195 / L240: a prefill chunk mapped ahead and never launched is trailing membership, not a verify's
    run(st, ("activate", "b", 300, 100), ("map", "b", "main", 128), ("launch", "p", [("b", "main", (0, 128))]),
        ("complete", "p", [("b", "main", 128)]), ("map", "b", "main", 256), ("truncate", "b", "main", 128))
    b = st.space_of("b", "main")
    assert b.committed == 128 and len(b.pages) == 2 and b.reservation == 5  # leases back to b's reservation
    assert_kept(st, "UNIT-4", exercised=False)  # no trim reached a provisional frontier


def test_unit4_keeps_a_mapping_trimmed_with_the_backend_off():
    st = small()
    committed(st, "a", 100, budget=200)
    run(st, ("map", "a", "main", 256), ("truncate", "a", "main", 100))  # no verify exists without a backend
    assert len(st.space_of("a", "main").pages) == 2
    assert_kept(st, "UNIT-4", exercised=False)


@pytest.mark.rule("UNIT-4", "fires")
def test_unit4_fires_on_trimming_a_verify_mapping_before_it_runs():
    st = small(backend="dflash2", full_layers=0)
    committed(st, "a", 100, budget=200)
    run(st, ("map", "a", "main", 256))  # a verify's mapping (the prompt is committed)
    assert_violation(st, "UNIT-4", "truncate", "a", "main", 100)


def test_unit4_fires_on_trimming_the_mtp_lead():
    st = small(backend="mtp", draft_window=3)
    committed(st, "a", 128, budget=200, pools=("main", "mtp"))
    run(st, ("map", "a", "mtp", 130))  # the draft lead crosses into block 2 of MTP
    assert_violation(st, "UNIT-4", "truncate", "a", "mtp", 128)


def test_a_trim_during_the_verify_is_unit1_not_unit4():
    st = small(backend="dflash2", full_layers=0)
    committed(st, "a", 100, budget=200)
    run(st, ("map", "a", "main", 256), ("launch", "v", [("a", "main", (100, 256))]))
    err = assert_violation(st, "UNIT-1", "truncate", "a", "main", 100)
    assert "UNIT-4" not in err.rules  # one rule per clause: seed 000 L254 names truncate
