"""BlockPool: LCM parents, packing, first-use binding, FIFO of empty parents, all-or-nothing acquire,
the null block, kernel page ids and the seed's virtual shard placement."""

from __future__ import annotations

import pytest

from kvsim.kvmodel.cache.block_pool import BlockPool
from kvsim.kvmodel.cache.group_spec import CacheConfigError


def test_ids_start_after_the_null_block_and_follow_the_kernel_formula():
    pool = BlockPool(3, (2, 1))
    assert pool.acquire(0, 3) == (1, 2, 3)  # parents 1 and 2 bound to group 0
    assert pool.acquire(1, 1) == (3,)  # parent 3, group 1 (k = 1): kernel id 1 + (3 − 1)·1 + 0
    assert [pool.to_local(0, b) for b in (1, 2, 3)] == [(0, 1), (0, 2), (0, 3)]
    assert pool.to_local(0, 0) is None
    assert pool.local_page_count(0) == 1 + 3 * 2 and pool.virtual_block_count(0) == 1 + 3 * 2


def test_binding_on_first_use_and_geometry_fixed_after_release():
    pool = BlockPool(2, (2,))
    (b,) = pool.acquire(0, 1)
    assert pool.parent(1) == (0, (True, False))
    pool.release(0, b)
    assert pool.parent(1) == (None, ()) and pool.empty_parents() == (2, 1)
    with pytest.raises(CacheConfigError):
        pool.register(0, 2)


def test_shortfall_changes_nothing():
    pool = BlockPool(2, (4,))
    pool.acquire(0, 3)
    snap = pool.snapshot()
    assert pool.acquire(0, 6) is None  # 1 hole + 1 empty parent × 4 = 5
    assert pool.snapshot() == snap
    assert len(pool.acquire(0, 5)) == 5


def test_fifo_reuse_in_release_order():
    pool = BlockPool(3, (1,))
    a, b, c = pool.acquire(0, 3)
    for x in (b, c, a):
        pool.release(0, x)
    assert pool.empty_parents() == (2, 3, 1)
    assert pool.acquire(0, 3) == (2, 3, 1)


def test_most_occupied_parent_then_lowest_parent_then_lowest_child():
    pool = BlockPool(3, (3,))
    ids = pool.acquire(0, 9)
    for b in (ids[0], ids[1], ids[3], ids[8]):  # parent 1: one left; parent 2: two left; parent 3: two left
        pool.release(0, b)
    assert pool.acquire(0, 2) == (ids[3], ids[8])  # parent 2 (occ 2, ties parent 3 by id), then parent 3
    assert pool.acquire(0, 1) == (ids[0],)


def test_fresh_parent_only_when_bound_holes_are_exhausted():
    pool = BlockPool(2, (2,))
    (a,) = pool.acquire(0, 1)
    assert pool.acquire(0, 2) == (2, 3)  # the hole of parent 1 first, then FIFO parent 2


def test_sharded_placement_balances_request_buckets():
    pool = BlockPool(2, (2,))
    pool.register(0, 2)  # 4 virtual children per parent: buckets 0,1,0,1
    assert pool.virtual_block_count(0) == 1 + 2 * 2 * 2 and pool.local_page_count(0) == 1 + 2 * 2
    table = list(pool.acquire(0, 3))
    assert table == [1, 2, 3]  # bucket 0, bucket 1, bucket 0 (loads tie → lower bucket)
    assert pool.acquire(0, 1, table) == (4,)  # bucket 1 is least loaded
    assert [pool.to_local(0, b) for b in (1, 2, 3, 4)] == [(0, 1), (1, 1), (0, 2), (1, 2)]
    other = pool.acquire(0, 1, [1, 3])  # a request loaded on bucket 0 gets bucket 1 in a fresh parent
    assert pool.bucket_of(0, other[0]) == 1


def test_release_of_a_free_block_is_refused():
    pool = BlockPool(1, (2,))
    pool.acquire(0, 1)
    with pytest.raises(RuntimeError):
        pool.release(0, 2)


def test_reads_never_fix_the_geometry_but_the_first_acquire_does():
    pool = BlockPool(2, (2,))
    assert pool.shard_count(0) == 1 and pool.slots_per_parent(0) == 2
    pool.register(0, 2)  # still free to register
    pool2 = BlockPool(2, (2,))
    pool2.acquire(0, 1)
    with pytest.raises(CacheConfigError):
        pool2.register(0, 2)


def test_parent_is_fully_evictable_only_when_the_cache_alone_holds_every_child():
    from tests.cache.builders import coordinator, tokens, warm
    c = coordinator(num_parents=20)
    warm(c, "a", tokens(8))
    full_parent = c.pool.locate(0, c.tables["a"][0].ids[0])[0]
    assert not c.indexes[0].parent_is_fully_evictable(full_parent)  # the table still pins it
    c.free("a")
    assert c.indexes[0].parent_is_fully_evictable(full_parent)
    assert not c.indexes[1].parent_is_fully_evictable(full_parent)  # bound to another group
