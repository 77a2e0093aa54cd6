"""Split-KV launch geometry and the split reduction of the device attention path (array-library neutral).

The device kernel (:mod:`gpu.cuda_source`) writes, per (column, query head, split), FP32 partials: the
running max ``m``, the sum ``l`` of ``exp(s - m)`` and the unnormalised output ``acc``. The reduction
weights split s by ``exp(m_s - max_s m_s)`` and divides by the weighted sum of ``l`` (the owner kernels'
reducer). The number of splits is capped at :data:`MAX_SPLITS`, so the workspace is bounded whatever the
context.

Works on NumPy and CuPy arrays alike (``xp`` is passed in). Must not know about the store model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.gpu.planes import PAGE_SIZE

MAX_SPLITS = 64
MAX_GROUP_CHUNK = 8
THREADS = 256


@dataclass(frozen=True)
class SplitGeometry:
    nsplit: int
    pages_per_split: int
    chunks: int  # query-head chunks of at most MAX_GROUP_CHUNK heads per KV head

    def grid(self, hkv: int, ncol: int) -> tuple[int, int, int]:
        return (self.nsplit, hkv * self.chunks, ncol)


def columns(rows: np.ndarray, pos: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flatten (B, W) to columns: (table row, position or -1 for an inert column), both int32."""
    w_count = pos.shape[1]
    live = np.arange(w_count)[None, :] < np.asarray(valid)[:, None]
    col_pos = np.where(live, pos, -1).astype(np.int32).reshape(-1)
    col_row = np.repeat(np.asarray(rows).astype(np.int32), w_count)
    return col_row, col_pos


def geometry(col_pos: np.ndarray, group: int) -> SplitGeometry:
    """Splits over the longest read domain: at most MAX_SPLITS, each a whole number of pages (>= 1)."""
    max_pages = int(col_pos.max()) // PAGE_SIZE + 1 if col_pos.size and col_pos.max() >= 0 else 1
    pages_per_split = -(-max_pages // MAX_SPLITS)
    return SplitGeometry(-(-max_pages // pages_per_split), pages_per_split, -(-group // MAX_GROUP_CHUNK))


def reduce_splits(xp, part_acc, part_m, part_l, col_pos):
    """(ncol, Hq, S, D) partials -> FP32 (ncol, Hq, D); inert columns (col_pos < 0) give exact zeros."""
    live = xp.asarray(np.asarray(col_pos) >= 0)[:, None, None]
    top = part_m.max(axis=2, keepdims=True)
    weight = xp.where(live, xp.exp(part_m - xp.where(live, top, 0)), 0)
    num = (part_acc * weight[..., None]).sum(axis=2)
    den = (part_l * weight).sum(axis=2)
    return xp.where(live, num / xp.where(den > 0, den, 1)[..., None], 0).astype(xp.float32)
