"""Prefix matchers: the per-kind policy deciding which cached slots a request may reuse.

Cache concepts: "FullAttnMatcher walks left-to-right until the first miss (prefix-closed); SwaMatcher
scans right-to-left for a run backing a resumable boundary (non-closed). Mamba needs no matcher of its
own: it is SwaMatcher at window 2". A resumable boundary needs ceil((W − 1) / bg) consecutive cached slots
behind it, or a shorter run reaching the first probed slot; slots left of the run stay null holes, and
W = 1 needs none. "A matcher only reads the group's index; it never touches allocation or physical
placement": here it reads a `cached(slot) -> bool` predicate and returns a frozen probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvsim.kvmodel.cache.geometry import GroupGeometry


@dataclass(frozen=True)
class GroupProbe:
    begin: int  # first probed slot
    hits: tuple[bool, ...]  # slot begin + i is reused iff hits[i]; False below the run = null hole

    @property
    def end(self) -> int:
        """The matched boundary, in slots."""
        return self.begin + len(self.hits)


class FullAttnMatcher:
    prefix_closed = True
    lookback_slots = 0

    def probe(self, cached: Callable[[int], bool], begin: int, end: int) -> GroupProbe:
        n = 0
        while begin + n < end and cached(begin + n):
            n += 1
        return GroupProbe(begin, (True,) * n)


class SwaMatcher:
    prefix_closed = False

    def __init__(self, lookback_slots: int) -> None:
        self.lookback_slots = lookback_slots  # ceil((W - 1) / bg)

    def probe(self, cached: Callable[[int], bool], begin: int, end: int) -> GroupProbe:
        if begin >= end:
            return GroupProbe(begin, ())
        if self.lookback_slots == 0:  # W == 1: every boundary resumes with nothing cached
            return GroupProbe(begin, (False,) * (end - begin))
        boundary = end
        while boundary > begin:
            run = boundary
            while run > begin and cached(run - 1):
                run -= 1
                if boundary - run >= self.lookback_slots:
                    return self._probe(begin, run, boundary)
            if run == begin and run < boundary:
                return self._probe(begin, run, boundary)
            boundary = run - 1  # the miss at run - 1 cuts every boundary in (run - 1, boundary]
        return GroupProbe(begin, ())

    @staticmethod
    def _probe(begin: int, run: int, boundary: int) -> GroupProbe:
        return GroupProbe(begin, (False,) * (run - begin) + (True,) * (boundary - run))


def matcher_for(geometry: GroupGeometry) -> FullAttnMatcher | SwaMatcher:
    """Full history → FullAttnMatcher; sliding and state → SwaMatcher(ceil((W − 1) / bg)), W = 2 for state."""
    if geometry.spec.window_tokens is None:
        return FullAttnMatcher()
    return SwaMatcher(geometry.lookback_slots())
