"""HostKVArena: the one startup-fixed, bounded, variable-size Host extent allocator shared by all pools.

Store contract: "Main 与 selected backend 的 Host replicas共用一个 startup-fixed pinned HostKVArena，
但每个 allocation 携带自己的 typed page layout" and "Host arena 是有界 variable-size allocator。Plan
必须针对完整 release/allocation recipe 验证 extent geometry；free_bytes 只是占用摘要，不是可分配性的
充分证明". Extents are packed in logical order, one page stride per page of the owning pool; a partial
release splits an extent (each page's slice is freed on its own).
Ordering contract: first fit at the lowest offset; freed ranges coalesce with their neighbours.
This module knows nothing of pages' epochs or address spaces.
"""

from __future__ import annotations

import bisect

from kvsim.kvmodel.store.errors import InvariantError


class HostKVArena:
    __slots__ = ("capacity", "_free")

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free: list[list[int]] = [[0, capacity]] if capacity > 0 else []  # sorted [offset, size]

    @property
    def free_bytes(self) -> int:
        return sum(s for _, s in self._free)

    @property
    def largest_extent(self) -> int:
        return max((s for _, s in self._free), default=0)

    def free_extents(self) -> list[tuple[int, int]]:
        return [(o, s) for o, s in self._free]

    @staticmethod
    def _first_fit(free: list[list[int]], size: int) -> int:
        for i, (_, s) in enumerate(free):
            if s >= size:
                return i
        return -1

    def plan(self, releases: list[tuple[int, int]], sizes: list[int]) -> list[int] | None:
        """Offsets the allocations `sizes` would get after `releases`, or None: checked on geometry."""
        free = [list(e) for e in self._free]
        for off, size in releases:
            _insert(free, off, size)
        offsets = []
        for size in sizes:
            i = self._first_fit(free, size)
            if i < 0:
                return None
            offsets.append(free[i][0])
            _take(free, i, size)
        return offsets

    def allocate(self, size: int) -> int:
        i = self._first_fit(self._free, size)
        if i < 0:
            raise InvariantError("host allocation fits", f"host arena: no extent of {size} B (plan it first)")
        off = self._free[i][0]
        _take(self._free, i, size)
        return off

    def take(self, offset: int, size: int) -> None:
        """Allocate exactly [offset, offset + size), which must lie inside one free extent."""
        for i, (o, s) in enumerate(self._free):
            if o <= offset and offset + size <= o + s:
                del self._free[i]
                if offset + size < o + s:
                    self._free.insert(i, [offset + size, o + s - offset - size])
                if o < offset:
                    self._free.insert(i, [o, offset - o])
                return
        raise InvariantError("host placement takes a free extent", f"host arena: [{offset}, {offset + size}) is not "
                             "free (plan it first)")

    def is_free(self, offset: int, size: int) -> bool:
        return any(o <= offset and offset + size <= o + s for o, s in self._free)

    def release(self, offset: int, size: int) -> None:
        if offset < 0 or offset + size > self.capacity:
            raise InvariantError("host extents in bounds", f"host arena: release [{offset}, {offset + size}) "
                                 f"outside [0, {self.capacity})")
        _insert(self._free, offset, size)

    def snapshot(self) -> tuple:
        return (self.capacity, tuple((o, s) for o, s in self._free))


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
