"""Rules that build, in one step, the states held-out bugs need and the other rules rarely reach.

Measured by sim.fuzz.reach: a legal h2d restore left open was about one reserve attempt in ninety, the
`busy` refusal never happened, and transfers were almost never open while other operations ran. Each rule
here sets the state up legally (as the oracle says), then leaves it for the rest of the run:

- `hold_transfer` / `hold_backend_transfer` / `hold_transfer_more`: make blocks eligible (offload and drop
  the Device copy for an h2d restore), reserve a transfer in a drawn pool (a backend pool first for the
  second rule), advance it through a drawn number of phases and leave it open; an h2d left before publish
  is then asked for by an activation, which a correct store refuses as `busy`; then every other operation
  is attempted once, in a drawn order, through its own rule, while the transfer stays open;
- `while_open`: while a transfer is open, attempt one drawn other operation through its own rule (legal or
  not, as that rule draws; only legal attempts count as reached);
- `resume_host_backed`: give a checkpoint's tail pages a Host copy, resume it by Move (or Fork) and append
  at its frontier at once, with no cut in between (sometimes first asking with a prompt shorter than the
  checkpoint: refused, `frontier`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from kvsim.sim.fuzz.harness import XFERS
from kvsim.sim.fuzz.reach import OTHER_OPS
from kvsim.sim.trace import records as kt

if TYPE_CHECKING:  # a mixin of the store machine: type-check it as the other rule sets it calls into
    from kvsim.sim.fuzz.host_rules import HostTierRules
    from kvsim.sim.fuzz.unit_rules import UnitRules

    class _Machine(UnitRules, HostTierRules):
        """The StoreMachine rules this mixin drives (defined in sim.fuzz.machines, which mixes this one in)."""

        def activate(self, label: str, seq: str, prompt: int, budget: int, src: str | None, keep: bool) -> Any: ...
        def activate_root(self, data: Any) -> Any: ...
        def activate_from(self, ck: str, keep: bool, data: Any) -> Any: ...
        def map(self, seq: str, data: Any) -> None: ...
        def grow(self, seq: str, data: Any) -> None: ...
        def cow(self, seq: str, data: Any) -> None: ...
        def truncate(self, seq: str, data: Any) -> None: ...
        def finish(self, seq: str, retain: bool, how: int, data: Any) -> Any: ...
        def release(self, ck: str, data: Any) -> None: ...
else:
    _Machine = object


def _host_and_ckpts(self: Any) -> bool:
    return self.driver is not None and bool(self.oracle.f.host_bytes) and bool(self.oracle.ckpts)


def _host(self: Any) -> bool:
    return self.driver is not None and bool(self.oracle.f.host_bytes)


class ReachRules(_Machine):
    @precondition(_host)
    @rule(target=XFERS, data=st.data())
    def hold_transfer(self, data):
        return self.open_transfer(data, backend_first=False)

    @precondition(lambda self: _host(self) and self.oracle.f.backend_pool is not None)
    @rule(target=XFERS, data=st.data())
    def hold_backend_transfer(self, data):
        return self.open_transfer(data, backend_first=True)

    def open_transfer(self, data, backend_first: bool, follow: bool = True):
        o = self.oracle
        if not any(o.ckpts[c][p].blocks for c in o.ckpts for p in self.pools) and not self.checkpoint(data):
            return multiple()
        ck = data.draw(st.sampled_from(sorted(c for c in o.ckpts if any(o.ckpts[c][p].blocks for p in self.pools))))
        pools = [p for p in self.pools if o.ckpts[ck][p].blocks]
        if not pools:
            return multiple()
        backend = [p for p in pools if p != "main"]
        pool = data.draw(st.sampled_from(backend if backend_first and backend else pools))
        blocks = o.ckpts[ck][pool].blocks
        stride = o.f.page_bytes[pool]
        direction = data.draw(st.sampled_from(("d2h", "h2d")))
        if direction == "d2h":
            if data.draw(st.integers(0, 2)) == 2:  # a Host copy elsewhere first: a Device copy droppable meanwhile
                self.host_op("offload", data, idle=True)
            cand = [i for i, b in enumerate(blocks) if b.dev and not b.pins]
            if not cand:
                return multiple()
            picks = data.draw(st.lists(st.sampled_from(cand), min_size=1, max_size=2, unique=True))
            if len(picks) * stride > o.host_free():
                return multiple()
        else:
            away = [i for i, b in enumerate(blocks) if not b.dev and not b.pins and b.host_current]
            if not away:  # make some: a Host copy, then drop the Device one (as evict does)
                idle = [i for i, b in enumerate(blocks) if b.dev and not b.pins and not b.active_holders]
                if not idle:
                    return multiple()
                picks = data.draw(st.lists(st.sampled_from(idle), min_size=1, max_size=2, unique=True))
                if len(o.offload_todo(ck, pool, picks)) * stride > o.host_free():
                    return multiple()
                if not self.do("hold:offload", kt.Offload(ckpt=ck, pool=pool, blocks=tuple(picks)), "either"):
                    return multiple()
                o.offload(ck, pool, picks)
                self.do("hold:drop_device", kt.DropDevice(ckpt=ck, pool=pool, blocks=tuple(picks)), "ok")
                o.drop_device(ck, pool, picks)
                away = picks
            picks = data.draw(st.lists(st.sampled_from(away), min_size=1, max_size=2, unique=True))
            if len(picks) > o.available(pool):
                return multiple()
        xid = self.fresh("x")
        base = dict(xfer=xid, dir=direction, ckpt=ck, pool=pool, blocks=tuple(picks))
        if not self.do(f"hold:{direction}-reserve", kt.Xfer(**base, phase="reserve"),
                       "either" if direction == "d2h" else "ok"):
            return multiple()
        o.xfer_reserve(xid, direction, ck, pool, picks)
        phases: tuple[Literal["copy", "verify", "publish"], ...] = ("copy", "verify", "publish")
        for phase in phases[:data.draw(st.integers(0, 3))]:
            self.do(f"hold:{direction}-{phase}", kt.Xfer(**base, phase=phase), "ok")
            o.xfer_phase(xid, phase)
        if direction == "h2d" and o.xfers[xid].phase != "publish" and data.draw(st.booleans()):
            # the restore is in flight: an activation from the checkpoint must wait (refused: busy)
            self.activate("hold:activate-restoring", self.fresh("s"), o.ckpts[ck]["main"].frontier, 0, ck,
                          data.draw(st.booleans()))
        if follow:  # the rest of the store goes on while it is open: every other operation, in a drawn order
            if data.draw(st.booleans()) and ck in o.ckpts:  # the copied checkpoint itself is resumed meanwhile
                self.activate_from(ck, data.draw(st.booleans()), data)
                if data.draw(st.booleans()):  # and the copy moves on while its source is read
                    self.xfer_next(xid, data)
            for op in data.draw(st.permutations(OTHER_OPS)) if xid in o.xfers else ():
                if xid not in o.xfers:
                    break
                self.attempt_other(data, op)
            if xid in o.xfers and data.draw(st.booleans()):  # and it moves on with that state around it
                self.xfer_next(xid, data)
        return xid if xid in o.xfers else multiple()

    def checkpoint(self, data) -> bool:
        """A new checkpoint with content in every pool: activate, one round, retain (False if refused)."""
        o = self.oracle
        seq = self.fresh("s")
        S = o.f.max_context
        self.activate("hold:activate", seq, data.draw(st.integers(1, S // 2)), data.draw(st.integers(0, S // 4)),
                      None, True)
        if seq not in o.seqs:
            return False
        self.round_for(seq, data)
        if seq not in o.seqs or self.busy(seq):
            return False
        ck = self.fresh("k")
        self.do("hold:retain", kt.Finish(seq=seq, retain=ck), "ok")
        o.finish(seq, ck)
        return any(o.ckpts[ck][p].blocks for p in self.pools)

    @precondition(lambda self: self.driver is not None and bool(self.oracle.xfers))
    @rule(data=st.data())
    def while_open(self, data):
        self.attempt_other(data)

    @precondition(lambda self: self.driver is not None and bool(self.oracle.xfers))
    @rule(data=st.data())
    def while_open_more(self, data):
        self.attempt_other(data)

    @precondition(_host)
    @rule(target=XFERS, data=st.data())
    def hold_transfer_more(self, data):
        return self.open_transfer(data, backend_first=data.draw(st.booleans()))

    def attempt_other(self, data, op: str | None = None) -> None:
        """One (drawn) other operation, through its own rule, while a transfer is open."""
        o = self.oracle
        if op is None:
            op = data.draw(st.sampled_from(OTHER_OPS))
        if op in ("map", "grow", "cow", "truncate", "finish", "launch", "complete", "fail") and not o.seqs:
            self.activate_root(data)  # a sequence to act on
        seqs, ckpts = sorted(o.seqs), sorted(o.ckpts)
        if op == "activate":
            if ckpts and data.draw(st.booleans()):
                self.activate_from(data.draw(st.sampled_from(ckpts)), data.draw(st.booleans()), data)
            else:
                self.activate_root(data)
        elif op == "cow":
            mapped = [n for n in seqs if any(sp.blocks and sp.unit is None for sp in o.seqs[n].spaces.values())]
            if not mapped and seqs:  # a sequence with pages to copy: one round of the first idle one
                idle = [n for n in seqs if not self.busy(n)]
                if idle:
                    self.round_for(idle[0], data)
                mapped = [n for n in sorted(o.seqs)
                          if any(sp.blocks and sp.unit is None for sp in o.seqs[n].spaces.values())]
            if mapped or o.seqs:
                self.cow(data.draw(st.sampled_from(mapped or sorted(o.seqs))), data)
        elif op in ("map", "grow", "truncate"):
            if seqs:
                getattr(self, op)(data.draw(st.sampled_from(seqs)), data)
        elif op == "finish":
            if seqs:
                self.finish(data.draw(st.sampled_from(seqs)), data.draw(st.booleans()), data.draw(st.integers(0, 7)),
                            data)
        elif op in ("offload", "drop_device", "drop_host") and data.draw(st.integers(0, 3)) and self.host_op(op, data):
            pass  # mostly a legal one, on blocks that allow it (the generic rules pick blocks blindly)
        elif op in ("release", "offload", "drop_device", "drop_host"):
            if ckpts:
                getattr(self, op)(data.draw(st.sampled_from(ckpts)), data)
        elif op == "launch":
            if self.free_spaces():
                self.launch(data)
        elif op in ("complete", "fail"):
            if not o.units and self.free_spaces():
                self.launch(data)
            if o.units:
                unit = data.draw(st.sampled_from(sorted(o.units)))
                (self.complete if op == "complete" else self.fail_unit)(unit, data)
        elif op == "xfer":
            if len(o.xfers) > 1 and data.draw(st.booleans()):
                self.xfer_next(data.draw(st.sampled_from(sorted(o.xfers))), data)
            elif ckpts:
                self.open_transfer(data, backend_first=data.draw(st.booleans()), follow=False)

    def host_op(self, op: str, data, idle: bool = False) -> bool:
        """A legal offload / drop_device / drop_host on blocks of some checkpoint that allow it (a drop first
        gets a Host copy to rely on, or to drop, when no block has one); False when no block allows it.
        `idle`: offload only blocks no active sequence holds (a Device copy that can be dropped next)."""
        o = self.oracle
        legal = {"offload": lambda b: b.dev and not b.pins and not (idle and b.active_holders),
                 "drop_device": lambda b: b.dev and not b.pins and not b.active_holders and b.host_current,
                 "drop_host": lambda b: b.host is not None and b.dev and not b.pins}[op]
        where = sorted({(c, p) for c in o.ckpts for p in self.pools
                        if any(legal(b) for b in o.ckpts[c][p].blocks)})
        if not where and op != "offload" and self.host_op("offload", data, idle=op == "drop_device"):
            return self.host_op(op, data)
        if not where:
            return False
        ck, pool = data.draw(st.sampled_from(where))
        cand = [i for i, b in enumerate(o.ckpts[ck][pool].blocks) if legal(b)]
        picks = data.draw(st.lists(st.sampled_from(cand), min_size=1, max_size=2, unique=True))
        if op == "offload":
            if len(o.offload_todo(ck, pool, picks)) * o.f.page_bytes[pool] > o.host_free():
                return False
            if self.do("while:offload", kt.Offload(ckpt=ck, pool=pool, blocks=tuple(picks)), "either"):
                o.offload(ck, pool, picks)
        elif op == "drop_device":
            self.do("while:drop_device", kt.DropDevice(ckpt=ck, pool=pool, blocks=tuple(picks)), "ok")
            o.drop_device(ck, pool, picks)
        else:
            self.do("while:drop_host", kt.DropHost(ckpt=ck, pool=pool, blocks=tuple(picks)), "ok")
            o.drop_host(ck, pool, picks)
        return True

    @precondition(lambda self: _host_and_ckpts(self) and any(c["main"].frontier for c in self.oracle.ckpts.values()))
    @rule(data=st.data())
    def resume_host_backed(self, data):
        o = self.oracle
        ck = data.draw(st.sampled_from(sorted(c for c in o.ckpts if o.ckpts[c]["main"].frontier)))
        for pool in self.pools:  # the tail page of every pool keeps a Host copy
            blocks = o.ckpts[ck][pool].blocks
            if not blocks:
                continue
            t = len(blocks) - 1
            b = blocks[t]
            if b.host is None and b.dev and not b.pins and o.f.page_bytes[pool] <= o.host_free():
                if self.do("resume:offload", kt.Offload(ckpt=ck, pool=pool, blocks=(t,)), "either"):
                    o.offload(ck, pool, [t])
        keep = data.draw(st.integers(0, 3)) == 3  # mostly Move: a Fork copies the partial tail
        F = o.ckpts[ck]["main"].frontier
        if data.draw(st.integers(0, 3)) == 3:  # a prompt shorter than the checkpoint: refused (frontier)
            self.activate("resume:below-frontier", self.fresh("s"), F - 1, 1, ck, keep)
        seq = self.fresh("s")
        prompt = F + data.draw(st.integers(0, 8))
        self.activate("resume:" + ("fork" if keep else "move"), seq, prompt, data.draw(st.integers(1, 64)), ck, keep)
        if seq in o.seqs:
            self.round_for(seq, data)
