"""CacheGroupSpec validation, the configuration gate and GroupGeometry."""

from __future__ import annotations

import pytest

from kvsim.kvmodel.cache.acquire_plan import AcquirePlan, DenseGrowth, SparseSuffix
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.geometry import GroupGeometry
from kvsim.kvmodel.cache.group_spec import FULL, MAMBA, SLIDING, CacheConfigError, CacheGroupSpec, full, sliding, state


def test_three_kinds_from_two_shapes():
    assert full("f", 64).kind == FULL and sliding("s", 16, 128).kind == SLIDING and state("m", 64).kind == MAMBA
    assert CacheGroupSpec("c", rows_per_page=16, entry_stride_tokens=4).block_granularity == 64
    assert state("m", 32).block_granularity == 32


@pytest.mark.parametrize("kw", [
    dict(rows_per_page=4, entry_stride_tokens=1, checkpoint_granularity=4),  # both shapes
    dict(),  # neither
    dict(checkpoint_granularity=4, retention="sliding_window", sliding_window_tokens=8),  # sliding state
    dict(rows_per_page=4, entry_stride_tokens=1, replayable=True),  # replayable full group
    dict(rows_per_page=4, entry_stride_tokens=1, retention="sliding_window"),  # no window
    dict(rows_per_page=4, entry_stride_tokens=1, shard_count=0),
    dict(rows_per_page=0, entry_stride_tokens=1),
])
def test_post_init_holds_each_family_to_its_shape(kw):
    with pytest.raises(CacheConfigError):
        CacheGroupSpec("g", **kw)


def test_a_state_group_has_no_page_size():
    with pytest.raises(TypeError):
        _ = state("m", 4).page_size


def test_block_granularity_must_divide_prefix_granularity():
    with pytest.raises(CacheConfigError, match="divisor"):
        CacheConfig(64, (full("f", 48),), (1,), 8)
    with pytest.raises(CacheConfigError, match="packing"):
        CacheConfig(64, (full("f", 64),), (), 8)


def test_plan_acquire_dense_counts_reserve_but_keeps_it_available():
    geo = GroupGeometry(full("f", 4))
    assert geo.plan_acquire(0, 0, DenseGrowth(10, 3)) == AcquirePlan(4, 0, 4, 6)
    assert geo.plan_acquire(4, 6, DenseGrowth(5)) == AcquirePlan(0, 4, 4, 1)  # fits in the tail


def test_plan_acquire_sparse_leaves_holes_below_the_suffix():
    geo = GroupGeometry(sliding("s", 4, 8))
    assert geo.plan_acquire(0, 0, SparseSuffix(20, 3, 2)) == AcquirePlan(3, 3, 6, 4)


def test_expired_blocks_at_slides_whole_pages():
    assert GroupGeometry(full("f", 4)).expired_blocks_at(1000) == 0
    assert GroupGeometry(sliding("s", 4, 8)).expired_blocks_at(19) == 3  # (19 − 8 + 1) // 4
    assert GroupGeometry(state("m", 4)).expired_blocks_at(9) == 2  # W = 2: (9 − 1) // 4
    assert GroupGeometry(sliding("s", 4, 8)).expired_blocks_at(3) == 0
