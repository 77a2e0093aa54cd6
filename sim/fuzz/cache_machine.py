"""The `cache` and `cache-host` fuzz machines: the cache-concepts model against the naive cache oracle.

`CacheMachine` drives kvmodel.cache's CacheCoordinator through random request lifecycles -- admit (with its
prefix match), extend (prefill chunks and decode steps), publish, reclaim, finish, retract and readmit,
abort, explicit eviction, raw pool holdings, ClearCache -- over a configuration drawn per run: one to four
cache groups (full attention, sliding window, replayable window, state), block granularities, shard counts,
packing and pool sizes, tight ones included. Before each step the oracle (sim.fuzz.cache_oracle, written
from seed 002 alone) says what a correct cache does -- the hit, the blocks each group acquires, whether the
admission fits and which blocks are evicted in which order -- and after every step the whole state is
compared: cached keys with their blocks, epochs, slots and kinds; every block's holders; the tables; holes
per group and empty parents, the empty-parent FIFO; the Host entries, the store queue and the stores in
flight. Every TS-* state rule (spec.cache_checking) runs after every step too.

`CacheHostMachine` always has a Host tier of a few pages and weights the Host rules: stores started at any
time, acknowledged late and out of order, ClearCache with stores in flight, Host eviction under pressure
(least recently used first), keys evicted on Device while their Host copy stays.
The model is imported here at call time through `kvsim.kvmodel.cache` (a self-check's mutated copy is what
runs); the oracle never imports it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.cache_oracle import FULL, SLIDING, STATE, CacheOracle, Group
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.stats import RUN

P = 4
PAGES = [[100 * i + j for j in range(P)] for i in range(5)]
prompts = st.tuples(st.lists(st.integers(0, 4), max_size=4), st.lists(st.integers(1, 3), max_size=3)).map(
    lambda t: [tok for i in t[0] for tok in PAGES[i]] + t[1] or [7])

group_specs = st.one_of(
    st.tuples(st.just(FULL), st.sampled_from((1, 2, 4)), st.just(None), st.just(False), st.integers(1, 2)),
    st.tuples(st.just(SLIDING), st.sampled_from((1, 2, 4)), st.integers(1, 9), st.booleans(), st.just(1)),
    st.tuples(st.just(STATE), st.sampled_from((1, 2, 4)), st.just(2), st.just(False), st.just(1)),
)


def cache_configs(host: bool | None = None):
    """(groups, packing, parents, host pages): a full group first most of the time, tight pools first."""
    return st.tuples(
        st.lists(group_specs, min_size=1, max_size=4).filter(
            lambda gs: sum(g[3] for g in gs) < len(gs)),  # at least one matched group
        st.lists(st.integers(1, 3), min_size=4, max_size=4),
        st.one_of(st.integers(2, 8), st.integers(8, 30)),
        st.just(0) if host is False else st.integers(2, 7) if host else st.one_of(st.just(0), st.integers(2, 10)))


class CacheMachine(RuleBasedStateMachine):
    name = "cache"
    oracles = ("cache", "host")  # the prefixes of the oracle branches it reaches (sim.fuzz.stats)
    config_strategy = cache_configs()

    def __init__(self) -> None:
        super().__init__()
        self.c: Any = None  # the CacheCoordinator under test (imported at call time: a self-check runs a copy)
        self.served: list[list] = []  # the last prompts served whole (follow-up turns reuse them)
        self.failed = False
        self.log: list = []

    @staticmethod
    def catalogue_ids() -> list[str]:
        """The catalogue rules this machine checks: every TS-* state rule."""
        from kvsim.spec.cache_checking import cache_rules
        return [r.id for r in cache_rules()]

    @initialize(cfg=config_strategy)
    def setup(self, cfg) -> None:
        from kvsim.kvmodel.cache.config import CacheConfig
        from kvsim.kvmodel.cache.coordinator import CacheCoordinator
        from kvsim.kvmodel.cache.group_spec import full, sliding, state
        from kvsim.kvmodel.cache.layer_binding import LayerBinding
        specs, packing, parents, host = cfg
        groups, model = [], []
        for i, (kind, bg, w, replay, shards) in enumerate(specs):
            if kind == FULL:
                model.append(full(f"g{i}", bg, shard_count=shards))
            elif kind == SLIDING:
                model.append(sliding(f"g{i}", bg, w, replayable=replay))
            else:
                model.append(state(f"g{i}", bg))
            groups.append(Group(kind, bg, None if kind == FULL else 2 if kind == STATE else w, replay,
                                packing[i], shards))
        config = CacheConfig(P, tuple(model), tuple(packing[:len(specs)]), parents, num_host_pages=host)
        layers = [LayerBinding(g, g, None if s.sliding_window_tokens is None else s.sliding_window_tokens - 1,
                               None if s.family == "state" else s.block_granularity)
                  for g, s in enumerate(config.groups)]
        self.log.append(["config", repr(config)])
        self.c = CacheCoordinator(config, journal=[], layers=layers)
        self.o = CacheOracle(P, groups, parents, host)
        self.hmap: dict[str, tuple] = {}  # the model's page hash -> the token prefix it names
        self.pmap: dict[tuple, str] = {}
        self.live: dict[str, dict] = {}  # request -> {"prompt", "computed", "extent"}
        self.served = []  # the last prompts served whole (follow-up turns reuse them)
        self.n = 0
        RUN.examples += 1

    # -- plumbing ---------------------------------------------------------------------------------------
    def count(self, label: str, *args) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1
        self.log.append([label, *args])

    def fail(self, kind: str, message: str, rule: str | None = None):
        self.failed = True
        text = f"{kind}: {message}"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 -- outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            data = "".join(json.dumps(x, default=repr) + "\n" for x in self.log).encode()
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": kind, "message": text, "rule": rule or f"ORACLE-{kind}",
                                "reproduced": False, "trace": None, "log": str(path), "steps": len(self.log)}
            text = f"{RUN.last_failure['rule']} ({kind}) -- step log {path}: {text}"
        raise FuzzFailure(text)

    def expect(self, ok: bool, kind: str, message) -> None:
        if not ok:
            self.fail(kind, message() if callable(message) else message)

    def call(self, label: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except Exception as exc:  # noqa: BLE001 -- a crash inside the model
            self.fail("crash", f"{label}: {type(exc).__name__}: {exc}")

    def learn(self, tokens) -> None:
        """Bind the model's page hashes to the token prefixes they name: one-to-one, forever."""
        pages = len(tokens) // P
        for i, h in enumerate(self.c.page_hashes(tokens, pages)):
            pre = tuple(tokens[:(i + 1) * P])
            if self.hmap.setdefault(h, pre) != pre or self.pmap.setdefault(pre, h) != h:
                self.fail("hash", f"page hash {h[:12]} names two prefixes, or a prefix has two hashes", "TS-PFX-1")

    def okey(self, key) -> tuple:
        pre = self.hmap.get(key.content_hash)
        if pre is None:
            self.fail("hash", f"the model caches key {key} whose hash no published prefix has", "TS-PFX-1")
        return (key.group, (pre, key.page_offset))

    def rid(self) -> str:
        self.n += 1
        return f"r{self.n}"

    def pick(self, data) -> str:
        return data.draw(st.sampled_from(sorted(self.live)))

    # -- requests ----------------------------------------------------------------------------------------
    @precondition(lambda self: self.c is not None and len(self.live) < 4)
    @rule(tokens=prompts, data=st.data())
    def admit(self, tokens, data) -> None:
        """A new request: probe, then admit its first chunk (or the whole prompt) with a reserve."""
        extent = data.draw(st.integers(1, len(tokens)))
        reserve = data.draw(st.sampled_from((0, 0, 1, 2, 5)))
        self.new_request(self.rid(), tokens, extent, reserve)

    def new_request(self, rid, tokens, extent, reserve) -> bool:
        """A first admission computes at least one token past its hit: "hit plus growth becomes the absolute
        extent" (seed 002 L176), so an extent is never below hit + 1 (the hit stops short of the last token)."""
        extent = max(extent, self.o.probe(tokens)[0] + 1)
        self.learn(tokens)
        self.count("admit", rid, tokens, extent, reserve)
        self.check_probe(tokens)
        plan = self.o.plan_admit(rid, tokens, extent, reserve, 0)
        before = self.c.pool.snapshot()
        res = self.call("admit", self.c.admit, rid, tokens, extent, reserve)
        return self.follow_admit("admit", rid, tokens, extent, reserve, plan, res, before)

    def follow_admit(self, label, rid, tokens, extent, reserve, plan, res, before, decode=False) -> bool:
        if res is None:
            self.expect(not plan.fits, "outcome", f"{label} {rid}: the model refused; the oracle fits it "
                        f"(need {plan.need}, victims {plan.victims})")
            self.expect(self.c.pool.snapshot() == before, "changed", f"{label} {rid}: refused, the pool changed")
            return False
        self.expect(plan.fits, "outcome", f"{label} {rid}: the model admitted; the oracle refuses (need {plan.need})")
        self.expect(res.hit_tokens == plan.hit, "hit", lambda: f"{label} {rid}: hit {res.hit_tokens}, the oracle "
                    f"says {plan.hit}")
        got = tuple((v.group, v.block) for v in res.victims)
        self.expect(got == plan.victims, "eviction", lambda: f"{label} {rid}: evicted {got}, the oracle evicts "
                    f"{plan.victims} (in this order)")
        bad = self.o.admit(rid, tokens, extent, reserve, plan, res.fresh, decode)
        self.expect(not bad, "placement", lambda: f"{label} {rid}: " + "; ".join(bad))
        r = self.live.setdefault(rid, {"prompt": len(tokens), "computed": plan.hit})
        r["extent"] = max(extent, r.get("extent", 0), plan.hit)
        return True

    @precondition(lambda self: self.c is not None)
    @rule(tokens=prompts, data=st.data())
    def warm(self, tokens, data) -> None:
        """A whole request in one go -- admit, compute, publish, finish: the cache keeps its pages (eviction
        fodder, prefix hits for the next requests)."""
        rid = self.rid()
        if self.new_request(rid, tokens, len(tokens), 0):
            self.do_publish(rid, tokens, len(tokens))
            self.served = [*self.served[-7:], list(tokens)]
            self.release(rid, data.draw(st.booleans()))

    @precondition(lambda self: self.c is not None and self.served)
    @rule(data=st.data(), pages=st.lists(st.integers(0, 4), min_size=1, max_size=2),
          tail=st.lists(st.integers(1, 3), max_size=2))
    def follow_up(self, data, pages, tail) -> None:
        """A conversation's next turn: an earlier prompt's whole pages, then more -- a prefix hit on every group
        that kept its pages (state checkpoints included), then publication and finish past it."""
        prev = data.draw(st.sampled_from(self.served))
        tokens = prev[:len(prev) // P * P] + [t for i in pages for t in PAGES[i]] + tail
        self.warm(tokens, data)

    @precondition(lambda self: self.c is not None and self.live)
    @rule(data=st.data(), more=st.integers(1, 6))
    def extend(self, data, more) -> None:
        """The next chunk of a prefill, or a decode step of one token once the prompt is computed."""
        rid = self.pick(data)
        r = self.live[rid]
        o = self.o.requests[rid]
        decode = r["extent"] >= r["prompt"] and data.draw(st.booleans())
        if decode:  # the step before computed everything it admitted
            r["computed"] = max(r["computed"], r["extent"])
        extent = r["extent"] + (1 if decode else more)
        tokens = o.tokens + [data.draw(st.sampled_from((9, 100, 101, 102, 103))) for _ in
                             range(max(extent - len(o.tokens), 0))]
        computed = r["computed"]
        self.learn(tokens)
        self.count("extend:decode" if decode else "extend", rid, extent)
        plan = self.o.plan_admit(rid, tokens, extent, 0, computed)
        before = self.c.pool.snapshot()
        res = self.call("extend", self.c.admit, rid, tokens, extent, num_computed_tokens=computed, decode=decode)
        if self.follow_admit("extend", rid, tokens, extent, 0, plan, res, before, decode):
            r["decode"] = decode

    @precondition(lambda self: self.c is not None and self.live)
    @rule(data=st.data())
    def publish(self, data) -> None:
        rid = self.pick(data)
        r = self.live[rid]
        tokens = self.o.requests[rid].tokens
        r["computed"] = data.draw(st.integers(r["computed"], r["extent"]))
        decode = bool(r.get("decode"))
        self.do_publish(rid, tokens, r["computed"], decode)
        if data.draw(st.booleans()):  # retention after publication: "ordered before retention reclaims" (L178)
            self.do_reclaim(rid)

    def do_publish(self, rid, tokens, computed, decode=False) -> None:
        self.learn(tokens)
        self.count("publish:decode" if decode else "publish", rid, computed)
        prompt = self.live[rid]["prompt"]
        want = self.o.publish(rid, tokens, computed, decode=decode, prompt=prompt)
        got = self.call("publish", self.c.publish, rid, tokens, computed, decode=decode, prompt_tokens=prompt)
        self.expect(got == want, "publish", f"publish {rid}: {got} keys registered or found, the oracle says {want}")

    @precondition(lambda self: self.c is not None and self.live)
    @rule(data=st.data())
    def reclaim(self, data) -> None:
        self.do_reclaim(self.pick(data))

    def do_reclaim(self, rid) -> None:
        computed = self.live[rid]["computed"]
        self.count("reclaim", rid, computed)
        want = self.o.reclaim(rid, computed)
        got = self.call("reclaim", self.c.reclaim_expired, rid, computed)
        self.expect(got == want, "reclaim", f"reclaim {rid}: {got} slots punched, the oracle punches {want}")

    @precondition(lambda self: self.c is not None and self.live)
    @rule(data=st.data())
    def finish(self, data) -> None:
        """Compute and publish the rest, then free: the request's pages (and newest checkpoint) go to Host."""
        rid = self.pick(data)
        r = self.live[rid]
        self.do_publish(rid, self.o.requests[rid].tokens, r["extent"], bool(r.get("decode")))
        self.release(rid, True)

    @precondition(lambda self: self.c is not None and self.live)
    @rule(data=st.data())
    def abort(self, data) -> None:
        self.release(self.pick(data), False)

    @precondition(lambda self: self.c is not None and self.live)
    @rule(data=st.data())
    def retract_readmit(self, data) -> None:
        """Retraction (preemption): queue for Host, release, then readmit the same tokens under a new id."""
        rid = self.pick(data)
        tokens = list(self.o.requests[rid].tokens)
        extent = self.live[rid]["extent"]
        self.release(rid, True, "retract")
        self.new_request(self.rid(), tokens, extent, 0)

    def release(self, rid, finished, label=None) -> None:
        self.count(label or ("free:finished" if finished else "free"), rid)
        self.o.free(rid, finished)
        self.call("free", self.c.free, rid, finished=finished)
        del self.live[rid]

    @precondition(lambda self: self.c is not None)
    @rule(tokens=prompts)
    def probe(self, tokens) -> None:
        self.learn(tokens)
        self.count("probe", tokens)
        before = self.c.pool.snapshot()
        self.check_probe(tokens)
        self.expect(self.c.pool.snapshot() == before, "changed", "probe changed the pool")

    def check_probe(self, tokens) -> None:
        hit, _closed, hits = self.o.probe(tokens)
        got = self.call("probe", self.c.probe, tokens)
        self.expect(got.hit_tokens == hit, "hit", lambda: f"probe {tokens}: hit {got.hit_tokens}, the oracle "
                    f"says {hit}")
        model = [list(p.hits) for p in got.probes]
        self.expect(model == hits, "hit", lambda: f"probe {tokens}: reused slots {model}, the oracle says {hits}")

    @precondition(lambda self: self.c is not None and any(self.o.entries))
    @rule(data=st.data())
    def evict(self, data) -> None:
        keys = sorted((g, k) for g, es in enumerate(self.o.entries) for k in es)
        g, k = data.draw(st.sampled_from(keys))
        self.count("evict", g, k)
        want = self.o.evictable(g, k)
        mkey = self.model_key(g, k)
        got = self.call("evict", self.c.evict, g, mkey)
        self.expect(bool(got) == want, "evict", f"evict {k} of group {g}: the model says {got}, the oracle "
                    f"{'frees it' if want else 'says it is pinned'}")
        self.o.evict(g, k)

    def model_key(self, g, k):
        from kvsim.kvmodel.cache.cache_key import CacheKey
        return CacheKey(g, self.pmap[k[0]], k[1])

    @precondition(lambda self: self.c is not None and len(self.o.raw) < 6)
    @rule(data=st.data(), num=st.integers(0, 4))
    def raw_acquire(self, data, num) -> None:
        """Blocks held straight from the pool (an in-flight transfer's holding): all or nothing."""
        from kvsim.kvmodel.cache import journal as J
        g = data.draw(st.integers(0, len(self.o.groups) - 1))
        self.count("raw_acquire", g, num)
        want = self.o.raw_acquire(g, num)
        mine = [b for gg, b in self.o.raw if gg == g]
        ids = self.call("raw_acquire", J.acquire_recorded, self.c.pool, self.c.journal, g, num, mine)
        self.expect((ids is not None) == want, "outcome", f"raw acquire of {num} in group {g}: the model "
                    f"{'granted' if ids is not None else 'refused'}")
        if ids is not None:
            held = self.o.holders()
            for b in ids:
                self.expect(not held[(g, b)], "placement", f"raw acquire handed out held block {b}")
            self.call("raw_acquire", self.c.refs.adopt, g, ids)
            for b in ids:
                p, _ = self.o.locate(g, b)
                if p in self.o.fifo:
                    self.o.fifo.remove(p)
            self.o.raw.extend((g, b) for b in ids)

    @precondition(lambda self: self.c is not None and self.o.raw)
    @rule(data=st.data())
    def raw_release(self, data) -> None:
        g, b = self.o.raw.pop(data.draw(st.integers(0, len(self.o.raw) - 1)))
        self.count("raw_release", g, b)
        self.call("raw_release", self.c.refs.drop, g, b)
        self.o.settle_fifo()

    # -- the Host tier -------------------------------------------------------------------------------------
    @precondition(lambda self: self.c is not None and self.o.host_pages)
    @rule()
    def start_stores(self) -> None:
        self.count("start_stores")
        todo, _keep, n_evict, _lru = self.o.plan_store()
        host_before = self.host_entries()
        op = self.call("start_stores", self.c.start_pending_stores)
        evicted = [gk for gk in host_before if gk not in self.host_entries()]
        self.expect(len(evicted) == n_evict and self.o.lru_ok(evicted), "host-eviction",
                    lambda: f"store: Host evicted {evicted}; the oracle evicts {n_evict} least recently used "
                    f"({[(gk, self.o.host[gk][1]) for gk in sorted(self.o.host, key=lambda x: self.o.host[x][1])]})")
        if op is None:
            self.expect(not todo, "store", f"store: nothing started; the oracle starts {todo}")
            self.o.start_store(None, (), evicted)
            return
        got = [(t.group, self.okey(t.key)[1], t.device_block) for t in op.transfers]
        self.expect(got == todo, "store", lambda: f"store {op.op_id}: transfers {got}; the oracle starts {todo}")
        pages = [t.host_page for t in op.transfers]
        used = self.o.host_pages_used() - {self.o.host[gk][0] for gk in evicted}
        self.expect(len(set(pages)) == len(pages) and all(0 < p < self.o.host_pages and p not in used for p in pages),
                    "store", f"store {op.op_id}: Host pages {pages} repeat, are out of range or in use ({used})")
        self.expect(op.op_id not in self.o.flying, "store", f"store id {op.op_id} is already in flight")
        self.o.start_store(op.op_id, pages, evicted)

    @precondition(lambda self: self.c is not None and self.o.flying)
    @rule(data=st.data())
    def ack(self, data) -> None:
        """An ACK, of any store in flight (late, out of order)."""
        op = data.draw(st.sampled_from(sorted(self.o.flying)))
        self.count("ack", op)
        self.call("ack", self.c.complete_store, op)
        self.o.ack(op)

    @precondition(lambda self: self.c is not None and (self.o.flying or self.o.host or any(self.o.entries)))
    @rule(gate=st.integers(0, 3))
    def clear_cache(self, gate) -> None:
        if gate and not self.o.flying:  # mostly while a store is in flight: a clear wipes what the run built
            return
        self.count("clear_cache")
        got = self.call("clear_cache", self.c.clear_cache)
        want = self.o.clear()
        self.expect(got == want, "clear", f"ClearCache {'accepted' if got else 'refused'}; the oracle "
                    f"{'accepts' if want else 'refuses: a store is in flight'}")

    def host_entries(self) -> dict:
        return {self.okey(k): [e.page, e.last_access_epoch] for idx in self.c.indexes for k, e in idx.host_entries()}

    # -- after every step ------------------------------------------------------------------------------------
    @invariant()
    def agrees(self) -> None:
        if self.c is None or self.failed:
            return
        from kvsim.spec.cache_checking import check_cache
        found = self.call("check_cache", check_cache, self.c.state(), RUN.coverage)
        if found:
            self.fail("violation", f"{found[0].rule}: {found[0].message}", found[0].rule)
        c, o = self.c, self.o
        model = {}
        for idx in c.indexes:
            for k, e in idx.entries():
                model[self.okey(k)] = (e.block, e.last_access_epoch, e.logical_index, int(e.kind), e.was_acquired)
        mine = {(g, k): (e.block, e.epoch, e.slot, e.kind, e.acquired) for g, es in enumerate(o.entries)
                for k, e in es.items()}
        self.expect(model == mine, "cached", lambda: "cached entries (block, epoch, slot, kind, acquired) differ: "
                    + diff(model, mine))
        held = {k: v for k, v in o.holders().items() if v}
        live = c.refs.live()
        self.expect(live == held, "pinned", lambda: "holders per (group, block) differ: " + diff(live, held))
        tables = {r: [list(t.ids) for t in ts] for r, ts in c.tables.items()}
        mine_t = {r: [list(t) for t in q.tables] for r, q in o.requests.items()}
        self.expect(tables == mine_t, "tables", lambda: "block tables differ: " + diff(tables, mine_t))
        occ = o.occupancy()
        free = [c.pool.free_slots(g) for g in range(len(o.groups))]
        self.expect(free == o.free_slots(occ) and c.pool.num_empty_parents == o.empty_parents(occ), "free",
                    lambda: f"free counts: holes {free}, empty parents {c.pool.num_empty_parents}; the oracle "
                    f"counts {o.free_slots(occ)}, {o.empty_parents(occ)}")
        fifo = list(c.pool.empty_parents())
        self.expect(o.fifo_ok(fifo), "fifo", lambda: f"empty-parent FIFO {fifo}; the oracle's {o.fifo} "
                    f"(arrivals {[o.arrival.get(p) for p in o.fifo]})")
        if c.host is not None:
            host = self.host_entries()
            self.expect(host == o.host, "host", lambda: "Host entries (page, epoch) differ: " + diff(host, o.host))
            pending = [self.okey(k) for k in c.host.pending]
            self.expect(pending == o.pending, "queue", lambda: f"store queue {pending}; the oracle's {o.pending}")
            flying = {i: [(t.group, self.okey(t.key)[1], t.device_block, t.host_page) for t in op.transfers]
                      for i, op in c.host.in_flight.items()}
            self.expect(flying == o.flying, "in-flight", lambda: "stores in flight differ: " + diff(flying, o.flying))
            self.expect(c.can_clear_cache() == (not o.flying), "clear", "ClearCache clearable differs")

    def teardown(self) -> None:
        self.log.clear()


def diff(a: dict, b: dict) -> str:
    keys = sorted({*a, *b}, key=repr)
    out = [f"{k!r}: model {a.get(k)!r}, oracle {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]
    return "; ".join(out[:4])


class CacheHostMachine(CacheMachine):
    """A Host tier of one to six pages always, and the Host rules drawn twice as often."""

    name = "cache-host"
    config_strategy = cache_configs(host=True)

    @initialize(cfg=config_strategy)
    def setup(self, cfg) -> None:
        super().setup(cfg)

    @precondition(lambda self: self.c is not None)
    @rule()
    def start_stores_again(self) -> None:
        self.start_stores()

    @precondition(lambda self: self.c is not None and len(self.o.flying) > 1)
    @rule(data=st.data())
    def ack_newest(self, data) -> None:
        """The newest store's ACK while older ones are still in flight."""
        op = max(self.o.flying)
        self.count("ack:newest", op)
        self.call("ack", self.c.complete_store, op)
        self.o.ack(op)

    @precondition(lambda self: self.c is not None)
    @rule(tokens=prompts, data=st.data())
    def warm_and_store(self, tokens, data) -> None:
        """A whole request, then a store of what it queued: several stores come to be in flight at once."""
        self.warm(tokens, data)
        self.start_stores()
