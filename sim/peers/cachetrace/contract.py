"""The observable contract of a prefix-caching scheduler, judged plan by plan from cachetrace/1 records.

A scheduler shows its runtime block tables, pages to zero and to copy, prefix lengths and cache operations;
it does not show its pool or index. This judge keeps only what those observations imply -- which live
table names which block, and which prefix key each block's content carries -- and checks:

* TS-TBL-1 (cache concepts: "publishing a table's completed blocks may replace one with the key's existing
  canonical block"): a block newly named by a table is either handed out fresh in that plan (a page to zero
  or a copy destination) or already holds exactly that slot's prefix key (a hit, or the swap to the
  canonical copy); no block is named by two live tables except through the same key; no write lands in a
  block another live table names or in a block holding published content.
* TS-POOL-4 ("a replicated group translates to itself minus the null block"): block 0 is never handed out,
  zeroed or copied; in a full-attention group a table never names it, holds -1 only as trailing padding and,
  while its request is live, never loses a slot it named (L165 "full attention never expires").
* TS-PFX-1 (prefix_granularity "defines the identity boundary of cached prefixes: two requests share cache
  only at multiples of this many tokens"): prefix hits are multiples of P and never reach the prompt's last
  token.
* TS-PFX-3 (cache concepts L179: a replayable group "never claims a hit, so its table is empty at first
  admission and the scheduler materializes it as a sparse private suffix from the replay window's first
  token"; L185: replayable groups "skip publication on both tiers"; L66: the re-fed window "is the retention
  window itself"): at a request's first extend it re-feeds min(W, hit) tokens, and a replayable group's row
  holds null holes below the slot of the replay window's first token and fresh pages from there; its pages
  are never published, so no later table may name one as cached content.
* PEER-1 capacity: every block id lies in [1, total_pages) of its group.
* PEER-2 fresh pages ("a load targets freshly acquired pages"): a page to zero or copy into is named by no
  live table other than the one receiving it in that plan, and appears once per plan.
* PEER-3 acknowledgement ("neither side dedups or invents an acknowledgement"): every cache op id is issued
  once and acknowledged exactly once, and only after it was issued.
* PEER-4 hits bounded by the trace: every hit page's prefix key was computed by some request in an earlier
  plan (the data plane orders a hitter's forward after the writer).
* PEER-10 the scheduler completes every call without an internal error (an ``error`` record: its own
  invariant check refused answers the trace shows to be legal -- acknowledgements may come plans late).

With a Host tier (``sim.peers.cachetrace.host_tier``, rules TS-L2-*), a write-back copies a Device page's content (its
key and last writer) to a Host page of the same group at plan time, and a load-back or restore hands out a
fresh Device page holding that Host page's content; a table that names it is judged by that content. A
snapshot retracts its request: its rows are released (the stream-ordered snapshot store has read them) and
its next row, after the restore, is judged afresh -- and, as its readmission, by TS-ADM-2
(``sim.peers.cachetrace.retraction``): it must secure more headroom than its previous admission did. A page handed
out fresh to a request outside the batch (a restore's growth page) counts as fresh when a table first names
it, in a later plan -- a weaker check than the same-plan one, since the judge cannot tell which request it
was meant for.

Prefix keys are the SHA-256 chain of ``kvmodel.cache.prefix_hash`` over the request's tokens (prompt, then
the tokens its results produced). This module knows cachetrace/1 records, never a scheduler's API.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.kvmodel.cache.prefix_hash import chain_digests, hashed_pages, page_digest, token_bytes
from kvsim.sim.peers.cachetrace import capacity, eviction, host_tier, l3_reads, retraction, state_group, store_policy
from kvsim.sim.trace import cachetrace as ct

__all__ = ["RULES", "Contract", "Finding"]

RULES: dict[str, tuple[str, str]] = {
    "TS-TBL-1": ("no two live tables alias a block except through the same cache key; no live table names "
                 "a freed block", "may replace one with the key's existing canonical block"),
    "TS-POOL-4": ("null block 0 never handed out, zeroed or named by a full-attention table; a full-attention "
                  "row holds -1 only as trailing padding and never loses a slot",
                  "a replicated group translates to itself minus the null block"),
    "TS-PFX-1": ("prefix hits only at multiples of prefix_granularity, short of the prompt's last token",
                 "two requests share cache only at multiples of this many tokens"),
    "TS-PFX-3": ("a replayable group claims no hit: it re-feeds its whole window, null holes below it, fresh "
                 "private pages from it",
                 "never claims a hit, so its table is empty at first admission and the scheduler materializes it "
                 "as a sparse private suffix from the replay window's first token"),
    "PEER-1": ("every block id lies within its group's pages (capacity never exceeded)",
               "its capacity belongs to the global empty-parent FIFO rather than any group"),
    "PEER-2": ("pages to zero and copy destinations are fresh: no other live table names them",
               "a load targets freshly acquired pages"),
    "PEER-3": ("every cache op is issued once and acknowledged exactly once",
               "neither side dedups or invents an acknowledgement"),
    "PEER-4": ("a prefix hit covers only pages some request computed in an earlier plan",
               "the FIFO data plane orders any hitter's forward after the writer"),
    "PEER-9": ("the scheduler's own pool counters agree with each other (active + available parents = the usable "
               "pool; empty <= available; no snapshot block held with no request retracted)",
               "its capacity belongs to the global empty-parent FIFO rather than any group"),
    "PEER-10": ("the scheduler completes every call on a legal sequence of answers, without an internal error",
                "A pinned op's sources stay cached and unevictable until the ACK, so its copy overlaps whatever "
                "the round does next"),
    **host_tier.RULES,
    **retraction.RULES,
    **store_policy.RULES,
    eviction.RULE: (eviction.TITLE, 'seed 002 L199: "first check whether existing local holes plus empty '
                       'parents fit with zero eviction; otherwise select eviction candidates until the plan fits"'),
    **state_group.RULES,
    **capacity.RULES,
    **l3_reads.RULES,
}


@dataclass
class Finding:
    rule: str
    line: int
    plan: int
    message: str
    context: dict = field(default_factory=dict)

    def as_dict(self, trace: str) -> dict:
        return {"rule": self.rule, "trace": trace, "event": self.plan, "line": self.line, "op": "plan",
                "message": self.message, "context": self.context}


class _Req:
    __slots__ = ("rid", "tokens", "generated", "digests", "computed", "rows", "seen", "hit", "prefill", "framed",
                 "image")

    def __init__(self, rid: str, tokens) -> None:
        self.rid = rid
        self.tokens = tokens
        self.generated: list[int] = []
        self.digests: list[bytes] = []
        self.computed = 0
        self.rows: dict[str, list[int]] = {}
        self.seen = False
        self.hit = 0
        self.prefill = len(tokens)
        self.framed: bytes | None = None
        self.image: dict[str, set[int]] = {}  # a retracted request's pages: its rows then, and what restores gave it

    def token_slice(self, a: int, b: int):
        n = len(self.tokens)
        if b <= n:
            return self.tokens[a:b]
        head = list(self.tokens[a:n]) if a < n else []
        return head + self.generated[max(a - n, 0):b - n]

    def digest(self, page: int, p: int) -> bytes | None:
        """The prefix key of page ``page`` (None while its tokens are not all known)."""
        d = self.digests
        if len(d) > page:
            return d[page]
        whole = len(self.tokens) // p
        if page < whole:  # prompt pages: frame the prompt once, hash every whole page in one pass
            if self.framed is None:
                self.framed = token_bytes(self.tokens)
            start = len(d)
            d.extend(chain_digests(d[-1] if d else b"", memoryview(self.framed)[start * 4 * p:], p, whole - start))
            return d[page]
        while len(d) <= page:
            i = len(d)
            if (i + 1) * p > len(self.tokens) + len(self.generated):
                return None
            d.append(page_digest(d[-1] if d else b"", self.token_slice(i * p, (i + 1) * p)))
        return d[page]


class Contract:
    """Feed it submit / plan / result records in order; ``findings`` collects what broke."""

    def __init__(self, config: ct.Config, max_findings: int = 1000) -> None:
        self.config = config
        self.p = config.prefix_granularity
        self.groups = {g.id: g for g in config.groups}
        self._replayable = [g.id for g in config.groups if g.replayable]
        self._replay_window = max((g.sliding_window_tokens or 0 for g in config.groups if g.replayable), default=0)
        self._declared = [g.id for g in config.groups if g.replayable and (g.attn_kind != "sliding" or
                                                                           not g.sliding_window_tokens)]
        self._replay_rows = 0  # replayable rows judged at a first extend (TS-PFX-3's premise)
        self.reqs: dict[str, _Req] = {}
        self.holders: dict[str, dict[int, int]] = {g: {} for g in self.groups}   # block -> live slots naming it
        self.content: dict[str, dict[int, tuple]] = {g: {} for g in self.groups}  # block -> key it holds
        self.writer: dict[str, dict[int, tuple]] = {g: {} for g in self.groups}   # block -> last (request, slot)
        self.l2 = host_tier.HostTier(self)
        self.headroom = retraction.Headroom()
        self.engine_failed = False  # PEER-10: the scheduler failed a call; the trace ends there
        self.stores = store_policy.StorePolicy(self)  # TS-L2-12: what the write-back policy owes the Host tier
        self._evict_group = eviction.premise(config)  # TS-ADM-4's group (None: outside its premise)
        for g in config.groups:
            if g.block_granularity == 0 and g.attn_kind != "mamba":
                raise ValueError(f"group {g.id!r}: block_granularity 0 is only a state (mamba) group's compact row")
        self.state = state_group.StateGroups(self)  # TS-ST-*: state rows are judged there, not by _row
        self.capacity = capacity.Capacity(self)     # TS-ADM-3 refusals at submission, TS-POOL-5 the page gauge
        self.l3 = l3_reads.L3Reads(self)            # TS-L2-13/14: what an L3 get may read
        self._state = set(self.state.ids)
        # the full-history group whose rows show what an admission secured (TS-ADM-2)
        self._history = next((g.id for g in config.groups if g.attn_kind == "full"), None)
        # per group: blocks handed out fresh (zeroed, copied or loaded into) that no table named yet -- a
        # restore hands pages to a request that rejoins the batch plans later
        self.handed: dict[str, set[int]] = {g: set() for g in self.groups}
        self._keyed_loads: dict[str, set[int]] = {}
        self.published: set[bytes] = set()
        self.pending: list[bytes] = []
        self.issued: set[int] = set()
        self.acked: set[int] = set()
        self.seen_keys: set[bytes] = set()   # every prompt page key submitted so far (the trace's bound)
        self.hits: dict[str, int] = {}     # request -> prefix hit of its first extend
        self.findings: list[Finding] = []
        self.max_findings = max_findings
        self.counts = {r: 0 for r in RULES}
        # plans in which each rule's premise held (fresh pages, a first prefix hit, a cache op): counted in
        # plans like `checked`, so exercised <= checked
        self.exercised = {r: 0 for r in RULES}
        self.stats = {"requests": 0, "plans": 0, "prompt_tokens": 0, "hits": 0, "hit_tokens": 0, "bound_tokens": 0,
                      "extend_tokens": 0, "decode_tokens": 0, "pages_zeroed": 0, "pages_copied": 0,
                      "cache_ops": 0, "tail_hits": 0, "aborts": 0, "finished": 0, "peak_live_blocks": 0}
        self.current_plan = -1
        self._batch: ct.Batch | None = None

    # -- findings ---------------------------------------------------------------------------------------------
    def find(self, rule: str, line: int, message: str, **ctx) -> None:
        self.counts[rule] += 1
        if len(self.findings) < self.max_findings:
            self.findings.append(Finding(rule, line, self.current_plan, message, ctx))

    # -- records ----------------------------------------------------------------------------------------------
    def submit(self, rec: ct.Submit, line: int = 0) -> None:
        self.capacity.submit(rec, line)
        if rec.refused is not None:  # refused at submission: it never runs
            return
        if rec.request in self.reqs:
            raise ValueError(f"request {rec.request!r} submitted while still live")
        r = _Req(rec.request, rec.tokens)
        self.reqs[rec.request] = r
        self.headroom.submit(rec.request, rec.max_new_tokens)
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += len(rec.tokens)
        pages = hashed_pages(len(rec.tokens), self.p)
        bound, chain = 0, True
        for i in range(pages):
            d = r.digest(i, self.p)
            if chain and d in self.seen_keys:
                bound += 1
            else:
                chain = False
        for i in range(hashed_pages(len(rec.tokens) + 1, self.p)):
            key = r.digest(i, self.p)
            if key is not None:  # hashed pages lie within the prompt: every key is known
                self.seen_keys.add(key)
        self.stats["bound_tokens"] += bound * self.p

    def plan(self, rec: ct.Plan, line: int = 0) -> None:
        if self._declared:  # TS-PFX-3, once, on the first plan: the configuration itself (seed 002 L66)
            for g in self._declared:
                self.find("TS-PFX-3", line, f"group {g} is declared replayable but is not a sliding-window group "
                          "with a window: replayable is set only on a sliding History group", group=g)
            self._declared = []
        st = self.stats
        before = (st["pages_zeroed"] + st["pages_copied"], st["hits"], st["cache_ops"],
                  self.headroom.stats["readmissions"], self._replay_rows, self.stores.judged)
        l2_before = dict(self.l2.exercised)
        st_before = dict(self.state.exercised)
        l3_before = dict(self.l3.exercised)
        self._plan_body(rec, line)
        self.l3.plan(rec, line)
        ex = self.exercised
        for rid, n in self.l2.exercised.items():  # the Host tier counts items; a plan counts once
            if n > l2_before[rid]:
                ex[rid] += 1
        for rid, n in self.state.exercised.items():
            if n > st_before[rid]:
                ex[rid] += 1
        for rid, n in self.l3.exercised.items():
            if n > l3_before[rid]:
                ex[rid] += 1
        if rec.gauge:
            self.capacity.gauge(rec, line)
            ex["TS-POOL-5"] += 1
        ex["TS-TBL-1"] += 1
        ex["PEER-1"] += 1
        ex["PEER-10"] += 1
        if st["pages_zeroed"] + st["pages_copied"] > before[0]:
            ex["TS-POOL-4"] += 1
            ex["PEER-2"] += 1
        if st["hits"] > before[1]:
            ex["TS-PFX-1"] += 1
            ex["PEER-4"] += 1
        if st["cache_ops"] > before[2]:
            ex["PEER-3"] += 1
        if self.headroom.stats["readmissions"] > before[3]:
            ex["TS-ADM-2"] += 1
        if self._replay_rows > before[4]:
            ex["TS-PFX-3"] += 1
        if self.stores.judged > before[5]:
            ex["TS-L2-12"] += 1

    def _plan_body(self, rec: ct.Plan, line: int) -> None:
        self.current_plan = rec.plan
        self.stats["plans"] += 1
        if self.pending:
            self.published.update(self.pending)
            self.pending.clear()
        b = rec.batch
        self._batch = b
        for rid in b.requests:
            if rid not in self.reqs:
                raise ValueError(f"plan {rec.plan} names request {rid!r} that was never submitted")
        if self._evict_group is not None:  # TS-ADM-4: before the fresh pages drop their content
            why = eviction.check(self, rec, self._evict_group)
            if why:
                self.find(eviction.RULE, line, why, group=self._evict_group)
        # Host tier: write-backs, load-backs, snapshots and restores run before this plan's copies, zeroing
        # and forward (cache concepts: "an unpinned op's sources may be re-granted in the same plan, so it is
        # launched first"); a snapshot's request is retracted: its rows are released once the store read them
        room = self.stores.room()
        loaded, keyed = self.l2.ops(rec, line)
        self.stores.ops(rec, room)
        if self._state:
            self.state.write_backs(rec, line)
        for rid in self.l2.take_retracted():
            self._retract(rid)
        # copies run before zeroing: "an unpinned op's sources may be re-granted in the same plan, so it is
        # launched first and ... waits on its completion event before the zeroing is enqueued"
        fresh: dict[str, set[int]] = {}
        copied: dict[str, dict[int, int]] = {}
        for g, pairs in rec.copy.items():
            self._check_ids(g, [s for s, _ in pairs], line, "copy source")
            self.l2.granted(g, [d for _, d in pairs], line, "copied into")
            writer = self.writer[g]
            for src, dst in pairs:
                copied.setdefault(g, {})[dst] = src
                if src in writer:
                    writer[dst] = writer[src]
                else:
                    writer.pop(dst, None)
            fresh.setdefault(g, set()).update(self._fresh_list(g, [d for _, d in pairs], line, "copy destination"))
            self.stats["pages_copied"] += len(pairs)
            if g in self._state:
                self.state.copied(g, pairs)
        for g, pages in rec.zero.items():
            fresh.setdefault(g, set()).update(self._fresh_list(g, pages, line, "zero"))
            self.l2.granted(g, pages, line, "zeroed")
            writer = self.writer[g]
            for blk in pages:
                writer.pop(blk, None)
            self.stats["pages_zeroed"] += len(pages)
        for g, pages in loaded.items():
            fresh.setdefault(g, set()).update(pages)
        self._keyed_loads = {}
        for g, dst, key in keyed:  # a loaded page holds the key it was written back with
            self.content[g][dst] = key
            self._keyed_loads.setdefault(g, set()).add(dst)
        for g, blocks in fresh.items():
            for blk in blocks:
                self.l2.fresh(g, blk)
            self.stores.regranted(g, blocks)
        if self._state:
            self.state.regranted(rec)
        newly: dict[str, dict[int, list[tuple[str, int]]]] = {}
        private = {g: fresh.get(g, set()) | self.handed[g] for g in self._replayable}  # fresh for TS-PFX-3
        for g, rows in rec.tables.items():
            if g not in self.groups:
                raise ValueError(f"plan {rec.plan} names unknown cache group {g!r}")
            for rid, row in rows.items():
                if g in self._state:
                    self.state.row(g, rid, row, fresh.get(g, set()) | self.handed[g], newly.setdefault(g, {}), line)
                    continue
                self._row(g, rid, row, fresh.get(g, set()) | self.handed[g], newly.setdefault(g, {}), line)
        for g, blocks in fresh.items():
            hold = self.holders[g]
            got = newly.get(g, {})
            for blk in sorted(blocks):
                receivers = got.get(blk, [])
                if not receivers:  # handed to a request outside this batch (a restore's growth): named later
                    self.handed[g].add(blk)
                if hold.get(blk, 0) > len(receivers):
                    self.find("PEER-2", line, f"{g} block {blk} is handed out fresh while a live table still names "
                              "it", group=g, block=blk)
                elif len(receivers) > 1:
                    self.find("TS-TBL-1", line, f"fresh {g} block {blk} given to {len(receivers)} slots "
                              f"({', '.join(f'{r}[{i}]' for r, i in receivers[:4])})", group=g, block=blk)
        # prefix hits: the first extend of a request
        p = self.p
        first = {rid for rid in b.requests[:b.extends] if not self.reqs[rid].seen} if self._state else set()
        for k in range(b.extends):
            rid = b.requests[k]
            r = self.reqs[rid]
            if r.seen:
                continue
            r.seen = True
            if self._replayable:
                self._replayable_rows(rid, b.prefix_lengths[k], _replay(b, k), rec.tables, private, line)
            hit = b.prefix_lengths[k] + _replay(b, k)  # the input re-feeds the replay window before the hit
            r.hit = hit
            self.hits[rid] = hit
            self.l2.hit(rid, r, hit, fresh, line)
            self.stats["hit_tokens"] += hit
            self.stats["hits"] += hit > 0
            if hit % p:
                self.stats["tail_hits"] += 1
                self.find("TS-PFX-1", line, f"{rid} hits {hit} tokens, not a multiple of {p}", request=rid, hit=hit)
                self._tail_hit(rid, r, hit, copied, line)
            if hit >= p:
                self._hit_shares_canonical(rid, r, hit, copied, line)
            if hit >= r.prefill:
                self.find("TS-PFX-1", line, f"{rid} hits {hit} of its {r.prefill} prompt tokens: the last token "
                          "must be computed", request=rid, hit=hit)
            for i in range(min(hit, r.prefill) // p):
                if r.digest(i, p) not in self.published:
                    self.find("PEER-4", line, f"{rid} hits page {i}, which no request computed in an earlier plan",
                              request=rid, page=i, hit=hit)
                    break
        if self._state:  # state rows: hits, checkpoints and the states this forward writes (TS-ST-*)
            self.state.forward(rec, first, line)
        # writes of this plan's forward
        for k, rid in enumerate(b.requests):
            r = self.reqs[rid]
            start = b.prefix_lengths[k] if k < b.extends else r.computed
            floor = start + _replay(b, k)
            n = b.input_lengths[k]
            if n:
                self._writes(rid, r, start, start + n, floor, line)
        self.stores.check(rec)  # after the rows: a page swapped to its canonical block is no debt
        for op in rec.cache:
            self.stats["cache_ops"] += 1
            if op.kind.startswith("Storage"):  # L3 ids are their own namespace (cachetrace.host_tier judges them)
                continue
            for oid in op.op_ids:
                if oid in self.issued:
                    self.find("PEER-3", line, f"cache op {oid} issued twice", op_id=oid)
                self.issued.add(oid)
        for a in rec.aborts:
            self.stats["aborts"] += 1
            self.stores.dropped(a.request)
            self.state.dropped(a.request)
            self._end(a.request)
        live = sum(len(h) for h in self.holders.values())
        if live > self.stats["peak_live_blocks"]:
            self.stats["peak_live_blocks"] = live

    def result(self, rec: ct.Result, line: int = 0) -> None:
        b = self._batch
        if b is None or rec.plan != self.current_plan:
            raise ValueError(f"result for plan {rec.plan} does not follow that plan")
        p = self.p
        for k, rid in enumerate(b.requests):
            r = self.reqs.get(rid)
            if r is None:  # aborted by this plan
                continue
            n = b.input_lengths[k]
            start = b.prefix_lengths[k] if k < b.extends else r.computed
            before, r.computed = start, start + n
            if k < b.extends:
                self.stats["extend_tokens"] += n
            else:
                self.stats["decode_tokens"] += n
            if k < len(rec.tokens):
                r.generated.extend(rec.tokens[k])
            for g, row in r.rows.items():
                bg = self.groups[g].block_granularity
                content, writer = self.content[g], self.writer[g]
                if n:
                    for i in range(before // bg, min((r.computed - 1) // bg + 1, len(row))):
                        if row[i] > 0:
                            writer[row[i]] = (r, i)
                if self.groups[g].replayable:  # never registered (L185): its rows stay private
                    continue
                # from the prefix page `before` lies in: a block finer than P completed in an earlier chunk
                # gets its key only once its whole prefix page is known
                for i in range(before // p * p // bg, min(r.computed // bg, len(row))):
                    d = r.digest((i * bg) // p, p) if ((i * bg) // p + 1) * p <= r.computed else None
                    if d is None:
                        continue
                    blk = row[i]
                    key = (d, i % (p // bg) if bg < p else 0)
                    if blk > 0:
                        content[blk] = key
                    self.stores.computed(rid, g, i, blk, key, k < b.extends)
                    if bg >= p or (i + 1) * bg % p == 0:
                        self.pending.append(d)
        for rid in rec.finish:
            self.stats["finished"] += 1
            self.stores.finished(rid)
            self.state.stopped(rid)
            self._end(rid)
        failed = set(rec.failed)
        for sd in rec.storage:  # L3 ops number their own ids and are acknowledged by their outcome
            self.stores.storage_done(sd)
            self.l3.done(sd)
            self.l2.storage_done(sd, line)
        for oid in rec.done:
            if oid not in self.issued:
                self.find("PEER-3", line, f"cache op {oid} acknowledged but never issued", op_id=oid)
            elif oid in self.acked:
                self.find("PEER-3", line, f"cache op {oid} acknowledged twice", op_id=oid)
            else:
                self.l2.acked(oid, oid in failed)
            self.acked.add(oid)
        for oid in sorted(failed - set(rec.done)):
            raise ValueError(f"op {oid} is listed as failed but not as acknowledged")

    def clear(self, rec: ct.Clear, line: int = 0) -> None:
        """A ClearCache request: refused while write-backs are in flight (TS-L2-8); once accepted, nothing
        computed before it may be hit again and the Host tier is empty."""
        if rec.plan != self.current_plan:
            raise ValueError(f"clear after plan {rec.plan} does not follow that plan")
        n = self.l2.exercised["TS-L2-8"]
        self.l2.clear(rec, line)
        if self.l2.exercised["TS-L2-8"] > n:
            self.exercised["TS-L2-8"] += 1
        if rec.accepted:
            self.stores.cleared()
            self.state.cleared()
            self.l3.cleared()
            self.published.clear()
            self.pending.clear()
            for g in self.content:
                self.content[g].clear()

    def apply(self, rec: ct.Submit | ct.Plan | ct.Result | ct.Clear | ct.EngineError, line: int = 0) -> None:
        """Feed one cachetrace/1 record (any but a KV-event batch, which the event checker judges) to its
        handler."""
        if isinstance(rec, ct.Plan):
            self.plan(rec, line)
        elif isinstance(rec, ct.Result):
            self.result(rec, line)
        elif isinstance(rec, ct.Submit):
            self.submit(rec, line)
        elif isinstance(rec, ct.Clear):
            self.clear(rec, line)
        else:
            self.engine_error(rec, line)

    def engine_error(self, rec: ct.EngineError, line: int = 0) -> None:
        """PEER-10: the scheduler raised from its own invariant check on the answers the trace shows (each of
        them legal: acknowledgements may come plans after their op, seed 002 L108); the trace ends there."""
        self.engine_failed = True
        self.find("PEER-10", line, f"the scheduler failed {rec.call} after plan {rec.plan} with an internal error: "
                  f"{rec.message}", call=rec.call)

    def counters(self, found: list[tuple[str, dict]], line: int = 0) -> None:
        """PEER-9: the scheduler's own pool counters, read after a plan's answer, disagree with each other
        (``sim.peers.tokenspeed.counters`` reads and checks them)."""
        self.exercised["PEER-9"] += 1
        for message, ctx in found:
            self.find("PEER-9", line, message, **ctx)

    def finish(self, line: int = 0) -> None:
        """End of the trace: every issued op must have been acknowledged; what the write-back policy owed is
        judged if the trace ends drained (TS-L2-12)."""
        if self.engine_failed:  # the run stopped where the scheduler failed: what it left open is no finding
            return
        self.l2.finish(line)
        self.stores.finish(line)
        self.state.finish(line)
        missing = sorted(self.issued - self.acked)
        if missing:
            self.find("PEER-3", line, f"{len(missing)} cache ops never acknowledged (first {missing[0]})",
                      op_id=missing[0])

    def _tail_hit(self, rid: str, r: _Req, hit: int, copied: dict, line: int) -> None:
        """A hit that ends inside a page reuses a partial page: its content must be this prompt's tokens.

        The reused page reaches the request either as a copy destination (its source's last writer is
        compared) or directly (then its own last writer is)."""
        p = self.p
        k = hit // p
        for g, row in r.rows.items():
            bg = self.groups[g].block_granularity
            slot = (k * p) // bg + (hit - k * p) // bg
            if bg < p or slot >= len(row) or self.groups[g].replayable:  # replayed rows are regenerated
                continue
            blk = row[slot]
            src = copied.get(g, {}).get(blk, blk)
            w = self.writer[g].get(src)
            ok = False
            if w is not None:
                sreq, si = w
                same_prefix = k == 0 or sreq.digest(k - 1, p) == r.digest(k - 1, p)
                mine = r.token_slice(k * p, hit)
                theirs = sreq.token_slice(k * p, hit)
                ok = si == slot and same_prefix and sreq.computed >= hit and list(mine) == list(theirs)
            if not ok:
                self.find("PEER-4", line, f"{rid} hits {hit} tokens through {g} block {src}, whose last write "
                          "does not hold this prompt's partial page", request=rid, group=g, block=src, hit=hit)

    def _hit_shares_canonical(self, rid: str, r: _Req, hit: int, copied: dict, line: int) -> None:
        """TS-TBL-1 (seed 002 L154: "A cache entry is metadata plus an owning CacheBlockRef that publishes an
        existing block for reuse; registration neither allocates nor copies physical storage"): a hit's whole
        prefix pages are served by the published canonical block itself, never by a fresh copy of it. A copy
        destination whose source holds published content, named at a slot below the hit's last whole page, is
        that fresh copy (a tail hit's partial-page copy lies above it and is TS-PFX-1's)."""
        whole = hit // self.p * self.p
        for g, row in r.rows.items():
            grp = self.groups[g]
            into = copied.get(g)
            if grp.replayable or not into:
                continue
            content = self.content[g]
            for i in range(min(len(row), whole // grp.block_granularity)):
                src = into.get(row[i])
                if src is not None and src in content:
                    self.find("TS-TBL-1", line, f"{rid}'s {g} slot {i} is a hit served by block {row[i]}, a fresh "
                              f"copy of published block {src}: publication shares the canonical block",
                              request=rid, group=g, slot=i, block=row[i], source=src)

    # -- pieces -----------------------------------------------------------------------------------------------
    def _replayable_rows(self, rid: str, start: int, replay: int, tables: dict, private: dict[str, set[int]],
                         line: int) -> None:
        """TS-PFX-3: at its first extend a request re-feeds exactly ``min(W, hit)`` tokens (W the largest
        replayable window: "the window the scheduler re-feeds is the retention window itself", L66), and its
        replayable rows are null holes below the slot of the replay window's first token (``start``, where the
        input begins) and fresh pages from it."""
        hit = start + replay
        want = min(self._replay_window, hit)
        if replay != want:
            self._replay_rows += 1
            self.find("TS-PFX-3", line, f"{rid} re-feeds {replay} tokens before its {hit}-token hit; a replayable "
                      f"group's window is {self._replay_window} tokens, so it must re-feed {want}", request=rid,
                      hit=hit, replay=replay)
            return
        for g in self._replayable:
            row = tables.get(g, {}).get(rid)
            if row is None:
                continue
            self._replay_rows += 1
            first = start // self.groups[g].block_granularity
            for i, blk in enumerate(row):
                if i < first and blk > 0:
                    self.find("TS-PFX-3", line, f"{rid}'s replayable {g} row names block {blk} at slot {i}, below the "
                              f"replay window's first slot {first}: a replayable group claims no hit", request=rid,
                              group=g, slot=i, block=blk)
                    return
                if i >= first and blk > 0 and blk not in private[g]:
                    self.find("TS-PFX-3", line, f"{rid}'s replayable {g} row names block {blk} at slot {i}, which was "
                              "not handed out fresh: a replayable group's suffix is private", request=rid, group=g,
                              slot=i, block=blk)
                    return
                if i >= first and blk <= 0:
                    self.find("TS-PFX-3", line, f"{rid}'s replayable {g} row has no page at slot {i}, inside the "
                              "replay window it must regenerate", request=rid, group=g, slot=i)
                    return

    def _check_ids(self, g: str, blocks, line: int, what: str) -> None:
        total = self.groups[g].total_pages
        for blk in blocks:
            if blk == 0:
                self.find("TS-POOL-4", line, f"{what} is the null block 0 ({g})", group=g)
            elif blk >= total:
                self.find("PEER-1", line, f"{what} {blk} beyond {g}'s {total} pages", group=g, block=blk)

    def _fresh_list(self, g: str, pages, line: int, what: str) -> list[int]:
        if g not in self.groups:
            raise ValueError(f"unknown cache group {g!r}")
        self._check_ids(g, pages, line, f"page to {what}" if what == "zero" else what)
        if len(set(pages)) != len(pages):
            dup = sorted(x for x in set(pages) if pages.count(x) > 1)[0]
            self.find("PEER-2", line, f"{g} page {dup} listed twice as {what} in one plan", group=g, block=dup)
        content = self.content[g]
        for blk in pages:
            content.pop(blk, None)
        return pages

    def _row(self, g: str, rid: str, row: list[int], fresh: set[int], newly: dict, line: int) -> None:
        r = self.reqs.get(rid)
        if r is None:
            raise ValueError(f"table of request {rid!r} that was never submitted")
        grp = self.groups[g]
        if g == self._history and g not in r.rows:  # the first row after an admission (or a readmission)
            why = self.headroom.admit(rid, len(row) * grp.block_granularity, len(r.tokens) + len(r.generated),
                                      len(r.generated))
            if why:
                self.find("TS-ADM-2", line, why, request=rid, group=g)
        old = r.rows.get(g, [])
        hold, content = self.holders[g], self.content[g]
        bg, p, total = grp.block_granularity, self.p, grp.total_pages
        full = grp.attn_kind == "full"
        # seed 002 L165 "full attention never expires": in a full-attention row -1 is only trailing padding, and
        # a slot of a live row never loses its block (TS-POOL-4, with the null-block hole below)
        named = _last_named(row) if full else -1
        was = _last_named(old) if full else -1
        for i, blk in enumerate(row):
            prev = old[i] if i < len(old) else -1
            if blk < 0 and full and ((i < named and not (prev < 0 and i < was)) or prev > 0):
                why = f"after naming block {prev} (a live full-attention row never loses a slot)" if prev > 0 \
                    else "before a named slot (only trailing padding may be -1)"
                self.find("TS-POOL-4", line, f"{rid}'s {g} table holds -1 at slot {i} {why}", request=rid,
                          group=g, slot=i)
            if blk == prev:
                continue
            if prev > 0:
                _release_holder(hold, prev)
            if blk < 0:
                continue
            if blk == 0:
                if full:
                    self.find("TS-POOL-4", line, f"{rid}'s {g} table names the null block 0 at slot {i}",
                              request=rid, group=g, slot=i)
                continue
            if blk >= total:
                self.find("PEER-1", line, f"{rid}'s {g} table names block {blk} beyond {total} pages",
                          request=rid, group=g, block=blk)
            hold[blk] = hold.get(blk, 0) + 1
            if blk in fresh:
                self.handed[g].discard(blk)
                newly.setdefault(blk, []).append((rid, i))
                if blk not in self._keyed_loads.get(g, ()):
                    continue
            else:
                self.l2.named(g, blk, rid, i, line)
            page = (i * bg) // p
            want = r.digest(page, p) if (page + 1) * p <= len(r.tokens) + len(r.generated) else None
            have = content.get(blk)
            if want is None or have is None or have[0] != want or have[1] != (i % (p // bg) if bg < p else 0):
                why = ("holds no published content" if have is None else
                       "holds another prefix" if want is None or have[0] != want else "holds another page offset")
                self.find("TS-TBL-1", line, f"{rid}'s {g} slot {i} names block {blk}, which was not handed out "
                          f"fresh and {why}", request=rid, group=g, slot=i, block=blk)
        for i in range(len(row), len(old)):
            prev = old[i]
            if prev > 0:
                _release_holder(hold, prev)
                if full:
                    self.find("TS-POOL-4", line, f"{rid}'s {g} table drops slot {i} (block {prev}): a live "
                              "full-attention row never loses a slot", request=rid, group=g, slot=i)
        r.rows[g] = list(row)

    def _writes(self, rid: str, r: _Req, a: int, b: int, floor: int, line: int) -> None:
        """The forward writes tokens [a, b) of a request: a replayable group from a (the replay window's
        first token), every shared group only from the write floor (cache concepts: "A write floor for the
        shared groups (... prefix + replay per request)": the shared rows stay what the first computation
        produced)."""
        for g, row in r.rows.items():
            bg = self.groups[g].block_granularity
            lo = a if self.groups[g].replayable else max(a, floor)
            hold, content = self.holders[g], self.content[g]
            for i in range(lo // bg, min((b - 1) // bg + 1, len(row))):
                blk = row[i]
                if blk <= 0:
                    continue
                self.l2.forward_write(g, blk, rid, i, line)
                if hold.get(blk, 0) > 1:
                    self.find("TS-TBL-1", line, f"{rid} writes {g} slot {i} into block {blk}, which another live "
                              "table names", request=rid, group=g, slot=i, block=blk)
                elif blk in content:  # also at a first extend (nothing computed yet): the write floor is the hit
                    self.find("TS-TBL-1", line, f"{rid} rewrites {g} slot {i} in block {blk}, which holds "
                              "published content", request=rid, group=g, slot=i, block=blk)

    def _retract(self, rid: str) -> None:
        """A retracted request keeps its tokens and progress but no rows: its pages go back to the pool."""
        r = self.reqs[rid]
        for g, row in r.rows.items():
            hold = self.holders[g]
            for blk in row:
                if blk > 0:
                    _release_holder(hold, blk)
        image = {g: {b for b in row if b > 0} for g, row in r.rows.items()}
        for g in self.state.ids:  # its state rows are the state judge's; the snapshot copies them too
            srow = self.state.rows[g].get(rid)
            if srow:
                image[g] = {b for b in srow if b > 0}
        if image:
            r.image = image
        r.rows = {}
        self.headroom.retract(rid)
        self.stores.dropped(rid)
        self.state.stopped(rid)
        self.state.release(rid)

    def _end(self, rid: str) -> None:
        r = self.reqs.get(rid)
        if r is None:
            raise ValueError(f"request {rid!r} ends but was never submitted")
        for g, row in r.rows.items():
            hold = self.holders[g]
            for blk in row:
                if blk > 0:
                    left = hold[blk] - 1
                    if left:
                        hold[blk] = left
                    else:
                        del hold[blk]
        self.state.release(rid)
        self.state.dropped(rid)
        del self.reqs[rid]
        self.headroom.end(rid)

    # -- summary ----------------------------------------------------------------------------------------------
    def summary(self) -> dict:
        s: dict[str, object] = dict(self.stats)
        pt = self.stats["prompt_tokens"] or 1
        s["hit_ratio"] = round(self.stats["hit_tokens"] / pt, 6)
        s["trace_bound_ratio"] = round(self.stats["bound_tokens"] / pt, 6)
        s["violations_by_rule"] = {k: v for k, v in self.counts.items() if v}
        s["host_tier"] = dict(self.l2.stats)
        s["retraction"] = dict(self.headroom.stats)
        s["store_policy"] = dict(self.stores.stats)
        if self._state:
            s["state_groups"] = dict(self.state.stats)
        s["capacity"] = dict(self.capacity.stats)
        s["l3_reads"] = dict(self.l3.stats)
        return s


def _replay(b: ct.Batch, k: int) -> int:
    """Tokens slot k re-feeds for its replayable groups before its prefix hit (extends only): its input starts
    at ``prefix_lengths[k]`` and the hit, the shared groups' write floor, lies this many tokens later."""
    return b.replay_lengths[k] if k < b.extends and k < len(b.replay_lengths) else 0


def _last_named(row: list[int]) -> int:
    """The last slot of a row that names a block (or the null block), -1 when none does."""
    return next((j for j in range(len(row) - 1, -1, -1) if row[j] >= 0), -1)


def _release_holder(hold: dict, blk: int) -> None:
    """One live table slot fewer names `blk`; the entry goes when none does."""
    left = hold[blk] - 1
    if left:
        hold[blk] = left
    else:
        del hold[blk]
