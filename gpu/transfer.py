"""Page-payload copies: Device page -> page (partial-tail COW, whole pages) and Host <-> Device transfers.

Store contract clauses:

* "一个 page group 是 allocation、 reservation、reference 和 transfer 的最小 Device 单位": a copy moves the
  same page slice of every plane of every layer of the pool.
* "Host replica 使用 logical-order packed HostKVPageLayout": the Host side is a packed byte buffer, page i
  of the request at byte ``i * stride``; no Device page ids, no holes; each page holds every grouped plane
  payload of the pool, so ``stride`` = PageBytes = sum of plane bytes per token * P * H * layers.
* "D2H/H2D transfer 复制完整 page payload": host transfers always copy whole pages; only the Device-side
  COW copy may be limited to the first n (committed) columns.

Byte layout of one Host page (little-endian, as the planes hold it): for each layer in order, for each
plane in the closed per-layer order (K code, V code, [K scale], [V scale]), the ``(H, P, X)`` block of
that page in (head, column, x) order.

Must not know about replicas, epochs or publication order: callers decide what to copy and when.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.gpu.planes import HEAD_MAJOR, PAGE_SIZE


@dataclass(frozen=True)
class HostSegment:
    layer: int
    plane: str
    offset: int  # byte offset inside one packed page
    nbytes: int


@dataclass(frozen=True)
class HostKVPageLayout:
    """Where each plane's payload sits inside one packed Host page, and the page stride."""

    segments: tuple[HostSegment, ...]
    stride: int


def host_page_layout(pool) -> HostKVPageLayout:
    segs, offset = [], 0
    for layer in range(pool.layers):
        for spec in pool.schema:
            nbytes = pool.kv_heads * PAGE_SIZE * spec.bytes_per_token_per_head
            segs.append(HostSegment(layer, spec.name, offset, nbytes))
            offset += nbytes
    if offset != pool.page_bytes:
        raise AssertionError("host page layout disagrees with PageBytes")
    return HostKVPageLayout(tuple(segs), offset)


def _page_ids(pool, ids, what: str) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= pool.num_pages):
        raise ValueError(f"{what}: page ids must lie in [0, {pool.num_pages})")
    return ids


def _slab(pool, plane, ids):
    """(n, H, P, X) view-or-copy of pages ``ids`` of one plane, whatever the order."""
    if pool.order == HEAD_MAJOR:
        return plane[:, ids].transpose(1, 0, 2, 3)
    return plane[ids]


def copy_pages(pool, src_pages, dst_pages, columns: int | None = None) -> None:
    """Device copy of page payloads ``src[i] -> dst[i]`` across all planes of all layers.

    ``columns`` limits the copy to the first n columns (positions ``[0, n)`` of the page); None copies the
    whole payload. Destinations must be distinct and disjoint from the sources.
    """
    src = _page_ids(pool, src_pages, "src_pages")
    dst = _page_ids(pool, dst_pages, "dst_pages")
    if src.size != dst.size:
        raise ValueError("src_pages and dst_pages differ in length")
    if np.unique(dst).size != dst.size or np.intersect1d(src, dst).size:
        raise ValueError("destination pages must be distinct and disjoint from the sources")
    n = PAGE_SIZE if columns is None else int(columns)
    if not 0 < n <= PAGE_SIZE:
        raise ValueError(f"columns must lie in (0, {PAGE_SIZE}]")
    xp = pool.backend.xp
    s, d = xp.asarray(src), xp.asarray(dst)
    for planes in pool.planes:
        for plane in planes.values():
            if pool.order == HEAD_MAJOR:
                plane[:, d, :n] = plane[:, s, :n]
            else:
                plane[d, :, :n] = plane[s, :, :n]


def pack_pages(pool, page_ids) -> np.ndarray:
    """D2H: whole payloads of ``page_ids`` (logical order) -> packed uint8 buffer ``(n * stride,)``."""
    ids = _page_ids(pool, page_ids, "page_ids")
    layout = host_page_layout(pool)
    out = np.empty((ids.size, layout.stride), dtype=np.uint8)
    dev_ids = pool.backend.xp.asarray(ids)
    for seg in layout.segments:
        block = pool.backend.asnumpy(_slab(pool, pool.planes[seg.layer][seg.plane], dev_ids))
        out[:, seg.offset:seg.offset + seg.nbytes] = np.ascontiguousarray(block).reshape(ids.size, -1).view(np.uint8)
    return out.reshape(-1)


def unpack_pages(pool, buf, page_ids) -> None:
    """H2D: packed buffer of ``len(page_ids)`` pages -> whole payloads of ``page_ids`` (distinct)."""
    ids = _page_ids(pool, page_ids, "page_ids")
    if np.unique(ids).size != ids.size:
        raise ValueError("page_ids must be distinct")
    layout = host_page_layout(pool)
    data = np.asarray(buf, dtype=np.uint8).reshape(-1)
    if data.size != ids.size * layout.stride:
        raise ValueError(f"buffer holds {data.size} bytes, expected {ids.size} pages x {layout.stride}")
    data = data.reshape(ids.size, layout.stride)
    xp = pool.backend.xp
    dev_ids = xp.asarray(ids)
    for seg in layout.segments:
        plane = pool.planes[seg.layer][seg.plane]
        chunk = np.ascontiguousarray(data[:, seg.offset:seg.offset + seg.nbytes]).view(plane.dtype)
        if pool.order == HEAD_MAJOR:
            block = chunk.reshape((ids.size,) + (plane.shape[0],) + plane.shape[2:]).transpose(1, 0, 2, 3)
            plane[:, dev_ids] = xp.asarray(block)
        else:
            plane[dev_ids] = xp.asarray(chunk.reshape((ids.size,) + plane.shape[1:]))
