"""From a kvtrace/1 header to the store model's configuration.

The header types what a line may hold (sim.trace.records); this module maps it onto `kvmodel.store.StoreConfig`
and turns an unsupported configuration (P != 64, capacity outside [M_min, M_max], ...) into an input
error at line 1, as DESIGN §6 requires ("unsupported config ... stop the replay with exit code 2").
"""

from __future__ import annotations

from kvsim.kvmodel.store import (
    BackendConfig,
    CapacityPolicy,
    ConfigError,
    GrowthConfig,
    KVStore,
    ModelGeometry,
    StoreConfig,
)
from kvsim.sim.trace import records as kt
from kvsim.sim.trace.stream import TraceInputError


def store_config(cfg: kt.Config) -> StoreConfig:
    b = cfg.backend
    if isinstance(b, kt.BackendMTP):
        backend = BackendConfig("mtp", draft_window=b.draft_window, mtp_layers=b.layers)
    elif isinstance(b, (kt.BackendDFlash, kt.BackendDFlash2)):
        backend = BackendConfig("dflash" if isinstance(b, kt.BackendDFlash) else "dflash2",
                                full_layers=b.full_layers, draft_kv_heads=b.kv_heads, draft_head_dim=b.head_dim)
    else:
        backend = BackendConfig("off")
    cap = cfg.kv_capacity
    if cap is None:
        capacity = CapacityPolicy()
    elif cap.tokens is not None:
        capacity = CapacityPolicy(tokens=cap.tokens)
    else:
        assert cap.auto is not None  # the record requires tokens or auto
        capacity = CapacityPolicy(free_bytes=cap.auto.free_bytes, headroom_bytes=cap.auto.headroom_bytes)
    growth = None if cfg.kv_lease_growth is None else GrowthConfig(cfg.kv_lease_growth.window,
                                                                   cfg.kv_lease_growth.cushion_pages)
    m = cfg.model
    return StoreConfig(max_context=cfg.max_context, max_concurrency=cfg.max_concurrency, page_size=cfg.page_size,
                       kv_profile=cfg.kv_profile, backend=backend, capacity=capacity,
                       model=ModelGeometry(m.full_attention_layers, m.kv_heads, m.head_dim),
                       host_arena_bytes=cfg.host_arena_bytes, growth=growth, prefill_chunk=cfg.prefill_chunk,
                       reserved_bytes=cfg.reserved_bytes)


def store_for(header: kt.Header, path: str) -> KVStore:
    """A fresh model for a trace, or TraceInputError(path, 1) naming the unsupported setting."""
    try:
        return KVStore(store_config(header.config))
    except ConfigError as exc:
        raise TraceInputError(path, 1, f"unsupported config: {exc}") from None
