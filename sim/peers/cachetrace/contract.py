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
* TS-PFX-1, TS-PFX-3, PEER-4 on a request's first extend (``hits.PrefixHits``): prefix hits are multiples of P
  short of the prompt's last token, a replayable group re-feeds its window and claims no hit, and every page a
  hit names was computed by some request in an earlier plan.
* PEER-1 capacity: every block id lies in [1, total_pages) of its group.
* PEER-2 fresh pages ("a load targets freshly acquired pages"): a page to zero or copy into is named by no
  live table other than the one receiving it in that plan, and appears once per plan.
* PEER-3 acknowledgement ("neither side dedups or invents an acknowledgement"): every cache op id is issued
  once and acknowledged exactly once, and only after it was issued.
* PEER-10 the scheduler completes every call without an internal error (an ``error`` record: its own
  invariant check refused answers the trace shows to be legal -- acknowledgements may come plans late).

With a Host tier (``host_tier``, rules TS-L2-*), a write-back copies a Device page's content (its
key and last writer) to a Host page of the same group at plan time, and a load-back or restore hands out a
fresh Device page holding that Host page's content; a table that names it is judged by that content. A
snapshot retracts its request: its rows are released (the stream-ordered snapshot store has read them) and
its next row, after the restore, is judged afresh -- and, as its readmission, by TS-ADM-2
(``retraction``): it must secure more headroom than its previous admission did. A page handed out fresh to a
request outside the batch (a restore's growth page) counts as fresh when a table first names it, in a later
plan -- weaker than the same-plan check: the judge cannot tell which request it was meant for. Prefix keys:
``request_state``; the rule table: ``rules``; roots and consequences: ``causes``. Knows cachetrace/1 records,
never a scheduler's API.
"""

from __future__ import annotations

from kvsim.sim.peers.cachetrace import capacity, eviction, host_tier, l3_reads, retraction, state_group, store_policy
from kvsim.sim.peers.cachetrace.causes import Causes
from kvsim.sim.peers.cachetrace.hits import PrefixHits
from kvsim.sim.peers.cachetrace.request_state import RequestState
from kvsim.sim.peers.cachetrace.rules import RULES, Finding
from kvsim.sim.trace import cachetrace as ct

__all__ = ["RULES", "Contract", "Finding"]


class Contract:
    """Feed it submit / plan / result records in order; ``findings`` collects what broke."""

    def __init__(self, config: ct.Config, max_findings: int | None = None) -> None:
        self.config = config
        self.p = config.prefix_granularity
        self.groups = {g.id: g for g in config.groups}
        self.prefix = PrefixHits(self)  # TS-PFX-1/3, PEER-4: what a request's first extend may hit
        self.reqs: dict[str, RequestState] = {}
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
        self.hits: dict[str, int] = {}     # request -> prefix hit of its first extend
        self.findings: list[Finding] = []  # roots and consequences alike, each marked (``id`` / ``of``)
        self.max_findings = max_findings
        self.causes = Causes()             # one cause, one finding: the report lists the roots
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
    def find(self, rule: str, line: int, message: str, *, cause: str | None = None, about: tuple = (),
             **ctx) -> None:
        """Count and keep one finding; ``cause`` (kept in its context) and ``about``: see ``causes.Causes``."""
        self.counts[rule] += 1
        if cause:
            ctx["cause"] = cause
        f = Finding(rule, line, self.current_plan, message, ctx)
        self.causes.file(f, cause, about)
        if self.max_findings is None or len(self.findings) < self.max_findings:
            self.findings.append(f)

    # -- records ----------------------------------------------------------------------------------------------
    def submit(self, rec: ct.Submit, line: int = 0) -> None:
        self.capacity.submit(rec, line)
        if rec.refused is not None:  # refused at submission: it never runs
            return
        if rec.request in self.reqs:
            raise ValueError(f"request {rec.request!r} submitted while still live")
        r = RequestState(rec.request, rec.tokens)
        self.reqs[rec.request] = r
        self.headroom.submit(rec.request, rec.max_new_tokens)
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += len(rec.tokens)
        self.stats["bound_tokens"] += self.prefix.trace_bound(r, len(rec.tokens))

    def plan(self, rec: ct.Plan, line: int = 0) -> None:
        self.prefix.configuration(line)  # TS-PFX-3, once, on the first plan: the configuration itself
        st = self.stats
        before = (st["pages_zeroed"] + st["pages_copied"], st["hits"], st["cache_ops"],
                  self.headroom.stats["readmissions"], self.prefix.replay_rows, self.stores.judged)
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
        if self.prefix.replay_rows > before[4]:
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
        private = {g: fresh.get(g, set()) | self.handed[g] for g in self.prefix.replayable}  # fresh for TS-PFX-3
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
            if self.prefix.replayable:
                self.prefix.replayable_rows(rid, b.prefix_lengths[k], _replay(b, k), rec.tables, private, line)
            hit = b.prefix_lengths[k] + _replay(b, k)  # the input re-feeds the replay window before the hit
            r.hit = hit
            self.hits[rid] = hit
            self.l2.hit(rid, r, hit, fresh, line)
            self.stats["hit_tokens"] += hit
            self.stats["hits"] += hit > 0
            if hit % p:
                self.stats["tail_hits"] += 1
            self.prefix.first_extend(rid, r, hit, copied, line)
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
        """A ClearCache: refused with write-backs in flight (TS-L2-8); accepted, nothing earlier may be hit again."""
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

    def kv(self, rec: ct.KvEvents, line: int = 0) -> None:
        """A KV-event batch: what it shows of the state groups' publications."""
        if self._state:
            self.state.kv(rec.events, line)

    def apply(self, rec: ct.Submit | ct.Plan | ct.Result | ct.Clear | ct.KvEvents | ct.EngineError,
              line: int = 0) -> None:
        """Feed one cachetrace/1 record to its handler (a KV-event batch: ``kv``; the event checker judges it)."""
        if isinstance(rec, ct.Plan):
            self.plan(rec, line)
        elif isinstance(rec, ct.Result):
            self.result(rec, line)
        elif isinstance(rec, ct.Submit):
            self.submit(rec, line)
        elif isinstance(rec, ct.Clear):
            self.clear(rec, line)
        elif isinstance(rec, ct.KvEvents):
            self.kv(rec, line)
        else:
            self.engine_error(rec, line)

    def engine_error(self, rec: ct.EngineError, line: int = 0) -> None:
        """PEER-10: the scheduler's own check refused legal answers (ACKs may come plans late, L108); the end."""
        self.engine_failed = True
        self.find("PEER-10", line, f"the scheduler failed {rec.call} after plan {rec.plan} with an internal error: "
                  f"{rec.message}", call=rec.call)

    def counters(self, found: list[tuple[str, dict]], line: int = 0) -> None:
        """PEER-9: the scheduler's pool counters disagree (``sim.peers.tokenspeed.counters`` checks them)."""
        self.exercised["PEER-9"] += 1
        for message, ctx in found:
            self.find("PEER-9", line, message, **ctx)

    def finish(self, line: int = 0) -> None:
        """End of the trace: every issued op acknowledged; what the write-back policy owed (drained: TS-L2-12)."""
        if self.engine_failed:  # the run stopped where the scheduler failed: what it left open is no finding
            return
        self.l2.finish(line)
        self.stores.finish(line)
        self.state.finish(line)
        missing = sorted(self.issued - self.acked)
        if missing:
            self.find("PEER-3", line, f"{len(missing)} cache ops never acknowledged (first {missing[0]})",
                      op_id=missing[0])

    # -- pieces -----------------------------------------------------------------------------------------------
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

    def _writes(self, rid: str, r: RequestState, a: int, b: int, floor: int, line: int) -> None:
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
    """One live table slot fewer names `blk` (the entry goes when none does)."""
    left = hold[blk] - 1
    if left:
        hold[blk] = left
    else:
        del hold[blk]
