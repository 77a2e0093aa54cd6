"""TS-L2-12: what the write-back policy must queue for Host, judged from a scheduler's plans.

Cache concepts L187: "During prefill, each completed scheduling boundary queues all newly published
full-attention pages and any published Endpoint/Promoted state checkpoints; the candidates are merged into a
batched writeback. The first decode admission from PrefillDone applies the same policy to the final prompt
boundary. Ordinary decode publishes history-cache Device entries but no state entries; full-attention pages
do not stream to Host during decode. At finish or retraction, eligible non-state Device pages and the newest
existing prefill checkpoint per state group are queued before request ownership is released. Ordinary
sliding-window entries always stream when published. The queue is drained by
TierTransferManager::StartPendingStores(guard)".

TS-L2-9 judges the prohibition (nothing streamed during decode); this module judges the obligation. A queue
is not visible in plans, and the seed fixes neither how fast it drains nor that a queued page outlives
capacity eviction ("All cached checkpoints remain subject to ordinary capacity eviction", L80). So what is
judged is what must eventually follow from the queueing, with a Host tier configured:

* a whole page a prefill forward computed (full-attention or ordinary sliding-window group) falls due at the
  request's next admission -- its next chunk or its first decode, where it is published; a whole page a
  decode computed, and any prefill page still owed, falls due when the request finishes;
* a page that fell due is settled once some write-back (pinned or not, acknowledged or not, by this request
  or another) has copied a Device page holding its prefix key and page offset to the group's Host tier since
  it was computed -- "a store skips keys already in flight", and a key already on Host needs no second copy;
  or once its Device block is handed out again (evicted while queued: not judged);
* when the trace ends drained -- its last plan schedules nothing and issues no cache op, so the scheduler
  had nothing left to store -- every page still unsettled is a violation, unless the Host tier was full
  while it waited: a plan whose write-backs took every Host page not held by an unacknowledged op or by a
  retraction's image may have dropped what did not fit (which subset a full Host tier keeps is the
  scheduler's choice), and so may the end if all unsettled pages would not fit.

Not owed: a page whose slot the table swapped to the key's existing canonical block at publication (not
newly published); a sliding-window page that had slid out of the window (TS-RET-1's
``max(0, computed - W + 1) // bg``: never published); anything of a request retracted or aborted, or before an
accepted ClearCache. Replayable groups never stream (TS-L2-7); state groups are not judged here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.sim.peers.cachetrace.view import StorePolicyView
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import stated

__all__ = ["RULES", "StorePolicy"]

RULES: dict[str, tuple[str, str]] = stated(("TS-L2-12",), "tokenspeed")  # from the catalogue


@dataclass(slots=True)
class _Owed:
    group: str
    page: int          # slot index in the group's row
    block: int         # the block it was computed into (a later swap to another block: a deduplicated page)
    key: tuple         # (prefix digest, page offset): the content the page holds
    plan: int          # the plan whose forward computed it
    prefill: bool      # computed by an extend (published at the next admission) or by a decode


class StorePolicy:
    def __init__(self, contract: StorePolicyView) -> None:
        self.c = contract
        cfg = contract.config
        self.enabled = cfg.num_host_pages > 1
        self.groups = {g.id for g in cfg.groups if g.attn_kind in ("full", "sliding") and not g.replayable}
        self.windows = {g.id: g.sliding_window_tokens for g in cfg.groups if g.attn_kind == "sliding"}
        self.bg = {g.id: g.block_granularity for g in cfg.groups}
        self.stored: dict[str, set[tuple]] = {g: set() for g in self.groups}
        self.owed: dict[str, list[_Owed]] = {}                 # computed by a prefill, not yet due (per request)
        self.owed_decode: dict[str, list[_Owed]] = {}          # computed by a decode: due at finish
        self.at_finish: list[tuple[str, list[_Owed]]] = []     # due in the next plan (requests just finished)
        self.due: dict[tuple[str, int], tuple[str, _Owed]] = {}  # (group, block) -> (request, page): unsettled
        self.images: set[int] = set()  # Host pages holding a retracted request's image until a restore reads it
        # Host pages an L3 get filled that no load-back has read yet: the storage layer holds them for the load
        # (cache concepts L189: a Host miss known to exist in L3 "allocates a Host page, batch_get_intos it, then
        # runs the ordinary H2D load"), so they are no room for write-backs
        self.prefetched: set[int] = set()
        self.drained = False           # the last plan scheduled nothing and issued no cache op
        self.full_now = False          # this plan's write-backs took all the Host room there was
        self.bound: set[tuple[str, int]] = set()  # unsettled pages that waited through a full Host tier
        self.fresh_now: set[tuple[str, int]] = set()  # Device blocks this plan hands out again
        self.stats = {"pages_owed": 0, "pages_due": 0, "pages_stored": 0, "pages_evicted_unstored": 0,
                      "pages_unsettled_at_end": 0, "capacity_bound": 0}
        self.judged = 0  # plans in which a page fell due (the rule's premise)

    # -- what the contract tells it -----------------------------------------------------------------------------
    def computed(self, rid: str, group: str, page: int, block: int, key: tuple, prefill: bool) -> None:
        """A forward completed a whole page of ``rid`` in ``block``, holding ``key`` (called from the result)."""
        if self.enabled and group in self.groups and block > 0:
            (self.owed if prefill else self.owed_decode).setdefault(rid, []).append(
                _Owed(group, page, block, key, self.c.current_plan, prefill))
            self.stats["pages_owed"] += 1

    def _retained(self, rid: str, owed: list[_Owed]) -> list[_Owed]:
        """What was newly published: drop pages whose slot now names another block (swapped to the key's
        canonical block) and sliding-window pages that have slid out of the window."""
        r = self.c.reqs.get(rid)
        if r is None:
            return []
        out = []
        for o in owed:
            row = r.rows.get(o.group, [])
            if o.page >= len(row) or row[o.page] != o.block:
                continue
            if o.group in self.windows and \
                    o.page < max(0, r.computed - (self.windows[o.group] or 0) + 1) // self.bg[o.group]:
                continue
            out.append(o)
        return out

    def finished(self, rid: str) -> None:
        owed = self.owed.pop(rid, []) + self.owed_decode.pop(rid, [])
        if owed:
            self.at_finish.append((rid, self._retained(rid, owed)))

    def dropped(self, rid: str) -> None:
        """Retracted or aborted: what it owed is no longer judged."""
        self.owed.pop(rid, None)
        self.owed_decode.pop(rid, None)

    def cleared(self) -> None:
        self.images.clear()
        self.prefetched.clear()
        for g in self.stored:
            self.stored[g].clear()
        self.owed.clear()
        self.owed_decode.clear()
        self.at_finish.clear()
        self.due.clear()
        self.bound.clear()

    def regranted(self, group: str, blocks) -> None:
        """Device blocks handed out again (zeroed, copied or loaded into): a page still unsettled there was
        evicted before its store -- allowed, and no longer judged."""
        self.fresh_now.update((group, blk) for blk in blocks)
        if not self.due:
            return
        for blk in blocks:
            if self.due.pop((group, blk), None) is not None:
                self.bound.discard((group, blk))
                self.stats["pages_evicted_unstored"] += 1

    def storage_done(self, sd: ct.StorageDone) -> None:
        """An L3 op's outcome (before the Host tier consumes it): a get's pages read successfully are held until a
        load-back reads them."""
        op = self.c.l2.storage.get(sd.op)
        if op is not None and op.kind == "StorageGetOp":
            self.prefetched.update(page for page, ok in zip(op.pages, sd.success, strict=False) if ok)

    def room(self) -> int:
        """Host pages a write-back may take now: all but those an unacknowledged op holds (a write-back's
        destination, a load's source), an L3 op in flight fills or reads, an L3 get filled for a load-back still
        to come, and a retraction's image; acknowledged entries can be evicted."""
        held: set[int] = set(self.images) | self.prefetched
        held.update(self.c.l2.host_busy)
        for fl in self.c.l2.inflight.values():
            held.update(page for _g, page in fl.host_dst)
            held.update(fl.host_pins)
        return max(self.c.config.num_host_pages - 1 - len(held), 0)

    # -- per plan ---------------------------------------------------------------------------------------------
    def ops(self, rec: ct.Plan, room: int) -> None:
        """Record the content every write-back of the plan copies (before the plan's zeroing and copies);
        ``room`` is the Host room before the plan's ops."""
        if not self.enabled:
            return
        filled = 0
        self.fresh_now = set()
        gids = [g.id for g in self.c.config.groups]
        for op in rec.cache:
            if op.kind in ("RestoreOp", "LoadBackOp"):  # reading an image (or an L3 get) back releases its pages
                read = [src for k, (src, _d) in enumerate(op.pages)
                        if (op.tiers[k] if k < len(op.tiers) else "L2") == "L2"]
                self.images.difference_update(read)
                self.prefetched.difference_update(read)
            if op.kind != "WriteBackOp":
                continue
            for k, (src, dst) in enumerate(op.pages):
                filled += 1
                self.prefetched.discard(dst)
                if op.pinned is False:
                    self.images.add(dst)
                else:
                    self.images.discard(dst)
                gi = op.groups[k] if op.groups else 0
                g = gids[gi] if gi < len(gids) else None
                if g in self.stored:
                    have = self.c.content[g].get(src)
                    if have is not None:
                        self.stored[g].add(have)
        self.full_now = filled > 0 and filled >= room
        if self.due:
            for gb, (_rid, o) in list(self.due.items()):
                if o.key in self.stored[o.group]:
                    del self.due[gb]
                    self.bound.discard(gb)
                    self.stats["pages_stored"] += 1
            if self.full_now:
                self.bound.update(self.due)

    def check(self, rec: ct.Plan) -> None:
        """After the plan's rows: prefill pages of the requests it admits again, and everything owed by the
        requests the previous answer finished, fall due; those not yet stored stay unsettled."""
        if not self.enabled:
            return
        self.drained = not rec.batch.requests and not rec.cache
        due: list[tuple[str, _Owed]] = []
        for rid, finished in self.at_finish:
            due += [(rid, o) for o in finished]
        self.at_finish = []
        for rid in rec.batch.requests:
            owed = self.owed.get(rid)
            if not owed:
                continue
            now = [o for o in owed if o.plan < rec.plan]
            if now:
                due += [(rid, o) for o in self._retained(rid, now)]
                self.owed[rid] = [o for o in owed if o.plan >= rec.plan]
        if not due:
            return
        self.judged += 1
        for rid, o in due:
            self.stats["pages_due"] += 1
            if o.key in self.stored[o.group]:
                self.stats["pages_stored"] += 1
            elif (o.group, o.block) in self.fresh_now:  # handed out again in this very plan: evicted
                self.stats["pages_evicted_unstored"] += 1
            else:
                self.due[(o.group, o.block)] = (rid, o)
                if self.full_now:
                    self.bound.add((o.group, o.block))

    def finish(self, line: int) -> None:
        """End of the trace: judged only if it ended drained; pages still unsettled then are violations if the
        Host tier had room for all of them."""
        if not self.enabled or not self.due:
            return
        self.stats["pages_unsettled_at_end"] = len(self.due)
        if not self.drained:
            return
        self.stats["capacity_bound"] = len(self.bound)
        left = sorted((v for gb, v in self.due.items() if gb not in self.bound),
                      key=lambda x: (x[1].plan, x[0], x[1].group, x[1].page))
        room = self.room()
        if len(left) > room:
            self.stats["capacity_bound"] += len(left)
            return
        for rid, o in left:
            kind = "prefill" if o.prefill else "decode"
            self.c.find("TS-L2-12", line, f"{rid}'s {o.group} page {o.page} (block {o.block}), computed by a {kind} "
                        f"forward in plan {o.plan} and published, was never stored on Host though it stayed "
                        f"resident and the trace ends drained with {room} Host pages free", request=rid,
                        group=o.group, slot=o.page, plan=o.plan)
