"""PrefixCacheIndex: canonical registration, epochs and boundary kinds only raised, eviction of what the
cache alone holds."""

from __future__ import annotations

import pytest

from kvsim.kvmodel.cache.block_pool import BlockPool
from kvsim.kvmodel.cache.block_refs import BlockRefs
from kvsim.kvmodel.cache.cache_key import BoundaryKind, CacheKey
from kvsim.kvmodel.cache.prefix_index import PrefixCacheIndex


def _index():
    pool = BlockPool(4, (1,))
    refs = BlockRefs(pool)
    return pool, refs, PrefixCacheIndex(0, refs)


def test_register_keeps_the_canonical_block_and_only_raises_kind_and_epoch():
    pool, refs, idx = _index()
    a, b = pool.acquire(0, 2)
    refs.adopt(0, (a, b))
    key = CacheKey(0, "h", 0)
    assert idx.register(key, a, 3, 0, BoundaryKind.ENDPOINT) == a and refs.count(0, a) == 2
    assert idx.register(key, b, 2, 0, BoundaryKind.CHUNK) == a  # b is not published; a stays canonical
    e = idx.find(key)
    assert (e.block, e.last_access_epoch, e.kind) == (a, 3, BoundaryKind.ENDPOINT) and refs.count(0, b) == 1
    idx.acquire_matched([key], 7)
    assert e.last_access_epoch == 7 and e.was_acquired


def test_only_an_entry_the_cache_alone_holds_is_evictable():
    pool, refs, idx = _index()
    (a,) = pool.acquire(0, 1)
    refs.adopt(0, (a,))
    key = CacheKey(0, "h", 0)
    idx.register(key, a, 1, 0)
    with pytest.raises(RuntimeError):
        idx.evict(key)  # the acquiring holder still pins it
    refs.drop(0, a)
    assert idx.evictable() == [(key, idx.find(key))]
    assert idx.evict(key) and not pool.is_occupied(0, a) and len(idx) == 0
