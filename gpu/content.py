"""Deterministic K/V content from 64-bit content keys, and bit-exact checks of what a row stores.

A lockstep driver names each token's content by a 64-bit key (one per position); this module turns
keys + (layer, part) into BF16-representable FP32 K/V ``(tokens, kv_heads, head_dim)`` and, after the
driver has appended, copied, packed/unpacked and published, checks that every position < the committed
frontier of a row stores exactly ``encode(profile, part, content)`` (the store contract's canonical
content: "一个 logical page 的 canonical content 由 content epoch + committed columns 标识").

Content shape: splitmix64 streams seeded by (key, layer, part); a fixed per-channel bias in [-1/2, 1/2)
per (layer, part, head, dim); per token an amplitude in [1/4, 4] times uniform values in [-1, 1); about
one channel in 32 is an "outlier" channel with gain 8 (real K caches have such channels; they make the
Hadamard rotation and the group scales matter); about one token in 61 is all zeros (exercises the
a == 0 codec paths). Values are rounded to BF16.

Must not know about the store model: keys are opaque numbers chosen by the caller.
"""

from __future__ import annotations

import numpy as np

from kvsim.gpu.append import append_tokens
from kvsim.gpu.codecs import PARTS, encode
from kvsim.gpu.formats import round_to_bf16
from kvsim.gpu.readback import read_stored

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
OUTLIER_GAIN = np.float32(8.0)
BIAS = np.float32(0.5)
ZERO_TOKEN_PERIOD = 61


def splitmix64(x) -> np.ndarray:
    """The splitmix64 finaliser of ``x + gamma`` on uint64 arrays (wrapping arithmetic)."""
    z = np.asarray(x, dtype=np.uint64) + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _salt(layer: int, part: str) -> np.uint64:
    if part not in PARTS:
        raise ValueError(f"part must be 'k' or 'v', got {part!r}")
    return splitmix64(np.array([layer * 2 + PARTS.index(part) + 0x5EED], dtype=np.uint64))[0]


def content_kv(keys, layer: int, part: str, kv_heads: int, head_dim: int) -> np.ndarray:
    """BF16-representable FP32 ``(len(keys), kv_heads, head_dim)`` content of ``keys`` for (layer, part)."""
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    salt = _salt(layer, part)
    seeds = splitmix64(keys ^ salt)
    lanes = np.arange(1, kv_heads * head_dim + 1, dtype=np.uint64) * _GAMMA
    bits = splitmix64(seeds[:, None] + lanes[None, :])
    uniform = (bits >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-23) - np.float32(1.0)
    exponent = ((seeds >> np.uint64(8)) & np.uint64(0xFF)).astype(np.float32) * np.float32(4.0 / 255.0) - 2
    amplitude = np.exp2(exponent).astype(np.float32)
    channel = splitmix64(salt + np.arange(kv_heads * head_dim, dtype=np.uint64))
    gain = np.where(channel % np.uint64(32) == 0, OUTLIER_GAIN, np.float32(1.0)).astype(np.float32)
    bias = ((channel >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-23) - np.float32(1.0)) * BIAS
    values = bias[None, :] + uniform * gain[None, :] * amplitude[:, None]
    values[(seeds % np.uint64(ZERO_TOKEN_PERIOD)) == 0] = 0.0
    return round_to_bf16(values).reshape(keys.size, kv_heads, head_dim)


def append_content(pool, row: int, positions, keys, layers=None) -> None:
    """Append the content of ``keys`` at ``positions`` of table ``row`` in every layer (or ``layers``)."""
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    if keys.size != positions.size:
        raise ValueError("one content key per position")
    for layer in range(pool.layers) if layers is None else layers:
        k = content_kv(keys, layer, "k", pool.kv_heads, pool.head_dim)
        v = content_kv(keys, layer, "v", pool.kv_heads, pool.head_dim)
        append_tokens(pool, layer, row, positions, k, v)


def expected_stored(profile, layer: int, keys, kv_heads: int, head_dim: int) -> dict[str, np.ndarray]:
    """``{plane name: (T, H, X)}`` that positions with content ``keys`` must store in ``layer``."""
    out = {}
    for part in PARTS:
        codes, scales = encode(profile, part, content_kv(keys, layer, part, kv_heads, head_dim))
        out[f"{part}_code"] = codes
        if scales is not None:
            out[f"{part}_scale"] = scales
    return out


def stored_mismatches(pool, row: int, frontier: int, keys, layers=None, limit: int = 10) -> list[str]:
    """Bit-exact comparison of positions [0, frontier) of ``row`` with the content of ``keys``.

    Returns human-readable mismatch lines (at most ``limit``), empty when everything matches. Reads the
    planes page by page through the table row, so holes below the frontier are reported as mismatches.
    """
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    if keys.size != frontier:
        raise ValueError(f"need one content key per position below the frontier ({frontier}), got {keys.size}")
    problems: list[str] = []
    for layer in range(pool.layers) if layers is None else layers:
        try:
            got = read_stored(pool, layer, row, frontier)
        except ValueError as exc:
            return [f"layer {layer}: {exc}"]
        want = expected_stored(pool.profile, layer, keys, pool.kv_heads, pool.head_dim)
        for name in want:
            g = got[name].reshape(frontier, -1).view(np.uint8).reshape(frontier, -1)
            w = want[name].reshape(frontier, -1).view(np.uint8).reshape(frontier, -1)
            bad = np.flatnonzero((g != w).any(axis=1))
            for pos in bad[: max(0, limit - len(problems))]:
                problems.append(f"layer {layer} {name}: position {int(pos)} differs")
            if len(problems) >= limit:
                return problems
    return problems
