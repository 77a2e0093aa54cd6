"""The Host-tier rules: offload, evict (offload then drop the Device copy, or an h2d restore phase by
phase), drop_device / drop_host and phase-by-phase transfers, each legal or illegal as the oracle says
(REP-1..4, PAGE-3, TRACE-2); an arena plan that free bytes cannot hold must be refused (REP-3), one they
can may still be refused for its geometry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from kvsim.sim.fuzz.harness import CKPTS, XFERS
from kvsim.sim.trace import records as kt

if TYPE_CHECKING:  # a mixin of FuzzMachine: type-check it as one
    from kvsim.sim.fuzz.harness import FuzzMachine as _Machine
else:
    _Machine = object


class HostTierRules(_Machine):
    def pick_blocks(self, ck, data):
        """(pool, blocks, out_of_range) of a live checkpoint."""
        pools = [p for p in self.pools if self.oracle.ckpts[ck][p].blocks] or list(self.pools)
        pool = data.draw(st.sampled_from(pools))
        n = len(self.oracle.ckpts[ck][pool].blocks)
        if n == 0 or data.draw(st.integers(0, 15)) == 15:
            return pool, [n], True
        return pool, data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True)), False

    @rule(ck=CKPTS, data=st.data())
    def offload(self, ck, data) -> None:
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("offload:stale", kt.Offload(ckpt=ck, pool="main", blocks=(0,)), "reject")
            return
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.Offload(ckpt=ck, pool=pool, blocks=tuple(blocks))
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        if bad or any(b.pins for b in objs) or not all(b.dev for b in objs):
            self.do("offload:illegal", ev, "reject")
            return
        need = len(o.offload_todo(ck, pool, blocks)) * o.f.page_bytes[pool]
        if need > o.host_free():  # free bytes alone cannot hold it: the arena must refuse (REP-3)
            self.do("offload:arena-full", ev, "reject")
        elif self.do("offload", ev, "either"):
            o.offload(ck, pool, blocks)

    @precondition(lambda self: self.driver is not None and self.oracle.f.host_bytes and self.oracle.ckpts)
    @rule(data=st.data())
    def evict(self, data) -> None:
        """Offload a checkpoint's idle pages and drop their Device replicas (a later activation restores them),
        or bring Host-only pages back by a phase-by-phase h2d transfer."""
        o = self.oracle
        ck = data.draw(st.sampled_from(sorted(o.ckpts)))
        pool = data.draw(st.sampled_from(self.pools))
        blocks = o.ckpts[ck][pool].blocks
        idle = [i for i, b in enumerate(blocks) if b.dev and not b.pins and not b.active_holders]
        away = [i for i, b in enumerate(blocks) if not b.dev and not b.pins and b.host_current]
        if away and data.draw(st.booleans()):
            picks = data.draw(st.lists(st.sampled_from(away), min_size=1, max_size=3, unique=True))
            if len(picks) > o.available(pool) or o.pinned_short(pool, len(picks)):
                return
            xid = self.fresh("x")
            base = dict(xfer=xid, dir="h2d", ckpt=ck, pool=pool, blocks=tuple(picks))
            self.do("evict:h2d-reserve", kt.Xfer(**base, phase="reserve"), "ok")
            o.xfer_reserve(xid, "h2d", ck, pool, picks)
            for phase in ("copy", "verify", "publish", "release_source"):
                self.do(f"evict:h2d-{phase}", kt.Xfer(**base, phase=phase), "ok")
                o.xfer_phase(xid, phase)
            return
        self.drop_stale(ck, data)
        if not idle:
            return
        picks = data.draw(st.lists(st.sampled_from(idle), min_size=1, max_size=4, unique=True))
        if len(o.offload_todo(ck, pool, picks)) * o.f.page_bytes[pool] > o.host_free():
            return
        if not self.do("evict:offload", kt.Offload(ckpt=ck, pool=pool, blocks=tuple(picks)), "either"):
            return
        o.offload(ck, pool, picks)
        self.do("evict:drop_device", kt.DropDevice(ckpt=ck, pool=pool, blocks=tuple(picks)), "ok")
        o.drop_device(ck, pool, picks)

    def drop_stale(self, ck, data) -> None:
        """Try to drop Device copies whose Host copy is stale (the content changed since it was taken): the
        only valid replica would go, so the store must refuse (REP-4)."""
        o = self.oracle
        for pool in self.pools:
            stale = [i for i, b in enumerate(o.ckpts[ck][pool].blocks)
                     if b.dev and b.host is not None and not b.host_current and not b.pins and not b.active_holders]
            if stale:
                self.do("drop_device:stale-host", kt.DropDevice(ckpt=ck, pool=pool, blocks=tuple(stale)), "reject")

    @rule(ck=CKPTS, data=st.data())
    def drop_device(self, ck, data) -> None:
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("drop_device:stale", kt.DropDevice(ckpt=ck, pool="main", blocks=(0,)), "reject")
            return
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.DropDevice(ckpt=ck, pool=pool, blocks=tuple(blocks))
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        legal = not bad and all(b.dev and not b.pins and not b.active_holders and b.host_current for b in objs)
        if self.do("drop_device" if legal else "drop_device:illegal", ev, "ok" if legal else "reject") and legal:
            o.drop_device(ck, pool, blocks)

    @rule(ck=CKPTS, data=st.data())
    def drop_host(self, ck, data) -> None:
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("drop_host:stale", kt.DropHost(ckpt=ck, pool="main", blocks=(0,)), "reject")
            return
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.DropHost(ckpt=ck, pool=pool, blocks=tuple(blocks))
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        legal = not bad and all(b.host is not None and b.dev and not b.pins for b in objs)
        if self.do("drop_host" if legal else "drop_host:illegal", ev, "ok" if legal else "reject") and legal:
            o.drop_host(ck, pool, blocks)

    @rule(target=XFERS, ck=CKPTS, d2h=st.booleans(), data=st.data())
    def xfer_reserve(self, ck, d2h, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        direction = "d2h" if d2h else "h2d"
        xid = self.fresh("x")
        if ck not in o.ckpts:
            ev = kt.Xfer(xfer=xid, dir=direction, ckpt=ck, pool="main", blocks=(0,), phase="reserve")
            self.do("xfer:stale", ev, "reject")
            return multiple()
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.Xfer(xfer=xid, dir=direction, ckpt=ck, pool=pool, blocks=tuple(blocks), phase="reserve")
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        if d2h:
            legal = not bad and all(b.dev and not b.pins for b in objs)
            arena = legal and len(objs) * o.f.page_bytes[pool] > o.host_free()
        else:
            legal = (not bad and all(b.host_current and not b.dev and not b.pins for b in objs)
                     and len(objs) <= o.available(pool) and not o.pinned_short(pool, len(objs)))
            arena = False
        if not legal or arena:
            self.do(f"xfer:{direction}-{'arena-full' if arena else 'illegal'}", ev, "reject")
            return multiple()
        if not self.do(f"xfer:{direction}-reserve", ev, "either" if d2h else "ok"):
            return multiple()
        o.xfer_reserve(xid, direction, ck, pool, blocks)
        return xid

    @rule(x=XFERS, data=st.data())
    def xfer_next(self, x, data) -> None:
        o = self.oracle
        x = self.steer(x, o.xfers, data)
        if x not in o.xfers:
            ev = kt.Xfer(xfer=x, dir="d2h", ckpt="k0", pool="main", blocks=(0,), phase="copy")
            self.do("xfer:ended", ev, "reject")
            return
        xo = o.xfers[x]
        nxt = o.next_phase(x)
        base = dict(xfer=x, dir=xo.direction, ckpt=xo.ckpt, pool=xo.pool, blocks=tuple(xo.indices))
        if data.draw(st.integers(0, 7)) == 7:  # out of the publication order (REP-1)
            wrong = data.draw(st.sampled_from([p for p in ("reserve", "copy", "verify", "publish", "release_source")
                                               if p != nxt and p != "reserve"]))
            self.do("xfer:out-of-order", kt.Xfer(**base, phase=wrong), "reject")
            return
        if nxt is None:  # every phase done: the transfer ended (the precondition keeps it from here)
            return
        ev = kt.Xfer(**base, phase=nxt)  # type: ignore[arg-type]  # nxt is one of PHASES
        live = [b for b in xo.blocks if b.alive]
        if nxt == "release_source" and any(not (b.dev if xo.direction == "h2d" else b.host_current) for b in live):
            # the copy it published has been dropped since: releasing the source would lose the last replica.
            # The model applies that fact and only its state rule objects (PAGE-3) instead of refusing it
            # (REP-4); not generated until the model refuses it without applying it.
            return
        if nxt == "release_source" and xo.direction == "d2h" and any(b.alive and b.active_holders for b in xo.blocks):
            # "release source when no longer required": a source an active sequence reads stays (REP-4)
            self.do("xfer:release-referenced-source", ev, "ok")
            o.xfer_phase(x, nxt)
            return
        if nxt == "verify" and o.verify_stale(x):
            # a block was cut while it was copied: verify must fail (PAGE-3 when reported passed); the engine
            # reports the failed verify and the copy is abandoned (decision 27)
            self.do("xfer:verify-stale", ev, "reject")
            failed = kt.Xfer(**base, phase="verify", result=kt.FactResult(ok=False, error="epoch"))
            self.do("xfer:verify-failed", failed, "ok")
            o.xfer_abandon(x)
            return
        self.do(f"xfer:{nxt}", ev, "ok")
        o.xfer_phase(x, nxt)

