"""Per-rule counters: how often a rule was checked, exercised (its premise held) and violated.

DESIGN §7: "counters checked / exercised (the premise held non-vacuously) / violated". The model and the
checkers count into one `Coverage`; the catalogue (spec) names the rules and reports the counters.
Each rule has one cell [checked, exercised, violated]; hot paths fetch the cells of a fixed tuple of
rules once (`cells`) and add to them directly.
This module knows nothing of the rules' meaning.
"""

from __future__ import annotations


class Coverage:
    __slots__ = ("_cells", "_groups")

    def __init__(self):
        self._cells: dict[str, list[int]] = {}
        self._groups: dict[tuple, tuple] = {}

    def cell(self, rule: str) -> list[int]:
        c = self._cells.get(rule)
        if c is None:
            c = self._cells[rule] = [0, 0, 0]
        return c

    def cells(self, rules: tuple) -> tuple:
        """The cells of a fixed (module-level, never collected) tuple of rules, cached by its identity."""
        g = self._groups.get(id(rules))
        if g is None:
            g = self._groups[id(rules)] = tuple(self.cell(r) for r in rules)
        return g

    def check(self, rule: str, exercised: bool = False) -> None:
        c = self.cell(rule)
        c[0] += 1
        if exercised:
            c[1] += 1

    def add(self, rule: str, checked: int, exercised: int = 0) -> None:
        """Count `checked` evaluations at once (hot paths count a whole batch of rows)."""
        c = self.cell(rule)
        c[0] += checked
        c[1] += exercised

    def violate(self, rule: str) -> None:
        self.cell(rule)[2] += 1

    def counts(self, rule: str) -> tuple[int, int, int]:
        c = self._cells.get(rule)
        return (0, 0, 0) if c is None else (c[0], c[1], c[2])

    @property
    def checked(self) -> dict[str, int]:
        return {r: c[0] for r, c in self._cells.items() if c[0]}

    @property
    def exercised(self) -> dict[str, int]:
        return {r: c[1] for r, c in self._cells.items() if c[1]}

    @property
    def violated(self) -> dict[str, int]:
        return {r: c[2] for r, c in self._cells.items() if c[2]}

    def merge(self, other: "Coverage") -> None:
        for r, c in other._cells.items():
            mine = self.cell(r)
            mine[0] += c[0]
            mine[1] += c[1]
            mine[2] += c[2]
