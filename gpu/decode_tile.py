"""Tile staging for the NumPy paged consumer: gather a few pages' codes, decode them into FP32 buffers.

The buffers are sized for one tile (a fixed number of pages) and reused across tiles and rows, so the
consumer's extra memory is bounded by the tile, never by the context ("Paging 不引入 gather-to-contiguous
cache或与 context 长度成比例的 staging copy"). Decoded values are bit-identical to
:func:`gpu.codecs.decode_codec` (same tables, same exact FP32 products).

Must not know about attention, tables or the store model: it turns page ids into FP32 K or V rows.
"""

from __future__ import annotations

import numpy as np

from kvsim.gpu import formats as F
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_SIZE


def _split(a: np.ndarray, shape) -> np.ndarray:
    """Reshape that must stay a view (the decoders write through it)."""
    return np.reshape(a, shape, copy=False)


def decode_into(codec: str, codes: np.ndarray, scale_f32, out: np.ndarray) -> None:
    """Decode ``codes (..., X)`` with FP32 scales ``(..., S)`` into FP32 ``out (..., D)`` (any strides).

    Bit-identical to :func:`gpu.codecs.decode_codec`; writes in place, no full-size temporaries.
    """
    if codec == "bf16":
        np.left_shift(codes.view(np.uint16), np.uint32(16), out=out.view(np.uint32), dtype=np.uint32)
    elif codec == "int8_g64":
        groups = scale_f32.shape[-1]
        np.multiply(codes.view(np.int8).reshape(codes.shape[:-1] + (groups, -1)), scale_f32[..., None],
                    out=_split(out, out.shape[:-1] + (groups, -1)), dtype=np.float32)
    elif codec == "fp8_row256":
        np.take(F.E4M3_TABLE, codes.view(np.uint8), out=out, mode="clip")
        np.multiply(out, scale_f32, out=out)
    elif codec == "nvfp4_g16":
        pairs = _split(out, out.shape[:-1] + (-1, 2))
        np.take(F.E2M1_PAIR_TABLE, codes.view(np.uint8), axis=0, out=pairs, mode="clip")
        grouped = _split(out, out.shape[:-1] + (scale_f32.shape[-1], -1))
        np.multiply(grouped, scale_f32[..., None], out=grouped)
    else:
        raise ValueError(f"unknown codec {codec!r}")


def scales_to_f32(codec: str, raw: np.ndarray, out: np.ndarray) -> None:
    """Scale plane contents (FP16, or UE4M3 bytes for NVFP4) -> FP32 ``out``."""
    if codec == "nvfp4_g16":
        np.take(F.E4M3_TABLE, raw.view(np.uint8), out=out, mode="clip")
    else:
        np.copyto(out, raw.view(np.float16), casting="safe")


class TileStager:
    """Reusable code/scale/FP32 buffers for ``tile_pages`` pages of one part (K or V) of one layer.

    ``load(ids)`` gathers pages ``ids`` (any order, any ids) of the code and scale planes with one
    ``np.take`` per plane (the plane is contiguous, so nothing outside the tile is copied) and decodes
    them into ``self.values[:, :len(ids) * 64]``, shaped ``(H, keys, D)`` (contiguous per head, the
    layout the batched matrix products want).
    """

    def __init__(self, codec: str, code_plane: np.ndarray, scale_plane, order: str, heads: int,
                 head_dim: int, tile_pages: int):
        self.codec, self.order, self.heads, self.head_dim = codec, order, heads, head_dim
        self.code_plane, self.scale_plane = code_plane, scale_plane
        self.tile_pages = tile_pages
        self.axis = 1 if order == HEAD_MAJOR else 0
        self.codes = np.empty(self._shape(code_plane.shape[-1]), dtype=code_plane.dtype)
        self.scales = None
        if scale_plane is not None:
            self.scales = np.empty(self._shape(scale_plane.shape[-1]), dtype=scale_plane.dtype)
            self.scale_f32 = np.empty(self.scales.shape, dtype=np.float32)
        self.values = np.empty((heads, tile_pages * PAGE_SIZE, head_dim), dtype=np.float32)

    def _shape(self, extent: int) -> tuple[int, int, int, int]:
        if self.axis:
            return (self.heads, self.tile_pages, PAGE_SIZE, extent)
        return (self.tile_pages, self.heads, PAGE_SIZE, extent)

    def _first(self, buf: np.ndarray, n: int) -> np.ndarray:
        return buf[:, :n] if self.axis else buf[:n]

    @property
    def nbytes(self) -> int:
        extra = 0 if self.scales is None else self.scales.nbytes + self.scale_f32.nbytes
        return self.codes.nbytes + self.values.nbytes + extra

    def load(self, ids: np.ndarray) -> np.ndarray:
        """Decode pages ``ids`` (validated by the caller) -> FP32 ``(H, len(ids)*64, D)`` view."""
        n = ids.size
        codes = self._first(self.codes, n)
        np.take(self.code_plane, ids, axis=self.axis, out=codes, mode="clip")
        out4 = _split(self.values[:, :n * PAGE_SIZE], (self.heads, n, PAGE_SIZE, self.head_dim))
        if not self.axis:
            out4 = out4.transpose(1, 0, 2, 3)  # same (page, head, col, x) layout as the gathered codes
        if self.scales is not None:
            raw = self._first(self.scales, n)
            np.take(self.scale_plane, ids, axis=self.axis, out=raw, mode="clip")
            scale = self._first(self.scale_f32, n)
            scales_to_f32(self.codec, raw, scale)
        decode_into(self.codec, codes, scale if self.scales is not None else None, out4)
        return self.values[:, :n * PAGE_SIZE]
