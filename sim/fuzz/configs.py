"""Configurations a fuzzing run draws (tight ones first), and the facts the oracle takes from them.

Everything here comes from the kvtrace/1 header: the oracle's capacities are computed from it (store
contract "MTP physical pages"), never read from the model; only the page strides (bytes) come from the
plane inventory, through the model's view.
"""

from __future__ import annotations

from hypothesis import reject
from hypothesis import strategies as st

from kvsim.kvmodel.store import PROFILES
from kvsim.kvmodel.store.config import PAGE_SIZE as P
from kvsim.sim.fuzz.oracle import Facts, ceil_div
from kvsim.sim.fuzz.view import ModelView
from kvsim.sim.trace import records as kt

BACKENDS = st.one_of(st.just(kt.BackendOff()),
                     st.builds(kt.BackendMTP, draft_window=st.sampled_from((1, 2, 3, 65, 130))),
                     st.just(kt.BackendDFlash(full_layers=1, kv_heads=1, head_dim=128)), st.just(kt.BackendDFlash2()))


HOST_PAGES = st.sampled_from((0, 0, 1, 2, 3, 6))  # strategies are immutable: shared defaults, built once
ALL_PROFILES = st.sampled_from(PROFILES)
CONTEXTS = st.sampled_from((128, 192, 256, 320, 512))


@st.composite
def configs(draw, host_pages=HOST_PAGES, heads: int = 2, profiles=ALL_PROFILES, contexts=CONTEXTS):
    """A kvtrace/1 config: small and mostly tight (capacity at or just above M_min, few rows)."""
    S = draw(contexts)
    C = draw(st.integers(1, 3))
    L = ceil_div(S, P)
    m_min, m_max = max(L, C), C * L
    M = min(m_max, m_min + draw(st.sampled_from((0, 0, 1, 2, L, 2 * L))))
    growth = draw(st.one_of(st.none(), st.builds(kt.KVLeaseGrowth, window=st.sampled_from((64, 128, 256)),
                                                 cushion_pages=st.integers(0, 2))))
    cfg = kt.Config(max_context=S, max_concurrency=C, page_size=P, kv_profile=draw(profiles), backend=draw(BACKENDS),
                    model=kt.Model(full_attention_layers=1, kv_heads=heads, head_dim=256),
                    kv_capacity=kt.KVCapacity(tokens=M * P), kv_lease_growth=growth, prefill_chunk=128)
    from kvsim.kvmodel.store import ConfigError, resolve_capacity
    from kvsim.sim.trace.config import store_config
    try:
        layout = resolve_capacity(store_config(cfg)).layout
    except ConfigError:  # a geometry the model does not support (it says which rule): draw another
        reject()
    pages = draw(host_pages)
    if pages:
        stride = max(g.page_bytes for g in layout.pools)
        cfg = kt.Config(**{**{f: getattr(cfg, f) for f in cfg.__struct_fields__},
                           "host_arena_bytes": pages * stride + draw(st.integers(0, 999))})
    return cfg


def pool_capacity(cfg: kt.Config) -> dict:
    """Pages per pool from the header alone (store contract "MTP physical pages": M + C·ceil((K-1)/P))."""
    if cfg.kv_capacity is None or cfg.kv_capacity.tokens is None:
        raise ValueError("fuzz configs state an explicit kv_capacity")
    M = cfg.kv_capacity.tokens // P
    b = cfg.backend
    if isinstance(b, kt.BackendMTP):
        return {"main": M, "mtp": M + cfg.max_concurrency * ceil_div(b.draft_window - 1, P)}
    # seed 000 L30 "Draft Full, when the selected draft config contains full-attention layers" (either kind)
    if isinstance(b, (kt.BackendDFlash, kt.BackendDFlash2)) and b.full_layers:
        return {"main": M, "draft_full": M}
    return {"main": M}


def facts_for(cfg: kt.Config, view: ModelView) -> Facts:
    cap = pool_capacity(cfg)
    b = cfg.backend
    backend = "mtp" if isinstance(b, kt.BackendMTP) else "draft_full" if "draft_full" in cap else None
    g = cfg.kv_lease_growth
    return Facts(cfg.max_context, cfg.max_concurrency, cap, {p: view.page_bytes(p) for p in cap}, cfg.host_arena_bytes,
                 backend, b.draft_window if isinstance(b, kt.BackendMTP) else 0,
                 None if g is None else max(cfg.prefill_chunk, g.window), 0 if g is None else g.cushion_pages,
                 not isinstance(b, kt.BackendOff))

