"""KV append through the block table: the persistent codec applied per token and head, written into the
code and scale planes of one layer.

Store contract: "writable K/V code 与 scale 在 frontier publication 前全部完成" and the append contract of
the batched op (k/v ``[256, Hkv, W, B]`` = NumPy ``(B, W, Hkv, D)``, ``table_rows[B]``, ``valid[B]``;
columns w >= valid[b] are not written). Translation is ``page = table[row, pos >> 6]``, ``offset = pos &
63`` ("当前 (P=64)：logical_block = position >> 6"). A write through a hole, or two tokens of one call
landing on the same slot, is refused before anything is written.

On a CUDA device the codec runs in a RawKernel (:mod:`gpu.cuda_kernels`) that is bit-identical to
:func:`gpu.codecs.encode`; on NumPy the codec is :mod:`gpu.codecs` itself.

Must not know about the store model: callers bring views, table rows, positions and content.
"""

from __future__ import annotations

import numpy as np

from kvsim.gpu.backend import to_host
from kvsim.gpu.codecs import encode
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_SHIFT, PAGE_SIZE, PagedKVBatchLayerView, PagedKVLayerView


def _destinations(view: PagedKVBatchLayerView, rows: np.ndarray, positions: np.ndarray):
    """(pages, offsets) of flat tokens; ValueError on positions outside the table, holes or collisions."""
    table = view.block_tables
    n_rows, n_logical = table.shape
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        raise ValueError(f"table_rows must lie in [0, {n_rows})")
    if positions.size and (positions.min() < 0 or (positions.max() >> PAGE_SHIFT) >= n_logical):
        raise ValueError(f"positions must lie in [0, {n_logical * PAGE_SIZE})")
    host_table = to_host(table)
    pages = host_table[rows, positions >> PAGE_SHIFT].astype(np.int64)
    offsets = positions & (PAGE_SIZE - 1)
    if pages.size and pages.min() < 0:
        bad = int(np.flatnonzero(pages < 0)[0])
        raise ValueError(f"append through a hole: row {int(rows[bad])}, position {int(positions[bad])}")
    if pages.size and pages.max() >= view.num_pages:
        raise ValueError(f"table holds a page id >= num_pages ({view.num_pages})")
    slots = pages * PAGE_SIZE + offsets
    if np.unique(slots).size != slots.size:
        raise ValueError("two tokens of one append land on the same page slot")
    return pages, offsets


def _scatter(plane, order: str, pages, offsets, values) -> None:
    """plane[slot(page, head, offset), :] = values[token, head, :] for every token and head."""
    heads = np.arange(values.shape[1])[None, :]
    if order == HEAD_MAJOR:
        plane[heads, pages[:, None], offsets[:, None]] = values
    else:
        plane[pages[:, None], heads, offsets[:, None]] = values


def _append_numpy(view, pages, offsets, k, v) -> None:
    planes = view.planes
    for part, x in (("k", k), ("v", v)):
        codes, scales = encode(view.storage, part, x)
        _scatter(planes[f"{part}_code"], view.order, pages, offsets, codes)
        if scales is not None:
            _scatter(planes[f"{part}_scale"], view.order, pages, offsets, scales)


def _check_kv(view, k, v, lead: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    want = lead + (view.num_kv_heads, view.head_dim)
    out = []
    for name, x in (("k", k), ("v", v)):
        x = to_host(x)
        if tuple(x.shape) != want:
            raise ValueError(f"{name}: shape {tuple(x.shape)} != {want}")
        out.append(np.asarray(x, dtype=np.float32))
    return out[0], out[1]


def kv_append_batch(view: PagedKVBatchLayerView, table_rows, positions, valid_columns, k, v) -> None:
    """Append k/v ``(B, W, Hkv, D)`` at ``positions (B, W)`` through ``table_rows (B,)``.

    Only columns ``w < valid_columns[b]`` are written.
    """
    rows = np.asarray(table_rows, dtype=np.int64).reshape(-1)
    positions = np.asarray(positions, dtype=np.int64)
    valid = np.asarray(valid_columns, dtype=np.int64).reshape(-1)
    if positions.ndim != 2 or positions.shape[0] != rows.size or valid.size != rows.size:
        raise ValueError("positions must be (B, W) with table_rows (B,) and valid_columns (B,)")
    b_count, w_count = positions.shape
    if valid.size and (valid.min() < 0 or valid.max() > w_count):
        raise ValueError(f"valid_columns must lie in [0, {w_count}]")
    k, v = _check_kv(view, k, v, (b_count, w_count))
    live = np.arange(w_count)[None, :] < valid[:, None]
    flat_rows = np.broadcast_to(rows[:, None], positions.shape)[live]
    flat_pos = positions[live]
    pages, offsets = _destinations(view, flat_rows, flat_pos)
    if not pages.size:
        return
    if view.k_pages.__class__ is np.ndarray:
        _append_numpy(view, pages, offsets, k[live], v[live])
    else:
        from kvsim.gpu.cuda_kernels import append_device  # noqa: PLC0415 - CuPy only

        append_device(view, pages, offsets, k[live], v[live])


def kv_append(view: PagedKVLayerView, positions, k, v) -> None:
    """Single-row append: k/v ``(T, Hkv, D)`` at ``positions (T,)`` through the view's table row."""
    positions = np.asarray(positions, dtype=np.int64).reshape(1, -1)
    k_arr, v_arr = _check_kv(view, k, v, (positions.shape[1],))
    kv_append_batch(view.as_batch_view(), [0], positions, [positions.shape[1]], k_arr[None], v_arr[None])


def append_tokens(pool, layer: int, row: int, positions, k, v) -> None:
    """Pool convenience: :func:`kv_append` on ``pool.layer_view(layer, row)``."""
    kv_append(pool.layer_view(layer, row), positions, k, v)

