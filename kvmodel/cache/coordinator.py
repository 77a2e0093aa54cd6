"""CacheCoordinator: the token-unit request lifecycle over the groups and one shared BlockPool.

Cache concepts: "the facade that hides 'multiple attention structures, one shared physical pool, two
storage tiers' behind a token-unit request lifecycle: probe → admit → publish → free." Probe is read-only;
Admit plans on shadow counts (AdmissionPlanner) and, only when the plan fits, advances the access epoch,
pins the hits, evicts the victims and acquires each group's blocks — a refused admission changes nothing.
Publication registers whole prefix pages (state groups: only the checkpoint at a P boundary; replayable
groups: never). Retention punches expired slots to holes. The live tables are kept here for the model
(the scheduler owns them in TokenSpeed). Only the Device tier is modelled; Host/L3 tiers are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.kvmodel.cache import journal as J
from kvsim.kvmodel.cache.acquire_plan import DenseGrowth, SparseSuffix
from kvsim.kvmodel.cache.admission import AdmissionPlanner, EvictionCandidate, PoolShadow, Tier
from kvsim.kvmodel.cache.block_pool import BlockPool
from kvsim.kvmodel.cache.block_refs import BlockRefs
from kvsim.kvmodel.cache.block_table import NULL_BLOCK, BlockTable
from kvsim.kvmodel.cache.cache_key import BoundaryKind, CacheKey
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.convergence import ConvergedProbe, GroupMatch, converge
from kvsim.kvmodel.cache.geometry import GroupGeometry
from kvsim.kvmodel.cache.group_spec import STATE
from kvsim.kvmodel.cache.matchers import matcher_for
from kvsim.kvmodel.cache.prefix_hash import hashed_pages, prefix_hashes
from kvsim.kvmodel.cache.prefix_index import PrefixCacheIndex
from kvsim.kvmodel.cache.state import CacheState


@dataclass(frozen=True)
class AdmitResult:
    hit_tokens: int
    fresh: tuple[tuple[int, ...], ...]  # per group: blocks acquired this round (pages to zero)
    victims: tuple[EvictionCandidate, ...]


class CacheCoordinator:
    def __init__(self, config: CacheConfig, journal: list | None = None, layers=()) -> None:
        self.config = config
        self.geometry = [GroupGeometry(s) for s in config.groups]
        self.matchers = [matcher_for(g) for g in self.geometry]
        self.pool = BlockPool(config.num_parents, config.packing)
        for i, s in enumerate(config.groups):
            self.pool.register(i, s.shard_count)
        self.refs = BlockRefs(self.pool)
        self.indexes = [PrefixCacheIndex(i, self.refs) for i in range(len(config.groups))]
        self.tables: dict[str, list[BlockTable]] = {}
        self.epochs: dict[str, int] = {}
        self.clock = 0
        self.journal = journal
        self.layers = tuple(layers)

    # -- probe (read-only) -------------------------------------------------------------------------

    def page_hashes(self, tokens, pages: int | None = None) -> list[str]:
        return prefix_hashes(tokens, self.config.prefix_granularity, pages)

    def probe(self, tokens, prefill_tokens: int | None = None) -> ConvergedProbe:
        """Hits per group converged to one boundary; at most (prefill − 1) // P pages are probed."""
        p = self.config.prefix_granularity
        pages = hashed_pages(len(tokens) if prefill_tokens is None else prefill_tokens, p)
        hashes = self.page_hashes(tokens, pages)
        bound = len(hashes) * p
        groups = []
        for g, geo in enumerate(self.geometry):
            m = self.geometry[g].slots_per_page(self.config.prefix_granularity)
            idx = self.indexes[g]
            groups.append(GroupMatch(self.matchers[g], geo.block_granularity,
                                     lambda s, g=g, m=m, idx=idx: idx.contains(CacheKey(g, hashes[s // m], s % m)),
                                     geo.spec.replayable))
        result = converge(groups, bound, p)
        if self.journal is not None:
            self.journal.append(J.ProbeRecord(p, bound, tuple(
                J.ProbeGroup(geo.block_granularity, geo.spec.window_tokens, geo.spec.replayable,
                             frozenset(s for s in range(bound // geo.block_granularity) if gm.cached(s)))
                for geo, gm in zip(self.geometry, groups)), result))
        return result

    # -- admit --------------------------------------------------------------------------------------

    def admit(self, request: str, tokens, extent_tokens: int, reserve_tokens: int = 0,
              probe: ConvergedProbe | None = None, num_computed_tokens: int = 0) -> AdmitResult | None:
        """Grow request's tables to extent_tokens (+ reserve); a new request first claims its probe's hits.
        None, with nothing changed, when even evicting every candidate cannot make room."""
        new = request not in self.tables
        if new and probe is None:
            probe = self.probe(tokens)
        hit = probe.hit_tokens if new else 0
        tables = self.tables.get(request) or [BlockTable() for _ in self.geometry]
        hit_ids = [self._hit_blocks(g, tokens, probe) if new else [] for g in range(len(self.geometry))]
        plans = [self._plan(g, tables[g], len(hit_ids[g]), hit, extent_tokens, reserve_tokens, new)
                 for g in range(len(self.geometry))]
        need = tuple(pl.num_blocks for pl in plans)
        protected = frozenset((g, b) for g, ids in enumerate(hit_ids) for b in ids if b != NULL_BLOCK)
        candidates = self._candidates(request, protected, num_computed_tokens)
        shadow = self._shadow(candidates)
        plan = AdmissionPlanner.plan(shadow, need, candidates)
        if not plan.fits:
            self._record_admit(shadow, need, candidates, protected, plan, ())
            return None
        if new:
            self.clock += 1
            self.epochs[request] = self.clock
            self.tables[request] = tables
        epoch = self.epochs[request]
        for g, ids in enumerate(hit_ids):  # pin and claim the hits
            for b in ids:
                if b != NULL_BLOCK:
                    self.refs.retain(g, b)
            tables[g].ids.extend(ids)
            self.indexes[g].acquire_matched([self.indexes[g].key_of(b) for b in ids if b != NULL_BLOCK], epoch)
        for v in plan.victims:
            self._evict(request, v)
        fresh = []
        for g, pl in enumerate(plans):
            ids = self._acquire(g, pl.num_blocks, tables[g].ids)
            if ids is None:
                raise RuntimeError(f"group {g}: the pool refused {pl.num_blocks} blocks the admission plan fit")
            self.refs.adopt(g, ids)
            tables[g].execute(pl, ids)
            fresh.append(ids)
        self._record_admit(shadow, need, candidates, protected, plan, tuple(fresh))
        return AdmitResult(hit, tuple(fresh), plan.victims)

    def _hit_blocks(self, g: int, tokens, probe: ConvergedProbe) -> list[int]:
        gp = probe.probes[g]
        if not gp.hits:
            return []
        m = self.geometry[g].slots_per_page(self.config.prefix_granularity)
        hashes = self.page_hashes(tokens, -(-len(gp.hits) // m))
        out = []
        for s, hit in enumerate(gp.hits):
            entry = self.indexes[g].find(CacheKey(g, hashes[s // m], s % m)) if hit else None
            if hit and entry is None:
                raise ValueError(f"stale probe: group {g} slot {s} was evicted after the probe")
            out.append(entry.block if hit else NULL_BLOCK)
        return out

    def _plan(self, g, table, hit_slots, hit_tokens, extent, reserve, new):
        geo = self.geometry[g]
        slots = len(table) + hit_slots
        if new and geo.spec.replayable:
            return geo.plan_acquire(slots, 0, SparseSuffix(max(extent, 1), geo.replay_first_slot(hit_tokens), reserve))
        if new:
            fill = min(hit_tokens, geo.tokens_of_slots(slots))
            avail = geo.tokens_of_slots(slots) - fill
        else:
            avail = table.available_tokens
            fill = geo.tokens_of_slots(slots) - avail
        return geo.plan_acquire(slots, avail, DenseGrowth(max(extent - fill, 0), reserve))

    def _candidates(self, request: str, protected, num_computed_tokens: int) -> list[EvictionCandidate]:
        out = []
        for g, idx in enumerate(self.indexes):
            closed = self.matchers[g].prefix_closed
            for _key, e in idx.evictable():
                if (g, e.block) in protected:
                    continue
                if closed:
                    tier, rank = Tier.CLOSED_PREFIX, -e.logical_index
                elif e.kind == BoundaryKind.CHUNK and not e.was_acquired:
                    tier, rank = Tier.PROBATIONARY, e.logical_index
                else:
                    tier, rank = Tier.ESTABLISHED, e.logical_index
                parent, child = self.pool.locate(g, e.block)
                out.append(EvictionCandidate(e.last_access_epoch, tier, rank, g, parent, child, e.block))
        for g, table in enumerate(self.tables.get(request, ())):  # the request's own expired, uncached tail
            expired = self.geometry[g].expired_blocks_at(num_computed_tokens)
            for slot, b in enumerate(table.ids[:expired]):
                if b != NULL_BLOCK and self.refs.count(g, b) == 1 and self.indexes[g].key_of(b) is None:
                    parent, child = self.pool.locate(g, b)
                    out.append(EvictionCandidate(0, Tier.UNCACHED, slot, g, parent, child, b))
        return out

    def _shadow(self, candidates) -> PoolShadow:
        pool = self.pool
        n = len(self.geometry)
        return PoolShadow(pool.num_empty_parents, tuple(pool.free_slots(g) for g in range(n)),
                          tuple(pool.slots_per_parent(g) for g in range(n)),
                          {c.parent: pool.occupied_count(c.parent) for c in candidates})

    def _evict(self, request: str, v: EvictionCandidate) -> None:
        if v.tier == Tier.UNCACHED:
            table = self.tables[request][v.group]
            table.ids[v.rank] = NULL_BLOCK
            self.refs.drop(v.group, v.block)
        else:
            idx = self.indexes[v.group]
            idx.evict(idx.key_of(v.block))

    def _acquire(self, g: int, num: int, table_ids) -> tuple[int, ...] | None:
        return J.acquire_recorded(self.pool, self.journal, g, num, table_ids)

    def _record_admit(self, shadow, need, candidates, protected, plan, fresh) -> None:
        if self.journal is not None:
            self.journal.append(J.AdmitRecord(shadow, need, tuple(candidates), protected, plan, fresh))

    # -- publish, retain, free ----------------------------------------------------------------------

    def publish(self, request: str, tokens, num_computed_tokens: int,
                kind: BoundaryKind = BoundaryKind.CHUNK) -> int:
        """Register the request's completed whole pages; returns how many keys were registered or found."""
        p = self.config.prefix_granularity
        pages = min(num_computed_tokens, len(tokens)) // p
        hashes = self.page_hashes(tokens, pages)
        epoch = self.epochs[request]
        keys = []
        for g, geo in enumerate(self.geometry):
            if geo.spec.replayable:
                continue
            m = self.geometry[g].slots_per_page(self.config.prefix_granularity)
            table = self.tables[request][g]
            if geo.spec.family == STATE:  # only the checkpoint at an exact P boundary
                slots = [pages * m - 1] if pages and num_computed_tokens % p == 0 else []
            else:
                slots = range(pages * m)
            for s in slots:
                if s >= len(table) or table.ids[s] == NULL_BLOCK:
                    continue
                key = CacheKey(g, hashes[s // m], s % m)
                own = table.ids[s]
                canon = self.indexes[g].register(key, own, epoch, s, kind)
                if canon != own:  # the key's canonical block replaces ours
                    self.refs.retain(g, canon)
                    table.ids[s] = canon
                    self.refs.drop(g, own)
                keys.append(key)
        if self.journal is not None:
            self.journal.append(J.PublishRecord(p, tuple(tokens[:pages * p]), tuple(hashes), tuple(keys)))
        return len(keys)

    def reclaim_expired(self, request: str, num_computed_tokens: int) -> int:
        """Punch every group's expired slots to holes; returns the blocks whose references were dropped."""
        n = 0
        for g, geo in enumerate(self.geometry):
            expired = geo.expired_blocks_at(num_computed_tokens)
            for b in self.tables[request][g].punch(expired):
                self.refs.drop(g, b)
                n += 1
            if self.journal is not None:
                self.journal.append(J.ReclaimRecord(g, geo.block_granularity, geo.spec.window_tokens,
                                                    num_computed_tokens, expired))
        return n

    def free(self, request: str) -> None:
        """Drop every reference the request's tables hold, suffix first (a deterministic FIFO order)."""
        for g, table in enumerate(self.tables.pop(request)):
            for b in reversed(table.ids):
                if b != NULL_BLOCK:
                    self.refs.drop(g, b)
        del self.epochs[request]

    def evict(self, group: int, key: CacheKey) -> bool:
        """Evict one cached entry if only the cache holds it; False (nothing changed) when it is pinned."""
        idx = self.indexes[group]
        return idx.is_evictable(key) and idx.evict(key)

    def state(self) -> CacheState:
        """The checkers' view; drains the journal."""
        records = list(self.journal) if self.journal is not None else []
        if self.journal is not None:
            self.journal.clear()
        return CacheState(
            self.config, self.pool,
            {r: [list(t.ids) for t in ts] for r, ts in self.tables.items()},
            [{e.block: (k, e.logical_index) for k, e in idx.entries()} for idx in self.indexes],
            None, self.layers, records)
