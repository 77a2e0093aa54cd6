"""Bit-exact narrow-float conversions (NumPy + ml_dtypes), with CUDA's SATFINITE semantics.

Every conversion rounds to nearest, ties to even, like the CUDA intrinsics the persistent codec uses
(``__float2half_rn``, ``__nv_cvt_float_to_fp8(.., __NV_SATFINITE, __NV_E4M3)``, E2M1 RNE SATFINITE).
ml_dtypes gives the RNE casts; SATFINITE is added here by clipping to the largest finite value first
(ml_dtypes turns E4M3FN inputs >= 465 into NaN). Also the decode tables (code byte -> FP32) that the
attention paths use, built from the same ml_dtypes types.

Must not know about profiles, planes or tables: only number formats.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
E2M1FN = np.dtype(ml_dtypes.float4_e2m1fn)

E4M3FN_MAX = np.float32(448.0)
E2M1_MAX = np.float32(6.0)
FP16_MAX = np.float32(65504.0)
FP16_MIN_SUBNORMAL = np.float32(2.0**-24)
E4M3_MIN_SUBNORMAL = np.float32(2.0**-9)


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """FP32 -> the nearest BF16 value (RNE), returned as FP32 (idempotent on BF16-representable input)."""
    return np.asarray(x, dtype=np.float32).astype(BF16).astype(np.float32)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """FP32 -> BF16 (RNE)."""
    return np.asarray(x, dtype=np.float32).astype(BF16)


def to_f16(x: np.ndarray) -> np.ndarray:
    """FP32 -> FP16 with RNE; overflow gives +-inf like ``__float2half_rn``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(x, dtype=np.float32).astype(np.float16)


def to_e4m3fn_satfinite(x: np.ndarray) -> np.ndarray:
    """FP32 -> FP8 E4M3FN, RNE, SATFINITE (finite overflow saturates to +-448; NaN stays NaN)."""
    clipped = np.clip(np.asarray(x, dtype=np.float32), -E4M3FN_MAX, E4M3FN_MAX)
    return clipped.astype(E4M3FN)


def to_e2m1_nibbles(x: np.ndarray) -> np.ndarray:
    """FP32 -> FP4 E2M1 code nibbles (uint8 in [0, 15]), RNE, SATFINITE to +-6, sign kept on zero."""
    clipped = np.clip(np.asarray(x, dtype=np.float32), -E2M1_MAX, E2M1_MAX)
    return clipped.astype(E2M1FN).view(np.uint8) & np.uint8(0x0F)


def pack_nibbles(nibbles: np.ndarray) -> np.ndarray:
    """(..., 2n) nibbles -> (..., n) bytes; the even (lower) dimension goes in the low nibble."""
    lo = nibbles[..., 0::2]
    hi = nibbles[..., 1::2]
    return (lo | (hi << np.uint8(4))).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """(..., n) bytes -> (..., 2n) nibbles, inverse of :func:`pack_nibbles`."""
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = packed & np.uint8(0x0F)
    out[..., 1::2] = packed >> np.uint8(4)
    return out


def _table(dtype: np.dtype, count: int) -> np.ndarray:
    codes = np.arange(count, dtype=np.uint8)
    return codes.view(dtype).astype(np.float32)


#: FP32 value of every E4M3FN byte (also UE4M3 scale bytes, which never set the sign bit).
E4M3_TABLE = _table(E4M3FN, 256)
#: FP32 value of every E2M1 nibble.
E2M1_TABLE = _table(E2M1FN, 16)
#: FP32 value of both nibbles of every packed byte: ``E2M1_PAIR_TABLE[b] = (low, high)``.
E2M1_PAIR_TABLE = np.stack([E2M1_TABLE[np.arange(256) & 15], E2M1_TABLE[np.arange(256) >> 4]], axis=1)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 BF16 bit patterns -> FP32 (exact), without going through ml_dtypes (fast path)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
