"""Capacity resolution: M from the explicit or automatic policy, and the typed pool capacity vector.

Store contract: "M_{min}=\\max(L,C)", "M_{max}=C,L", the explicit policy "M=\\left\\lceil K_{main}/P\\right\\rceil"
with K_main >= S and M in [M_min, M_max], the affine SequenceCapacityCurve B(M) = B_min + (M - M_min)
B_step and the automatic choice M = min(M_max, M_min + floor((F - R - B_min)/B_step)) requiring
F >= R + B_min ("Target 用同一生产 layout builder 生成 B_min、B_step 和最终 layout，并验证 capacity
curve"), and the backend pool sizes ("MTP physical pages = M + C * ceil((K - 1) / P)").

The resolver takes a curve and never re-derives model dimensions; `capacity_curve` builds the curve by
running the same layout builder (`build_layout`) at M_min and M_min + 1 and verifies it is affine at the
resolved M. This module knows nothing of leases or address spaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.kvmodel.store.config import PAGE_SIZE, StoreConfig, ceil_div
from kvsim.kvmodel.store.errors import ConfigError
from kvsim.kvmodel.store.planes import PoolGeometry, block_table_bytes, pool_geometry


@dataclass(frozen=True, slots=True)
class SequenceCapacityCurve:
    """B(M) = b_min + (M - m_min) · b_step over [m_min, m_max] (bytes)."""

    m_min: int
    m_max: int
    b_min: int
    b_step: int

    def bytes_at(self, m: int) -> int:
        return self.b_min + (m - self.m_min) * self.b_step


def m_range(config: StoreConfig) -> tuple[int, int]:
    """(M_min, M_max) = (max(L, C), C·L)."""
    lp = config.logical_pages
    return max(lp, config.max_concurrency), config.max_concurrency * lp


def resolve_explicit(tokens: int, max_context: int, m_min: int, m_max: int, page_size: int = PAGE_SIZE) -> int:
    """Explicit kv_capacity: M = ceil(K_main/P), requiring K_main >= S and M_min <= M <= M_max."""
    if tokens < max_context:
        raise ConfigError("CAP-1", f"kv_capacity {tokens} tokens is below max_context {max_context}")
    m = ceil_div(tokens, page_size)
    if not m_min <= m <= m_max:
        raise ConfigError("CAP-1", f"kv_capacity {tokens} tokens gives M = {m} pages, outside "
                                   f"[M_min, M_max] = [{m_min}, {m_max}]")
    return m


def resolve_automatic(curve: SequenceCapacityCurve, free_bytes: int, headroom_bytes: int) -> int:
    """Automatic kv_capacity: M = min(M_max, M_min + floor((F - R - B_min)/B_step)), needs F >= R + B_min."""
    if free_bytes < headroom_bytes + curve.b_min:
        raise ConfigError("CAP-1", f"automatic kv_capacity: free {free_bytes} B < headroom {headroom_bytes} B + "
                                   f"B_min {curve.b_min} B")
    if curve.m_min == curve.m_max or curve.b_step == 0:
        return curve.m_max if curve.b_step == 0 else curve.m_min
    return min(curve.m_max, curve.m_min + (free_bytes - headroom_bytes - curve.b_min) // curve.b_step)


def pool_pages(config: StoreConfig, m: int) -> dict[str, int]:
    """The typed capacity vector: physical pages per enabled pool, derived from Main's M."""
    pages = {"main": m}
    backend = config.backend.pool
    if backend == "mtp":
        pages["mtp"] = m + config.max_concurrency * ceil_div(config.backend.draft_window - 1, config.page_size)
    elif backend == "draft_full":
        pages["draft_full"] = m
    return pages


@dataclass(frozen=True, slots=True)
class StoreLayout:
    """The startup layout at one M: pool geometries and the runtime Device reservation B(M)."""

    m: int
    pools: tuple[PoolGeometry, ...]
    reservation_bytes: int

    def pool(self, name: str) -> PoolGeometry:
        for g in self.pools:
            if g.name == name:
                return g
        raise KeyError(name)


def build_layout(config: StoreConfig, m: int) -> StoreLayout:
    """The one layout builder: pools at M, and B(M) = reserved + Σ (slabs + block table) per pool."""
    pools = tuple(pool_geometry(config, name, n) for name, n in pool_pages(config, m).items())
    total = config.reserved_bytes + sum(g.startup_bytes + block_table_bytes(config) for g in pools)
    return StoreLayout(m, pools, total)


def capacity_curve(config: StoreConfig) -> SequenceCapacityCurve:
    """Measure B_min and B_step with the layout builder (B_step = B(M_min + 1) - B(M_min))."""
    m_min, m_max = m_range(config)
    b_min = build_layout(config, m_min).reservation_bytes
    b_step = build_layout(config, m_min + 1).reservation_bytes - b_min if m_max > m_min else 0
    return SequenceCapacityCurve(m_min, m_max, b_min, b_step)


@dataclass(frozen=True, slots=True)
class CapacityResolution:
    """What startup resolved: policy, M, curve, final layout and the per-pool page counts."""

    policy: str
    m: int
    curve: SequenceCapacityCurve
    layout: StoreLayout

    @property
    def pages(self) -> dict[str, int]:
        return {g.name: g.pages for g in self.layout.pools}

    @property
    def token_capacity(self) -> int:
        """The published Main capacity in token-equivalents: M · P."""
        return self.m * PAGE_SIZE


def resolve_capacity(config: StoreConfig) -> CapacityResolution:
    """Resolve M once at startup; under the automatic policy, verify the final layout lies on the affine curve."""
    config.validate()
    curve = capacity_curve(config)
    policy = config.capacity.kind
    if policy == "explicit":
        m = resolve_explicit(config.capacity.tokens or 0,  # the explicit policy's defining field: never None here
                             config.max_context, curve.m_min, curve.m_max)
    elif policy == "automatic":
        # the automatic policy's defining fields: never None here
        m = resolve_automatic(curve, config.capacity.free_bytes or 0, config.capacity.headroom_bytes or 0)
    else:
        m = curve.m_max
    layout = build_layout(config, m)
    # Only the automatic policy resolves M from the curve, so only it verifies the curve ("Target 用同一生产
    # layout builder 生成 (B_{min})、(B_{step}) 和最终 layout，并验证 capacity curve"); the explicit policy needs
    # K_main >= S and M in range and nothing more ("并要求 (K_{main}\ge S) 且 (M\in[M_{min},M_{max}])").
    if policy == "automatic" and layout.reservation_bytes != curve.bytes_at(m):
        raise ConfigError("CAP-1", f"capacity curve is not affine for this geometry: B({m}) = "
                                   f"{layout.reservation_bytes} B but B_min + (M - M_min)·B_step = "
                                   f"{curve.bytes_at(m)} B")
    return CapacityResolution(policy, m, curve, layout)
