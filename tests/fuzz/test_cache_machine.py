"""The `cache` stateful machine: pool, prefix index and admission planner under random operations.

Random admit / grow / publish / reclaim / free / evict / probe, plus raw acquire and release on the pool,
over a few configurations (hybrid full + sliding + Mamba, packed and sharded full groups, a replayable
sliding group), and with a Host tier: start the queued stores, acknowledge one, ClearCache. After every
step: every TS-* rule (spec.cache_checking.check_cache on the drained journal) and a naive oracle — a dict
of cached keys and their blocks, kept from the operations' results, a recount of every block's holders
(tables, cache entries, raw holdings, store tickets) against the pool's occupancy and the reference
counts, and the L2 rules against a naive set of Host keys: a store names each key's canonical Device block
and skips keys on Host or in flight (TS-L2-4, TS-L2-6), never a replayable group (TS-L2-7), pinned sources
stay cached until the ACK (TS-L2-1), ClearCache is refused exactly while a store is in flight (TS-L2-8),
and the index's Host entries are the acknowledged keys.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvsim.kvmodel.cache import journal as J
from kvsim.kvmodel.cache.admission import Tier
from kvsim.kvmodel.cache.cache_key import CacheKey
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.coordinator import CacheCoordinator
from kvsim.kvmodel.cache.group_spec import full, sliding, state
from kvsim.kvmodel.cache.layer_binding import LayerBinding
from kvsim.spec.cache_checking import check_cache

P = 4
CONFIGS = {
    "hybrid": lambda n: CacheConfig(P, (full("full", 4), sliding("swa", 2, 4), state("mamba", 4)), (2, 2, 1), n),
    "packed": lambda n: CacheConfig(P, (full("a", 2), full("b", 4)), (3, 1), n),
    "sharded": lambda n: CacheConfig(P, (full("kv", 4, shard_count=2), sliding("swa", 4, 5)), (2, 1), n),
    "replay": lambda n: CacheConfig(P, (full("kv", 4), sliding("swa", 2, 3, replayable=True), state("m", 2)),
                                    (1, 2, 2), n, num_host_pages=12),
    "hosted": lambda n: CacheConfig(P, (full("full", 4), sliding("swa", 2, 4), state("mamba", 4)), (2, 2, 1), n,
                                    num_host_pages=8),
}
# prompts share prefixes: each is a few pages drawn from a small set, then a short tail
PAGES = [[100 * i + j for j in range(P)] for i in range(5)]
prompts = st.tuples(st.lists(st.integers(0, 4), min_size=0, max_size=4),
                    st.lists(st.integers(1, 3), max_size=3)).map(
    lambda t: [tok for i in t[0] for tok in PAGES[i]] + t[1])


class CacheMachine(RuleBasedStateMachine):
    names = sorted(CONFIGS)

    @initialize(data=st.data(), parents=st.integers(10, 30))
    def setup(self, data, parents):
        cfg = CONFIGS[data.draw(st.sampled_from(self.names))](parents)
        layers = [LayerBinding(g, g, None if s.sliding_window_tokens is None else s.sliding_window_tokens - 1,
                               None if s.family == "state" else s.block_granularity)
                  for g, s in enumerate(cfg.groups)]
        self.c = CacheCoordinator(cfg, journal=[], layers=layers)
        self.requests: dict[str, dict] = {}  # id -> {"tokens", "extent", "computed"}
        self.raw: list[tuple[int, int]] = []  # (group, block) acquired straight from the pool
        self.keys: dict[CacheKey, int] = {}  # the oracle: cached key -> its canonical block
        self.fifo = self.c.pool.empty_parents()  # the empty-parent FIFO after the last step
        self.n = 0
        self.host_keys: set[CacheKey] = set()  # the oracle's Host tier: acknowledged keys still held
        self.flying: dict[int, list] = {}       # op id -> its transfers

    # -- operations -------------------------------------------------------------------------------

    @precondition(lambda self: len(self.requests) < 3)  # few live requests: the cache fills, eviction follows
    @rule(tokens=prompts, reserve=st.integers(0, 5))
    def admit(self, tokens, reserve):
        if not tokens:
            tokens = [7]
        rid = f"r{self.n}"
        self.n += 1
        before = self.c.pool.snapshot()
        res = self.c.admit(rid, tokens, len(tokens), reserve)
        if res is None:
            assert self.c.pool.snapshot() == before and rid not in self.c.tables
            return
        self._forget_victims(res.victims)
        self.requests[rid] = {"tokens": list(tokens), "extent": len(tokens), "computed": res.hit_tokens}

    @rule(tokens=prompts)
    def warm(self, tokens):
        """A whole request in one step: admit, compute, publish, free — the cache keeps its pages."""
        rid = f"r{self.n}"
        self.admit(tokens or [7], 0)
        if rid in self.requests:
            self.requests[rid]["computed"] = self.requests[rid]["extent"]
            self._publish(rid)
            self.c.free(rid)
            del self.requests[rid]

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), more=st.integers(1, 6))
    def grow(self, data, more):
        rid = data.draw(st.sampled_from(sorted(self.requests)))
        r = self.requests[rid]
        toks = r["tokens"] + [9] * max(r["extent"] + more - len(r["tokens"]), 0)
        res = self.c.admit(rid, toks, r["extent"] + more, num_computed_tokens=r["computed"])
        if res is not None:
            self._forget_victims(res.victims)
            r["tokens"], r["extent"] = toks, r["extent"] + more

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def compute_and_publish(self, data):
        rid = data.draw(st.sampled_from(sorted(self.requests)))
        r = self.requests[rid]
        r["computed"] = data.draw(st.integers(r["computed"], r["extent"]))
        self._publish(rid)

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def reclaim(self, data):
        rid = data.draw(st.sampled_from(sorted(self.requests)))
        self.c.reclaim_expired(rid, self.requests[rid]["computed"])

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def free(self, data):
        rid = data.draw(st.sampled_from(sorted(self.requests)))
        self.c.free(rid)
        del self.requests[rid]

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def finish(self, data):
        """Compute and publish everything, then free: the cache alone keeps the pages (eviction fodder)."""
        rid = data.draw(st.sampled_from(sorted(self.requests)))
        self.requests[rid]["computed"] = self.requests[rid]["extent"]
        self._publish(rid)
        self.c.free(rid, finished=True)
        del self.requests[rid]

    # -- the Host tier ---------------------------------------------------------------------------

    @precondition(lambda self: self.c.host is not None and bool(self.c.host.pending))
    @rule()
    def start_stores(self):
        before = self.c.host.pool.free
        op = self.c.start_pending_stores()
        held = {k for idx in self.c.indexes for k, _ in idx.host_entries()}
        evicted = self.host_keys - held  # Host entries leave only to make room for this store
        assert held <= self.host_keys and (not evicted or (op is not None and len(op.transfers) > before))
        self.host_keys = held
        if op is None:
            return
        flying = {t.key for ts in self.flying.values() for t in ts}
        assert op.transfers
        for t in op.transfers:
            assert t.key not in flying and t.key not in self.host_keys, t  # TS-L2-4: never twice in flight
            assert not self.c.config.groups[t.group].replayable, t         # TS-L2-7
            entry = self.c.indexes[t.group].find(t.key)
            assert entry is not None and entry.block == t.device_block, t   # TS-L2-6: the key's own block
            flying.add(t.key)
        assert len({(t.group, t.device_block, t.host_page) for t in op.transfers}) == len(op.transfers)  # L2-3
        self.flying[op.op_id] = list(op.transfers)

    @precondition(lambda self: self.flying)
    @rule(data=st.data())
    def ack_store(self, data):
        oid = data.draw(st.sampled_from(sorted(self.flying)))
        self.c.complete_store(oid)
        self.host_keys.update(t.key for t in self.flying.pop(oid))

    @precondition(lambda self: bool(self.flying or self.host_keys))  # a clear with nothing on Host proves nothing
    @rule()
    def clear_cache(self):
        accepted = self.c.clear_cache()
        assert accepted == (not self.flying)  # TS-L2-8
        if accepted:
            self.host_keys.clear()
            gone = [k for k, b in self.keys.items() if self.c.indexes[k.group].find(k) is None]
            for k in gone:
                del self.keys[k]

    def _publish(self, rid):
        """Publish, then extend the oracle: a newly cached key maps to the block the index now holds, and a
        key already cached keeps its canonical block."""
        r = self.requests[rid]
        self.c.publish(rid, r["tokens"], r["computed"])
        pages = min(r["computed"], len(r["tokens"])) // P
        hashes = self.c.page_hashes(r["tokens"], pages)
        for g, spec in enumerate(self.c.config.groups):
            m = P // spec.block_granularity
            for s in range(pages * m):
                key = CacheKey(g, hashes[s // m], s % m)
                entry = self.c.indexes[g].find(key)
                if key in self.keys:
                    assert entry is not None and entry.block == self.keys[key]
                elif entry is not None:
                    assert not spec.replayable
                    self.keys[key] = entry.block

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def evict(self, data):
        key = data.draw(st.sampled_from(sorted(self.keys)))
        pinned = self.c.refs.count(key.group, self.keys[key]) > 1  # a table (or a store ticket) holds it too
        assert self.c.evict(key.group, key) is not pinned
        if not pinned:
            del self.keys[key]

    @rule(tokens=prompts)
    def probe(self, tokens):
        before = self.c.pool.snapshot()
        res = self.c.probe(tokens or [7])
        assert self.c.pool.snapshot() == before and res.hit_tokens % P == 0

    @precondition(lambda self: len(self.raw) < 8)
    @rule(data=st.data(), num=st.integers(0, 4))
    def raw_acquire(self, data, num):
        g = data.draw(st.integers(0, len(self.c.config.groups) - 1))
        mine = [b for gg, b in self.raw if gg == g]
        ids = J.acquire_recorded(self.c.pool, self.c.journal, g, num, mine)
        if ids is not None:
            self.c.refs.adopt(g, ids)
            self.raw.extend((g, b) for b in ids)

    @precondition(lambda self: self.raw)
    @rule(data=st.data())
    def raw_release(self, data):
        i = data.draw(st.integers(0, len(self.raw) - 1))
        g, b = self.raw.pop(i)
        assert self.c.refs.drop(g, b)

    def _forget_victims(self, victims):
        for v in victims:
            if v.tier != Tier.UNCACHED:
                gone = [k for k, b in self.keys.items() if k.group == v.group and b == v.block]
                assert len(gone) == 1, (v, gone)
                del self.keys[gone[0]]

    # -- checks after every step ----------------------------------------------------------------

    @invariant()
    def rules_hold(self):
        found = check_cache(self.c.state())
        assert not found, found

    @invariant()
    def oracle_agrees(self):
        c = self.c
        cached = {k: e.block for idx in c.indexes for k, e in idx.entries()}
        assert cached == self.keys
        holders = Counter(self.raw)
        for tables in c.tables.values():
            for g, t in enumerate(tables):
                holders.update((g, b) for b in t.ids if b)
        holders.update((k.group, b) for k, b in self.keys.items())
        holders.update((t.group, t.device_block) for ts in self.flying.values() for t in ts)  # store tickets
        assert dict(holders) == c.refs.live()
        for ts in self.flying.values():  # TS-L2-1: a pinned source stays the key's cached block until the ACK
            for t in ts:
                entry = c.indexes[t.group].find(t.key)
                assert entry is not None and entry.block == t.device_block, t
        host = {k for idx in c.indexes for k, _ in idx.host_entries()}
        assert host == self.host_keys, (host, self.host_keys)
        occupied = {(g, c.pool.block_id(g, p, ch)) for p in range(1, c.pool.num_parents + 1)
                    for g, occ in [c.pool.parent(p)] if g is not None for ch, u in enumerate(occ) if u}
        assert occupied == set(holders)
        # parents leave the FIFO from the front and return at the back: the survivors keep order and lead
        now, prev = c.pool.empty_parents(), self.fifo
        assert any(now[:len(prev) - j] == prev[j:] for j in range(len(prev) + 1)), (prev, now)
        self.fifo = now


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])


class HostCacheMachine(CacheMachine):
    """The same machine on the configurations with a Host tier only, so stores, ACKs and clears are frequent."""
    names = ["hosted", "replay"]


TestHostCacheMachine = HostCacheMachine.TestCase
TestHostCacheMachine.settings = settings(max_examples=30, stateful_step_count=40, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
