"""CuPy launchers for the device paths: KV append and split-KV paged attention (RawModule, NVRTC).

Used only when the planes live on a CUDA device (see :mod:`gpu.backend`); importing this module needs
CuPy. Callers (:mod:`gpu.append`, :mod:`gpu.attention`) validate inputs and translate/check tables on
the host first, so the kernels never meet a hole in a read domain or a colliding append slot.

Workspace of the attention kernel: split-KV partials (acc, m, l) for at most :data:`MAX_SPLITS` splits
per (column, query head), whatever the context: bounded, never context-sized ("Paging 不引入
gather-to-contiguous cache或与 context 长度成比例的 staging copy"). :func:`last_staging_bytes` reports what
the last call allocated.

Must not know about the store model.
"""

from __future__ import annotations

import functools

import cupy
import numpy as np

from gpu.cuda_source import CODEC_IDS, kernel_source
from gpu.hadamard import rotate
from gpu.planes import HEAD_MAJOR

MAX_SPLITS = 64
MAX_GROUP_CHUNK = 8
THREADS = 256
APPEND_THREADS = 128
_last_staging = [0]


@functools.lru_cache(maxsize=None)
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
    from gpu.codecs import get_profile  # noqa: PLC0415 - keep the import graph flat

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


def attention_device(view, q, rows: np.ndarray, pos: np.ndarray, valid: np.ndarray, prof):
    """Paged attention on the device; host-validated ``rows``/``pos``/``valid``; returns FP32 CuPy array."""
    q = cupy.asarray(q, dtype=cupy.float32)
    b_count, w_count, hq, d = q.shape
    hkv = view.num_kv_heads
    group = hq // hkv
    live = np.arange(w_count)[None, :] < valid[:, None]
    col_pos = np.where(live, pos, -1).astype(np.int32).reshape(-1)
    col_row = np.repeat(rows.astype(np.int32), w_count)
    ncol = b_count * w_count
    out = cupy.zeros((b_count, w_count, hq, d), dtype=cupy.float32)
    if not live.any():
        _last_staging[0] = 0
        return out
    max_pages = (int(col_pos.max()) >> 6) + 1
    pages_per_split = -(-max_pages // MAX_SPLITS)
    nsplit = -(-max_pages // pages_per_split)
    chunks = -(-group // MAX_GROUP_CHUNK)
    qr = rotate(q) if prof.rotate_k else q
    qr = cupy.ascontiguousarray(qr.reshape(ncol, hq, d))
    part_acc = cupy.empty((ncol, hq, nsplit, d), dtype=cupy.float32)
    part_m = cupy.empty((ncol, hq, nsplit), dtype=cupy.float32)
    part_l = cupy.empty((ncol, hq, nsplit), dtype=cupy.float32)
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
        np.int32(hq), np.int32(hkv), np.int32(view.num_pages), np.int32(chunks), np.int32(pages_per_split),
        np.int32(nsplit), np.float32(1.0 / np.sqrt(d)),
        part_acc, part_m, part_l,
    )
    fn((nsplit, hkv * chunks, ncol), (THREADS,), args)
    top = part_m.max(axis=2, keepdims=True)
    live_cols = cupy.asarray(col_pos >= 0)[:, None, None]
    weight = cupy.where(live_cols, cupy.exp(part_m - cupy.where(live_cols, top, 0)), 0)
    num = (part_acc * weight[..., None]).sum(axis=2)
    den = (part_l * weight).sum(axis=2)
    res = cupy.where(live_cols, num / cupy.where(den > 0, den, 1)[..., None], 0).astype(cupy.float32)
    res = res.reshape(b_count, w_count, hq, d)
    return rotate(res) if prof.rotate_v else res


def last_staging_bytes() -> int:
    """Bytes of workspace the last :func:`attention_device` call allocated (partials, rotated q, selectors)."""
    return _last_staging[0]
