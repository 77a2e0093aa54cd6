"""Faults of the snapshot-state groups (rules TS-ST-1 ... TS-ST-5): a state row, checkpoint or write-back
perturbed the way a scheduler publishing the wrong state would show it."""

from __future__ import annotations

from kvsim.sim.peers.tokenspeed.faults.base import Fault, write_backs
from kvsim.sim.trace import cachetrace as ct

__all__ = ["DecodeStateHit", "ForeignStateHit", "MisplacedCheckpoint", "SkipEndpoint", "UnkeyedStateStore"]


def _state_groups(config: ct.Config) -> list[int]:
    return [i for i, g in enumerate(config.groups) if g.attn_kind == "mamba"]


class DecodeStateHit(Fault):
    name, rule = "decode-state-hit", "TS-ST-2"
    why = ("a request admitted with a prefix hit reads, as its input state, the block another request's decode "
           "is writing (the run needs --state-group and a decode running beside a state hit)")
    donor_role = "decode"

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.outputs: dict[str, tuple[int, int]] = {}  # request -> (block, boundary) its latest donor_role forward
        self.computed: dict[str, int] = {}                # wrote
        self.seen: set[str] = set()                       # requests past their first extend

    def _plan(self, rec: ct.Plan) -> bool:
        state = [self.config.groups[i].id for i in _state_groups(self.config)]
        if not state:
            return False
        rows = (rec.tables or {}).get(state[0], {})
        b = rec.batch
        for k in range(b.extends):
            rid, row = b.requests[k], rows.get(b.requests[k])
            donor = next((blk for d, (blk, at) in sorted(self.outputs.items())
                          if d != rid and at != b.prefix_lengths[k]), None)
            if rid not in self.seen and row and b.prefix_lengths[k] > 0 and row[0] > 0 and donor is not None:
                rec.tables = {g: dict(rs) for g, rs in rec.tables.items()}
                rec.tables[state[0]][rid] = [donor] + list(row[1:])
                return True
        self.seen.update(b.requests[:b.extends])
        ks = range(b.extends, len(b.requests)) if self.donor_role == "decode" else range(b.extends)
        for k, rid in enumerate(b.requests):
            at = (b.prefix_lengths[k] if k < b.extends else self.computed.get(rid, 0)) + b.input_lengths[k]
            self.computed[rid] = at
            row = rows.get(rid)
            if k in ks and row and len(row) > 1 and row[1] > 0:
                self.outputs[rid] = (row[1], at)
        return False

    def result(self, res: ct.Result) -> ct.Result:
        res = super().result(res)
        for rid in res.finish:
            self.outputs.pop(rid, None)
            self.computed.pop(rid, None)
            self.seen.discard(rid)
        return res


class ForeignStateHit(DecodeStateHit):
    name, rule = "foreign-state-hit", "TS-ST-1"
    why = ("a request admitted with a prefix hit reads, as its input state, the block another request's prefill "
           "wrote at another boundary (the run needs --state-group and a state hit)")
    donor_role = "extend"


class MisplacedCheckpoint(Fault):
    name, rule = "misplaced-checkpoint", "TS-ST-3"
    why = ("an extend's internal state checkpoint is moved one prefix page earlier than floor(after/P)*P (the run "
           "needs --state-group and chunked prefills that materialize one)")

    def _plan(self, rec: ct.Plan) -> bool:
        b = rec.batch
        p = self.config.prefix_granularity
        for k, ck in enumerate(b.checkpoint_lengths):
            if ck > p:
                b.checkpoint_lengths = list(b.checkpoint_lengths)
                b.checkpoint_lengths[k] = ck - p
                return True
        return False


class SkipEndpoint(Fault):
    name, rule = "skip-endpoint", "TS-ST-4"
    why = ("the extend completing a prompt with a short final tail drops the internal checkpoint it materializes "
           "at the prompt's last aligned checkpoint (the run needs --state-group and chunked prefills)")

    def _plan(self, rec: ct.Plan) -> bool:
        b = rec.batch
        state = [self.config.groups[i].id for i in _state_groups(self.config)]
        for k, ck in enumerate(b.checkpoint_lengths):
            after = b.prefix_lengths[k] + b.input_lengths[k]
            if ck and k < len(b.prefill_lengths) and after == b.prefill_lengths[k]:
                b.checkpoint_lengths = list(b.checkpoint_lengths)
                b.checkpoint_lengths[k] = 0
                rid = b.requests[k]
                rec.tables = {g: dict(rs) for g, rs in rec.tables.items()}
                for g in state:
                    row = rec.tables.get(g, {}).get(rid)
                    if row is not None and len(row) > 2:
                        rec.tables[g][rid] = list(row[:2])
                return True
        return False


class UnkeyedStateStore(Fault):
    name, rule = "unkeyed-state-store", "TS-ST-5"
    why = ("every write-back of a state block drops its key, so no state checkpoint is ever indexed on Host (the run "
           "needs --state-group and --host-pages)")

    def plan(self, rec: ct.Plan) -> ct.Plan:
        state = _state_groups(self.config)
        for op in write_backs(rec, None):
            if op.keys and op.groups and any(key and op.groups[k] in state for k, key in enumerate(op.keys)):
                op.keys = ["" if op.groups[k] in state else key for k, key in enumerate(op.keys)]
                self.fired = True
        return rec
