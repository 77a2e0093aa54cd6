"""Read stored planes back through a table row, page by page, for checks (lockstep, oracle).

``read_view`` (or ``read_stored`` on a pool) returns, for every position < frontier of one table row,
the code and scale plane contents in logical order ``(frontier, H, X)`` with the logical plane dtypes; ``read_decoded``
turns them into the
stored-domain FP32 K/V. Each page is translated with ``page = table[row, pos >> 6]`` and read as one
slice, so the result does not depend on which physical ids the row uses. This is a checking tool, not a
consumer: it materialises a contiguous copy on purpose (the FP64 oracle is dense by definition).

Must not know about the store model: it reads what the table says.
"""

from __future__ import annotations

import numpy as np

from kvsim.gpu.backend import to_host
from kvsim.gpu.codecs import decode, plane_schema
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_SHIFT, PAGE_SIZE, PagedKVLayerView


def read_view(view: PagedKVLayerView, frontier: int) -> dict[str, np.ndarray]:
    """Plane contents of positions [0, frontier) through one layer view (its planes + one table row).

    Returns ``{plane name: (frontier, H, X)}`` with the logical plane dtypes; a hole below the frontier
    is a ValueError.
    """
    n_logical = view.block_table.shape[0]
    if frontier < 0 or frontier > n_logical * PAGE_SIZE:
        raise ValueError(f"frontier {frontier} outside [0, {n_logical * PAGE_SIZE}]")
    table_row = to_host(view.block_table)
    planes = view.as_batch_view().planes
    specs = plane_schema(view.storage, view.head_dim)
    out = {s.name: np.empty((frontier, view.num_kv_heads, s.extent), dtype=s.dtype) for s in specs}
    for block in range((frontier + PAGE_SIZE - 1) >> PAGE_SHIFT):
        page = int(table_row[block])
        if page < 0:
            raise ValueError(f"hole at logical block {block} below frontier {frontier}")
        lo = block * PAGE_SIZE
        n = min(PAGE_SIZE, frontier - lo)
        for spec in specs:
            plane = planes[spec.name]
            slab = plane[:, page, :n] if view.order == HEAD_MAJOR else plane[page, :, :n]
            out[spec.name][lo:lo + n] = to_host(slab).view(spec.dtype).transpose(1, 0, 2)
    return out


def read_stored(pool, layer: int, row: int, frontier: int) -> dict[str, np.ndarray]:
    """:func:`read_view` of ``pool.layer_view(layer, row)``."""
    return read_view(pool.layer_view(layer, row), frontier)


def read_decoded(pool, layer: int, row: int, frontier: int) -> tuple[np.ndarray, np.ndarray]:
    """Stored-domain FP32 K and V ``(frontier, H, D)`` of one row (still rotated where stored rotated)."""
    st = read_stored(pool, layer, row, frontier)
    k = decode(pool.profile, "k", st["k_code"], st.get("k_scale"))
    v = decode(pool.profile, "v", st["v_code"], st.get("v_scale"))
    return k, v
