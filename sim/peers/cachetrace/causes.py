"""One cause, one finding, for the contract judge: replay's recovery discipline (``sim.recovery``: roots numbered
``id``, consequences counted apart, each with ``of``) applied to the findings of a scheduler's plans.

A finding may name its *cause* -- a behaviour of the scheduler its checker recognises, the same wherever it shows
(the wheel publishing a partial last page; its gauge leaving internal checkpoints out of the active count) -- and
the *entities* it concerns (``about``: keys such as ``("block", group, id)``). The first finding of a cause, or on
entities no earlier root marked, is a **root** and marks its cause and entities with its number. A later finding
with a marked cause or entity is that root's **consequence**: counted (per root and per rule), the first per (root,
cause or entity, rule) listed, its own entities marked in turn; it is never a violation of its own. A finding naming
neither is always a root: the discipline groups only what a checker says follows from one cause.

Pure bookkeeping over ``rules.Finding`` objects (``rule``, ``id``, ``of``); it knows nothing of the contract.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Causes", "PARTIAL_TAIL"]

Key = tuple

# The scheduler publishes a prompt's partial last page as a tail (cache concepts L13: "two requests share cache only
# at multiples of this many tokens"): a prefix hit inside a page (TS-PFX-1), a state off every prefix boundary
# stored under a key or handed to a hit (TS-ST-1, TS-ST-2) all show it, wherever and however often.
PARTIAL_TAIL = "partial tail published"


class Causes:
    """Roots and consequences of one judged trace, in the order findings arrive (``file``)."""

    def __init__(self, max_listed: int | None = None) -> None:
        self.marks: dict[Key, int] = {}      # cause or entity -> the root it follows from
        self.roots = 0                       # roots numbered so far
        self.first: list[tuple[Any, str]] = []  # the first consequence per (root, cause or entity), in order,
        #                                         and rule, with the cause or entity it follows through
        self.seen: set[tuple[int, Key, str]] = set()
        self.suppressed = 0                  # every consequence, listed or not
        self.per_root: dict[int, int] = {}   # root id -> consequences counted
        self.rule_roots: dict[str, int] = {}  # rule -> roots
        self.max_listed = max_listed

    def file(self, f: Any, cause: str | None = None, about: Iterable[Key] = ()) -> bool:
        """File one finding: True (``f.id`` set) when it is a root, False (``f.of`` set) when it follows from an
        earlier root through its cause or an entity it names."""
        keys: list[Key] = ([("cause", cause)] if cause else []) + [tuple(k) for k in about]
        of: int | None = None
        via: Key = ("cause", "")
        for k in keys:
            n = self.marks.get(k)
            if n is not None and (of is None or n < of):
                of, via = n, k
        if of is None:
            self.roots += 1
            f.id = self.roots
            self.rule_roots[f.rule] = self.rule_roots.get(f.rule, 0) + 1
            for k in keys:
                self.marks.setdefault(k, f.id)
            return True
        f.of = of
        self.suppressed += 1
        self.per_root[of] = self.per_root.get(of, 0) + 1
        for k in keys:
            self.marks.setdefault(k, of)
        if (of, via, f.rule) not in self.seen and (self.max_listed is None or len(self.first) < self.max_listed):
            self.seen.add((of, via, f.rule))
            self.first.append((f, str(via[1]) if via[0] == "cause" else " ".join(map(str, via))))
        return False
