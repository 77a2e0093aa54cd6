"""The FP64 oracle: dense stable softmax attention over decoded persistent K/V, and error measures.

Contract (the consumer arithmetic of the store contract, "consumer arithmetic 由 softmax_attention.h
定义"): ``score = scale * dot(q, k)`` with scale 1/sqrt(D), subtract the max, exponentiate, normalise,
``sum p * v``, all in FP64; column j at position p attends [0, p]; GQA query head h reads KV head
h // group. For rotated caches the oracle uses R q (R = H256/16 in FP64) and, where V is rotated, rotates
the output back. Storage rounding is not re-modelled: the oracle reads whatever K/V it is given, so
"oracle over decoded K/V" vs "oracle over the original BF16 K/V" isolates the codec error, and "paged
kernel vs oracle over decoded K/V" isolates the kernel error.

Must not know about the store model.
"""

from __future__ import annotations

import numpy as np

from kvsim.gpu.codecs import get_profile
from kvsim.gpu.hadamard import hadamard_matrix
from kvsim.gpu.readback import read_decoded


def oracle_attention(q, k, v, positions, *, rotate_q: bool = False, rotate_out: bool = False) -> np.ndarray:
    """q ``(W, Hq, D)``, k/v ``(T, Hkv, D)`` with T > max(positions) -> FP64 ``(W, Hq, D)``."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    w_count, hq, d = q.shape
    hkv = k.shape[1]
    if hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of KV heads {hkv}")
    rot = hadamard_matrix(d) if (rotate_q or rotate_out) else None
    if rotate_q:
        q = q @ rot.T
    group = hq // hkv
    out = np.empty((w_count, hq, d), dtype=np.float64)
    scale = 1.0 / np.sqrt(d)
    for w, p in enumerate(np.asarray(positions, dtype=np.int64)):
        kk = k[: p + 1]
        vv = v[: p + 1]
        for h in range(hq):
            s = scale * (kk[:, h // group] @ q[w, h])
            e = np.exp(s - s.max())
            out[w, h] = (e / e.sum()) @ vv[:, h // group]
    if rotate_out:
        out = out @ rot.T
    return out


def oracle_for_pool(pool, layer: int, q, table_rows, positions, valid_columns) -> np.ndarray:
    """FP64 oracle for a batched call on ``pool``: K/V decoded from the stored planes of each row."""
    prof = get_profile(pool.profile)
    q = np.asarray(q)
    positions = np.asarray(positions, dtype=np.int64)
    out = np.zeros(q.shape, dtype=np.float64)
    for b, row in enumerate(np.asarray(table_rows).reshape(-1)):
        n = int(np.asarray(valid_columns).reshape(-1)[b])
        if not n:
            continue
        k, v = read_decoded(pool, layer, int(row), int(positions[b, :n].max()) + 1)
        out[b, :n] = oracle_attention(q[b, :n], k, v, positions[b, :n], rotate_q=prof.rotate_k,
                                      rotate_out=prof.rotate_v)
    return out


def rel_l2(got, want) -> float:
    """||got - want||_2 / ||want||_2 in FP64 (0 when both are zero)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    denom = np.linalg.norm(want)
    num = np.linalg.norm(got - want)
    return float(num / denom) if denom else float(num)
