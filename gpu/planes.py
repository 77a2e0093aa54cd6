"""Plane tensors in the closed plane orders, paged consumer views, and one pool's store of planes.

Store contract clauses enforced here:

* "所有 registered growing pools 使用 (P=64)，并选择两种 closed orders 之一": P = 64 only; Main/MTP use
  page-major ``[X,P,H,N]``, DFlash Full head-major ``[X,P,N,H]`` (ggml shapes, ne[0] = X fastest). As
  C-order arrays: page-major ``(N, H, P, X)``, element offset ``((g*H + h)*64 + o)*X + x`` ("Page-major
  地址为"); head-major ``(H, N, P, X)``, offset ``((h*N + g)*64 + o)*X + x``.
* Per layer the plane order is K code, V code, [K scale], [V scale]; code and scale planes share the page
  id g but have their own dtype and leading extent X ("Code 与 scale planes 使用同一个 (g)").
* Translation ``logical_block = position >> 6``, ``page_offset = position & 63``, ``physical_page =
  block_table[logical_block]``; the block-table matrix is I32 ``[Nlogical, C]`` (a C-order ``(C,
  Nlogical)`` array), holes are -1.
* "Single-sequence growing-cache Op 使用 non-owning PagedKVLayerView" / "Batched Op 使用
  PagedKVBatchLayerView": one layer's planes plus one table row (or the whole matrix, with ``table_rows``
  a separate op input). "Wrapper 验证 Tensor dtype、geometry、closed strides、table shape": the views
  check all of these at construction and raise ValueError with the offending plane named.

Must not know about the store model (leases, references, frontiers, requests): a pool here is only the
plane memory of one typed pool plus its execution table matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.gpu.backend import Backend, resolve
from kvsim.gpu.codecs import PlaneSpec, check_head_dim, get_profile, plane_schema

PAGE_SIZE = 64
PAGE_SHIFT = 6
PAGE_MASK = PAGE_SIZE - 1
HOLE = -1
PAGE_MAJOR = "page_major"
HEAD_MAJOR = "head_major"
ORDERS = (PAGE_MAJOR, HEAD_MAJOR)
PLANE_NAMES = ("k_code", "v_code", "k_scale", "v_scale")


def plane_shape(order: str, num_pages: int, kv_heads: int, extent: int) -> tuple[int, int, int, int]:
    """C-order array shape of one plane: page-major (N, H, P, X), head-major (H, N, P, X)."""
    if order == PAGE_MAJOR:
        return (num_pages, kv_heads, PAGE_SIZE, extent)
    if order == HEAD_MAJOR:
        return (kv_heads, num_pages, PAGE_SIZE, extent)
    raise ValueError(f"unknown plane order {order!r}; closed orders are {ORDERS}")


def translate(table_row: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(physical pages, page offsets) of ``positions`` through one table row (holes come back as -1)."""
    positions = np.asarray(positions, dtype=np.int64)
    blocks = positions >> PAGE_SHIFT
    if positions.size and (positions.min() < 0 or blocks.max() >= table_row.shape[0]):
        raise ValueError(f"positions must lie in [0, {table_row.shape[0] * PAGE_SIZE}) for this table row")
    return np.asarray(table_row)[blocks].astype(np.int64), positions & PAGE_MASK


def _is_device_array(a) -> bool:
    return not isinstance(a, np.ndarray)


def _closed_strides(shape, itemsize) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for extent in reversed(shape):
        strides.append(acc)
        acc *= extent
    return tuple(reversed(strides))


def _check_plane(name: str, arr, spec: PlaneSpec, order: str, heads: int, pages: int | None) -> int:
    if arr is None:
        raise ValueError(f"plane {name}: missing (profile needs {spec.dtype_name} x {spec.extent})")
    want = spec.device_dtype if _is_device_array(arr) else spec.dtype
    if arr.dtype != want:
        raise ValueError(f"plane {name}: dtype {arr.dtype} != {want} ({spec.dtype_name})")
    if arr.ndim != 4:
        raise ValueError(f"plane {name}: expected 4 dimensions, got shape {tuple(arr.shape)}")
    n = arr.shape[0] if order == PAGE_MAJOR else arr.shape[1]
    want_shape = plane_shape(order, n if pages is None else pages, heads, spec.extent)
    if tuple(arr.shape) != want_shape:
        raise ValueError(f"plane {name}: shape {tuple(arr.shape)} != {want_shape} ({order}, H={heads}, "
                         f"P={PAGE_SIZE}, X={spec.extent})")
    if tuple(arr.strides) != _closed_strides(arr.shape, arr.dtype.itemsize):
        raise ValueError(f"plane {name}: strides {tuple(arr.strides)} are not the closed {order} strides "
                         f"{_closed_strides(arr.shape, arr.dtype.itemsize)}")
    return n


