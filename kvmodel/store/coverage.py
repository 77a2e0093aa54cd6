"""Per-rule counters: how often a rule was checked, exercised (its premise held) and violated.

DESIGN §7: "counters checked / exercised (the premise held non-vacuously) / violated". The model and the
checkers count into one `Coverage`; the catalogue (spec) names the rules and reports the counters.
This module knows nothing of the rules' meaning.
"""

from __future__ import annotations


class Coverage:
    __slots__ = ("checked", "exercised", "violated")

    def __init__(self):
        self.checked: dict[str, int] = {}
        self.exercised: dict[str, int] = {}
        self.violated: dict[str, int] = {}

    def check(self, rule: str, exercised: bool = False) -> None:
        c = self.checked
        c[rule] = c.get(rule, 0) + 1
        if exercised:
            e = self.exercised
            e[rule] = e.get(rule, 0) + 1

    def checks(self, rules: tuple, exercised: bool = False) -> None:
        for rule in rules:
            self.check(rule, exercised)

    def violate(self, rule: str) -> None:
        v = self.violated
        v[rule] = v.get(rule, 0) + 1

    def counts(self, rule: str) -> tuple[int, int, int]:
        return self.checked.get(rule, 0), self.exercised.get(rule, 0), self.violated.get(rule, 0)

    def merge(self, other: "Coverage") -> None:
        for mine, theirs in ((self.checked, other.checked), (self.exercised, other.exercised),
                             (self.violated, other.violated)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
