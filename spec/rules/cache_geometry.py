"""TS-GEO-1 and TS-RET-1: token geometry (spans, kernel pages, retention covering visibility) and retention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.cache.group_spec import FULL
from kvsim.kvmodel.cache.journal import ReclaimRecord
from kvsim.kvmodel.cache.layer_binding import KERNEL_SOURCES
from kvsim.spec.catalogue import state_rule

if TYPE_CHECKING:
    from kvsim.kvmodel.cache.state import CacheState


@state_rule("TS-GEO-1", "block_granularity divides prefix_granularity; kernel_page_size never derived from it; "
            "retention covers visibility",
            'cache concepts: "a positive divisor of prefix_granularity"; "deriving kernel_page_size from '
            'prefix_granularity is a category error and a bug"; "a group must retain every token its layers can see"',
            scope="cache",
            decisions="A layer's kernel_page_size must come from the registry or the config and divide its "
                      "group's block_granularity (the subdivision block → kernel pages); a state group's layers "
                      "have no kernel pages; a full-visibility layer cannot ride a sliding group and a sliding mask "
                      "needs window_left + 1 <= sliding_window_tokens.",
            evidence="model",
            tests=("tests/cache/test_rules.py::test_geo1_keeps_spans_kernel_pages_and_visibility",
                   "tests/cache/test_rules.py::test_geo1_fires_on_a_derived_kernel_page_and_a_window_wider_than_retention"))
def ts_geo_1(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    cfg = st.config
    for g in cfg.groups:
        bg = g.block_granularity
        if bg <= 0 or cfg.prefix_granularity % bg:
            return (f"group {g.group_id!r}: block_granularity {bg} does not divide prefix_granularity "
                    f"{cfg.prefix_granularity}")
    for lb in st.layers:
        spec = cfg.groups[lb.group]
        if spec.family == "state":
            if lb.kernel_page_size is not None:
                return f"layer {lb.layer}: a state group has no pages, yet a kernel_page_size is bound"
        else:
            if lb.kernel_page_source not in KERNEL_SOURCES:
                return f"layer {lb.layer}: kernel_page_size taken from {lb.kernel_page_source!r}"
            if not lb.kernel_page_size or spec.block_granularity % lb.kernel_page_size:
                return (f"layer {lb.layer}: kernel_page_size {lb.kernel_page_size} does not subdivide "
                        f"block_granularity {spec.block_granularity}")
        w = spec.sliding_window_tokens
        if w is not None and (lb.window_left is None or lb.window_left + 1 > w):
            return f"layer {lb.layer}: visibility {lb.window_left} exceeds group {spec.group_id!r}'s window {w}"
    return True


@state_rule("TS-RET-1", "Retention slides out whole pages (max(0, computed − W + 1) // bg); full history never "
            "expires",
            'cache concepts: "full attention never expires; SWA and Mamba-at-window-2 slide out whole pages"',
            scope="cache",
            decisions="W is the sliding window, 2 for state groups; full-history tables never hold a hole: no "
                      "null block 0, and -1 only as trailing padding (seed 002 L165). On a scheduler's plans the "
                      "same clause is the peer contract's TS-POOL-4 (a -1 before a named slot, or a live row losing "
                      "a slot).",
            evidence="model",
            tests=("tests/cache/test_rules.py::test_ret1_keeps_whole_page_expiry",
                   "tests/cache/test_rules.py::test_ret1_fires_on_partial_expiry_and_a_full_history_hole"))
def ts_ret_1(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    seen = False
    for r in st.journal:
        if not isinstance(r, ReclaimRecord):
            continue
        seen = True
        want = 0 if r.window_tokens is None else \
            max(0, r.num_computed_tokens - r.window_tokens + 1) // r.block_granularity
        if r.expired_slots != want:
            return (f"group {r.group}: {r.expired_slots} slots expired at {r.num_computed_tokens} computed tokens, "
                    f"retention gives {want}")
    for req, tables in st.tables.items():
        for g, ids in enumerate(tables):
            if st.config.groups[g].kind == FULL:
                seen = True
                row = list(ids)
                last = max((j for j, b in enumerate(row) if b > 0), default=-1)
                hole = next((j for j, b in enumerate(row) if b == 0 or (b < 0 and j < last)), None)
                if hole is not None:  # -1 only as trailing padding (seed 002 L165 "full attention never expires")
                    return f"request {req!r}: full-history group {g} table has a hole at slot {hole}"
    return True if seen else None
