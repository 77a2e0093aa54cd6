"""Paged attention vs the FP64 oracle: random shapes, permuted tables, holes, every profile, both orders;
inert columns; bounded staging (a contiguous-gather implementation fails these)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.gpu.accuracy import CODEC_REL_L2_BUDGET, FP32_KERNEL_REL_L2, KERNEL_REL_L2_BAR, measure_errors
from kvsim.gpu.attention import attention, paged_attention_row
from kvsim.gpu.codecs import PROFILE_NAMES
from kvsim.gpu.content import append_content
from kvsim.gpu.oracle import oracle_for_pool, rel_l2
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_MAJOR, PagedKVPool


@st.composite
def attention_cases(draw):
    profile = draw(st.sampled_from(PROFILE_NAMES))
    order = draw(st.sampled_from([PAGE_MAJOR, HEAD_MAJOR]))
    hkv = draw(st.integers(1, 2))
    group = draw(st.integers(1, 3))
    batch = draw(st.integers(1, 2))
    width = draw(st.integers(1, 3))
    contexts = [draw(st.integers(1, 300)) for _ in range(batch)]
    valid = [draw(st.integers(0, width)) for _ in range(batch)]
    tile = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31))
    return profile, order, hkv, group, batch, width, contexts, valid, tile, seed


def _build(profile, order, hkv, contexts, seed, backend="numpy"):
    rng = np.random.default_rng(seed)
    logical = 6
    pool = PagedKVPool(profile, 1, hkv, 256, num_pages=len(contexts) * logical + 2, order=order,
                       rows=len(contexts) + 1, logical_pages=logical, backend=backend)
    perm = rng.permutation(pool.num_pages)
    for b, ctx in enumerate(contexts):
        used = -(-ctx // 64)
        row_pages = perm[b * logical:b * logical + used].tolist()
        # holes (and garbage ids are never used) beyond the read domain are ignored
        pool.publish(b + 1, 0, row_pages + [-1] * (logical - used))
        append_content(pool, b + 1, np.arange(ctx), rng.integers(0, 2**62, ctx).astype(np.uint64))
    return pool, rng


@settings(max_examples=40, deadline=None)
@given(case=attention_cases())
def test_random_paged_attention_matches_oracle(case):
    profile, order, hkv, group, batch, width, contexts, valid, tile, seed = case
    pool, rng = _build(profile, order, hkv, contexts, seed)
    q = rng.standard_normal((batch, width, hkv * group, 256)).astype(np.float32)
    # causal multi-column rows: the last `width` positions of each context, or any positions below it
    pos = np.array([[max(0, ctx - width + w) for w in range(width)] for ctx in contexts])
    rows = list(range(1, batch + 1))
    got = attention(pool, 0, q, rows, pos, valid, tile_pages=tile)
    want = oracle_for_pool(pool, 0, q, rows, pos, valid)
    assert got.dtype == np.float32 and got.shape == q.shape
    for b in range(batch):
        assert not got[b, valid[b]:].any()  # inert columns: exactly zero
    if np.any(want):
        err = rel_l2(got, want)
        assert err <= KERNEL_REL_L2_BAR[profile] and err <= FP32_KERNEL_REL_L2, err


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_decode_and_multicolumn_agree_and_match_oracle(profile, backend_name):
    pool, rng = _build(profile, PAGE_MAJOR, 2, [260], 5, backend_name)
    q = rng.standard_normal((1, 3, 6, 256)).astype(np.float32)
    pos = np.array([[100, 257, 259]])
    xp = pool.backend.xp
    multi = pool.backend.asnumpy(attention(pool, 0, xp.asarray(q), [1], pos, [3]))
    for j in range(3):
        single = pool.backend.asnumpy(attention(pool, 0, xp.asarray(q[:, j:j + 1]), [1], pos[:, j:j + 1], [1]))
        assert rel_l2(single[0, 0], multi[0, j]) < 1e-5
    want = oracle_for_pool(pool, 0, q, [1], pos, [3])
    assert rel_l2(multi, want) <= min(KERNEL_REL_L2_BAR[profile], FP32_KERNEL_REL_L2)


def test_hole_inside_read_domain_is_reported_outside_ignored(backend_name):
    pool = PagedKVPool("fp8", 1, 1, 256, num_pages=6, rows=1, logical_pages=5, backend=backend_name)
    pool.publish(0, 0, [4, 0, 2])
    append_content(pool, 0, np.arange(150), np.arange(150, dtype=np.uint64))
    q = np.ones((1, 1, 256), np.float32)
    view = pool.layer_view(0, 0)
    paged_attention_row(view, pool.backend.xp.asarray(q), [149])  # blocks 3, 4 are holes: outside
    pool.publish(0, 1, [-1])
    with pytest.raises(ValueError, match="hole at logical block 1"):
        paged_attention_row(view, pool.backend.xp.asarray(q), [149])
    paged_attention_row(view, pool.backend.xp.asarray(q), [63])  # domain [0, 64) has no hole


def test_bad_batch_inputs():
    pool = PagedKVPool("bf16", 1, 2, 256, num_pages=2, rows=1, logical_pages=2)
    pool.publish(0, 0, [1, 0])
    q = np.ones((1, 2, 3, 256), np.float32)
    with pytest.raises(ValueError, match="multiple of KV heads"):
        attention(pool, 0, q, [0], [[1, 2]], [2])
    with pytest.raises(ValueError, match="q must be"):
        attention(pool, 0, np.ones((1, 2, 4, 128), np.float32), [0], [[1, 2]], [2])
    q = np.ones((1, 2, 4, 256), np.float32)
    with pytest.raises(ValueError, match="valid_columns"):
        attention(pool, 0, q, [0], [[1, 2]], [3])
    with pytest.raises(ValueError, match="table_rows"):
        attention(pool, 0, q, [1], [[1, 2]], [2])
    with pytest.raises(ValueError, match="positions must lie"):
        attention(pool, 0, q, [0], [[1, 128]], [2])
    assert not attention(pool, 0, q, [0], [[-5, 7]], [0]).any()  # all inert: nothing read, all zero


@pytest.mark.parametrize("profile", ["bf16", "nvfp4"])
def test_staging_is_bounded_by_a_tile_at_16k_context(profile):
    """Peak extra memory of a 16k-context decode stays at a few tiles, far below one context-sized array."""
    context, heads, tile = 16384, 2, 4
    pool = PagedKVPool(profile, 1, heads, 256, num_pages=context // 64, rows=1, logical_pages=context // 64)
    pool.publish(0, 0, np.random.default_rng(1).permutation(context // 64))
    append_content(pool, 0, np.arange(context), np.arange(context, dtype=np.uint64))
    q = np.random.default_rng(2).standard_normal((1, 1, 4 * heads, 256)).astype(np.float32)
    tracemalloc.start()
    try:
        attention(pool, 0, q, [0], [[context - 1]], [1], tile_pages=tile)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    context_fp32 = context * heads * 256 * 4  # one decoded K (or V) of the whole context
    tile_fp32 = tile * 64 * heads * 256 * 4
    assert peak < 6 * tile_fp32 < context_fp32 / 4, (peak, tile_fp32, context_fp32)


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@pytest.mark.parametrize("seed", [0, 1])
def test_codec_and_kernel_error_within_tables(profile, seed):
    report = measure_errors(profile, seed=seed, context=1024)
    assert report.kernel_rel_l2 <= KERNEL_REL_L2_BAR[profile]
    assert report.kernel_rel_l2 <= FP32_KERNEL_REL_L2
    assert report.codec_rel_l2 <= CODEC_REL_L2_BUDGET[profile]
    if profile == "bf16":
        assert report.codec_rel_l2 == 0.0  # BF16 K and V are stored bit for bit
    else:
        assert report.codec_rel_l2 > 1e-4  # a quantising codec is visible to the oracle
