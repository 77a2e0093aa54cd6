"""The store's capacity resolution as the store contract (seed 000) states it, for the `capacity` machine: the
reference ``kvmodel.store.capacity`` is held to.

Seed 000: "L = ceil(S/P)", "M_min = max(L, C)", "M_max = C·L"; the explicit policy "M = ceil(K_main/P)" requiring
"K_main >= S" and "M in [M_min, M_max]"; the automatic policy resolves M once from the free Device bytes F and the
headroom R over the affine curve "B(M) = B_min + (M - M_min) B_step": "M = min(M_max, M_min + floor((F - R -
B_min)/B_step))", requiring "F >= R + B_min", and "when M_min = M_max, that single point"; no policy: M_max. B(M)
is the one layout builder's reservation at M ("Target 用同一生产 layout builder 生成 B_min、B_step 和最终 layout"):
the machine hands it in, and this module reads it as a black box -- the largest M of [M_min, M_max] whose B(M)
fits F - R -- rather than through the closed formula. The backend pools: "MTP physical pages = M + C * ceil((K -
1) / P)", Draft Full pages = M with full-attention draft layers, none otherwise. Imports nothing of kvsim.
"""

from __future__ import annotations

from collections.abc import Callable

P = 64


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def m_range(max_context: int, concurrency: int) -> tuple[int, int]:
    logical = ceil_div(max_context, P)
    return max(logical, concurrency), concurrency * logical


def resolve(max_context: int, concurrency: int, policy: str, tokens: int = 0, free: int = 0, headroom: int = 0,
            b_of: Callable[[int], int] | None = None) -> int | None:
    """M, or None when the contract refuses the configuration."""
    lo, hi = m_range(max_context, concurrency)
    if policy == "explicit":
        m = ceil_div(tokens, P)
        return m if tokens >= max_context and lo <= m <= hi else None
    if policy == "automatic":
        if b_of is None:
            raise ValueError("the automatic policy needs B(M) (b_of)")
        if free < headroom + b_of(lo):
            return None
        best = lo
        step = 1
        while best + step <= hi and b_of(best + step) <= free - headroom:  # galloping search: B is increasing
            best += step
            step *= 2
        while step > 1:
            step //= 2
            if best + step <= hi and b_of(best + step) <= free - headroom:
                best += step
        return best
    return hi


def pools(m: int, concurrency: int, backend: str, draft_window: int = 0, full_layers: int = 0) -> dict[str, int]:
    out = {"main": m}
    if backend == "mtp":
        out["mtp"] = m + concurrency * ceil_div(draft_window - 1, P)
    elif backend in ("dflash", "dflash2") and full_layers:
        out["draft_full"] = m
    return out
