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
    resolve_capacity,
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
        if cap.auto is None:  # the record's validation requires tokens or auto
            raise ValueError("kv_capacity needs tokens or auto")
        capacity = CapacityPolicy(free_bytes=cap.auto.free_bytes, headroom_bytes=cap.auto.headroom_bytes)
    growth = None if cfg.kv_lease_growth is None else GrowthConfig(cfg.kv_lease_growth.window,
                                                                   cfg.kv_lease_growth.cushion_pages)
    m = cfg.model
    return StoreConfig(max_context=cfg.max_context, max_concurrency=cfg.max_concurrency, page_size=cfg.page_size,
                       kv_profile=cfg.kv_profile, backend=backend, capacity=capacity,
                       model=ModelGeometry(m.full_attention_layers, m.kv_heads, m.head_dim),
                       host_arena_bytes=cfg.host_arena_bytes, growth=growth, prefill_chunk=cfg.prefill_chunk,
                       reserved_bytes=cfg.reserved_bytes)


MAX_MODEL_SIZE = 1 << 24
"""The most pages per pool, and execution rows, the model holds (16,777,216: about 1.4 GB of model state);
a larger store is refused as an input error before any memory is spent on it, never a MemoryError."""


def store_for(header: kt.Header, path: str) -> KVStore:
    """A fresh model for a trace, or TraceInputError(path, 1) naming the unsupported setting."""
    try:
        config = store_config(header.config)
    except ConfigError as exc:
        raise TraceInputError(path, 1, f"unsupported config: {exc}") from None
    return store_for_config(config, path)


def store_for_config(config: StoreConfig, path: str = "<config>") -> KVStore:
    """A fresh model of this configuration, or TraceInputError(path, 1) naming the unsupported setting
    (a store too large to model included: kvsim's own limit, not a rule of the contract)."""
    try:
        too_big = None
        if config.max_concurrency > MAX_MODEL_SIZE:
            too_big = f"max_concurrency {config.max_concurrency:,} is beyond the {MAX_MODEL_SIZE:,} rows kvsim models"
        for pool in resolve_capacity(config).layout.pools:
            if too_big is None and pool.pages > MAX_MODEL_SIZE:
                too_big = (f"the {pool.name} pool would hold {pool.pages:,} pages, beyond the {MAX_MODEL_SIZE:,} "
                           "pages per pool kvsim models")
        if too_big is not None:
            raise TraceInputError(path, 1, f"unsupported config: {too_big}")
        return KVStore(config)
    except ConfigError as exc:
        raise TraceInputError(path, 1, f"unsupported config: {exc}") from None
