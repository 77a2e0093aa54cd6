"""Straightforward scalar-Python reference of the persistent codecs, written from the formulas alone.

Independent of the code under test: FP32 rounding via struct (a correctly rounded double operation
rounded once more to FP32 equals the correctly rounded FP32 operation for + - * /), FP16 via struct's
half-even packing, E4M3FN / E2M1 by nearest-value search over tables built from the bit layout.
Slow on purpose; used for known-answer checks on a few rows.
"""

from __future__ import annotations

import bisect
import math
import struct

INF = float("inf")


def f32(v: float) -> float:
    """Round a double to FP32 (RNE); overflow gives +-inf."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(INF, v)


def f16_rne(v: float) -> float:
    """FP32 value -> FP16 RNE value (as a float); overflow gives +-inf like __float2half_rn."""
    try:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    except OverflowError:
        return math.copysign(INF, v)


def f16_bits(v: float) -> int:
    if math.isinf(v):
        return 0x7C00 | (0x8000 if v < 0 else 0)
    return struct.unpack("<H", struct.pack("<e", v))[0]


def bf16_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0] >> 16


def _e4m3_value(code: int) -> float:
    e, m = code >> 3, code & 7
    if e == 0:
        return m * 2.0**-9
    return (1 + m / 8) * 2.0 ** (e - 7)


E4M3_POS = [(_e4m3_value(c), c) for c in range(0x7F)]  # 0x7F is NaN
E2M1_POS = [(v, c) for c, v in enumerate([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])]


def _nearest_even(a: float, table) -> int:
    values = [v for v, _ in table]
    if a >= values[-1]:
        return table[-1][1]  # SATFINITE
    i = bisect.bisect_right(values, a) - 1
    lo_v, lo_c = table[i]
    hi_v, hi_c = table[i + 1]
    if a - lo_v < hi_v - a:
        return lo_c
    if a - lo_v > hi_v - a:
        return hi_c
    return lo_c if lo_c % 2 == 0 else hi_c


def _negative(v: float) -> bool:
    return v < 0 or (v == 0 and math.copysign(1.0, v) < 0)


def e4m3_code(v: float) -> int:
    """E4M3FN RNE SATFINITE byte."""
    return (0x80 if _negative(v) else 0) | _nearest_even(abs(v), E4M3_POS)


def e2m1_code(v: float) -> int:
    """E2M1 RNE SATFINITE nibble."""
    return (0x8 if _negative(v) else 0) | _nearest_even(abs(v), E2M1_POS)


def e4m3_value(byte: int) -> float:
    v = _e4m3_value(byte & 0x7F)
    return -v if byte & 0x80 else v


def rotate(x: list[float]) -> list[float]:
    """H256/16 butterfly, strides 1..128, lower a+b, upper a-b, every op rounded to FP32, then x 2^-4."""
    y = list(x)
    s = 1
    while s < len(y):
        for base in range(0, len(y), 2 * s):
            for i in range(base, base + s):
                a, b = y[i], y[i + s]
                y[i], y[i + s] = f32(a + b), f32(a - b)
        s *= 2
    return [f32(v * 2.0**-4) for v in y]


def int8_g64(x: list[float]):
    """-> (codes list[int], scale FP16 bit patterns list[int])."""
    codes, scales = [], []
    for g in range(0, len(x), 64):
        grp = x[g:g + 64]
        a = max(abs(v) for v in grp)
        s = f16_rne(f32(a / 127.0))
        scales.append(f16_bits(s))
        if s == 0:
            codes += [0] * 64
            continue
        inv = f32(1.0 / s)
        for v in grp:
            codes.append(max(-127, min(127, int(round(f32(v * inv))))))
    return codes, scales


def fp8_row256(x: list[float]):
    """-> (code bytes, [scale FP16 bits])."""
    a = max(abs(v) for v in x)
    if a == 0:
        return [0] * len(x), [0]
    t = min(max(f32(a / 448.0), 2.0**-24), 65504.0)
    s = f16_rne(t)
    inv = f32(1.0 / s)
    return [e4m3_code(f32(v * inv)) for v in x], [f16_bits(s)]


def nvfp4_g16(x: list[float]):
    """-> (packed code bytes, UE4M3 scale bytes)."""
    nibbles, scales = [], []
    for g in range(0, len(x), 16):
        grp = x[g:g + 16]
        a = max(abs(v) for v in grp)
        if a == 0:
            scales.append(0)
            nibbles += [0] * 16
            continue
        t = min(max(f32(a / 6.0), 2.0**-9), 448.0)
        sb = e4m3_code(t)
        s = e4m3_value(sb)
        scales.append(sb)
        nibbles += [e2m1_code(f32(v / s)) for v in grp]
    packed = [nibbles[i] | (nibbles[i + 1] << 4) for i in range(0, len(nibbles), 2)]
    return packed, scales
