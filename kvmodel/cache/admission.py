"""AdmissionPlanner: which cached blocks must be evicted for an admission to fit — on shadow counts only.

Cache concepts: "first check whether existing local holes plus empty parents fit with zero eviction;
otherwise select eviction candidates until the plan fits ... LRU access epoch, then tier (uncached
request-only block → probationary boundary → established boundary → suffix of a closed prefix). Finally,
walk the selected blocks in reverse and restore every block that is not strictly required, yielding a
minimal eviction set". Current prefix hits are protected (the caller leaves them out of the candidates).
Fit (research §4): Σ_g ceil(max(need_g − free_g, 0) / slots_per_parent_g) ≤ empty parents.
Candidates are ordered by (epoch, tier, rank, group, parent, child) — the seed's per-epoch cursors yield
the same order; this planner sorts once. Pure: never mutates the pool, returns a frozen AdmissionPlan.
It speaks blocks and parents only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum


class Tier(IntEnum):
    UNCACHED = 0  # a request-only block (epoch 0)
    PROBATIONARY = 1  # non-closed group, kChunk, never acquired
    ESTABLISHED = 2  # non-closed group otherwise
    CLOSED_PREFIX = 3  # a prefix-closed group's entry


@dataclass(frozen=True, order=True)
class EvictionCandidate:
    epoch: int  # last access epoch (0: uncached)
    tier: Tier
    rank: int  # +slot for window groups (the deeper frontier is kept), −slot for closed ones (suffix first)
    group: int
    parent: int
    child: int
    block: int  # virtual block id (for the executor)

    @property
    def order_key(self) -> tuple:
        return (self.epoch, self.tier, self.rank, self.group, self.parent, self.child)


@dataclass(frozen=True)
class PoolShadow:
    """What the planner reads of the pool: counts, not placement structures."""

    empty_parents: int
    free_slots: tuple[int, ...]  # per group: holes in its bound parents
    slots_per_parent: tuple[int, ...]  # per group
    occupancy: Mapping[int, int]  # parent -> occupied children (for the parents candidates sit in)


@dataclass(frozen=True)
class AdmissionPlan:
    fits: bool
    victims: tuple[EvictionCandidate, ...]  # in selection order; empty on the zero-eviction path


def fits(shadow: PoolShadow, need: Sequence[int], victims: Iterable[EvictionCandidate] = ()) -> bool:
    """Whether need (blocks per group) fits after evicting victims from the shadow counts."""
    free = list(shadow.free_slots)
    empty = shadow.empty_parents
    occ: dict[int, int] = {}
    for v in victims:
        n = occ.get(v.parent, shadow.occupancy[v.parent]) - 1
        occ[v.parent] = n
        if n:
            free[v.group] += 1
        else:  # the parent empties: its holes leave the group for the FIFO
            free[v.group] -= shadow.slots_per_parent[v.group] - 1
            empty += 1
    short = 0
    for g, n in enumerate(need):
        deficit = n - free[g]
        if deficit > 0:
            short += -(-deficit // shadow.slots_per_parent[g])
    return short <= empty


class AdmissionPlanner:
    """Plans one admission; holds nothing between calls."""

    @staticmethod
    def plan(shadow: PoolShadow, need: Sequence[int], candidates: Iterable[EvictionCandidate]) -> AdmissionPlan:
        if fits(shadow, need):
            return AdmissionPlan(True, ())
        chosen: list[EvictionCandidate] = []
        for c in sorted(candidates, key=lambda c: c.order_key):
            chosen.append(c)
            if fits(shadow, need, chosen):
                break
        else:
            return AdmissionPlan(False, ())
        kept = list(chosen)
        for c in reversed(chosen):  # restore newest first whatever is not strictly required
            trial = [v for v in kept if v is not c]
            if fits(shadow, need, trial):
                kept = trial
        return AdmissionPlan(True, tuple(kept))
