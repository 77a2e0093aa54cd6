"""CuPy launchers for the device paths: KV append and split-KV paged attention (RawModule, NVRTC).

Used only when the planes live on a CUDA device (see :mod:`gpu.backend`); importing this module needs
CuPy. Callers (:mod:`gpu.append`, :mod:`gpu.attention`) validate inputs and translate/check tables on
the host first, so the kernels never meet a hole in a read domain or a colliding append slot.

Workspace of the attention kernel: split-KV partials (acc, m, l) for at most ``gpu.splitkv.MAX_SPLITS`` splits
per (column, query head) (:mod:`gpu.splitkv`), whatever the context: bounded, never context-sized ("Paging 不引入
gather-to-contiguous cache或与 context 长度成比例的 staging copy"). :func:`last_staging_bytes` reports what
the last call allocated.

Must not know about the store model.
"""

from __future__ import annotations

import functools

import cupy
import numpy as np

from kvsim.gpu.codecs import get_profile
from kvsim.gpu.cuda_source import CODEC_IDS, kernel_source
from kvsim.gpu.hadamard import rotate
from kvsim.gpu.planes import HEAD_MAJOR
from kvsim.gpu.splitkv import THREADS, columns, geometry, reduce_splits

APPEND_THREADS = 128
_last_staging = [0]


@functools.cache
def _module(k_codec: str, v_codec: str, rot_k: bool, rot_v: bool, order: str, head_dim: int):
    options = (
        "-std=c++14",
        f"-DKV_HEAD_DIM={head_dim}",
        f"-DKV_KCODEC={CODEC_IDS[k_codec]}",
        f"-DKV_VCODEC={CODEC_IDS[v_codec]}",
        f"-DKV_KROT={int(rot_k)}",
        f"-DKV_VROT={int(rot_v)}",
        f"-DKV_ORDER={1 if order == HEAD_MAJOR else 0}",
    )
    return cupy.RawModule(code=kernel_source(), options=options)


def _module_for(view, prof):
    if view.head_dim % 32 or view.head_dim > 256:
        raise ValueError(f"the device kernels need head_dim a multiple of 32 and <= 256, got {view.head_dim}")
    return _module(prof.codec("k").name, prof.codec("v").name, prof.rotate_k, prof.rotate_v, view.order,
                   view.head_dim)


def _dummy():
    return cupy.zeros(1, dtype=cupy.uint8)


def append_device(view, pages: np.ndarray, offsets: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """Encode k/v ``(T, H, D)`` on the device and write slot (pages[t], head, offsets[t]) of every plane."""
    prof = get_profile(view.storage)
    fn = _module_for(view, prof).get_function("kv_append_tokens")
    ntok, heads = k.shape[0], k.shape[1]
    total = ntok * heads * 2
    args = (
        cupy.asarray(np.ascontiguousarray(k, dtype=np.float32)),
        cupy.asarray(np.ascontiguousarray(v, dtype=np.float32)),
        cupy.asarray(pages.astype(np.int32)),
        cupy.asarray(offsets.astype(np.int32)),
        np.int32(ntok), np.int32(heads), np.int32(view.num_pages),
        view.k_pages, view.k_scale_pages if view.k_scale_pages is not None else _dummy(),
        view.v_pages, view.v_scale_pages if view.v_scale_pages is not None else _dummy(),
    )
    fn(((total + APPEND_THREADS - 1) // APPEND_THREADS,), (APPEND_THREADS,), args)


def prepare_attention(view, q, rows: np.ndarray, pos: np.ndarray, valid: np.ndarray, prof):
    """Allocate the workspace and bind the arguments once; the returned callable launches the kernel
    and the split reduction and returns the FP32 output (timing loops call it repeatedly;
    ``run.kernel_only()`` launches just the kernel)."""
    q = cupy.asarray(q, dtype=cupy.float32)
    b_count, w_count, hq, d = q.shape
    hkv = view.num_kv_heads
    col_row, col_pos = columns(rows, pos, valid)
    ncol = b_count * w_count
    if not (col_pos >= 0).any():
        _last_staging[0] = 0
        return lambda: cupy.zeros((b_count, w_count, hq, d), dtype=cupy.float32)
    geo = geometry(col_pos, hq // hkv)
    qr = rotate(q) if prof.rotate_k else q
    qr = cupy.ascontiguousarray(qr.reshape(ncol, hq, d))
    part_acc = cupy.empty((ncol, hq, geo.nsplit, d), dtype=cupy.float32)
    part_m = cupy.empty((ncol, hq, geo.nsplit), dtype=cupy.float32)
    part_l = cupy.empty((ncol, hq, geo.nsplit), dtype=cupy.float32)
    d_row, d_pos = cupy.asarray(col_row), cupy.asarray(col_pos)
    _last_staging[0] = int(part_acc.nbytes + part_m.nbytes + part_l.nbytes + qr.nbytes + d_row.nbytes
                           + d_pos.nbytes)
    fn = _module_for(view, prof).get_function("kv_paged_attention")
    tables = view.block_tables
    args = (
        qr,
        view.k_pages, view.k_scale_pages if view.k_scale_pages is not None else _dummy(),
        view.v_pages, view.v_scale_pages if view.v_scale_pages is not None else _dummy(),
        tables, np.int32(tables.shape[1]), d_row, d_pos,
        np.int32(hq), np.int32(hkv), np.int32(view.num_pages), np.int32(geo.chunks),
        np.int32(geo.pages_per_split), np.int32(geo.nsplit), np.float32(1.0 / np.sqrt(d)),
        part_acc, part_m, part_l,
    )
    grid = geo.grid(hkv, ncol)

    def kernel_only():
        fn(grid, (THREADS,), args)

    def run():
        kernel_only()
        res = reduce_splits(cupy, part_acc, part_m, part_l, col_pos).reshape(b_count, w_count, hq, d)
        return rotate(res) if prof.rotate_v else res

    run.kernel_only = kernel_only
    return run


def attention_device(view, q, rows: np.ndarray, pos: np.ndarray, valid: np.ndarray, prof):
    """Paged attention on the device; host-validated ``rows``/``pos``/``valid``; returns FP32 CuPy array."""
    return prepare_attention(view, q, rows, pos, valid, prof)()


def last_staging_bytes() -> int:
    """Bytes of workspace the last :func:`attention_device` call allocated (partials, rotated q, selectors)."""
    return _last_staging[0]
