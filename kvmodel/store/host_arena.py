"""HostKVArena: the one startup-fixed, bounded, variable-size Host extent allocator shared by all pools.

Store contract: "Main 与 selected backend 的 Host replicas共用一个 startup-fixed pinned HostKVArena，
但每个 allocation 携带自己的 typed page layout" and "Host arena 是有界 variable-size allocator。Plan
必须针对完整 release/allocation recipe 验证 extent geometry；free_bytes 只是占用摘要，不是可分配性的
充分证明". Extents are packed in logical order, one page stride per page of the owning pool; a partial
release splits an extent (each page's slice is freed on its own).
Ordering contract: first fit at the lowest offset; freed ranges coalesce with their neighbours.
Costs: `take`, `is_free` and `release` find their extent by bisection; `plan` never copies the free list
(a recipe's releases and allocations live in a small overlay, `_Overlay`); `free_bytes` is a counter
(REP-3's audit recounts it against the extents).
This module knows nothing of pages' epochs or address spaces.
"""

from __future__ import annotations

import bisect
from operator import itemgetter

from kvsim.kvmodel.store.errors import InvariantError

_start = itemgetter(0)


class HostKVArena:
    __slots__ = ("capacity", "_free", "free_bytes")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free: list[list[int]] = [[0, capacity]] if capacity > 0 else []  # sorted [offset, size]
        self.free_bytes = max(capacity, 0)  # the occupancy summary, kept with every change of `_free`

    @property
    def largest_extent(self) -> int:
        return max((s for _, s in self._free), default=0)

    def free_extents(self) -> list[tuple[int, int]]:
        return [(o, s) for o, s in self._free]

    def _covering(self, offset: int) -> int:
        """Index of the free extent starting at or below `offset` with the highest start (-1 if none): the
        only one that can contain `offset`, the extents being sorted and disjoint."""
        return bisect.bisect_right(self._free, offset, key=_start) - 1

    def overlapping(self, offset: int, size: int) -> tuple[int, int] | None:
        """A free extent meeting [offset, offset + size), if any (the one with the highest start)."""
        i = bisect.bisect_left(self._free, offset + size, key=_start) - 1
        if i >= 0 and self._free[i][0] + self._free[i][1] > offset:
            return (self._free[i][0], self._free[i][1])
        return None

    def free_extent_at(self, offset: int) -> tuple[int, int] | None:
        """The free extent containing byte `offset`, if any."""
        i = self._covering(offset)
        if i >= 0 and offset < self._free[i][0] + self._free[i][1]:
            return (self._free[i][0], self._free[i][1])
        return None

    @staticmethod
    def _first_fit(free: list[list[int]], size: int) -> int:
        for i, (_, s) in enumerate(free):
            if s >= size:
                return i
        return -1

    def plan(self, releases: list[tuple[int, int]], sizes: list[int]) -> list[int] | None:
        """Offsets the allocations `sizes` would get after `releases`, or None: checked on geometry."""
        if not releases and len(sizes) == 1:  # one first fit over the arena as it is
            i = self._first_fit(self._free, sizes[0])
            return None if i < 0 else [self._free[i][0]]
        view = _Overlay(self._free)
        for off, size in releases:
            view.release(off, size)
        offsets: list[int] = []
        for size in sizes:
            got = view.take_first_fit(size)
            if got is None:
                return None
            offsets.append(got)
        return offsets

    def allocate(self, size: int) -> int:
        i = self._first_fit(self._free, size)
        if i < 0:
            raise InvariantError("host allocation fits", f"host arena: no extent of {size} B (plan it first)")
        off = self._free[i][0]
        _take(self._free, i, size)
        self.free_bytes -= size
        return off

    def take(self, offset: int, size: int) -> None:
        """Allocate exactly [offset, offset + size), which must lie inside one free extent."""
        i = self._covering(offset)
        if i >= 0:
            o, s = self._free[i]
            if offset + size <= o + s:
                del self._free[i]
                if offset + size < o + s:
                    self._free.insert(i, [offset + size, o + s - offset - size])
                if o < offset:
                    self._free.insert(i, [o, offset - o])
                self.free_bytes -= size
                return
        raise InvariantError("host placement takes a free extent", f"host arena: [{offset}, {offset + size}) is not "
                             "free (plan it first)")

    def is_free(self, offset: int, size: int) -> bool:
        i = self._covering(offset)
        return i >= 0 and offset + size <= self._free[i][0] + self._free[i][1]

    def release(self, offset: int, size: int) -> None:
        if offset < 0 or offset + size > self.capacity:
            raise InvariantError("host extents in bounds", f"host arena: release [{offset}, {offset + size}) "
                                 f"outside [0, {self.capacity})")
        _insert(self._free, offset, size)
        self.free_bytes += size

    def snapshot(self) -> tuple:
        return (self.capacity, tuple((o, s) for o, s in self._free))


