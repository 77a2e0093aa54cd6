"""CacheCoordinator: the token-unit request lifecycle over the groups and one shared BlockPool.

Cache concepts: "the facade that hides 'multiple attention structures, one shared physical pool, two
storage tiers' behind a token-unit request lifecycle: probe → admit → publish → free." Probe is read-only;
Admit plans on shadow counts (AdmissionPlanner) and, only when the plan fits, advances the access epoch,
pins the hits, evicts the victims and acquires each group's blocks — a refused admission changes nothing.
Publication registers whole prefix pages (replayable groups: never). Snapshot-state groups are sparse and
publish only with provenance (cache concepts L74-L82): a prefill admission materializes only the aligned
internal checkpoint, the final continuation checkpoint and its reserve (null holes between, absolute slot
positions kept) and records the aligned boundaries it materialized; publication registers a recorded
boundary only when it is classified Endpoint (the prompt's last aligned checkpoint) or Promoted, and a
decode admission or publication records and publishes no state checkpoint. Retention punches expired slots
to holes.

The released TokenSpeed wheel (0.1.42) declares its State group with block_granularity 0 and a two-slot row
instead of absolute positions: slot 0 holds the checkpoint the forward starts from or, in a prefill with an
internal boundary, that aligned checkpoint; slot 1 the final continuation state; each decode rolls slot 1
into slot 0 and punches the old input to a hole. Model slot (before - 1) // bg maps to its slot 0 (or the
aligned (floor(after / P) * P - 1) // bg), model slot (after - 1) // bg to its slot 1; a comparison with the
wheel goes through that mapping, never through raw slot indexes.

With num_host_pages, publication also queues stores for the Host tier (kvmodel.cache.host_tier) by the
policy of L187: during prefill every newly published full-attention page and each published Endpoint/
Promoted state checkpoint; never a full-attention page during decode; sliding-window entries whenever
published; replayable groups never; at finish or retraction the request's published non-state pages and
its newest state checkpoint. start_pending_stores drains the queue (pinning Device sources until
complete_store), and clear_cache is refused while a store is in flight. The live tables are kept here for the model
(the scheduler owns them in TokenSpeed). Only the Device tier is modelled; Host/L3 tiers are not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from kvsim.kvmodel.cache import journal as J
from kvsim.kvmodel.cache.acquire_plan import AcquirePlan, Checkpoints, DenseGrowth, SparseSuffix
from kvsim.kvmodel.cache.admission import AdmissionPlan, AdmissionPlanner, EvictionCandidate, PoolShadow, Tier
from kvsim.kvmodel.cache.block_pool import BlockPool
from kvsim.kvmodel.cache.block_refs import BlockRefs
from kvsim.kvmodel.cache.block_table import NULL_BLOCK, BlockTable
from kvsim.kvmodel.cache.cache_key import BoundaryKind, CacheKey
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.convergence import ConvergedProbe, GroupMatch, converge
from kvsim.kvmodel.cache.geometry import GroupGeometry
from kvsim.kvmodel.cache.group_spec import SLIDING_WINDOW, STATE
from kvsim.kvmodel.cache.host_tier import HostTier, StoreOp
from kvsim.kvmodel.cache.layer_binding import LayerBinding
from kvsim.kvmodel.cache.matchers import matcher_for
from kvsim.kvmodel.cache.prefix_hash import hashed_pages, prefix_hashes
from kvsim.kvmodel.cache.prefix_index import PrefixCacheIndex
from kvsim.kvmodel.cache.state import CacheState


@dataclass(frozen=True)
class AdmitResult:
    hit_tokens: int
    fresh: tuple[tuple[int, ...], ...]  # per group: blocks acquired this round (pages to zero)
    victims: tuple[EvictionCandidate, ...]


def _cached(idx: PrefixCacheIndex, g: int, m: int, hashes: Sequence[str], s: int) -> bool:
    """Whether slot s of group g (m slots per prefix page) is cached under the request's page hashes."""
    return idx.contains(CacheKey(g, hashes[s // m], s % m))


class CacheCoordinator:
    def __init__(self, config: CacheConfig, journal: list | None = None, layers: Iterable[LayerBinding] = ()) -> None:
        self.config = config
        self.geometry = [GroupGeometry(s) for s in config.groups]
        self.matchers = [matcher_for(g) for g in self.geometry]
        self.pool = BlockPool(config.num_parents, config.packing)
        for i, s in enumerate(config.groups):
            self.pool.register(i, s.shard_count)
        self.refs = BlockRefs(self.pool)
        self.indexes = [PrefixCacheIndex(i, self.refs) for i in range(len(config.groups))]
        self.host = HostTier(config.num_host_pages, self.indexes, self.refs) if config.num_host_pages > 1 else None
        self.tables: dict[str, list[BlockTable]] = {}
        # request -> state group -> aligned boundaries (tokens) a prefill materialized, not yet published
        self.checkpoints: dict[str, dict[int, set[int]]] = {}
        self.promoted: dict[str, set[int]] = {}  # request -> its recorded promotion boundaries
        self.epochs: dict[str, int] = {}
        self.clock = 0
        self.journal = journal
        self.layers = tuple(layers)

    # -- probe (read-only) -------------------------------------------------------------------------

    def page_hashes(self, tokens: Sequence[int], pages: int | None = None) -> list[str]:
        return prefix_hashes(tokens, self.config.prefix_granularity, pages)

    def probe(self, tokens: Sequence[int], prefill_tokens: int | None = None) -> ConvergedProbe:
        """Hits per group converged to one boundary; at most (prefill − 1) // P pages are probed."""
        p = self.config.prefix_granularity
        pages = hashed_pages(len(tokens) if prefill_tokens is None else prefill_tokens, p)
        hashes = self.page_hashes(tokens, pages)
        bound = len(hashes) * p
        groups: list[GroupMatch] = []
        for g, geo in enumerate(self.geometry):
            m = self.geometry[g].slots_per_page(self.config.prefix_granularity)
            idx = self.indexes[g]
            groups.append(GroupMatch(self.matchers[g], geo.block_granularity,
                                     partial(_cached, idx, g, m, hashes),
                                     geo.spec.replayable))
        result = converge(groups, bound, p)
        if self.journal is not None:
            self.journal.append(J.ProbeRecord(p, bound, tuple(
                J.ProbeGroup(geo.block_granularity, geo.spec.window_tokens, geo.spec.replayable,
                             frozenset(s for s in range(bound // geo.block_granularity) if gm.cached(s)))
                for geo, gm in zip(self.geometry, groups)), result))
        return result

    # -- admit --------------------------------------------------------------------------------------

    def admit(self, request: str, tokens: Sequence[int], extent_tokens: int, reserve_tokens: int = 0,
              probe: ConvergedProbe | None = None, num_computed_tokens: int = 0,
              decode: bool = False) -> AdmitResult | None:
        """Grow request's tables to extent_tokens (+ reserve); a new request first claims its probe's hits.
        None, with nothing changed, when even evicting every candidate cannot make room. A prefill admission
        (decode False) records the aligned state checkpoints it materializes, the provenance publication
        needs; "decode itself records and publishes no state checkpoints"."""
        new = request not in self.tables
        if new and probe is None:
            probe = self.probe(tokens)
        hit = probe.hit_tokens if new and probe is not None else 0
        tables = self.tables.get(request) or [BlockTable() for _ in self.geometry]
        hit_ids = [self._hit_blocks(g, tokens, probe) if new and probe is not None else []
                   for g in range(len(self.geometry))]
        # a promotion boundary: the prefix-closed groups match further than the converged hit, so the state
        # at that boundary is worth computing and publishing (Promoted) for the next request with this prefix
        promo = probe.closed_tokens if new and probe is not None and probe.closed_tokens > hit else 0
        plans = [self._plan(g, tables[g], hit_ids[g], hit, extent_tokens, reserve_tokens, new, promo)
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
            idx = self.indexes[g]
            keys = [idx.key_of(b) for b in ids if b != NULL_BLOCK]
            idx.acquire_matched([k for k in keys if k is not None], epoch)  # a hit is cached: every key is there
        for v in plan.victims:
            self._evict(request, v)
        fresh: list[tuple[int, ...]] = []
        for g, pl in enumerate(plans):
            got = self._acquire(g, pl.num_blocks, tables[g].ids)
            if got is None:
                raise RuntimeError(f"group {g}: the pool refused {pl.num_blocks} blocks the admission plan fit")
            self.refs.adopt(g, got)
            tables[g].execute(pl, got)
            fresh.append(got)
            if self.geometry[g].spec.family == STATE and not decode:
                self._record_checkpoints(request, g, tables[g], extent_tokens, promo)
        self._record_admit(shadow, need, candidates, protected, plan, tuple(fresh))
        return AdmitResult(hit, tuple(fresh), plan.victims)

    def _hit_blocks(self, g: int, tokens: Sequence[int], probe: ConvergedProbe) -> list[int]:
        gp = probe.probes[g]
        if not gp.hits:
            return []
        m = self.geometry[g].slots_per_page(self.config.prefix_granularity)
        hashes = self.page_hashes(tokens, -(-len(gp.hits) // m))
        out: list[int] = []
        for s, hit in enumerate(gp.hits):
            if not hit:
                out.append(NULL_BLOCK)
                continue
            entry = self.indexes[g].find(CacheKey(g, hashes[s // m], s % m))
            if entry is None:
                raise ValueError(f"stale probe: group {g} slot {s} was evicted after the probe")
            out.append(entry.block)
        return out

    def _record_checkpoints(self, request: str, g: int, table: BlockTable, extent: int, promo: int = 0) -> None:
        """Provenance (cache concepts L76): "Scheduled local prefill records its last aligned checkpoint" -- the
        aligned boundary floor(extent / P) * P -- and a promotion boundary, each when its exact slot holds a
        materialized block."""
        p, bg = self.config.prefix_granularity, self.geometry[g].block_granularity
        for b in (extent // p * p, promo):
            if b > 0 and (b - 1) // bg < len(table.ids) and table.ids[(b - 1) // bg] != NULL_BLOCK:
                self.checkpoints.setdefault(request, {}).setdefault(g, set()).add(b)
                if b == promo:
                    self.promoted.setdefault(request, set()).add(b)

    def _plan(self, g: int, table: BlockTable, hit_ids: Sequence[int], hit_tokens: int, extent: int, reserve: int,
              new: bool, promo: int = 0) -> AcquirePlan:
        geo = self.geometry[g]
        hit_slots = len(hit_ids)
        slots = len(table) + hit_slots
        if geo.spec.family == STATE:
            ids = list(table.ids) + list(hit_ids)
            if new:
                before = min(hit_tokens, geo.tokens_of_slots(slots))
            else:
                before = geo.tokens_of_slots(slots) - table.available_tokens
            holes = frozenset(s for s, b in enumerate(ids) if b == NULL_BLOCK)
            return geo.plan_checkpoints(slots, holes, Checkpoints(before, max(extent, before),
                                                                  self.config.prefix_granularity, reserve, promo))
        if new and geo.spec.replayable:
            return geo.plan_acquire(slots, 0, SparseSuffix(max(extent, 1), geo.replay_first_slot(hit_tokens), reserve))
        if new:
            fill = min(hit_tokens, geo.tokens_of_slots(slots))
            avail = geo.tokens_of_slots(slots) - fill
        else:
            avail = table.available_tokens
            fill = geo.tokens_of_slots(slots) - avail
        return geo.plan_acquire(slots, avail, DenseGrowth(max(extent - fill, 0), reserve))

    def _candidates(self, request: str, protected: frozenset[tuple[int, int]], num_computed_tokens: int
                    ) -> list[EvictionCandidate]:
        out: list[EvictionCandidate] = []
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

    def _shadow(self, candidates: Sequence[EvictionCandidate]) -> PoolShadow:
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
            key = idx.key_of(v.block)
            if key is None:
                raise RuntimeError(f"group {v.group}: cached candidate block {v.block} has no key")
            idx.evict(key)

    def _acquire(self, g: int, num: int, table_ids: Iterable[int]) -> tuple[int, ...] | None:
        return J.acquire_recorded(self.pool, self.journal, g, num, table_ids)

    def _record_admit(self, shadow: PoolShadow, need: tuple[int, ...], candidates: Sequence[EvictionCandidate],
                      protected: frozenset[tuple[int, int]], plan: AdmissionPlan, fresh: tuple[tuple[int, ...], ...]
                      ) -> None:
        if self.journal is not None:
            self.journal.append(J.AdmitRecord(shadow, need, tuple(candidates), protected, plan, fresh))

    # -- publish, retain, free ----------------------------------------------------------------------

    def publish(self, request: str, tokens: Sequence[int], num_computed_tokens: int,
                kind: BoundaryKind = BoundaryKind.CHUNK, decode: bool = False,
                prompt_tokens: int | None = None) -> int:
        """Register the request's completed whole pages; returns how many keys were registered or found.

        History groups register every completed page. A state group registers only recorded checkpoints the
        newly hashed range covers, and only as Endpoint (the prompt's last aligned checkpoint,
        floor(prompt / P) * P) or Promoted (``kind``): "Allocated slots and completed hashes alone are not
        proof"; a Chunk boundary's record is discarded unpublished. ``decode`` publishes no state."""
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
            kinds: dict[int, BoundaryKind] = {}
            slots: Sequence[int]
            if geo.spec.family == STATE:
                slots = [] if decode else self._state_slots(request, g, pages * p, prompt_tokens or len(tokens),
                                                            kind, kinds)
            else:
                slots = range(pages * m)
            for s in slots:
                if s >= len(table) or table.ids[s] == NULL_BLOCK:
                    continue
                key = CacheKey(g, hashes[s // m], s % m)
                own = table.ids[s]
                canon = self.indexes[g].register(key, own, epoch, s, kinds.get(s, kind))
                if canon != own:  # the key's canonical block replaces ours
                    self.refs.retain(g, canon)
                    table.ids[s] = canon
                    self.refs.drop(g, own)
                keys.append(key)
                if self.host is not None and self._streams(geo, decode):
                    self.host.queue(key)
        if self.journal is not None:
            self.journal.append(J.PublishRecord(p, tuple(tokens[:pages * p]), tuple(hashes), tuple(keys)))
        return len(keys)

    def _state_slots(self, request: str, g: int, hashed: int, prompt: int, kind: BoundaryKind,
                     kinds: dict[int, BoundaryKind]) -> list[int]:
        """The slots of recorded boundaries within the hashed range classified Endpoint or Promoted (their
        records are consumed, Chunk ones dropped unpublished); fills ``kinds`` with each slot's kind."""
        rec = self.checkpoints.get(request, {}).get(g)
        if not rec:
            return []
        p, bg = self.config.prefix_granularity, self.geometry[g].block_granularity
        endpoint = prompt // p * p
        out = []
        for b in sorted(x for x in rec if x <= hashed):
            rec.discard(b)
            k = max(kind, BoundaryKind.PROMOTED if b in self.promoted.get(request, ()) else
                    BoundaryKind.ENDPOINT if b == endpoint else BoundaryKind.CHUNK)
            if k >= BoundaryKind.ENDPOINT:
                out.append((b - 1) // bg)
                kinds[(b - 1) // bg] = k
        return out

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

    @staticmethod
    def _streams(geo: GroupGeometry, decode: bool) -> bool:
        """The write-back policy for a newly published entry (cache concepts L187)."""
        if geo.spec.replayable:
            return False
        if geo.spec.retention == SLIDING_WINDOW:
            return True  # "Ordinary sliding-window entries always stream when published"
        return not decode  # full attention and state: prefill boundaries only

    def free(self, request: str, finished: bool = False) -> None:
        """Drop every reference the request's tables hold, suffix first (a deterministic FIFO order). A
        finished (or retracted) request first queues its published non-state pages and its newest state
        checkpoint for the Host tier ("queued before request ownership is released")."""
        if finished and self.host is not None:
            for g, table in enumerate(self.tables[request]):
                geo = self.geometry[g]
                if geo.spec.replayable:
                    continue
                keys = [k for b in table.ids if b != NULL_BLOCK
                        for k in [self.indexes[g].key_of(b)] if k is not None]
                for key in keys[-1:] if geo.spec.family == STATE else keys:
                    self.host.queue(key)
        self.checkpoints.pop(request, None)
        self.promoted.pop(request, None)
        for g, table in enumerate(self.tables.pop(request)):
            for b in reversed(table.ids):
                if b != NULL_BLOCK:
                    self.refs.drop(g, b)
        del self.epochs[request]

    # -- the Host tier --------------------------------------------------------------------------------

    def start_pending_stores(self) -> StoreOp | None:
        """Drain the store queue into one write-back (sources pinned until complete_store)."""
        return self.host.start_pending_stores() if self.host is not None else None

    def complete_store(self, op_id: int) -> None:
        """The write-back's ACK: its keys become Host entries of their groups' indexes."""
        if self.host is None:
            raise ValueError("no Host tier")
        self.clock += 1
        self.host.complete(op_id, self.clock)

    def can_clear_cache(self) -> bool:
        return self.host is None or self.host.can_clear()

    def clear_cache(self) -> bool:
        """ClearCache: refused (False, nothing changed) while a write-back is unacknowledged; otherwise every
        Host entry and every Device entry held only by the cache is dropped."""
        if not self.can_clear_cache():
            return False
        if self.host is not None:
            self.host.clear()
        for idx in self.indexes:
            for key, _e in idx.evictable():
                idx.evict(key)
        return True

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
