"""Paged attention consumer: decode and causal multi-column rows read straight from the paged planes.

Arithmetic contract (the store contract's "consumer arithmetic 由 softmax_attention.h 定义"):

* column j of batch row b at position p attends cache positions [0, p] of table row ``table_rows[b]``;
  columns j >= ``valid_columns[b]`` are inert and output exactly zero;
* GQA: query head h reads KV head ``h // (Hq / Hkv)``; scale ``1/sqrt(D)``;
* rotated caches: the query is rotated (R q) where K is rotated, and the output is rotated back
  (R^T = R) where V is rotated;
* FP32 scores and accumulators with an online softmax over page tiles (running max m, sum l, acc).

Output is FP32 ``(B, W, Hq, D)``: the engine's kernel writes BF16, but an FP32 output lets the kernel
error be measured against the FP64 oracle without an extra output rounding.

Paging discipline ("Paging 不引入 gather-to-contiguous cache或与 context 长度成比例的 staging copy"):
translation happens per tile of ``tile_pages`` pages; only that tile is ever staged (codes + FP32
values), so extra memory is bounded by the tile whatever the context. Physical ids may be any
permutation; a hole inside a column's read domain is an error reported before any work, holes beyond
every read domain are ignored ("Kernel correctness不能依赖相邻 logical pages映射到相邻 physical IDs").

On a CUDA device the same call runs RawKernels (:mod:`gpu.cuda_kernels`). Must not know about the
store model.
"""

from __future__ import annotations

import numpy as np

from kvsim.gpu.backend import to_host
from kvsim.gpu.codecs import get_profile
from kvsim.gpu.decode_tile import TileStager
from kvsim.gpu.hadamard import rotate
from kvsim.gpu.planes import PAGE_SHIFT, PAGE_SIZE, PagedKVBatchLayerView, PagedKVLayerView

DEFAULT_TILE_PAGES = 16


def check_batch_inputs(view: PagedKVBatchLayerView, q, table_rows, positions, valid_columns):
    """Validate shapes and the read domains; return host (rows, positions, valid, table) arrays."""
    rows = np.asarray(to_host(table_rows), dtype=np.int64).reshape(-1)
    positions = np.asarray(to_host(positions), dtype=np.int64)
    valid = np.asarray(to_host(valid_columns), dtype=np.int64).reshape(-1)
    if q.ndim != 4 or q.shape[-1] != view.head_dim:
        raise ValueError(f"q must be (B, W, Hq, {view.head_dim}), got {tuple(q.shape)}")
    b_count, w_count, hq = q.shape[:3]
    if hq % view.num_kv_heads:
        raise ValueError(f"query heads {hq} are not a multiple of KV heads {view.num_kv_heads}")
    if rows.size != b_count or valid.size != b_count or positions.shape != (b_count, w_count):
        raise ValueError("table_rows (B,), positions (B, W) and valid_columns (B,) must match q (B, W, ...)")
    n_rows, n_logical = view.block_tables.shape
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        raise ValueError(f"table_rows must lie in [0, {n_rows})")
    if valid.size and (valid.min() < 0 or valid.max() > w_count):
        raise ValueError(f"valid_columns must lie in [0, {w_count}]")
    table = to_host(view.block_tables)
    live = np.arange(w_count)[None, :] < valid[:, None]
    for b in range(b_count):
        pos = positions[b][live[b]]
        if not pos.size:
            continue
        if pos.min() < 0 or (pos.max() >> PAGE_SHIFT) >= n_logical:
            raise ValueError(f"row {b}: positions must lie in [0, {n_logical * PAGE_SIZE})")
        domain = table[rows[b], : (int(pos.max()) >> PAGE_SHIFT) + 1]
        if domain.min() < 0:
            block = int(np.flatnonzero(domain < 0)[0])
            raise ValueError(f"row {b} (table row {int(rows[b])}): hole at logical block {block} inside the "
                             f"read domain [0, {int(pos.max()) + 1})")
        if domain.max() >= view.num_pages:
            raise ValueError(f"row {b}: table holds a page id >= num_pages ({view.num_pages})")
    return rows, positions, valid, table


