"""Plane geometry, closed strides, address formula, view validation, table publication, backend choice."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.gpu import backend as B
from kvsim.gpu.codecs import BYTES_PER_TOKEN_PER_HEAD, PROFILE_NAMES
from kvsim.gpu.content import append_content
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_MAJOR, PagedKVBatchLayerView, PagedKVLayerView, PagedKVPool
from kvsim.gpu.readback import read_stored


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@pytest.mark.parametrize("order", [PAGE_MAJOR, HEAD_MAJOR])
def test_plane_shapes_order_and_page_bytes(profile, order):
    pool = PagedKVPool(profile, layers=3, kv_heads=2, head_dim=256, num_pages=5, order=order, rows=2,
                       logical_pages=4)
    for planes in pool.planes:
        assert list(planes) == [s.name for s in pool.schema]
        for spec in pool.schema:
            arr = planes[spec.name]
            want = (5, 2, 64, spec.extent) if order == PAGE_MAJOR else (2, 5, 64, spec.extent)
            assert arr.shape == want and arr.dtype == spec.dtype and arr.flags.c_contiguous
            assert arr.ctypes.data % 256 == 0
    assert pool.page_bytes == BYTES_PER_TOKEN_PER_HEAD[profile] * 64 * 2 * 3
    assert pool.table.shape == (2, 4) and pool.table.dtype == np.int32 and (pool.table == -1).all()


@pytest.mark.parametrize("profile", ["fp8", "k8v4", "int8", "nvfp4", "bf16"])
@pytest.mark.parametrize("heads", [1, 3, 5])
def test_startup_bytes_are_affine_and_match_the_layout_builder(profile, heads):
    """Decision 21 (CAP-1): each slab is its span plus one alignment allowance, so the physical footprint is
    affine in the page count for odd KV-head counts too (an FP8 scale slab holds 128·H bytes per page), and the
    model's layout builder charges exactly what this pool allocates."""
    from kvsim.kvmodel.store.config import BackendConfig, CapacityPolicy, ModelGeometry, StoreConfig
    from kvsim.kvmodel.store.planes import pool_geometry

    sizes = [PagedKVPool(profile, 2, heads, 256, num_pages=n, rows=1).startup_bytes for n in (3, 4, 5, 6)]
    steps = {b - a for a, b in zip(sizes, sizes[1:], strict=False)}
    assert len(steps) == 1
    cfg = StoreConfig(max_context=1024, max_concurrency=2, kv_profile=profile, backend=BackendConfig("off"),
                      capacity=CapacityPolicy(), model=ModelGeometry(full_attention_layers=2, kv_heads=heads,
                                                                     head_dim=256))
    for n, size in zip((3, 4, 5, 6), sizes, strict=True):
        assert pool_geometry(cfg, "main", n).startup_bytes == size


@pytest.mark.parametrize("order", [PAGE_MAJOR, HEAD_MAJOR])
def test_element_address_formula(order):
    """Element (pos, head, x) of a row lives at the flat offset the closed order prescribes."""
    pool = PagedKVPool("int8", 1, 3, 256, num_pages=7, order=order, rows=1, logical_pages=3)
    pages = [5, 2, 6]
    pool.publish(0, 0, pages)
    keys = np.arange(150, dtype=np.uint64) + 11
    append_content(pool, 0, np.arange(150), keys)
    stored = read_stored(pool, 0, 0, 150)
    n_pages, heads = 7, 3
    for name in ("k_code", "k_scale"):
        flat = pool.planes[0][name].reshape(-1)
        x_ext = flat.size // (n_pages * heads * 64)
        for pos in (0, 63, 64, 100, 149):
            g, o = pages[pos >> 6], pos & 63
            for h in range(heads):
                base = ((g * heads + h) * 64 + o) if order == PAGE_MAJOR else ((h * n_pages + g) * 64 + o)
                got = flat[base * x_ext:(base + 1) * x_ext]
                assert np.array_equal(got.view(np.uint8), stored[name][pos, h].view(np.uint8))


def _view_args(pool, layer=0):
    p = pool.planes[layer]
    return dict(k_pages=p["k_code"], v_pages=p["v_code"], k_scale_pages=p.get("k_scale"),
                v_scale_pages=p.get("v_scale"), block_table=pool.table[0], head_dim=256, num_kv_heads=2,
                storage=pool.storage)


def test_view_accepts_pool_planes():
    pool = PagedKVPool("k8v4", 1, 2, 256, num_pages=4, rows=3, logical_pages=5)
    view = PagedKVLayerView(**_view_args(pool))
    assert view.num_pages == 4
    bview = view.as_batch_view()
    assert isinstance(bview, PagedKVBatchLayerView) and bview.block_tables.shape == (1, 5)
    assert pool.batch_view(0).block_tables.shape == (3, 5)