def _check_planes(view) -> int:
    prof = get_profile(view.storage)
    check_head_dim(prof, view.head_dim)
    if view.order not in ORDERS:
        raise ValueError(f"unknown plane order {view.order!r}; closed orders are {ORDERS}")
    if view.num_kv_heads < 1:
        raise ValueError(f"num_kv_heads must be positive, got {view.num_kv_heads}")
    specs = {s.name: s for s in plane_schema(prof, view.head_dim)}
    pages = None
    kinds = set()
    for name in PLANE_NAMES:
        arr = getattr(view, f"{name.split('_')[0]}_{'pages' if name.endswith('code') else 'scale_pages'}")
        if name not in specs:
            if arr is not None:
                raise ValueError(f"plane {name}: profile {prof.name!r} has no such plane, got an array")
            continue
        pages = _check_plane(name, arr, specs[name], view.order, view.num_kv_heads, pages)
        kinds.add(_is_device_array(arr))
    if len(kinds) != 1:
        raise ValueError("planes mix host and device arrays")
    return pages


def _check_table(name: str, table, ndim: int, planes_on_device: bool) -> None:
    if table.dtype != np.int32:
        raise ValueError(f"{name}: dtype {table.dtype} != int32")
    if table.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {tuple(table.shape)}")
    if tuple(table.strides) != _closed_strides(table.shape, 4):
        raise ValueError(f"{name}: strides {tuple(table.strides)} are not contiguous I32 strides")
    if _is_device_array(table) != planes_on_device:
        raise ValueError(f"{name}: must live with the planes (host vs device)")


@dataclass(frozen=True, eq=False)
class PagedKVLayerView:
    """One layer's planes and one block-table row I32[Nlogical] (non-owning; no allocator state)."""

    k_pages: object
    v_pages: object
    k_scale_pages: object
    v_scale_pages: object
    block_table: object
    head_dim: int
    num_kv_heads: int
    storage: str
    order: str = PAGE_MAJOR

    def __post_init__(self):
        object.__setattr__(self, "num_pages", _check_planes(self))
        _check_table("block_table", self.block_table, 1, _is_device_array(self.k_pages))

    def as_batch_view(self) -> PagedKVBatchLayerView:
        """``single_row_paged_kv_batch_view``: the same planes, the row as a one-row matrix (row 0)."""
        return PagedKVBatchLayerView(self.k_pages, self.v_pages, self.k_scale_pages, self.v_scale_pages,
                                     self.block_table.reshape(1, -1), self.head_dim, self.num_kv_heads,
                                     self.storage, self.order)


@dataclass(frozen=True, eq=False)
class PagedKVBatchLayerView:
    """Shared layer planes plus the whole table matrix I32[Nlogical, C] (``table_rows`` is an op input)."""

    k_pages: object
    v_pages: object
    k_scale_pages: object
    v_scale_pages: object
    block_tables: object
    head_dim: int
    num_kv_heads: int
    storage: str
    order: str = PAGE_MAJOR

    def __post_init__(self):
        object.__setattr__(self, "num_pages", _check_planes(self))
        _check_table("block_tables", self.block_tables, 2, _is_device_array(self.k_pages))

    @property
    def planes(self) -> dict:
        """Plane arrays by name, in the closed per-layer order, absent scale planes left out."""
        out = {"k_code": self.k_pages, "v_code": self.v_pages}
        if self.k_scale_pages is not None:
            out["k_scale"] = self.k_scale_pages
        if self.v_scale_pages is not None:
            out["v_scale"] = self.v_scale_pages
        return out


SLAB_ALIGNMENT = 256  # plane bases are 256-byte aligned


def slab_footprint(nbytes: int) -> int:
    """Bytes one plane slab takes: its exact span plus one alignment allowance.

    Store contract: "Startup physical bytes 由各 plane slab 的完整 span 与 alignment 得到" and the affine
    capacity curve (L57-68): the allowance is constant in the page count, so the footprint is affine in N for
    every geometry (rounding the span up to the alignment is not: an FP8 scale plane of an odd KV-head count
    holds 128·H bytes per page). The model's layout builder charges the same (kvmodel.store.planes).
    """
    return nbytes + SLAB_ALIGNMENT


