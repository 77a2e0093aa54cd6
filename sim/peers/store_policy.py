"""TS-L2-12: what the write-back policy must queue for Host, and by when, judged from a scheduler's plans.

Cache concepts L187: "During prefill, each completed scheduling boundary queues all newly published
full-attention pages and any published Endpoint/Promoted state checkpoints; the candidates are merged into a
batched writeback. The first decode admission from PrefillDone applies the same policy to the final prompt
boundary. Ordinary decode publishes history-cache Device entries but no state entries; full-attention pages
do not stream to Host during decode. At finish or retraction, eligible non-state Device pages and the newest
existing prefill checkpoint per state group are queued before request ownership is released. Ordinary
sliding-window entries always stream when published."

TS-L2-9 judges the prohibition (nothing streamed during decode); this module judges the obligations, with a
Host tier configured:

* a whole page a prefill forward computed (full-attention or ordinary sliding-window group) is published at
  the request's next admission -- its next chunk, or its first decode -- and must be stored by the end of
  that plan;
* a whole page a decode computed, and any prefill page still owed, must be stored by the end of the plan
  after the one whose answer finished the request.

"Stored" means a write-back (pinned or not, acknowledged or not) has copied a Device page holding that
prefix key and page offset into the group's Host tier since it was computed -- by this request or another:
"a store skips keys already in flight", and a key already on Host needs no second copy. Three limits the
seed implies are honoured. A page whose slot the request's table swaps, at publication, to the key's existing
canonical block ("publishing a table's completed blocks may replace one with the key's existing canonical
block") was not newly published, so it is owed nothing. A sliding-window page that has slid out of the
window by then (TS-RET-1's ``max(0, computed - W + 1) // bg``) is never published, so it is owed nothing.
And the Host tier may be too small: what a plan owes is judged only if all of it, beside what the plan's
write-backs stored, fits the Host pages no one holds -- held are the pages of unacknowledged ops (a
write-back's destinations, a load's sources) and a retraction's image, which its unpinned store put on Host
and its restore reads back. Otherwise its unstored pages are counted as ``capacity_bound``: which subset a
full Host tier keeps is the scheduler's choice. A request that is
retracted or aborted, a trace that ends, or an accepted ClearCache drops what was owed (the seed's
"eligible" and a retraction's snapshot are not judged). Replayable groups never stream (TS-L2-7) and owe
nothing; state groups are not judged here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvsim.sim.trace import cachetrace as ct

if TYPE_CHECKING:
    from kvsim.sim.peers.contract import Contract

__all__ = ["RULES", "StorePolicy"]

RULES: dict[str, tuple[str, str]] = {
    "TS-L2-12": ("pages a prefill computed are stored by its next admission; the rest by the plan after finish",
                 "each completed scheduling boundary queues all newly published full-attention pages"),
}


@dataclass
class _Owed:
    group: str
    page: int          # slot index in the group's row
    block: int         # the block it was computed into (a later swap to another block: a deduplicated page)
    key: tuple         # (prefix digest, page offset): the content the page holds
    plan: int          # the plan whose forward computed it
    prefill: bool      # computed by an extend (published at the next admission) or by a decode


class StorePolicy:
    def __init__(self, contract: Contract) -> None:
        self.c = contract
        cfg = contract.config
        self.enabled = cfg.num_host_pages > 1
        self.groups = {g.id for g in cfg.groups if g.attn_kind in ("full", "sliding") and not g.replayable}
        self.stored: dict[str, set[tuple]] = {g: set() for g in self.groups}
        self.owed: dict[str, list[_Owed]] = {}
        self.at_finish: list[tuple[str, list[_Owed]]] = []   # due by the end of the next plan
        self.windows = {g.id: g.sliding_window_tokens for g in cfg.groups if g.attn_kind == "sliding"}
        self.bg = {g.id: g.block_granularity for g in cfg.groups}
        self.images: set[int] = set()  # Host pages holding a retracted request's image until a restore reads it
        self.stats = {"pages_owed": 0, "pages_judged": 0, "capacity_bound": 0}
        self.judged = 0  # plans in which an owed page fell due (the rule's premise)

    def computed(self, rid: str, group: str, page: int, block: int, key: tuple, prefill: bool) -> None:
        """A forward completed a whole page of ``rid`` in ``block``, holding ``key`` (called from the result)."""
        if self.enabled and group in self.groups and block > 0:
            self.owed.setdefault(rid, []).append(_Owed(group, page, block, key, self.c._plan, prefill))
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
        owed = self.owed.pop(rid, None)
        if owed:
            self.at_finish.append((rid, self._retained(rid, owed)))

    def dropped(self, rid: str) -> None:
        """Retracted or aborted: what it owed is no longer judged."""
        self.owed.pop(rid, None)

    def cleared(self) -> None:
        self.images.clear()
        for g in self.stored:
            self.stored[g].clear()
        self.owed.clear()
        self.at_finish.clear()

    def room(self) -> int:
        """Host pages a write-back may take now: all but those an unacknowledged op holds (a write-back's
        destination, a load's source); acknowledged entries can be evicted."""
        held: set[int] = set(self.images)
        for fl in self.c.l2.inflight.values():
            held.update(page for _g, page in fl.host_dst)
            held.update(fl.host_pins)
        return max(self.c.config.num_host_pages - 1 - len(held), 0)

    def ops(self, rec: ct.Plan) -> int:
        """Record the content every write-back of the plan copies (before the plan's zeroing and copies);
        returns how many Host pages they fill."""
        if not self.enabled:
            return 0
        filled = 0
        gids = [g.id for g in self.c.config.groups]
        for op in rec.cache:
            if op.kind in ("RestoreOp", "LoadBackOp"):  # reading an image back releases its Host pages
                self.images.difference_update(src for k, (src, _d) in enumerate(op.pages)
                                              if (op.tiers[k] if k < len(op.tiers) else "L2") == "L2")
            if op.kind != "WriteBackOp":
                continue
            for k, (src, dst) in enumerate(op.pages):
                filled += 1
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
        return filled

    def check(self, rec: ct.Plan, line: int, room: int, filled: int) -> None:
        """After the plan's ops: prefill pages of the requests it admits again, and everything owed by the
        requests the previous answer finished, must be stored -- unless the plan's write-backs filled the
        ``room`` the Host tier had."""
        if not self.enabled:
            return
        due: list[tuple[str, _Owed, str]] = []
        for rid, finished in self.at_finish:
            due += [(rid, o, "finished in the previous plan") for o in finished]
        self.at_finish = []
        for rid in rec.batch.requests:
            owed = self.owed.get(rid, [])
            now = [o for o in owed if o.prefill and o.plan < rec.plan]
            if now:
                due += [(rid, o, "admitted again") for o in self._retained(rid, now)]
                self.owed[rid] = [o for o in owed if not (o.prefill and o.plan < rec.plan)]
        if not due:
            return
        missing = sum(o.key not in self.stored[o.group] for _r, o, _w in due)
        if filled + missing > room:
            self.stats["capacity_bound"] += missing
            due = [d for d in due if d[1].key in self.stored[d[1].group]]
            if not due:
                return
        self.judged += 1
        for rid, o, why in due:
            self.stats["pages_judged"] += 1
            if o.key not in self.stored[o.group]:
                kind = "prefill" if o.prefill else "decode"
                self.c._find("TS-L2-12", line, f"{rid}'s {o.group} page {o.page}, computed by a {kind} forward in plan "
                             f"{o.plan}, is not on Host or in flight though the request was {why}: the write-back "
                             "policy queues it by then", request=rid, group=o.group, slot=o.page)
