"""HostKVArena against the straightforward implementation it replaced (a copied free list, linear scans):
the same offsets from `plan`, the same extents after `allocate` / `take` / `release`, the same answers from
`is_free`, and the same refusals, on random recipes; `free_bytes` (a counter) equals the extents' sum."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kvmodel.store.errors import InvariantError
from kvsim.kvmodel.store.host_arena import HostKVArena

UNIT = 16


class Reference:
    """The arena as first written: every plan copies the free list, take / is_free scan it."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.free = [[0, capacity]] if capacity > 0 else []

    @staticmethod
    def _first_fit(free, size):
        return next((i for i, (_, s) in enumerate(free) if s >= size), -1)

    def plan(self, releases, sizes):
        free = [list(e) for e in self.free]
        for off, size in releases:
            _insert(free, off, size)
        out = []
        for size in sizes:
            i = self._first_fit(free, size)
            if i < 0:
                return None
            out.append(free[i][0])
            _take(free, i, size)
        return out

    def allocate(self, size):
        i = self._first_fit(self.free, size)
        if i < 0:
            raise InvariantError("host allocation fits", "no extent")
        off = self.free[i][0]
        _take(self.free, i, size)
        return off

    def take(self, offset, size):
        for i, (o, s) in enumerate(self.free):
            if o <= offset and offset + size <= o + s:
                del self.free[i]
                if offset + size < o + s:
                    self.free.insert(i, [offset + size, o + s - offset - size])
                if o < offset:
                    self.free.insert(i, [o, offset - o])
                return
        raise InvariantError("host placement takes a free extent", "not free")

    def is_free(self, offset, size):
        return any(o <= offset and offset + size <= o + s for o, s in self.free)

    def release(self, offset, size):
        _insert(self.free, offset, size)


def _take(free, i, size):
    if free[i][1] == size:
        del free[i]
    else:
        free[i][0] += size
        free[i][1] -= size


def _insert(free, offset, size):
    i = bisect.bisect_left(free, [offset, 0])
    if (i < len(free) and offset + size > free[i][0]) or (i > 0 and free[i - 1][0] + free[i - 1][1] > offset):
        raise InvariantError("host extents disjoint", "double release")
    free.insert(i, [offset, size])
    if i + 1 < len(free) and offset + size == free[i + 1][0]:
        free[i][1] += free[i + 1][1]
        del free[i + 1]
    if i > 0 and free[i - 1][0] + free[i - 1][1] == offset:
        free[i - 1][1] += free[i][1]
        del free[i]


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except InvariantError as exc:
        return ("refused", exc.invariant)


extent = st.tuples(st.integers(0, 40).map(lambda u: u * UNIT), st.integers(1, 8).map(lambda u: u * UNIT))


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(0, 48).map(lambda u: u * UNIT), data=st.data())
def test_the_arena_agrees_with_the_reference(capacity, data):
    new, ref = HostKVArena(capacity), Reference(capacity)
    allocated = []  # (offset, size) handed out, so that most releases are legal
    for _ in range(data.draw(st.integers(0, 30))):
        op = data.draw(st.sampled_from(("allocate", "take", "release", "release", "plan", "plan", "is_free")))
        if op == "allocate":
            size = data.draw(st.integers(0, 8)) * UNIT
            got = _outcome(new.allocate, size)
            assert got == _outcome(ref.allocate, size)
            if got[0] == "ok" and size:
                allocated.append((got[1], size))
        elif op == "take":
            off, size = data.draw(extent)
            got = _outcome(new.take, off, size)
            assert got == _outcome(ref.take, off, size)
            if got[0] == "ok":
                allocated.append((off, size))
        elif op == "release":
            if allocated and data.draw(st.integers(0, 5)):
                off, size = allocated.pop(data.draw(st.integers(0, len(allocated) - 1)))
                if size > UNIT and data.draw(st.booleans()):  # a partial release splits the extent
                    allocated.append((off + UNIT, size - UNIT))
                    size = UNIT
            else:
                off, size = data.draw(extent)
            if off + size > capacity:
                continue
            got = _outcome(new.release, off, size)
            assert got == _outcome(ref.release, off, size)
        elif op == "plan":
            pool = allocated + [data.draw(extent) for _ in range(data.draw(st.integers(0, 1)))]
            releases = data.draw(st.lists(st.sampled_from(pool), max_size=4)) if pool else []
            sizes = data.draw(st.lists(st.integers(0, 10).map(lambda u: u * UNIT), max_size=4))
            before = new.snapshot()
            assert _outcome(new.plan, releases, sizes) == _outcome(ref.plan, releases, sizes), (releases, sizes)
            assert new.snapshot() == before  # a plan changes nothing
        else:
            off, size = data.draw(extent)
            assert new.is_free(off, size) == ref.is_free(off, size)
        assert new.free_extents() == [tuple(e) for e in ref.free]
        assert new.free_bytes == sum(s for _, s in ref.free)


def test_a_plan_over_releases_coalesces_like_the_free_list():
    arena = HostKVArena(10 * UNIT)
    for off in range(0, 10 * UNIT, UNIT):
        arena.take(off, UNIT)
    # releases next to each other and to the free tail make one extent; the second allocation follows it
    arena.release(8 * UNIT, 2 * UNIT)
    assert arena.plan([(6 * UNIT, UNIT), (7 * UNIT, UNIT)], [3 * UNIT, UNIT]) == [6 * UNIT, 9 * UNIT]
    assert arena.plan([(0, UNIT), (2 * UNIT, UNIT)], [2 * UNIT]) == [8 * UNIT]
    assert arena.plan([(0, UNIT), (2 * UNIT, UNIT)], [2 * UNIT, 2 * UNIT]) is None
    with pytest.raises(InvariantError, match="double release"):
        arena.plan([(0, UNIT), (0, UNIT)], [UNIT])
    assert arena.free_extents() == [(8 * UNIT, 2 * UNIT)] and arena.free_bytes == 2 * UNIT