@pytest.mark.parametrize("mutate, message", [
    (lambda a: a.update(k_pages=a["k_pages"].view(np.int8)), "dtype"),
    (lambda a: a.update(v_pages=np.zeros((4, 2, 64, 256), np.float32)), "dtype"),
    (lambda a: a.update(k_pages=np.ascontiguousarray(a["k_pages"][:, :, :, :128])), "shape"),
    (lambda a: a.update(k_pages=np.zeros((4, 2, 32, 256), a["k_pages"].dtype)), "shape"),
    (lambda a: a.update(k_pages=np.zeros((4, 3, 64, 256), a["k_pages"].dtype)), "shape"),
    (lambda a: a.update(k_pages=np.zeros((4, 2, 64, 256), a["k_pages"].dtype)[:, :, :, :]
                        .transpose(1, 0, 2, 3).copy().transpose(1, 0, 2, 3)), "strides"),
    (lambda a: a.update(v_scale_pages=np.zeros((5, 2, 64, 16), np.uint8)), "shape"),
    (lambda a: a.update(k_scale_pages=None), "missing"),
    (lambda a: a.update(block_table=a["block_table"].astype(np.int64)), "int32"),
    (lambda a: a.update(block_table=np.zeros((2, 3), np.int32)), "dimension"),
    (lambda a: a.update(block_table=np.zeros(10, np.int32)[::2]), "strides"),
    (lambda a: a.update(storage="fp16"), "unknown KV storage profile"),
    (lambda a: a.update(head_dim=128), "head_dim"),
])
def test_view_validation_errors(mutate, message):
    pool = PagedKVPool("k8v4", 1, 2, 256, num_pages=4, rows=1, logical_pages=5)
    args = _view_args(pool)
    mutate(args)
    with pytest.raises(ValueError, match=message):
        PagedKVLayerView(**args)


def test_view_rejects_scale_plane_for_bf16_and_batch_table_shape():
    pool = PagedKVPool("bf16", 1, 2, 256, num_pages=4, rows=2, logical_pages=5)
    args = _view_args(pool)
    args["k_scale_pages"] = np.zeros((4, 2, 64, 1), np.float16)
    with pytest.raises(ValueError, match="no such plane"):
        PagedKVLayerView(**args)
    args = _view_args(pool)
    args.pop("block_table")
    with pytest.raises(ValueError, match="dimension"):
        PagedKVBatchLayerView(**args, block_tables=pool.table[0])


def test_head_major_draft_pool_bf16_d128():
    pool = PagedKVPool("bf16", 2, 8, 128, num_pages=3, order=HEAD_MAJOR, rows=1, logical_pages=3)
    assert pool.planes[0]["k_code"].shape == (8, 3, 64, 128)
    assert pool.page_bytes == 512 * 64 * 8 * 2
    with pytest.raises(ValueError, match="head_dim 256 only"):
        PagedKVPool("nvfp4", 1, 8, 128, num_pages=3)


def test_publish_and_table_validation():
    pool = PagedKVPool("fp8", 1, 1, 256, num_pages=4, rows=2, logical_pages=3)
    pool.publish(1, 1, [3, 0])
    assert pool.table_row(1).tolist() == [-1, 3, 0]
    pool.publish(1, 2, [-1])
    assert pool.table_row(1).tolist() == [-1, 3, -1]
    with pytest.raises(ValueError, match="page ids"):
        pool.publish(0, 0, [4])
    with pytest.raises(ValueError, match="table slice"):
        pool.publish(0, 2, [0, 1])
    with pytest.raises(ValueError, match="table row"):
        pool.publish(2, 0, [0])
    pool.clear_row(1)
    assert pool.table_row(1).tolist() == [-1, -1, -1]
    with pytest.raises(ValueError, match="P=64|order"):
        PagedKVPool("fp8", 1, 1, 256, num_pages=4, order="row_major")


def test_backend_choice(monkeypatch):
    assert B.get_backend("numpy").xp is np
    monkeypatch.setenv(B.ENV_VAR, "numpy")
    assert B.get_backend().name == "numpy"
    with pytest.raises(ValueError, match="unknown array backend"):
        B.get_backend("torch")
    monkeypatch.delenv(B.ENV_VAR)
    assert B.get_backend().name == ("cupy" if B.cupy_usable() else "numpy")
    assert B.available_backends()[0] == "numpy"
    if not B.cupy_usable():
        monkeypatch.setenv(B.ENV_VAR, "cupy")
        with pytest.raises(B.BackendUnavailable, match="cupy"):
            B.get_backend()
