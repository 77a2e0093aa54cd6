"""Per-rule counters: how often a rule was checked, exercised (its premise held) and violated.

DESIGN §7: "counters checked / exercised (the premise held non-vacuously) / violated". The model and the
checkers count into one `Coverage`; the catalogue (spec) names the rules and reports the counters.
Each rule has one `Cell`; hot paths fetch the cells of a fixed tuple of rules once (`cells`) and add to
their named fields directly.
This module knows nothing of the rules' meaning.
"""

from __future__ import annotations


class Cell:
    """One rule's counters. Writers: the transaction that evaluates the rule, or the checker running it."""

    __slots__ = ("checked", "exercised", "violated", "partial")

    def __init__(self) -> None:
        self.checked = 0  # evaluations of the rule
        self.exercised = 0  # evaluations whose premise held (a non-vacuous pass or a violation)
        self.violated = 0  # evaluations that found the rule broken
        self.partial = 0  # evaluations that could check only part of the premise (e.g. a layout the trace hid)

    def as_tuple(self) -> tuple[int, int, int]:
        return self.checked, self.exercised, self.violated


class Coverage:
    __slots__ = ("_cells", "_groups")

    def __init__(self) -> None:
        self._cells: dict[str, Cell] = {}
        self._groups: dict[int, tuple[Cell, ...]] = {}

    def cell(self, rule: str) -> Cell:
        c = self._cells.get(rule)
        if c is None:
            c = self._cells[rule] = Cell()
        return c

    def cells(self, rules: tuple[str, ...]) -> tuple[Cell, ...]:
        """The cells of a fixed (module-level, never collected) tuple of rules, cached by its identity."""
        g = self._groups.get(id(rules))
        if g is None:
            g = self._groups[id(rules)] = tuple(self.cell(r) for r in rules)
        return g

    def check(self, rule: str, exercised: bool = False) -> None:
        c = self.cell(rule)
        c.checked += 1
        if exercised:
            c.exercised += 1

    def add(self, rule: str, checked: int, exercised: int = 0) -> None:
        """Count `checked` evaluations at once (hot paths count a whole batch of rows)."""
        c = self.cell(rule)
        c.checked += checked
        c.exercised += exercised

    def count(self, checks: list[tuple[str, bool]]) -> None:
        """Count the (rule, exercised) evaluations a planner reported (planners never count themselves)."""
        for rule, exercised in checks:
            self.check(rule, exercised)

    def violate(self, rule: str) -> None:
        self.cell(rule).violated += 1

    def partial(self, rule: str) -> None:
        """One evaluation of `rule` could check only part of what the rule requires (reported beside it)."""
        self.cell(rule).partial += 1

    @property
    def partials(self) -> dict[str, int]:
        return {r: c.partial for r, c in self._cells.items() if c.partial}

    def counts(self, rule: str) -> tuple[int, int, int]:
        c = self._cells.get(rule)
        return (0, 0, 0) if c is None else c.as_tuple()

    @property
    def checked(self) -> dict[str, int]:
        return {r: c.checked for r, c in self._cells.items() if c.checked}

    @property
    def exercised(self) -> dict[str, int]:
        return {r: c.exercised for r, c in self._cells.items() if c.exercised}

    @property
    def violated(self) -> dict[str, int]:
        return {r: c.violated for r, c in self._cells.items() if c.violated}

    def merge(self, other: Coverage) -> None:
        for r, c in other._cells.items():
            mine = self.cell(r)
            mine.checked += c.checked
            mine.exercised += c.exercised
            mine.violated += c.violated
            mine.partial += c.partial
