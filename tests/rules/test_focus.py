"""Focused checking misses nothing: after each focused operation, corrupting what it writes is reported by
its focus exactly as by every state rule on the same touched entities.

`spec.checking.FOCUS` runs only some state rules after launch, complete, fail and grow (the per-event
hot path). Each case performs the operation, then corrupts a field that operation writes (as a buggy
implementation of it would), and compares the focused check with the check of every rule.
"""

from __future__ import annotations

import msgspec
import pytest

from kvsim.kvmodel.store import GrowthConfig
from kvsim.spec.checking import FOCUS, Checker
from tests.rules.builders import committed, rules_of, run, small, touch


def _launched(**kw):
    st = small(**kw)
    committed(st, "a", 100, budget=100)
    run(st, ("map", "a", "main", 192))
    return st, st.space_of("a", "main")


def _launch():
    st, sp = _launched()
    st.launch("u", [("a", "main", (100, 192))])
    return st, sp, sp.in_flight


def _complete():
    st, sp = _launched()
    run(st, ("launch", "u", [("a", "main", (100, 192))]))
    row = sp.in_flight
    st.complete("u", [("a", "main", 150)])
    return st, sp, row


def _fail():
    st, sp = _launched()
    run(st, ("launch", "u", [("a", "main", (100, 192))]))
    row = sp.in_flight
    st.fail("u")
    return st, sp, row


def _grow():
    st = small(growth=GrowthConfig())
    run(st, ("activate", "a", 100, 600))
    sp = st.space_of("a", "main")
    assert isinstance(st.grow("a"), dict)
    return st, sp, None


def _stale_mark(st, sp, row):
    sp.in_flight = row  # the unit ended, its row's mark stayed


CASES = {
    "launch": (_launch, {
        "a row frozen with the wrong frontier": lambda st, sp, row: setattr(
            sp, "in_flight", msgspec.structs.replace(row, committed=row.committed + 1)),
        "a row marked in a unit that was never registered": lambda st, sp, row: st.units.clear(),
    }),
    "complete": (_complete, {
        "the rows' marks left behind": _stale_mark,
        "a frontier beyond the mapped extent": lambda st, sp, row: setattr(sp, "committed", len(sp.pages) * 64 + 1),
        "a Device replica not advanced": lambda st, sp, row: setattr(sp.pages[1], "dev_cov", 100 - 64),
        "a protected frontier above the committed one": lambda st, sp, row: setattr(sp, "protected", 151),
    }),
    "fail": (_fail, {"the rows' marks left behind": _stale_mark}),
    "grow": (_grow, {
        "a reservation the pool does not count": lambda st, sp, row: setattr(sp, "reservation", sp.reservation + 1),
        "pool counters that no longer add up": lambda st, sp, row: setattr(st.pools["main"], "reserved",
                                                                          st.pools["main"].reserved + 1),
    }),
}


def test_every_focused_operation_has_corruption_cases():
    assert set(CASES) == set(FOCUS)


@pytest.mark.parametrize("op,case", [(op, case) for op, (_, cases) in CASES.items() for case in cases])
def test_a_focus_reports_what_every_rule_would(op, case):
    make, cases = CASES[op]
    st, sp, row = make()
    cases[case](st, sp, row)
    touched = (list(st.t_pages), list(st.t_spaces), list(st.t_pools), list(st.t_rows), st.t_host)
    focused = rules_of(Checker(st).incremental(op))
    touch(st, *touched[:4], host=touched[4])
    everything = rules_of(Checker(st).incremental())
    assert everything, f"{op}: the corruption ({case}) is invisible on what {op} touched"
    assert everything <= focused, f"{op}'s focus misses {everything - focused} ({case})"
    assert everything <= rules_of(Checker(st).audit())
