"""Faults of the tables, prefix hits and admission (rules TS-PFX-3, TS-ADM-2, TS-TBL-1, TS-POOL-4, TS-ADM-3,
TS-POOL-5): a plan's rows, hits, readmission or page gauge, or a submission's refusal, perturbed."""

from __future__ import annotations

from kvsim.sim.peers.tokenspeed.faults.base import Fault
from kvsim.sim.trace import cachetrace as ct

__all__ = ["ReplayableHit", "FlatReadmission", "HitServedAsCopy", "FullRowHole", "AdmitOverBound", "GaugeOff"]


class ReplayableHit(Fault):
    name, rule = "replayable-hit", "TS-PFX-3"
    why = ("a request admitted with a prefix hit names, below its replay window, the page its full-attention row "
           "hits at that slot, in the replayable group too (the run needs one: --swa-replayable)")

    def _plan(self, rec: ct.Plan) -> bool:
        rep = [g.id for g in self.config.groups if g.replayable]
        full = next((g.id for g in self.config.groups if g.attn_kind == "full"), None)
        b = rec.batch
        if not rep or full is None:
            return False
        for k in range(b.extends):
            rid = b.requests[k]
            row, hit_row = (rec.tables or {}).get(rep[0], {}).get(rid), (rec.tables or {}).get(full, {}).get(rid)
            if row and hit_row and b.prefix_lengths[k] > 0 and row[0] == 0:
                rec.tables = {g: dict(rows) for g, rows in rec.tables.items()}
                rec.tables[rep[0]][rid] = [hit_row[0]] + list(row[1:])
                return True
        return False


class FlatReadmission(Fault):
    name, rule = "flat-readmission", "TS-ADM-2"
    why = ("a retracted request's readmission row is cut back to the headroom its previous admission secured "
           "(the run needs retraction and a request whose generation that headroom does not cover)")

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        g = next((g for g in config.groups if g.attn_kind == "full"), config.groups[0])
        self.group, self.bg = g.id, g.block_granularity
        self.budget: dict[str, tuple[int, int]] = {}   # request -> (prompt tokens, max_new_tokens)
        self.produced: dict[str, int] = {}
        self.secured: dict[str, int] = {}               # headroom its latest admission secured
        self.retracted: set[str] = set()
        self.batch: list[str] = []

    def submit(self, rec: ct.Submit) -> None:
        self.budget[rec.request] = (len(rec.tokens), rec.max_new_tokens)

    def _plan(self, rec: ct.Plan) -> bool:
        self.batch = list(rec.batch.requests)
        cut = False
        for rid, row in list((rec.tables or {}).get(self.group, {}).items()):
            if rid not in self.budget or (rid in self.secured and rid not in self.retracted):
                continue
            prompt, max_new = self.budget[rid]
            made = self.produced.get(rid, 0)
            tokens = prompt + made
            if rid in self.retracted and not cut:
                keep = (tokens + self.secured[rid]) // self.bg   # no more headroom than last time
                if -(-(tokens + 1) // self.bg) <= keep < len(row) and keep * self.bg - tokens < max_new - made:
                    rec.tables = {g: dict(rows) for g, rows in rec.tables.items()}
                    rec.tables[self.group][rid] = list(row[:keep])
                    cut = True
            self.retracted.discard(rid)
            self.secured[rid] = len(row) * self.bg - tokens
        for op in rec.cache:
            if op.kind == "SnapshotOp" and op.request is not None:
                self.retracted.add(op.request)
        return cut

    def result(self, res: ct.Result) -> ct.Result:
        res = super().result(res)
        for rid, toks in zip(self.batch, res.tokens):
            self.produced[rid] = self.produced.get(rid, 0) + len(toks)
        return res


class HitServedAsCopy(Fault):
    name, rule = "hit-served-as-copy", "TS-TBL-1"
    why = ("a first extend with a prefix hit of at least one page names, at its full-attention slot 0, a fresh copy "
           "of the published block instead of the block itself (seed 002 L154)")

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.seen: set[int] = set()  # every full-attention block id a record named so far: the fresh id avoids them

    def _plan(self, rec: ct.Plan) -> bool:
        g = self._full_group()
        if g is None:
            return False
        for row in rec.tables.get(g, {}).values():
            self.seen.update(row)
        self.seen.update(x for pair in rec.copy.get(g, []) for x in pair)
        self.seen.update(rec.zero.get(g, []))
        total = next(grp.total_pages for grp in self.config.groups if grp.id == g)
        b = rec.batch
        for k in range(b.extends):
            rid = b.requests[k]
            got = rec.tables.get(g, {}).get(rid)
            if b.prefix_lengths[k] < self.config.prefix_granularity or not got or got[0] <= 0:
                continue
            row = got
            fresh = next((x for x in range(total - 1, 0, -1) if x not in self.seen), None)
            if fresh is None:
                return False
            rec.tables = {name: dict(rows) for name, rows in rec.tables.items()}
            rec.tables[g][rid] = [fresh, *row[1:]]
            rec.copy = {**rec.copy, g: [*rec.copy.get(g, []), (row[0], fresh)]}
            return True
        return False


class FullRowHole(Fault):
    name, rule = "full-row-hole", "TS-POOL-4"
    why = "a live request's full-attention row loses its slot 0 to -1 while its later slots stay (seed 002 L165)"

    def _plan(self, rec: ct.Plan) -> bool:
        g = self._full_group()
        if g is None:
            return False
        b = rec.batch
        for rid in b.requests[b.extends:]:  # a decode: its request is live and its row already judged
            row = rec.tables.get(g, {}).get(rid)
            if row and len(row) > 1 and row[0] > 0 and row[1] > 0:
                rec.tables = {name: dict(rows) for name, rows in rec.tables.items()}
                rec.tables[g][rid] = [-1, *row[1:]]
                return True
        return False


class AdmitOverBound(Fault):
    name, rule = "admit-over-bound", "TS-ADM-3"
    why = ("a request the scheduler refused at submission (over the CapacityModel's single-request bound) is recorded "
           "as accepted (the run needs a refusal: a pool too small for one request)")

    def submit(self, rec: ct.Submit) -> None:
        if not self.fired and rec.refused is not None:
            rec.refused = None
            self.fired = True


class GaugeOff(Fault):
    name, rule = "gauge-off", "TS-POOL-5"
    why = "the first plan's page gauge reports one active parent more than the live tables name"

    def _plan(self, rec: ct.Plan) -> bool:
        if len(rec.gauge) == 2 and rec.batch.requests:
            rec.gauge = [rec.gauge[0], rec.gauge[1] + 1]
            return True
        return False