class _Overlay:
    """The free list as a plan sees it, without copying it: the arena's extents minus `hidden` (indices a
    release coalesced or an allocation consumed) plus `extra` (sorted extents the recipe made). Every hidden
    extent's bytes are in `extra` or allocated by the recipe, so the view stays sorted and disjoint."""

    __slots__ = ("base", "hidden", "extra")

    def __init__(self, base: list[list[int]]) -> None:
        self.base = base
        self.hidden: set[int] = set()
        self.extra: list[list[int]] = []

    def _base_from(self, i: int) -> int:
        while i < len(self.base) and i in self.hidden:
            i += 1
        return i

    def _base_before(self, i: int) -> int:
        while i >= 0 and i in self.hidden:
            i -= 1
        return i

    def release(self, offset: int, size: int) -> None:
        """`_insert` on the view: the same checks (a double release raises), the same coalescing."""
        base, extra = self.base, self.extra
        bi = bisect.bisect_left(base, offset, key=_start)
        bn, bp = self._base_from(bi), self._base_before(bi - 1)
        ei = bisect.bisect_left(extra, offset, key=_start)
        nxt = min((e for e in (base[bn] if bn < len(base) else None, extra[ei] if ei < len(extra) else None)
                   if e is not None), key=_start, default=None)
        prv = max((e for e in (base[bp] if bp >= 0 else None, extra[ei - 1] if ei > 0 else None) if e is not None),
                  key=_start, default=None)
        if (nxt is not None and offset + size > nxt[0]) or (prv is not None and prv[0] + prv[1] > offset):
            raise InvariantError("host extents disjoint", f"host arena: release of [{offset}, {offset + size}) "
                                 "overlaps a free extent (a double release)")
        lo, hi = offset, offset + size
        for e in (nxt, prv):
            if e is not None and (e[0] == hi or e[0] + e[1] == lo):
                lo, hi = min(lo, e[0]), max(hi, e[0] + e[1])
                self._drop(e, bn if e is nxt else bp, ei if e is nxt else ei - 1)
        bisect.insort(extra, [lo, hi - lo], key=_start)

    def _drop(self, e: list[int], bi: int, ei: int) -> None:
        if 0 <= bi < len(self.base) and self.base[bi] is e:
            self.hidden.add(bi)
        else:
            del self.extra[ei]

    def take_first_fit(self, size: int) -> int | None:
        """First fit over the view (lowest offset); the extent is consumed from the view."""
        base, extra = self.base, self.extra
        if not self.hidden and not extra:
            i = HostKVArena._first_fit(base, size)
            if i < 0:
                return None
            self.hidden.add(i)
            o, s = base[i]
            if s > size:
                bisect.insort(extra, [o + size, s - size], key=_start)
            return o
        i = j = 0
        nb, ne = len(base), len(extra)
        while True:
            i = self._base_from(i)
            if i < nb and (j >= ne or base[i][0] < extra[j][0]):
                o, s = base[i]
                if s >= size:
                    self.hidden.add(i)
                    if s > size:
                        bisect.insort(extra, [o + size, s - size], key=_start)
                    return o
                i += 1
            elif j < ne:
                o, s = extra[j]
                if s >= size:
                    if s == size:
                        del extra[j]
                    else:
                        extra[j] = [o + size, s - size]
                    return o
                j += 1
            else:
                return None


def _take(free: list[list[int]], i: int, size: int) -> None:
    if free[i][1] == size:
        del free[i]
    else:
        free[i][0] += size
        free[i][1] -= size


def _insert(free: list[list[int]], offset: int, size: int) -> None:
    i = bisect.bisect_left(free, [offset, 0])
    if (i < len(free) and offset + size > free[i][0]) or (i > 0 and free[i - 1][0] + free[i - 1][1] > offset):
        raise InvariantError("host extents disjoint", f"host arena: release of [{offset}, {offset + size}) "
                             "overlaps a free extent (a double release)")
    free.insert(i, [offset, size])
    if i + 1 < len(free) and offset + size == free[i + 1][0]:
        free[i][1] += free[i + 1][1]
        del free[i + 1]
    if i > 0 and free[i - 1][0] + free[i - 1][1] == offset:
        free[i - 1][1] += free[i][1]
        del free[i]