def paged_attention(view: PagedKVBatchLayerView, q, table_rows, positions, valid_columns,
                    tile_pages: int = DEFAULT_TILE_PAGES):
    """Batched paged attention; q ``(B, W, Hq, D)`` float32 -> FP32 ``(B, W, Hq, D)`` (same backend as q)."""
    rows, pos, valid, table = check_batch_inputs(view, q, table_rows, positions, valid_columns)
    prof = get_profile(view.storage)
    if not isinstance(view.k_pages, np.ndarray):
        from kvsim.gpu.cuda_kernels import attention_device  # noqa: PLC0415 - CuPy only

        return attention_device(view, q, rows, pos, valid, prof)
    if tile_pages < 1:
        raise ValueError("tile_pages must be positive")
    q = np.asarray(q, dtype=np.float32)
    if prof.rotate_k:
        q = rotate(q)
    out = np.zeros(q.shape, dtype=np.float32)
    stagers = (
        TileStager(prof.codec("k").name, view.k_pages, view.k_scale_pages, view.order, view.num_kv_heads,
                   view.head_dim, tile_pages),
        TileStager(prof.codec("v").name, view.v_pages, view.v_scale_pages, view.order, view.num_kv_heads,
                   view.head_dim, tile_pages),
    )
    for b in range(q.shape[0]):
        n = int(valid[b])
        if n:
            out[b, :n] = _attend_row(q[b, :n], pos[b, :n], table[rows[b]], stagers, tile_pages,
                                     np.float32(1.0 / np.sqrt(view.head_dim)))
    return rotate(out) if prof.rotate_v else out


def _attend_row(q: np.ndarray, pos: np.ndarray, table_row: np.ndarray, stagers, tile_pages: int,
                scale: np.float32) -> np.ndarray:
    """One table row: q ``(W, Hq, D)`` (already rotated), positions ``(W,)`` -> FP32 ``(W, Hq, D)``."""
    k_stage, v_stage = stagers
    w_count, hq, d = q.shape
    hkv = k_stage.heads
    group = hq // hkv
    # (Hkv, W*group, D): query i = w*group + g of KV head kh is query head kh*group + g of column w.
    qg = np.ascontiguousarray(q.reshape(w_count, hkv, group, d).transpose(1, 0, 2, 3)).reshape(hkv, -1, d)
    qpos = np.repeat(pos, group)
    m = np.full((hkv, qg.shape[1]), -np.inf, dtype=np.float32)
    l_sum = np.zeros_like(m)
    acc = np.zeros(qg.shape, dtype=np.float32)
    n_pages = (int(pos.max()) >> PAGE_SHIFT) + 1
    for first in range(0, n_pages, tile_pages):
        ids = table_row[first:min(first + tile_pages, n_pages)].astype(np.intp)
        keys = k_stage.load(ids)
        s = np.matmul(qg, keys.transpose(0, 2, 1))
        s *= scale
        key0 = first * PAGE_SIZE
        if key0 + s.shape[-1] - 1 > qpos.min():
            key_pos = key0 + np.arange(s.shape[-1])
            s[:, key_pos[None, :] > qpos[:, None]] = -np.inf
        m_new = np.maximum(m, s.max(axis=-1))
        alpha = np.exp(m - m_new)
        s -= m_new[..., None]
        np.exp(s, out=s)
        l_sum = l_sum * alpha + s.sum(axis=-1)
        acc *= alpha[..., None]
        acc += np.matmul(s, v_stage.load(ids))
        m = m_new
    out = acc / l_sum[..., None]
    return out.reshape(hkv, w_count, group, d).transpose(1, 0, 2, 3).reshape(w_count, hq, d)


def paged_attention_row(view: PagedKVLayerView, q, positions, valid: int | None = None,
                        tile_pages: int = DEFAULT_TILE_PAGES):
    """Single-row form: q ``(W, Hq, D)``, positions ``(W,)`` -> ``(W, Hq, D)``."""
    positions = np.asarray(positions, dtype=np.int64).reshape(1, -1)
    n = positions.shape[1] if valid is None else valid
    out = paged_attention(view.as_batch_view(), q[None], [0], positions, [n], tile_pages)
    return out[0]


def attention(pool, layer: int, q, table_rows, positions, valid_columns, tile_pages: int = DEFAULT_TILE_PAGES):
    """Pool convenience: :func:`paged_attention` on ``pool.batch_view(layer)``."""
    return paged_attention(pool.batch_view(layer), q, table_rows, positions, valid_columns, tile_pages)
