"""A reference of the logical-to-physical slot mapping (cache concepts L68, L343-L344).

L344: "The slot arithmetic itself lives in the mapping layer in exactly two spellings of one invariant
(table[req, pos // P] * P + pos % P, which is page-size invariant): the router's stacked window/span math (...
failing to slot 0 -- the reserved dummy page) and the token-shaped resolve (... failing closed to the -1 skip
sentinel for group buffers with no dummy page)". L68: row i of a table covers tokens [i * block_granularity,
(i + 1) * block_granularity).

``token_slots`` is the token-shaped resolve: a position whose slot is past the row, padding (-1) or a null hole
(0) resolves to -1 (or to 0, the dummy page, when ``dummy``). ``expand`` subdivides block ids into kernel pages
(block b of span bg is kernel pages b * (bg // k) + j), the one conversion the router does; the invariant is that
resolving through the expanded table with span k gives the same slots. ``check_mapping`` checks an
implementation against both on given rows (the wheel's real block tables, in the tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["token_slots", "expand", "check_mapping"]


def token_slots(row: Sequence[int], positions: np.ndarray, span: int, dummy: bool = False) -> np.ndarray:
    """Physical slot of each token position through one table row: row[pos // span] * span + pos % span, or the
    fail value (-1; 0 with a dummy page) where the slot is absent, padding (-1) or a null hole (0)."""
    r = np.asarray(row, dtype=np.int64)
    pos = np.asarray(positions, dtype=np.int64)
    page = pos // span
    inside = (pos >= 0) & (page < len(r))
    ids = np.where(inside, r[np.clip(page, 0, max(len(r) - 1, 0))] if len(r) else -1, -1)
    ok = inside & (ids > 0)
    return np.where(ok, ids * span + pos % span, 0 if dummy else -1)


def expand(row: Sequence[int], span: int, kernel: int) -> list[int]:
    """The row in kernel pages of ``kernel`` tokens (``kernel`` divides ``span``): block b -> pages b*m .. b*m+m-1,
    a hole or padding -> that many holes or padding."""
    if span % kernel:
        raise ValueError(f"kernel page {kernel} does not divide block_granularity {span}")
    m = span // kernel
    out: list[int] = []
    for b in row:
        out += [b * m + j for j in range(m)] if b > 0 else [b] * m
    return out


def check_mapping(impl: Callable[[Sequence[int], np.ndarray, int], np.ndarray], rows: Sequence[Sequence[int]],
                  span: int, kernels: Sequence[int] = ()) -> str | None:
    """``impl(row, positions, span)`` against the reference for every position of each row and beyond it (so
    padding and holes are exercised); with ``kernels``, also the page-size invariance of the reference itself on
    those rows (a kernel-page table resolves every token to the same slot)."""
    for n, row in enumerate(rows):
        pos = np.arange(-1, (len(row) + 1) * span)
        want = token_slots(row, pos, span)
        got = np.asarray(impl(row, pos, span))
        if got.shape != want.shape or not np.array_equal(got, want):
            if got.shape != want.shape:
                return f"row {n}: {got.shape[0] if got.ndim else 0} slots for {len(pos)} positions"
            i = int(np.flatnonzero(got != want)[0])
            return f"row {n}: position {int(pos[i])} resolves to {int(got[i])}, the reference to {int(want[i])}"
        for k in kernels:
            alt = token_slots(expand(row, span, k), pos, k)
            if not np.array_equal(alt, want):
                i = int(np.flatnonzero(alt != want)[0])
                return f"row {n}: position {int(pos[i])} resolves to {int(alt[i])} through {k}-token kernel pages"
    return None
