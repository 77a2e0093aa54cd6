"""A small, stable surface of the cache model for differential tests against real schedulers.

    lcm_blocks_needed_for(packing, group_pages) -> int
        LCM parents that hold group_pages[g] blocks of each group g at packing[g] blocks per parent:
        Σ_g ceil(pages_g / k_g) (the scheduler's CapacityModel.LcmBlocksNeededFor).

    admission_fits(empty_parents, free_slots, slots_per_parent, need) -> bool
        The zero-eviction capacity decision: whether need[g] more blocks per group fit in the holes of
        the group's bound parents plus the empty parents.

    MatchSession(config)
        .hit_tokens(tokens, prefill_tokens=None) -> int   converged prefix hit of a new request (read-only)
        .cache(tokens, num_computed_tokens=None, reclaim_first=False) -> bool
                                                          run a request through admit → publish → free,
                                                          leaving its whole computed pages cached; with
                                                          reclaim_first, retention first runs at the last
                                                          whole page (as the TokenSpeed wheel does at
                                                          finish), so sliding/state groups keep only that
                                                          boundary's lookback; False (nothing changed)
                                                          when the pool refuses it
        .coordinator                                      the CacheCoordinator underneath

Inputs are token lists and a CacheConfig (kvmodel.cache.config); nothing here mutates its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.kvmodel.cache.admission import PoolShadow, fits
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.coordinator import CacheCoordinator


def lcm_blocks_needed_for(packing: Sequence[int], group_pages: Sequence[int]) -> int:
    if len(packing) != len(group_pages):
        raise ValueError("one page count per group")
    return sum(-(-n // k) for n, k in zip(group_pages, packing))


def admission_fits(empty_parents: int, free_slots: Sequence[int], slots_per_parent: Sequence[int],
                   need: Sequence[int]) -> bool:
    return fits(PoolShadow(empty_parents, tuple(free_slots), tuple(slots_per_parent), {}), tuple(need))


class MatchSession:
    """A cache model fed request by request; each request's hit is probed against what earlier ones left."""

    def __init__(self, config: CacheConfig) -> None:
        self.coordinator = CacheCoordinator(config)
        self._n = 0

    def hit_tokens(self, tokens: Sequence[int], prefill_tokens: int | None = None) -> int:
        return self.coordinator.probe(list(tokens), prefill_tokens).hit_tokens

    def cache(self, tokens: Sequence[int], num_computed_tokens: int | None = None,
              reclaim_first: bool = False) -> bool:
        c = self.coordinator
        toks = list(tokens)
        rid = f"session-{self._n}"
        self._n += 1
        if c.admit(rid, toks, len(toks)) is None:
            return False
        computed = len(toks) if num_computed_tokens is None else num_computed_tokens
        if reclaim_first:  # retention up to the last whole page: the boundary being published keeps its lookback
            c.reclaim_expired(rid, computed - computed % c.config.prefix_granularity)
        c.publish(rid, toks, computed)
        c.free(rid)
        return True
