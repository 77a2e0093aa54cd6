"""Snapshot-state groups of the observable contract (cachetrace/1 ``attn_kind`` "mamba"): rules TS-ST-*.

A state group holds recurrent/conv state snapshots, one per block, not rows of KV (cache concepts L19). Its
blocks are published, streamed to Host and reused by a later request's hit like any group's, but only under
the clauses of "Snapshot-state prefill checkpoints" (seed 002 L72-L90) and the coordinator's (L185, L187):

* TS-ST-1 (L74 "publishing an unwritten intermediate checkpoint would break position identity"; L76
  "Computed state publication requires an Endpoint or Promoted boundary and checkpoint provenance at that
  exact prefix boundary ... Allocated slots and completed hashes alone are not proof"; L185 "CacheCompletedBlocks
  publishes only explicitly listed materialized boundaries inside the newly hashed range"): every state block
  the scheduler publishes -- stores on Host under a key, or hands to a later request's prefix hit -- holds
  the state a prefill forward wrote at exactly that key's prefix boundary, a multiple of prefix_granularity.
* TS-ST-2 (L78 "decode itself records and publishes no state checkpoints"; L187 "Ordinary decode publishes
  history-cache Device entries but no state entries"): no state a decode forward wrote is stored on Host
  under a key or reused by a hit.
* TS-ST-3 (L82 "the last internal reusable checkpoint is at floor(after / prefix_granularity) *
  prefix_granularity, strictly between before and after"): an internal checkpoint an extend materializes
  (``checkpoint_lengths``) lies there, and the row names a block for it.
* TS-ST-4 (L78 "Newly completed prefill boundaries at the prompt's last aligned checkpoint are classified as
  Endpoint ... including before a short final tail"): a prompt of n tokens, n not a multiple of P, whose last
  aligned checkpoint A = floor(n/P)*P lies beyond its hit, has its state at A written by its prefill (a chunk
  ending at A or an internal checkpoint at A): without it there is no Endpoint to classify or publish.
* TS-ST-5 (L187 "At finish or retraction ... the newest existing prefill checkpoint per state group [is]
  queued before request ownership is released"; "The queue is drained by StartPendingStores"): with a Host
  tier, the newest aligned state a request's prefill wrote is stored on Host (a keyed write-back of that key,
  by any request, since it was written) before a drained trace ends -- unless its block was handed out again
  first (evicted, L80 "All cached checkpoints remain subject to ordinary capacity eviction") or the Host tier
  was full while it waited (the judgement TS-L2-12 makes for history pages).

Row layout. ``block_granularity`` 0 (TokenSpeed's State group) is a compact row: at an extend slot 0 is the
input state, slot 1 the final state at the chunk's end and slot 2, when ``checkpoint_lengths`` names one, the
internal checkpoint; at a decode slot 0 is the input (a null hole once expired) and slot 1 the output. With
``block_granularity`` bg > 0 the row keeps absolute positions (L74 "The table keeps absolute slot positions";
L82 "Its slot is (checkpoint - 1) / block_granularity"): the state after b tokens is slot (b - 1) // bg.

The contract hands this judge the state rows (its own row checks are for history groups), the plan's fresh
blocks and cache ops, the forward and the KV events (the judge reads it through ``view.StateGroupView``); Host
provenance of a state block follows write-backs and load-backs. Publication is seen three ways: a keyed write-back,
a hit, and a page the folded KV events announce (``state_events``). A state at its own partial page's end, published
any of these ways, names the cause ``causes.PARTIAL_TAIL``.
This module knows cachetrace/1 records, never a scheduler's API.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.kvmodel.cache.prefix_hash import page_digest
from kvsim.sim.peers.cachetrace.causes import PARTIAL_TAIL
from kvsim.sim.peers.cachetrace.state_events import StatePublications
from kvsim.sim.peers.cachetrace.view import StateGroupView
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import stated

__all__ = ["RULES", "StateGroups"]

RULES: dict[str, tuple[str, str]] = stated([f"TS-ST-{i}" for i in range(1, 6)], "tokenspeed")  # from the catalogue


@dataclass(frozen=True, slots=True)
class _State:
    """What a state block holds: the state of ``request`` after ``boundary`` tokens, written by a prefill
    (extend) or a decode forward; ``key`` the prefix digest (hex) when the boundary is a multiple of P, else
    ``tail`` the digest of the partial page ending there (the key a published partial tail carries)."""
    request: str
    boundary: int
    prefill: bool
    key: str | None
    plan: int
    tail: str | None = None


@dataclass(slots=True)
class _Owed:
    request: str
    group: str
    block: int
    key: str
    boundary: int
    plan: int


class StateGroups:
    def __init__(self, contract: StateGroupView) -> None:
        self.c = contract
        cfg = contract.config
        self.ids = [g.id for g in cfg.groups if g.attn_kind == "mamba"]
        self.bg = {g.id: g.block_granularity for g in cfg.groups if g.attn_kind == "mamba"}
        self.gindex = {g.id: i for i, g in enumerate(cfg.groups)}
        self.gids = [g.id for g in cfg.groups]
        self.p = cfg.prefix_granularity
        self.rows: dict[str, dict[str, list[int]]] = {g: {} for g in self.ids}   # group -> request -> row
        self.held: dict[str, dict[int, _State]] = {g: {} for g in self.ids}       # Device block -> its state
        self.host: dict[str, dict[int, _State]] = {g: {} for g in self.ids}       # Host page -> its state
        self.written: dict[str, set[int]] = {}   # request -> boundaries its prefill wrote a state at
        self.newest: dict[str, dict[str, _Owed]] = {}  # request -> group -> newest aligned prefill checkpoint
        self.stored: dict[str, set[str]] = {g: set() for g in self.ids}  # keys stored on Host since the last clear
        self.due: dict[tuple[str, int], _Owed] = {}
        self.bound: set[tuple[str, int]] = set()
        self.host_enabled = cfg.num_host_pages > 1
        # one block per parent in every group: a block id names its parent, shared by the groups in turn
        self.shared_ids = all(g.cache_blocks_per_lcm_block == 1 for g in cfg.groups) and len(cfg.groups) > 1
        self.endpoints: set[str] = set()  # requests whose prompt's last aligned checkpoint was judged (TS-ST-4)
        self.exercised = {r: 0 for r in RULES}
        self.published_in: int | None = None  # the plan whose write-backs or hits exercised TS-ST-1/2
        self.announced_in: int | None = None  # the plan whose KV events exercised them (state_events)
        self.pub = StatePublications(contract, self.p, self.ids[0]) if self.ids else None
        self.stats = {"state_writes": 0, "decode_state_writes": 0, "checkpoints": 0, "state_hits": 0,
                      "state_stores": 0, "endpoints_owed": 0, "checkpoints_owed": 0, "checkpoints_stored": 0,
                      "checkpoints_evicted_unstored": 0}

    def _find(self, rule: str, line: int, message: str, **ctx) -> None:
        self.c.find(rule, line, message, **ctx)

    # -- rows ---------------------------------------------------------------------------------------------------
    def row(self, g: str, rid: str, row: list[int], fresh: set[int], newly: dict, line: int) -> None:
        """A state row recorded in this plan: the live-table bookkeeping the contract's PEER-2 and TS-TBL-1 (one
        fresh block, one slot) read; what the row's blocks hold is judged by ``forward``."""
        c = self.c
        if rid not in c.reqs:
            raise ValueError(f"table of request {rid!r} that was never submitted")
        old = self.rows[g].get(rid, [])
        hold, total = c.holders[g], c.groups[g].total_pages
        for i, blk in enumerate(row):
            prev = old[i] if i < len(old) else -1
            if blk == prev:
                continue
            if prev > 0:
                _release(hold, prev)
            if blk <= 0:
                continue
            if blk >= total:
                self._find("PEER-1", line, f"{rid}'s {g} table names block {blk} beyond {total} pages", request=rid,
                           group=g, block=blk)
            hold[blk] = hold.get(blk, 0) + 1
            if blk in fresh:
                c.handed[g].discard(blk)
                newly.setdefault(blk, []).append((rid, i))
        for i in range(len(row), len(old)):
            if old[i] > 0:
                _release(hold, old[i])
        self.rows[g][rid] = list(row)

    def release(self, rid: str) -> None:
        """The request's state rows end (finish, abort or retraction)."""
        for g in self.ids:
            row = self.rows[g].pop(rid, None)
            for blk in row or []:
                if blk > 0:
                    _release(self.c.holders[g], blk)

    # -- the plan's blocks and ops ------------------------------------------------------------------------------
    def _pairs(self, op: ct.CacheOp):
        """(state group, src, dst, key, tier) per pair of ``op`` in a state group."""
        for k, (src, dst) in enumerate(op.pages):
            gi = op.groups[k] if op.groups else 0
            g = self.gids[gi] if gi < len(self.gids) else None
            if g in self.held:
                yield g, src, dst, op.keys[k] if k < len(op.keys) else "", op.tiers[k] if k < len(op.tiers) else "L2"

    def write_backs(self, rec: ct.Plan, line: int) -> None:
        """The plan's write-backs of state blocks, run before its copies and zeroing: a keyed one publishes the
        state to Host (TS-ST-1, TS-ST-2); either carries the state to its Host page."""
        for op in rec.cache:
            if op.kind != "WriteBackOp":
                continue
            for g, src, dst, key, _tier in self._pairs(op):
                st = self.held[g].get(src)
                if st is None:
                    self.host[g].pop(dst, None)
                else:
                    self.host[g][dst] = st
                if key:
                    self.stats["state_stores"] += 1
                    self._published(g, src, st, key, line, f"write-back {op.op_ids[0] if op.op_ids else -1} stores "
                                    f"{g} block {src} under key {key[:12]}..")
                    self.stored[g].add(key)
        full = self.c.stores.full_now
        for gb, o in list(self.due.items()):
            if o.key in self.stored[o.group]:
                del self.due[gb]
                self.bound.discard(gb)
                self.stats["checkpoints_stored"] += 1
            elif full:
                self.bound.add(gb)

    def copied(self, g: str, pairs) -> None:
        """A copy hands its destination the source's state."""
        held = self.held[g]
        for src, dst in pairs:
            st = held.get(src)
            if st is None:
                held.pop(dst, None)
            else:
                held[dst] = st
        self._evicted(g, [d for _s, d in pairs])

    def regranted(self, rec: ct.Plan) -> None:
        """Blocks zeroed hold no state; load-backs and restores from Host hold what their Host page holds (a
        snapshot-pool source is the request's own image, not published content). A checkpoint still unstored in
        any of them was evicted before its store (not judged). Where every group packs one block per parent (a
        block id is its parent's), a block another group takes fresh is that parent re-bound to it: the state
        block it held was evicted first (seed 002 L36: "A parent with zero occupants is unbound, so its capacity
        belongs to the global empty-parent FIFO rather than any group")."""
        others: dict[str, list[int]] = {}
        if self.shared_ids:
            for og, pages in rec.zero.items():
                for g in self.ids:
                    if og != g:
                        others.setdefault(g, []).extend(pages)
            for og, pairs in rec.copy.items():
                for g in self.ids:
                    if og != g:
                        others.setdefault(g, []).extend(d for _s, d in pairs)
        for g in self.ids:
            zero = list(rec.zero.get(g, [])) + others.get(g, [])
            for blk in zero:
                self.held[g].pop(blk, None)
            self._evicted(g, zero)
        for op in rec.cache:
            if op.kind not in ("LoadBackOp", "RestoreOp"):
                continue
            for g, src, dst, _key, tier in self._pairs(op):
                st = self.host[g].get(src) if tier == "L2" else None
                if st is None:
                    self.held[g].pop(dst, None)
                else:
                    self.held[g][dst] = st
                self._evicted(g, [dst])

    def _evicted(self, g: str, blocks) -> None:
        if not self.due:
            return
        for blk in blocks:
            if self.due.pop((g, blk), None) is not None:
                self.bound.discard((g, blk))
                self.stats["checkpoints_evicted_unstored"] += 1

    def _published(self, g: str, blk: int, st: _State | None, key: str | None, line: int, what: str,
                   hit: int | None = None) -> bool:
        """TS-ST-1 / TS-ST-2 on one publication: ``key`` the prefix key it is published under (hex), or None for
        a hit of ``hit`` tokens off every prefix boundary (judged by the caller against the boundary)."""
        self.exercised["TS-ST-1"] += 1
        self.exercised["TS-ST-2"] += 1
        self.published_in = self.c.current_plan
        # a state off every prefix boundary stored under its own partial page's key, or handed to a hit ending
        # there, is a published partial tail (a state under another key, or at another length, is not)
        tail = PARTIAL_TAIL if st is not None and st.tail is not None and (
            st.tail == key if hit is None else st.boundary == hit) else None
        about = (("state", st.request, st.boundary),) if st is not None else ()  # the same state published again
        if st is not None and not st.prefill:
            self.c.find("TS-ST-2", line, f"{what}: it holds the state {st.request}'s decode wrote after "
                        f"{st.boundary} tokens (plan {st.plan}); decode publishes no state", cause=tail, about=about,
                        group=g, block=blk, request=st.request)
            return False
        if st is None:
            why = "holds no state a forward wrote"
        elif st.key is None:
            why = (f"holds {st.request}'s state after {st.boundary} tokens, not a multiple of prefix_granularity "
                   f"{self.p}: no prefix boundary")
        elif key is not None and st.key != key:
            why = f"holds {st.request}'s state at boundary {st.boundary}, whose prefix key is {st.key[:12]}.."
        else:
            return True
        self.c.find("TS-ST-1", line, f"{what}, which {why}", cause=tail, about=about, group=g, block=blk)
        return False

    # -- the forward ----------------------------------------------------------------------------------------------
    def forward(self, rec: ct.Plan, first: set[str], line: int) -> None:
        """The plan's forward: hits (``first``: requests at their first extend), internal checkpoints, the state
        each extend and decode writes, and the prompt's last aligned checkpoint."""
        b = rec.batch
        p = self.p
        ck_lens = b.checkpoint_lengths
        for k, rid in enumerate(b.requests):
            r = self.c.reqs.get(rid)
            if r is None:
                continue
            ext = k < b.extends
            before = b.prefix_lengths[k] if ext else r.computed
            after = before + b.input_lengths[k]
            ck = ck_lens[k] if ext and k < len(ck_lens) else 0
            if ck:
                self.exercised["TS-ST-3"] += 1
                self.stats["checkpoints"] += 1
                at = before + ck
                want = after // p * p
                if at != want or not before < at < after:
                    self._find("TS-ST-3", line, f"{rid}'s extend [{before}, {after}) materializes its internal state "
                               f"checkpoint at {at}; the last reusable checkpoint is floor({after}/{p})*{p} = {want}"
                               + ("" if before < want < after else ", which is not strictly inside the extent"),
                               request=rid, checkpoint=at)
            for g in self.ids:
                row = self.rows[g].get(rid)
                if row is None:
                    continue
                bg = self.bg[g]
                if ext and rid in first and before > 0:
                    self._hit(g, rid, r, row, before, line)
                if not b.input_lengths[k]:
                    continue
                out = 1 if bg == 0 else (after - 1) // bg
                self._write(g, rid, r, row, out, after, ext, line)
                if ck:
                    slot = 2 if bg == 0 else (before + ck - 1) // bg
                    if slot >= len(row) or row[slot] <= 0:
                        self._find("TS-ST-3", line, f"{rid}'s extend materializes a state checkpoint at {before + ck} "
                                   f"but its {g} row has no block at slot {slot}", request=rid, group=g, slot=slot)
                    else:
                        self._write(g, rid, r, row, slot, before + ck, True, line)
            if ext and before < r.prefill <= after and rid not in self.endpoints:
                self.endpoints.add(rid)
                self._endpoint(rid, r, line)

    def _write(self, g: str, rid: str, r, row: list[int], slot: int, boundary: int, prefill: bool,
               line: int) -> None:
        if slot >= len(row) or row[slot] <= 0:
            return
        blk = row[slot]
        p = self.p
        key = tail = None
        if prefill and boundary % p == 0 and boundary > 0:
            d = r.digest(boundary // p - 1, p)
            key = d.hex() if d is not None else None
        elif boundary % p:
            prev = r.digest(boundary // p - 1, p) if boundary >= p else b""
            tail = page_digest(prev, r.token_slice(boundary // p * p, boundary)).hex() if prev is not None else None
        self.held[g][blk] = _State(rid, boundary, prefill, key, self.c.current_plan, tail)
        self.stats["state_writes" if prefill else "decode_state_writes"] += 1
        if self.pub is not None and g == self.pub.group:
            self.pub.wrote(r, boundary, prefill)
        if prefill:
            self.written.setdefault(rid, set()).add(boundary)
            if key is not None:
                have = self.newest.setdefault(rid, {}).get(g)
                if have is None or have.boundary <= boundary:
                    self.newest[rid][g] = _Owed(rid, g, blk, key, boundary, self.c.current_plan)

    def _hit(self, g: str, rid: str, r, row: list[int], hit: int, line: int) -> None:
        """A first extend reusing ``hit`` tokens: its input state is the published checkpoint at exactly ``hit``
        of this request's own prefix."""
        bg = self.bg[g]
        slot = 0 if bg == 0 else (hit - 1) // bg
        blk = row[slot] if slot < len(row) else -1
        self.stats["state_hits"] += 1
        what = f"{rid}'s hit of {hit} tokens reuses {g} block {blk} (slot {slot})"
        if blk <= 0:
            self.exercised["TS-ST-1"] += 1
            self._find("TS-ST-1", line, f"{rid}'s hit of {hit} tokens has no {g} block at its input slot {slot}: no "
                       "state at the hit boundary", request=rid, group=g, slot=slot)
            return
        st = self.held[g].get(blk)
        d = r.digest(hit // self.p - 1, self.p) if hit % self.p == 0 else None
        if not self._published(g, blk, st, d.hex() if d is not None else None, line, what,
                               hit if d is None else None):
            return
        if st is not None and st.boundary != hit:
            self._find("TS-ST-1", line, f"{what}, which holds {st.request}'s state at boundary {st.boundary}, not at "
                       f"the hit", request=rid, group=g, block=blk)

    def _endpoint(self, rid: str, r, line: int) -> None:
        """TS-ST-4 at the extend completing the prompt."""
        n, p = r.prefill, self.p
        a = n // p * p
        if not self.ids or n % p == 0 or a == 0 or a <= r.hit:
            return
        self.exercised["TS-ST-4"] += 1
        self.stats["endpoints_owed"] += 1
        if a not in self.written.get(rid, ()):
            self._find("TS-ST-4", line, f"{rid}'s prefill of {n} tokens ends {n - a} tokens past its last aligned "
                       f"checkpoint {a} without writing the state there (no chunk ends at {a} and no internal "
                       "checkpoint is materialized): no Endpoint before the short final tail", request=rid,
                       endpoint=a)

    # -- finish, retraction, end -----------------------------------------------------------------------------------
    def stopped(self, rid: str) -> None:
        """Finish or retraction: the newest prefill checkpoint per state group falls due for Host (TS-ST-5)."""
        newest = self.newest.pop(rid, {})
        self.written.pop(rid, None)
        if not self.host_enabled:
            return
        for g, o in sorted(newest.items()):
            if self.held[g].get(o.block) is None or self.held[g][o.block].key != o.key:
                continue  # overwritten or handed out again since: no longer an existing checkpoint
            self.c.exercised["TS-ST-5"] += 1  # counted where it falls due (a finish is an answer, not a plan)
            self.stats["checkpoints_owed"] += 1
            if o.key in self.stored[g]:
                self.stats["checkpoints_stored"] += 1
            else:
                self.due[(g, o.block)] = o

    def dropped(self, rid: str) -> None:
        """Aborted or finished and gone: nothing it wrote is owed any more."""
        self.newest.pop(rid, None)
        self.written.pop(rid, None)
        self.endpoints.discard(rid)
        if self.pub is not None:
            self.pub.ended(rid)

    def kv(self, events: list, line: int) -> None:
        """The KV events drained after a plan's answer: the state published on Device at each stored page's end
        (``state_events``); counted as exercising TS-ST-1/2 in a plan its own ops and hits did not."""
        if self.pub is None or not self.pub.stored(events, line):
            return
        plan = self.c.current_plan
        if plan not in (self.published_in, self.announced_in):
            self.announced_in = plan
            self.c.exercised["TS-ST-1"] += 1
            self.c.exercised["TS-ST-2"] += 1

    def cleared(self) -> None:
        for g in self.ids:
            self.stored[g].clear()
            self.host[g].clear()
        self.due.clear()
        self.bound.clear()
        if self.pub is not None:
            self.pub.cleared()

    def finish(self, line: int) -> None:
        """End of the trace: checkpoints still unstored are TS-ST-5 violations if it ended drained and the Host
        tier had room for them."""
        if not self.due or not self.c.stores.drained:
            return
        left = sorted((o for gb, o in self.due.items() if gb not in self.bound),
                      key=lambda o: (o.plan, o.request, o.group))
        room = self.c.stores.room()
        if len(left) > room:
            return
        for o in left:
            self._find("TS-ST-5", line, f"{o.request}'s newest prefill checkpoint ({o.group} block {o.block}, the "
                       f"state at {o.boundary} tokens written in plan {o.plan}) was never stored on Host though it "
                       f"stayed resident and the trace ends drained with {room} Host pages free", request=o.request,
                       group=o.group, block=o.block)


def _release(hold: dict, blk: int) -> None:
    left = hold.get(blk, 0) - 1
    if left > 0:
        hold[blk] = left
    else:
        hold.pop(blk, None)
