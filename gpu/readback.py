"""Read stored planes back through a table row, page by page, for checks (lockstep, oracle).

``read_stored`` returns, for every position < frontier of one row, the code and scale plane contents in
logical order ``(frontier, H, X)`` with the logical plane dtypes; ``read_decoded`` turns them into the
stored-domain FP32 K/V. Each page is translated with ``page = table[row, pos >> 6]`` and read as one
slice, so the result does not depend on which physical ids the row uses. This is a checking tool, not a
consumer: it materialises a contiguous copy on purpose (the FP64 oracle is dense by definition).

Must not know about the store model: it reads what the table says.
"""

from __future__ import annotations

import numpy as np

from gpu.codecs import decode
from gpu.planes import HEAD_MAJOR, PAGE_SHIFT, PAGE_SIZE


def read_stored(pool, layer: int, row: int, frontier: int) -> dict[str, np.ndarray]:
    """Plane contents of positions [0, frontier) of ``row``: ``{plane name: (frontier, H, X)}``."""
    if frontier < 0 or frontier > pool.logical_pages * PAGE_SIZE:
        raise ValueError(f"frontier {frontier} outside [0, {pool.logical_pages * PAGE_SIZE}]")
    table_row = pool.table_row(row)
    planes = pool.planes[layer]
    out = {s.name: np.empty((frontier, pool.kv_heads, s.extent), dtype=s.dtype) for s in pool.schema}
    for block in range((frontier + PAGE_SIZE - 1) >> PAGE_SHIFT):
        page = int(table_row[block])
        if page < 0:
            raise ValueError(f"row {row}: hole at logical block {block} below frontier {frontier}")
        lo = block * PAGE_SIZE
        n = min(PAGE_SIZE, frontier - lo)
        for spec in pool.schema:
            plane = planes[spec.name]
            slab = plane[:, page, :n] if pool.order == HEAD_MAJOR else plane[page, :, :n]
            host = pool.backend.asnumpy(slab).view(spec.dtype)
            out[spec.name][lo:lo + n] = host.transpose(1, 0, 2)
    return out


def read_decoded(pool, layer: int, row: int, frontier: int) -> tuple[np.ndarray, np.ndarray]:
    """Stored-domain FP32 K and V ``(frontier, H, D)`` of one row (still rotated where stored rotated)."""
    st = read_stored(pool, layer, row, frontier)
    k = decode(pool.profile, "k", st["k_code"], st.get("k_scale"))
    v = decode(pool.profile, "v", st["v_code"], st.get("v_scale"))
    return k, v
