"""Operation records the cache model writes for the TS-* checkers (only when given a journal).

Each record carries what an independent checker needs to re-derive the operation's correct outcome: the
inputs (pool snapshot, demands, candidates, cached slots, tokens) and what the model did. Records are
frozen; the model appends them to a plain list the checker drains. Nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvsim.kvmodel.cache.admission import AdmissionPlan, EvictionCandidate, PoolShadow
from kvsim.kvmodel.cache.block_pool import BlockPool
from kvsim.kvmodel.cache.convergence import ConvergedProbe


@dataclass(frozen=True)
class AcquireRecord:
    group: int
    num: int
    table_ids: tuple[int, ...]  # the request's table in that group before the acquire
    before: tuple  # BlockPool.snapshot() before
    after: tuple  # BlockPool.snapshot() after
    result: tuple[int, ...] | None  # the blocks handed out; None: refused


@dataclass(frozen=True)
class ProbeGroup:
    block_granularity: int  # tokens
    window_tokens: int | None  # W (None: full history)
    replayable: bool
    cached: frozenset[int]  # slots below the bound whose key was cached at probe time


@dataclass(frozen=True)
class ProbeRecord:
    prefix_granularity: int
    bound_tokens: int  # the probe limit (hashed pages × P)
    groups: tuple[ProbeGroup, ...]
    result: ConvergedProbe


@dataclass(frozen=True)
class PublishRecord:
    prefix_granularity: int
    tokens: tuple[int, ...]  # the request's tokens covering the published pages
    page_hashes: tuple[str, ...]  # the hashes the keys carry, page by page
    keys: tuple  # CacheKeys registered (or found canonical) by this publication


@dataclass(frozen=True)
class AdmitRecord:
    shadow: PoolShadow
    need: tuple[int, ...]  # blocks per group
    candidates: tuple[EvictionCandidate, ...]
    protected: frozenset[tuple[int, int]]  # (group, block) of the current hits
    plan: AdmissionPlan
    fresh: tuple[tuple[int, ...], ...] = ()  # blocks acquired per group (pages to zero); () when refused


@dataclass(frozen=True)
class ReclaimRecord:
    group: int
    block_granularity: int
    window_tokens: int | None
    num_computed_tokens: int
    expired_slots: int  # what the model punched up to


def acquire_recorded(pool: BlockPool, journal: list | None, group: int, num: int,
                     table_ids: Iterable[int] = ()) -> tuple[int, ...] | None:
    """BlockPool.acquire, with an AcquireRecord appended when a journal is kept."""
    if journal is None:
        return pool.acquire(group, num, table_ids)
    before = pool.snapshot()
    ids = pool.acquire(group, num, table_ids)
    journal.append(AcquireRecord(group, num, tuple(table_ids), before, pool.snapshot(), ids))
    return ids
