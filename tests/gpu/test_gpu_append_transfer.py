"""KV append through tables (single and batched), page copies (COW tails), Host pack/unpack."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.gpu.append import kv_append, kv_append_batch
from kvsim.gpu.codecs import PROFILE_NAMES, encode
from kvsim.gpu.content import append_content, content_kv, stored_mismatches
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_MAJOR, PagedKVPool
from kvsim.gpu.readback import read_stored
from kvsim.gpu.transfer import copy_pages, host_page_layout, pack_pages, unpack_pages


def _pool(profile, backend, order=PAGE_MAJOR, pages=8, rows=3, logical=6, layers=2, heads=2):
    return PagedKVPool(profile, layers, heads, 256, num_pages=pages, order=order, rows=rows,
                       logical_pages=logical, backend=backend)


def _all_bytes(pool):
    return np.concatenate([pool.backend.asnumpy(a).view(np.uint8).reshape(-1)
                           for planes in pool.planes for a in planes.values()])


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@pytest.mark.parametrize("order", [PAGE_MAJOR, HEAD_MAJOR])
def test_single_row_append_stores_encoded_content(profile, order, backend_name):
    pool = _pool(profile, backend_name, order)
    pool.publish(2, 0, [6, 1, 4])
    keys = np.arange(170, dtype=np.uint64) * 31 + 5
    append_content(pool, 2, np.arange(170), keys)
    assert stored_mismatches(pool, 2, 170, keys) == []
    got = read_stored(pool, 1, 2, 170)
    want_codes, want_scales = encode(profile, "v", content_kv(keys, 1, "v", 2, 256))
    assert np.array_equal(got["v_code"].view(np.uint8), want_codes.view(np.uint8))
    if want_scales is not None:
        assert np.array_equal(got["v_scale"].view(np.uint8), want_scales.view(np.uint8))


def test_batched_append_writes_only_valid_columns(backend_name):
    pool = _pool("nvfp4", backend_name, layers=1)
    pool.publish(0, 0, [3])
    pool.publish(1, 0, [5, 0])
    rows = [1, 0]
    positions = np.array([[64, 65, 66], [10, 11, 12]])
    valid = [2, 1]
    k = content_kv(np.arange(6, dtype=np.uint64), 0, "k", 2, 256).reshape(2, 3, 2, 256)
    v = content_kv(np.arange(6, dtype=np.uint64), 0, "v", 2, 256).reshape(2, 3, 2, 256)
    kv_append_batch(pool.batch_view(0), rows, positions, valid, k, v)
    code = pool.backend.asnumpy(pool.planes[0]["k_code"])
    want, _ = encode("nvfp4", "k", k)
    assert np.array_equal(code[0, :, 0], want[0, 0]) and np.array_equal(code[0, :, 1], want[0, 1])
    assert np.array_equal(code[3, :, 10], want[1, 0])
    assert not code[0, :, 2].any() and not code[3, :, 11:13].any()
    written = {(0, 0), (0, 1), (3, 10)}
    for page in range(8):
        for col in range(64):
            if (page, col) not in written:
                assert not code[page, :, col].any()


def test_append_refuses_holes_and_collisions_before_writing(backend_name):
    pool = _pool("int8", backend_name, layers=1)
    pool.publish(0, 0, [2, -1, 3])
    view = pool.layer_view(0, 0)
    x = np.ones((2, 2, 256), np.float32)
    with pytest.raises(ValueError, match="hole"):
        kv_append(view, [5, 70], x, x)
    with pytest.raises(ValueError, match="same page slot"):
        kv_append(view, [5, 5], x, x)
    with pytest.raises(ValueError, match="positions must lie"):
        kv_append(view, [5, 6 * 64], x, x)
    with pytest.raises(ValueError, match="shape"):
        kv_append(view, [5, 6], x[:, :1], x)
    assert not _all_bytes(pool).any()


@pytest.mark.parametrize("order", [PAGE_MAJOR, HEAD_MAJOR])
def test_copy_first_columns_for_cow_tail(order, backend_name):
    pool = _pool("k8v4", backend_name, order)
    pool.publish(0, 0, [1])
    pool.publish(1, 0, [6])
    src_keys = np.arange(64, dtype=np.uint64) + 1000
    dst_keys = np.arange(64, dtype=np.uint64) + 2000
    append_content(pool, 0, np.arange(64), src_keys)
    append_content(pool, 1, np.arange(64), dst_keys)
    copy_pages(pool, [1], [6], columns=40)
    merged = np.concatenate([src_keys[:40], dst_keys[40:]])
    assert stored_mismatches(pool, 1, 64, merged) == []
    assert stored_mismatches(pool, 0, 64, src_keys) == []
    copy_pages(pool, [1], [6])
    assert stored_mismatches(pool, 1, 64, src_keys) == []
    with pytest.raises(ValueError, match="disjoint"):
        copy_pages(pool, [1, 6], [6, 2])
    with pytest.raises(ValueError, match="columns"):
        copy_pages(pool, [1], [2], columns=0)


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@pytest.mark.parametrize("order", [PAGE_MAJOR, HEAD_MAJOR])
def test_pack_unpack_logical_order(profile, order, backend_name):
    src = _pool(profile, backend_name, order)
    src.publish(0, 0, [7, 2, 5])
    keys = np.arange(150, dtype=np.uint64) * 3 + 17
    append_content(src, 0, np.arange(150), keys)
    buf = pack_pages(src, src.table_row(0)[:3])
    layout = host_page_layout(src)
    assert buf.dtype == np.uint8 and buf.size == 3 * src.page_bytes and layout.stride == src.page_bytes
    first = layout.segments[0]
    assert (first.layer, first.plane, first.offset) == (0, "k_code", 0)
    page7 = src.backend.asnumpy(src.planes[0]["k_code"][7] if order == PAGE_MAJOR else src.planes[0]["k_code"][:, 7])
    assert np.array_equal(buf[:first.nbytes], np.ascontiguousarray(page7).view(np.uint8).reshape(-1))
    dst = _pool(profile, backend_name, order, pages=9)
    dst.publish(1, 0, [0, 8, 3])
    unpack_pages(dst, buf, [0, 8, 3])
    assert stored_mismatches(dst, 1, 150, keys) == []
    assert np.array_equal(pack_pages(dst, [0, 8, 3]), buf)
    with pytest.raises(ValueError, match="expected 2 pages"):
        unpack_pages(dst, buf, [0, 1])
    with pytest.raises(ValueError, match="distinct"):
        unpack_pages(dst, buf, [0, 0, 1])


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_append_copy_transfer_sequences_keep_rows_exact(data):
    """Random permuted tables, batched appends with valid columns, COW copies and host round trips."""
    profile = data.draw(st.sampled_from(PROFILE_NAMES))
    order = data.draw(st.sampled_from([PAGE_MAJOR, HEAD_MAJOR]))
    pool = PagedKVPool(profile, 1, 1, 256, num_pages=12, order=order, rows=2, logical_pages=4)
    perm = data.draw(st.permutations(range(12)))
    for row in range(2):
        pool.publish(row, 0, perm[row * 4:(row + 1) * 4])
    expect = {0: {}, 1: {}}
    for step in range(data.draw(st.integers(1, 4))):
        width = data.draw(st.integers(1, 5))
        starts = [data.draw(st.integers(0, 256 - width)) for _ in range(2)]
        valid = [data.draw(st.integers(0, width)) for _ in range(2)]
        keys = np.array([[step * 1000 + r * 100 + w for w in range(width)] for r in range(2)], np.uint64)
        positions = np.array([[s + w for w in range(width)] for s in starts])
        k = content_kv(keys.reshape(-1), 0, "k", 1, 256).reshape(2, width, 1, 256)
        v = content_kv(keys.reshape(-1), 0, "v", 1, 256).reshape(2, width, 1, 256)
        kv_append_batch(pool.batch_view(0), [0, 1], positions, valid, k, v)
        for r in range(2):
            for w in range(valid[r]):
                expect[r][int(positions[r, w])] = int(keys[r, w])
    # COW: the tail page of row 0 takes row 1's first n columns of its first block.
    n = data.draw(st.integers(1, 64))
    copy_pages(pool, [pool.table_row(1)[0]], [pool.table_row(0)[3]], columns=n)
    for col in range(n):
        if col in expect[1]:
            expect[0][192 + col] = expect[1][col]
        else:
            expect[0].pop(192 + col, None)
    # Host round trip of row 0 into fresh pages of row 1.
    buf = pack_pages(pool, pool.table_row(0))
    unpack_pages(pool, buf, pool.table_row(1))
    expect[1] = dict(expect[0])
    for r in range(2):
        got = read_stored(pool, 0, r, 256)
        for pos, key in expect[r].items():
            want = encode(profile, "k", content_kv(np.array([key], np.uint64), 0, "k", 1, 256))[0][0]
            assert np.array_equal(got["k_code"][pos].view(np.uint8), want.view(np.uint8))
