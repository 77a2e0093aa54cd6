"""Hadamard "preparation" R = H256 / 16, evaluated exactly as the append kernel evaluates it.

The kernel (one warp per 256-vector, dimension d = lane + 32 r) runs five shuffle stages over the lane
bits (strides 1, 2, 4, 8, 16), then three register stages (strides 32, 64, 128); every stage gives the
lower index ``a + b`` and the upper index ``a - b``, each rounded to FP32 (``__fadd_rn`` / ``__fsub_rn``);
finally everything is multiplied by 2^-4 (exact). :func:`rotate` reproduces that order stage for stage,
so its FP32 result is bit-identical to the kernel's. R is the normalised Sylvester matrix, R = R^T = R^-1.

Works on NumPy and CuPy arrays alike (only reshapes, adds and subtracts). Must not know about codecs,
profiles or planes.
"""

from __future__ import annotations

import numpy as np

DIM = 256
STRIDES = (1, 2, 4, 8, 16, 32, 64, 128)
NORMALISER = np.float32(2.0**-4)


def _xp(x):
    return np if isinstance(x, np.ndarray) else __import__(type(x).__module__.split(".")[0])


def rotate(x):
    """R @ x along the last axis, x float32 (..., 256); FP32 butterfly in kernel stage order."""
    xp = _xp(x)
    y = xp.asarray(x, dtype=xp.float32)
    if y.shape[-1] != DIM:
        raise ValueError(f"Hadamard rotation needs a last extent of {DIM}, got {y.shape[-1]}")
    lead = y.shape[:-1]
    for s in STRIDES:
        blocks = y.reshape(lead + (DIM // (2 * s), 2, s))
        a = blocks[..., 0, :]
        b = blocks[..., 1, :]
        y = xp.stack((a + b, a - b), axis=-2).reshape(lead + (DIM,))
    return y * NORMALISER


def hadamard_matrix(n: int = DIM) -> np.ndarray:
    """The normalised Sylvester Hadamard matrix H_n / sqrt(n) in FP64 (H256/16 for n = 256)."""
    h = np.ones((1, 1), dtype=np.float64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    if h.shape[0] != n:
        raise ValueError(f"n must be a power of two, got {n}")
    return h / np.sqrt(n)
