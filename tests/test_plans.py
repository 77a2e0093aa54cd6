"""Plan, then execute: planners read and never count; violations leave nothing marked; effects are taken.

Units validate a launch or completion into an immutable plan before anything changes; `KVStore.units` is
the one source of truth for "in flight" and `KVAddressSpace.in_flight` its cache; effects are drained by
their consumer (`take_effects`), never cleared by a checker.
"""

from __future__ import annotations

import msgspec
import pytest

from kvsim.kvmodel.store import ContractViolation, GrowthConfig, units
from kvsim.kvmodel.store.activation import ActivationPlan, plan_activation
from kvsim.kvmodel.store.effects import CopyColumns, FreeLease
from kvsim.kvmodel.store.mapping import plan_grow, would_map
from kvsim.spec.checking import Checker
from tests.rules.builders import committed, retained, run, small


def _counts(st) -> dict:
    return {r: st.cov.counts(r) for r in sorted(st.cov._cells)}


def test_planners_read_and_never_count():
    st = small(growth=GrowthConfig())
    retained(st, "k", 100)
    committed(st, "a", 64, budget=200)
    before, snap = _counts(st), st.snapshot()
    for _ in range(2):
        assert isinstance(plan_activation(st, "b", 120, 10, "k", True, None, None), ActivationPlan)
        plan_grow(st, "a")
        would_map(st, "a", "main", 10_000)
        units.plan_launch(st, "u", [units.LaunchRow("a", "main", (64, 64))])
    assert _counts(st) == before and st.snapshot() == snap


def test_a_launch_plan_is_immutable_and_applying_it_marks_the_rows():
    st = small()
    committed(st, "a", 64, budget=200)
    run(st, ("map", "a", "main", 128))
    plan = units.plan_launch(st, "u", [units.LaunchRow("a", "main", (64, 128))])
    with pytest.raises(AttributeError):
        plan.rows = ()
    space = st.space_of("a", "main")
    assert space.in_flight is None and "u" not in st.units  # planning marked nothing
    st.launch("u", [("a", "main", (64, 128))])
    row = space.in_flight
    assert st.units["u"].rows == (row,) and (row.a, row.b, row.num_pages, row.committed) == (64, 128, 2, 64)
    assert space.unit == "u"
    st.complete("u", [("a", "main", 100)])
    assert space.in_flight is None and not st.units and space.committed == 100


def test_a_duplicate_row_is_refused_before_anything_is_marked():
    st = small()
    committed(st, "a", 64, budget=200)
    snap = st.snapshot()
    with pytest.raises(ContractViolation) as info:
        st.launch("u", [("a", "main", None), ("a", "main", None)])
    assert info.value.rules == ["UNIT-1"] and st.snapshot() == snap
    assert st.space_of("a", "main").in_flight is None


def test_unit1_catches_a_cache_that_disagrees_with_the_units():
    st = small()
    committed(st, "a", 64, budget=200)
    run(st, ("launch", "u", [("a", "main", None)]))
    space = st.space_of("a", "main")
    space.in_flight = None  # the cache lost the row; KVStore.units still holds it
    assert "UNIT-1" in {f.rule for f in Checker(st).audit()}


def test_coverage_cells_have_named_counters():
    st = small()
    committed(st, "a", 64)
    cell = st.cov.cell("UNIT-2")
    assert (cell.checked, cell.exercised, cell.violated) == st.cov.counts("UNIT-2") == (1, 1, 0)


def test_effects_are_kept_only_when_asked_and_taken_once():
    st = small()
    committed(st, "a", 100, budget=100)
    run(st, ("finish", "a", None))
    assert st.take_effects() == []  # nobody asked: nothing kept
    st.record_effects()
    retained(st, "k", 100)
    run(st, ("activate", "b", 120, 10, "k"))  # a fork copies the partial tail
    effects = st.take_effects()
    assert any(isinstance(e, CopyColumns) and e.columns == 36 for e in effects)
    assert st.take_effects() == []
    Checker(st).incremental()  # a checker's reset no longer touches them
    run(st, ("finish", "b", None))
    assert all(isinstance(e, FreeLease) for e in st.take_effects())
    with pytest.raises(AttributeError):
        effects[0].columns = 1
    assert isinstance(effects[0], msgspec.Struct)