def _aligned_zeros(xp, shape, dtype, align: int = SLAB_ALIGNMENT):
    """Zero-filled C-order array whose base is ``align``-byte aligned (device pools already are), carved from a
    buffer of `slab_footprint` bytes."""
    dtype = np.dtype(dtype)
    if xp is not np:
        return xp.zeros(shape, dtype=dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(slab_footprint(nbytes) if align == SLAB_ALIGNMENT else nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class PagedKVPool:
    """The plane tensors of every layer of one typed pool, plus its execution table matrix.

    ``planes[layer][name]`` holds each plane (zero-filled at construction so contents are
    deterministic); ``table`` is the I32 ``(rows, logical_pages)`` matrix, all holes at first.
    """

    def __init__(self, profile: str, layers: int, kv_heads: int, head_dim: int, num_pages: int,
                 order: str = PAGE_MAJOR, rows: int = 1, logical_pages: int | None = None,
                 backend: Backend | str | None = None):
        if layers < 1 or kv_heads < 1 or num_pages < 1 or rows < 1:
            raise ValueError("layers, kv_heads, num_pages and rows must be positive")
        self.profile = get_profile(profile)
        self.schema = plane_schema(self.profile, head_dim)
        plane_shape(order, 1, 1, 1)  # validates the order
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.num_pages, self.order, self.rows = num_pages, order, rows
        self.logical_pages = num_pages if logical_pages is None else logical_pages
        if self.logical_pages < 1:
            raise ValueError("logical_pages must be positive")
        self.backend = resolve(backend)
        xp = self.backend.xp
        dtype = (lambda s: s.device_dtype) if self.backend.is_device else (lambda s: s.dtype)
        self.planes = tuple(
            {s.name: _aligned_zeros(xp, plane_shape(order, num_pages, kv_heads, s.extent), dtype(s))
             for s in self.schema}
            for _ in range(layers))
        self.table = xp.full((rows, self.logical_pages), HOLE, dtype=np.int32)

    # --- geometry -------------------------------------------------------------------------------------
    @property
    def storage(self) -> str:
        return self.profile.name

    @property
    def bytes_per_token_per_head(self) -> int:
        return sum(s.bytes_per_token_per_head for s in self.schema)

    @property
    def page_bytes(self) -> int:
        """PageBytes = sum over planes of bytes per token * P, for every head of every layer."""
        return self.bytes_per_token_per_head * PAGE_SIZE * self.kv_heads * self.layers

    @property
    def startup_bytes(self) -> int:
        """Startup bytes of the plane slabs: each plane's span plus its alignment allowance (`slab_footprint`),
        affine in the page count for every profile and head count."""
        return sum(slab_footprint(s.bytes_per_token_per_head * PAGE_SIZE * self.kv_heads * self.num_pages)
                   for s in self.schema) * self.layers

    # --- views ------------------------------------------------------------------------------------------
    def _plane_args(self, layer: int):
        if not 0 <= layer < self.layers:
            raise ValueError(f"layer {layer} outside [0, {self.layers})")
        p = self.planes[layer]
        return p["k_code"], p["v_code"], p.get("k_scale"), p.get("v_scale")

    def layer_view(self, layer: int, row: int) -> PagedKVLayerView:
        self._check_row(row)
        return PagedKVLayerView(*self._plane_args(layer), self.table[row], self.head_dim, self.kv_heads,
                                self.storage, self.order)

    def batch_view(self, layer: int) -> PagedKVBatchLayerView:
        return PagedKVBatchLayerView(*self._plane_args(layer), self.table, self.head_dim, self.kv_heads,
                                     self.storage, self.order)

    # --- execution table ------------------------------------------------------------------------------
    def _check_row(self, row: int) -> None:
        if not 0 <= row < self.rows:
            raise ValueError(f"table row {row} outside [0, {self.rows})")

    def publish(self, row: int, begin: int, pages) -> None:
        """Write one contiguous table slice ``table[row, begin:begin+len(pages)] = pages`` (-1 = hole)."""
        self._check_row(row)
        pages = np.asarray(pages, dtype=np.int64).reshape(-1)
        if begin < 0 or begin + pages.size > self.logical_pages:
            raise ValueError(f"table slice [{begin}, {begin + pages.size}) outside [0, {self.logical_pages})")
        if pages.size and (pages.min() < HOLE or pages.max() >= self.num_pages):
            raise ValueError(f"page ids must be -1 (hole) or in [0, {self.num_pages})")
        self.table[row, begin:begin + pages.size] = self.backend.asarray(pages.astype(np.int32))

    def clear_row(self, row: int) -> None:
        """Every entry of ``row`` becomes a hole."""
        self._check_row(row)
        self.table[row, :] = HOLE

    def table_row(self, row: int) -> np.ndarray:
        """A host copy of one table row."""
        self._check_row(row)
        return self.backend.asnumpy(self.table[row]).copy()
