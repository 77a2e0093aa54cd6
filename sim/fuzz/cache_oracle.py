"""A naive oracle of the cache concepts (seed 002), for the `cache` and `cache-host` fuzz machines.

Written from the seed alone and never importing kvmodel.cache (tests/fuzz/test_cache_oracle.py enforces the
boundary): plain dicts and lists, recounted from scratch where the model keeps indexes. It predicts what a
correct cache does with each lifecycle step and keeps the state a correct cache holds:

- what is reusable (`probe`): the greatest prefix boundary, a multiple of P within the (n - 1) // P hashed
  pages, that every non-replayable group supports -- a full-history group when every slot below it is
  cached ("walks left-to-right until the first miss"), a window group (sliding, or state at W = 2) when the
  ceil((W - 1) / bg) slots behind it are cached or the run reaches slot 0 ("scans right-to-left for a run
  backing a resumable boundary"; "Mamba ... is SwaMatcher at window 2"); seed 002 L154, L176, L185;
- what each admission acquires (`admit`): dense growth for history groups, a sparse suffix from the replay
  window's first token for a replayable group's first admission (L176, L53), and for a state group only the
  aligned internal checkpoint floor(after / P) * P, the final continuation checkpoint, the reserve's slot
  and a promotion boundary (L74, L82);
- which blocks are evicted AND in which order (`admit`): "first check whether existing local holes plus
  empty parents fit with zero eviction; otherwise select eviction candidates until the plan fits ... LRU
  access epoch, then tier (uncached request-only block -> probationary boundary -> established boundary ->
  suffix of a closed prefix). Finally, walk the selected blocks in reverse and restore every block that is
  not strictly required" (L199); current hits protected;
- what is pinned: holders per block (tables, cache entries, store tickets, raw holdings), recounted;
- free counts: holes per group and empty parents, from the oracle's own occupancy (block id
  1 + (parent - 1) * k * D + child), and the empty-parent FIFO ("A parent with zero occupants is unbound,
  so its capacity belongs to the global empty-parent FIFO", L36);
- the Host tier (L187-L189, L112): which keys are queued (prefill boundaries of full and state groups,
  sliding entries whenever published, replayable never; at finish or retraction the non-state pages and the
  NEWEST state checkpoint per group), which keys a store starts (skipping keys on Host, in flight or no
  longer cached), which Host entries leave for room (least recently used first), the pins each store holds
  until its ACK, and ClearCache refused exactly while a store is in flight.

Every decision point calls `stats.reached("cache:...")`, so a campaign shows which branches it reached.
Keys are the oracle's own: (group, the token prefix through the page, page offset) -- a prefix identity,
not a hash, so the machine checks the model's hashes map one-to-one onto them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvsim.sim.fuzz.stats import declare, reached

FULL, SLIDING, STATE = "full", "sliding", "state"
CHUNK, ENDPOINT, PROMOTED = 0, 1, 2  # boundary kinds, only ever raised (L81)
UNCACHED, PROBATIONARY, ESTABLISHED, CLOSED = 0, 1, 2, 3  # eviction tiers, in the seed's order (L199)

BRANCHES = (
    "cache:probe:miss", "cache:probe:hit", "cache:probe:window-cut", "cache:probe:promotion",
    "cache:admit:zero-eviction", "cache:admit:evict", "cache:admit:evict-request-tail", "cache:admit:refused",
    "cache:admit:minimised", "cache:admit:hits-protected", "cache:admit:replay-suffix",
    "cache:admit:state-aligned", "cache:admit:state-reserve", "cache:admit:state-hole-filled",
    "cache:admit:new-parent", "cache:evict-order:tier", "cache:evict-order:epoch",
    "cache:publish:new-key", "cache:publish:canonical-swap", "cache:publish:state-endpoint",
    "cache:publish:state-promoted", "cache:publish:state-chunk-dropped", "cache:publish:decode",
    "cache:reclaim:expired", "cache:free:parent-to-fifo", "cache:evict:pinned", "cache:evict:freed",
    "cache:raw:refused",
    "host:queue:prefill", "host:queue:sliding", "host:queue:finish", "host:queue:finish-newest-state",
    "host:store:started", "host:store:skip-on-host", "host:store:skip-in-flight", "host:store:skip-uncached",
    "host:store:evict-lru", "host:store:short", "host:store:nothing", "host:ack:out-of-order",
    "host:ack:in-order", "host:clear:refused", "host:clear:accepted", "host:evicted-device-kept-host",
)
declare(BRANCHES)


@dataclass(frozen=True)
class Group:
    kind: str  # full | sliding | state
    bg: int  # block_granularity (tokens per slot)
    window: int | None  # W: the sliding window; 2 for state; None for full history
    replayable: bool
    packing: int  # k: blocks per LCM parent
    shards: int  # D

    @property
    def spp(self) -> int:
        return self.packing * self.shards

    @property
    def lookback(self) -> int:
        return 0 if self.window is None else -(-(self.window - 1) // self.bg)


@dataclass
class Entry:
    block: int
    epoch: int
    slot: int
    kind: int = CHUNK
    acquired: bool = False


@dataclass
class Request:
    tokens: list
    epoch: int
    tables: list  # per group: block ids by slot, 0 = hole
    fill: list  # per group: tokens the table covers (its slots minus the available tail)
    checkpoints: dict = field(default_factory=dict)  # state group -> recorded aligned boundaries
    promoted: set = field(default_factory=set)


@dataclass(frozen=True)
class Admission:
    fits: bool
    hit: int
    need: tuple  # blocks per group
    slots: tuple  # per group: the slots the fresh blocks fill, in order
    victims: tuple  # ((group, block), ...) in selection order


class CacheOracle:
    def __init__(self, P: int, groups: list[Group], num_parents: int, host_pages: int = 0) -> None:
        self.P, self.groups, self.num_parents = P, groups, num_parents
        self.entries: list[dict] = [{} for _ in groups]  # group -> okey (prefix, offset) -> Entry, insertion order
        self.requests: dict[str, Request] = {}
        self.raw: list[tuple[int, int]] = []
        self.clock = 0
        self.fifo: list[int] = list(range(1, num_parents + 1))  # empty parents, front first
        self.arrival: dict[int, int] = dict.fromkeys(self.fifo, 0)  # parent -> the step batch it joined the FIFO in
        self.batch = 0
        self.host_pages = host_pages if host_pages > 1 else 0
        self.host: dict = {}  # (group, okey) -> [page, epoch], insertion order
        self.pending: list = []  # queued (group, okey)
        self.flying: dict[int, list] = {}  # op id -> [(group, okey, block, page)]

    # -- derived facts ------------------------------------------------------------------------------
    def holders(self) -> Counter:
        """Every reference: table slots, cache entries, store tickets, raw holdings."""
        c: Counter = Counter()
        for r in self.requests.values():
            for g, t in enumerate(r.tables):
                c.update((g, b) for b in t if b)
        for g, es in enumerate(self.entries):
            c.update((g, e.block) for e in es.values())
        c.update((g, b) for ts in self.flying.values() for g, _k, b, _p in ts)
        c.update(self.raw)
        return c

    def locate(self, g: int, block: int) -> tuple[int, int]:
        spp = self.groups[g].spp
        return (block - 1) // spp + 1, (block - 1) % spp

    def occupancy(self, held=None) -> dict[int, tuple[int, set]]:
        """parent -> (its group, occupied children), from the held blocks."""
        occ: dict[int, tuple[int, set]] = {}
        for g, b in (self.holders() if held is None else held):
            p, ch = self.locate(g, b)
            occ.setdefault(p, (g, set()))[1].add(ch)
        return occ

    def free_slots(self, occ=None) -> list[int]:
        occ = self.occupancy() if occ is None else occ
        free = [0] * len(self.groups)
        for g, children in occ.values():
            free[g] += self.groups[g].spp - len(children)
        return free

    def empty_parents(self, occ=None) -> int:
        return self.num_parents - len(self.occupancy() if occ is None else occ)

    def key_of(self, g: int, block: int):
        for k, e in self.entries[g].items():
            if e.block == block:
                return k
        return None

    def evictable(self, g: int, k) -> bool:
        """Held only by the cache (L38)."""
        e = self.entries[g].get(k)
        return e is not None and self.holders()[(g, e.block)] == 1

    def page_keys(self, tokens, pages: int) -> list[tuple]:
        P = self.P
        return [tuple(tokens[:(i + 1) * P]) for i in range(pages)]

    def okey(self, tokens, g: int, slot: int):
        m = self.P // self.groups[g].bg
        return (tuple(tokens[:(slot // m + 1) * self.P]), slot % m)

    # -- probe ----------------------------------------------------------------------------------------
    def supports(self, g: int, tokens, boundary: int) -> bool:
        grp = self.groups[g]
        end = boundary // grp.bg
        lo = 0 if grp.window is None else max(0, end - grp.lookback)
        return all(self.okey(tokens, g, s) in self.entries[g] for s in range(lo, end))

    def probe(self, tokens, prefill: int | None = None) -> tuple[int, int, list]:
        """(hit tokens, the prefix-closed groups' boundary, per group the hit slots as a list of bools)."""
        n = len(tokens) if prefill is None else prefill
        P = self.P
        bound = max(n - 1, 0) // P * P  # "(prefill - 1) // P" hashed pages
        live = [g for g, grp in enumerate(self.groups) if not grp.replayable]
        closed_groups = [g for g in live if self.groups[g].window is None]
        closed = max((b for b in range(0, bound + 1, P) if all(self.supports(g, tokens, b) for g in closed_groups)),
                     default=0)
        hit = max(b for b in range(0, bound + 1, P) if all(self.supports(g, tokens, b) for g in live))
        if hit < closed:
            reached("cache:probe:window-cut")
        reached("cache:probe:hit" if hit else "cache:probe:miss")
        hits: list[list[bool]] = []
        for grp in self.groups:
            end = hit // grp.bg
            if grp.replayable:
                hits.append([])
            elif grp.window is None:
                hits.append([True] * end)
            else:
                lo = max(0, end - grp.lookback) if grp.lookback else end
                hits.append([s >= lo for s in range(end)])
        return hit, closed, hits

    # -- admission ------------------------------------------------------------------------------------
    def demand(self, g: int, table: list, fill: int, new: bool, hit: int, extent: int, reserve: int,
               promo: int) -> tuple[list[int], int, int]:
        """(slots to materialize, table length after, tokens covered after) of one group."""
        grp, P = self.groups[g], self.P
        bg = grp.bg
        slots = len(table)

        def ceil(a: int) -> int:
            return -(-max(a, 0) // bg)
        if grp.kind == STATE:  # L74, L82: aligned internal checkpoint, final continuation, reserve, promotion
            before = min(hit, slots * bg) if new else fill
            after = max(extent, before)
            want = {(after - 1) // bg} if after > 0 else set()
            aligned = after // P * P
            if before < aligned < after:
                want.add((aligned - 1) // bg)
                reached("cache:admit:state-aligned")
            if reserve > 0:
                want.add((after + reserve - 1) // bg)
                reached("cache:admit:state-reserve")
            if before < promo < after:
                want.add((promo - 1) // bg)
            picked = sorted(s for s in want if s >= slots or table[s] == 0)
            if any(s < slots for s in picked):
                reached("cache:admit:state-hole-filled")
            return picked, max(slots, ceil(after + reserve)), after
        if new and grp.replayable:  # L176: a sparse private suffix from the replay window's first token
            reached("cache:admit:replay-suffix")
            ext = max(extent, 1)
            first = max(hit - (grp.window or 0), 0) // bg
            after_slots = max(slots, ceil(ext + reserve))
            return list(range(max(first, slots), after_slots)), after_slots, ext
        if new:
            fill = min(hit, slots * bg)
        cover = max(extent, fill)
        nb = ceil(cover + reserve - slots * bg)
        return list(range(slots, slots + nb)), slots + nb, cover

    def candidates(self, rid: str, protected: set, computed: int) -> list[tuple]:
        """Eviction candidates with their order key: (epoch, tier, rank, group, parent, child, block)."""
        out = []
        held = self.holders()
        for g, es in enumerate(self.entries):
            grp = self.groups[g]
            for e in es.values():
                if held[(g, e.block)] != 1 or (g, e.block) in protected:
                    continue
                if grp.window is None:
                    tier, rank = CLOSED, -e.slot  # the suffix of a closed prefix goes first
                elif e.kind == CHUNK and not e.acquired:
                    tier, rank = PROBATIONARY, e.slot
                else:
                    tier, rank = ESTABLISHED, e.slot
                out.append((e.epoch, tier, rank, g, *self.locate(g, e.block), e.block))
        r = self.requests.get(rid)
        if r is not None:  # the request's own expired, uncached tail (L178: it "can fund the same admission")
            for g, t in enumerate(r.tables):
                for s in range(self.expired(g, computed)):
                    b = t[s] if s < len(t) else 0
                    if b and held[(g, b)] == 1 and self.key_of(g, b) is None:
                        out.append((0, UNCACHED, s, g, *self.locate(g, b), b))
        return sorted(out)

    def fits(self, need, victims, occ) -> bool:
        """Whether need fits after the victims leave (shadow occupancy: the real one is never touched)."""
        occ = {p: (g, set(ch)) for p, (g, ch) in occ.items()}
        for _e, _t, _r, _g, p, ch, _b in victims:
            occ[p][1].discard(ch)
            if not occ[p][1]:
                del occ[p]
        free, empty = self.free_slots(occ), self.empty_parents(occ)
        short = sum(-(-(n - free[g]) // self.groups[g].spp) for g, n in enumerate(need) if n > free[g])
        return short <= empty

    def plan_admit(self, rid: str, tokens, extent: int, reserve: int, computed: int,
                   prefill: int | None = None) -> Admission:
        r = self.requests.get(rid)
        new = r is None
        hit, closed, hits = self.probe(tokens, prefill) if new else (0, 0, [[] for _ in self.groups])
        promo = closed if new and closed > hit else 0
        if promo:
            reached("cache:probe:promotion")
        need: list[int] = []
        slots: list[tuple] = []
        protected: set[tuple[int, int]] = set()
        for g in range(len(self.groups)):
            if new:
                table = [self.entries[g][self.okey(tokens, g, s)].block if h else 0 for s, h in enumerate(hits[g])]
                protected.update((g, b) for b in table if b)
                fill = 0
            else:
                if r is None:
                    raise RuntimeError(f"oracle: no request holds group {g}'s row")
                table, fill = r.tables[g], r.fill[g]
            picked, _, _ = self.demand(g, table, fill, new, hit, extent, reserve, promo)
            need.append(len(picked))
            slots.append(tuple(picked))
        occ = self.occupancy()
        if self.fits(need, (), occ):
            reached("cache:admit:zero-eviction")
            return Admission(True, hit, tuple(need), tuple(slots), ())
        cands = self.candidates(rid, protected, computed)
        if protected:
            reached("cache:admit:hits-protected")
        chosen = []
        for c in cands:
            chosen.append(c)
            if self.fits(need, chosen, occ):
                break
        else:
            reached("cache:admit:refused")
            return Admission(False, hit, tuple(need), tuple(slots), ())
        kept = list(chosen)
        for c in reversed(chosen):  # "walk the selected blocks in reverse and restore ... not strictly required"
            trial = [v for v in kept if v is not c]
            if self.fits(need, trial, occ):
                kept = trial
                reached("cache:admit:minimised")
        reached("cache:admit:evict")
        if any(v[1] == UNCACHED for v in kept):
            reached("cache:admit:evict-request-tail")
        if len({v[1] for v in kept}) > 1:
            reached("cache:evict-order:tier")
        if len({v[0] for v in kept}) > 1:
            reached("cache:evict-order:epoch")
        return Admission(True, hit, tuple(need), tuple(slots), tuple((v[3], v[6]) for v in kept))

    def admit(self, rid: str, tokens, extent: int, reserve: int, plan: Admission, fresh, decode: bool = False
              ) -> list[str]:
        """Follow a granted admission; `fresh` (per group, the block ids the model acquired) is checked: never a
        held block, in range, and a parent opened only when the group's holes are spent, from the FIFO front.
        Returns what is wrong with them."""
        bad: list[str] = []
        new = rid not in self.requests
        if new:
            self.clock += 1
            hit, closed, hits = self.probe(tokens)
            tables = [[self.entries[g][self.okey(tokens, g, s)].block if h else 0 for s, h in enumerate(hits[g])]
                      for g in range(len(self.groups))]
            for g, t in enumerate(tables):
                for s, b in enumerate(t):
                    if b:
                        e = self.entries[g][self.okey(tokens, g, s)]
                        e.epoch, e.acquired = max(e.epoch, self.clock), True
            r = Request(list(tokens), self.clock, tables, [0] * len(self.groups))
            self.requests[rid] = r
            promo = closed if closed > hit else 0
        else:
            r, hit, promo = self.requests[rid], 0, 0
            r.tokens = list(tokens)
        for g, b in plan.victims:
            k = self.key_of(g, b)
            if k is not None and self.holders()[(g, b)] == 1:
                del self.entries[g][k]
            else:  # the request's own expired tail slot
                t = r.tables[g]
                t[t.index(b)] = 0
        self.settle_fifo()
        for g in range(len(self.groups)):
            ids = list(fresh[g])
            if len(ids) != plan.need[g]:
                bad.append(f"group {g}: {len(ids)} fresh blocks, the plan needs {plan.need[g]}")
                continue
            held = self.holders()
            vbc = 1 + self.num_parents * self.groups[g].spp
            for b in ids:
                if not 0 < b < vbc or held[(g, b)]:
                    bad.append(f"group {g}: fresh block {b} is out of range or still held")
                    continue
                occ = self.occupancy(held)
                p, _ = self.locate(g, b)
                if p not in occ:
                    if self.free_slots(occ)[g]:
                        bad.append(f"group {g}: block {b} opens parent {p} while the group has holes")
                    elif p not in self.fifo or self.arrival[p] != min(self.arrival[q] for q in self.fifo):
                        bad.append(f"group {g}: block {b} opens parent {p}, not at the empty-parent FIFO's front "
                                   f"{[q for q in self.fifo if self.arrival[q] == self.arrival[self.fifo[0]]]}")
                    if p in self.fifo:
                        self.fifo.remove(p)
                    reached("cache:admit:new-parent")
                elif occ[p][0] != g:
                    bad.append(f"group {g}: block {b} lies in parent {p}, bound to group {occ[p][0]}")
                held[(g, b)] += 1
                self.raw.append((g, b))  # held while the table is built below
            t = r.tables[g]
            _, after_slots, cover = self.demand(g, t, r.fill[g], new, hit, extent, reserve, promo)
            t.extend([0] * (max(after_slots, max(plan.slots[g], default=-1) + 1) - len(t)))
            for s, b in zip(plan.slots[g], ids, strict=False):
                t[s] = b
            r.fill[g] = cover
            for b in ids:
                self.raw.remove((g, b))
            if self.groups[g].kind == STATE and not decode:  # provenance: the last aligned checkpoint (L76)
                bg = self.groups[g].bg
                for bnd in (extent // self.P * self.P, promo):
                    if bnd > 0 and (bnd - 1) // bg < len(t) and t[(bnd - 1) // bg]:
                        r.checkpoints.setdefault(g, set()).add(bnd)
                        if bnd == promo:
                            r.promoted.add(bnd)
        return bad

    # -- publication, retention, free ------------------------------------------------------------------
    def streams(self, g: int, decode: bool) -> bool:
        """The write-back policy of a newly published entry (L187)."""
        grp = self.groups[g]
        if grp.replayable or not self.host_pages:
            return False
        return grp.kind == SLIDING or not decode

    def publish(self, rid: str, tokens, computed: int, kind: int = CHUNK, decode: bool = False,
                prompt: int | None = None) -> int:
        r = self.requests[rid]
        P = self.P
        pages = min(computed, len(tokens)) // P
        hashed = pages * P
        if decode:
            reached("cache:publish:decode")
        n = 0
        for g, grp in enumerate(self.groups):
            if grp.replayable:
                continue
            m = P // grp.bg
            t = r.tables[g]
            kinds: dict[int, int] = {}
            if grp.kind == STATE:
                slots = []
                rec = r.checkpoints.get(g, set())
                endpoint = (prompt or len(tokens)) // P * P
                for b in sorted(x for x in rec if x <= hashed) if not decode else ():
                    rec.discard(b)
                    k = max(kind, PROMOTED if b in r.promoted else ENDPOINT if b == endpoint else CHUNK)
                    if k >= ENDPOINT:
                        slots.append((b - 1) // grp.bg)
                        kinds[(b - 1) // grp.bg] = k
                        reached("cache:publish:state-promoted" if k == PROMOTED else "cache:publish:state-endpoint")
                    else:
                        reached("cache:publish:state-chunk-dropped")
            else:
                slots = list(range(pages * m))
            for s in slots:
                if s >= len(t) or not t[s]:
                    continue
                k = self.okey(tokens, g, s)
                e = self.entries[g].get(k)
                if e is not None:
                    e.epoch, e.kind = max(e.epoch, r.epoch), max(e.kind, kinds.get(s, kind))
                    if e.block != t[s]:
                        reached("cache:publish:canonical-swap")
                        t[s] = e.block
                else:
                    reached("cache:publish:new-key")
                    self.entries[g][k] = Entry(t[s], r.epoch, s, kinds.get(s, kind))
                n += 1
                if self.streams(g, decode):
                    reached("host:queue:sliding" if grp.kind == SLIDING else "host:queue:prefill")
                    self.queue(g, k)
        self.settle_fifo()
        return n

    def expired(self, g: int, computed: int) -> int:
        """Leading slots no later query reads: max(0, computed - W + 1) // bg, whole pages only; full history
        never expires (L152, DESIGN §5)."""
        w = self.groups[g].window
        return 0 if w is None else max(0, computed - w + 1) // self.groups[g].bg

    def reclaim(self, rid: str, computed: int) -> int:
        n = 0
        for g, t in enumerate(self.requests[rid].tables):
            for s in range(min(self.expired(g, computed), len(t))):
                if t[s]:
                    t[s] = 0
                    n += 1
        if n:
            reached("cache:reclaim:expired")
        self.settle_fifo()
        return n

    def free(self, rid: str, finished: bool = False) -> None:
        """Release the request's references; a finished (or retracted) request first queues its published
        non-state pages and the NEWEST existing checkpoint per state group (L187)."""
        r = self.requests[rid]
        if finished and self.host_pages:
            for g, t in enumerate(r.tables):
                grp = self.groups[g]
                if grp.replayable:
                    continue
                keys = [k for b in t if b for k in [self.key_of(g, b)] if k is not None]
                if grp.kind == STATE:
                    keys = keys[-1:]  # the newest: the deepest slot
                    if keys:
                        reached("host:queue:finish-newest-state")
                elif keys:
                    reached("host:queue:finish")
                for k in keys:
                    self.queue(g, k)
        del self.requests[rid]
        self.settle_fifo()

    def evict(self, g: int, k) -> bool:
        if not self.evictable(g, k):
            reached("cache:evict:pinned")
            return False
        del self.entries[g][k]
        reached("cache:evict:freed")
        if (g, k) in self.host:
            reached("host:evicted-device-kept-host")
        self.settle_fifo()
        return True

    def raw_acquire(self, g: int, num: int) -> bool:
        """All or nothing: holes plus empty parents x slots per parent."""
        free, empty = self.free_slots(), self.empty_parents()
        ok = free[g] + empty * self.groups[g].spp >= num
        if not ok:
            reached("cache:raw:refused")
        return ok

    def settle_fifo(self) -> None:
        """Parents whose last child was released join the FIFO's back (the order among parents emptied by one
        step is the model's: the machine compares each step's arrivals as a set)."""
        occ = self.occupancy()
        gone = [p for p in range(1, self.num_parents + 1) if p not in occ and p not in self.fifo]
        if gone:
            reached("cache:free:parent-to-fifo")
            self.batch += 1
            for p in gone:
                self.arrival[p] = self.batch
        self.fifo.extend(gone)

    def fifo_ok(self, model_fifo) -> bool:
        """The model's FIFO holds the oracle's empty parents, each step's arrivals behind the earlier ones."""
        order = [self.arrival.get(p, -1) for p in model_fifo]
        return sorted(model_fifo) == sorted(self.fifo) and order == sorted(order)

    # -- the Host tier --------------------------------------------------------------------------------------
    def queue(self, g: int, k) -> None:
        if (g, k) not in self.pending:
            self.pending.append((g, k))

    def plan_store(self) -> tuple[list, list, int, list]:
        """What a store started now does: (the transfers, in queue order: (group, okey, block); the keys left
        queued; how many Host entries leave for room; the Host entries in least-recently-used order)."""
        flying = {(g, k) for ts in self.flying.values() for g, k, _b, _p in ts}
        todo = []
        for g, k in self.pending:
            if (g, k) in flying:
                reached("host:store:skip-in-flight")
            elif (g, k) in self.host:
                reached("host:store:skip-on-host")
            elif k not in self.entries[g]:
                reached("host:store:skip-uncached")
            else:
                todo.append((g, k, self.entries[g][k].block))
        free = self.host_pages - 1 - len(self.host) - sum(len(ts) for ts in self.flying.values())
        lru = sorted(self.host, key=lambda gk: self.host[gk][1])
        evict = min(max(len(todo) - free, 0), len(lru))
        if evict:
            reached("host:store:evict-lru")
        if len(todo) > free + evict:
            reached("host:store:short")
        n = min(len(todo), free + evict)
        return todo[:n], [(g, k) for g, k, _b in todo[n:]], evict, lru

    def lru_ok(self, evicted) -> bool:
        """Host entries leave least recently used first: none evicted is newer than one kept (ties are free)."""
        kept = [v[1] for gk, v in self.host.items() if gk not in evicted]
        return all(self.host[gk][1] <= min(kept, default=self.host[gk][1]) for gk in evicted)

    def start_store(self, op_id: int | None, pages, evicted) -> None:
        todo, keep, _n, _lru = self.plan_store()
        for gk in evicted:
            del self.host[gk]
        self.pending = keep
        if op_id is None:
            reached("host:store:nothing")
            return
        reached("host:store:started")
        self.flying[op_id] = [(g, k, b, p) for (g, k, b), p in zip(todo, pages, strict=True)]

    def ack(self, op_id: int) -> None:
        reached("host:ack:in-order" if op_id == min(self.flying) else "host:ack:out-of-order")
        self.clock += 1
        for g, k, _b, p in self.flying.pop(op_id):
            self.host[(g, k)] = [p, self.clock]
        self.settle_fifo()

    def clear(self) -> bool:
        """ClearCache: refused while a write-back is unacknowledged (L189); otherwise every Host entry and every
        Device entry held only by the cache goes."""
        if self.flying:
            reached("host:clear:refused")
            return False
        reached("host:clear:accepted")
        self.host.clear()
        self.pending.clear()
        for g, es in enumerate(self.entries):
            for k in [k for k in es if self.evictable(g, k)]:
                del es[k]
        self.settle_fifo()
        return True

    def host_pages_used(self) -> set:
        return {v[0] for v in self.host.values()} | {p for ts in self.flying.values() for *_x, p in ts}
