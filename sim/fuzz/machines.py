"""The stateful fuzzing machines: the store model driven through kvtrace/1, judged by the oracle.

`StoreMachine` runs every transaction of the store contract — activation (root, Fork, Move, with Host
restores and engine-chosen pages), map, launch / complete / fail (speculative rounds over Main and the
backend pool), truncate, grow, cow, finish (retain / release), release, offload / drop / phase-by-phase
transfers — and an illegal variant of each, which must be rejected with a rule and leave the whole state
exactly as it was. Handles live in Bundles (sequences, checkpoints, units, transfers); a stale handle
turns a rule into an illegal attempt. Hypothesis selects rules by swarm testing; the configuration
(profile, backend, capacity, growth, concurrency, Host arena) is drawn per run, tight ones first.
The machine steers by the oracle (what a correct store holds), never by the model under test
(`sim.fuzz.harness`). `HostMachine` weights the Host tier and draws small arenas; `LockstepMachine`
(`sim.fuzz.physical`) also runs the physical pools.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import initialize, multiple, precondition, rule

from kvsim.kvmodel.store.config import PAGE_SIZE as P
from kvsim.sim.fuzz.configs import configs
from kvsim.sim.fuzz.harness import CKPTS, SEQS, XFERS, FuzzFailure, FuzzMachine
from kvsim.sim.fuzz.host_rules import HostTierRules
from kvsim.sim.fuzz.reach_rules import ReachRules
from kvsim.sim.fuzz.unit_rules import UnitRules
from kvsim.sim.trace import records as kt

__all__ = ["StoreMachine", "HostMachine", "FuzzFailure", "configs"]


class StoreMachine(ReachRules, UnitRules, HostTierRules, FuzzMachine):
    name = "store"
    config_strategy = configs()

    @initialize(cfg=config_strategy)
    def setup(self, cfg) -> None:
        self.start(cfg)

    # -- activation ---------------------------------------------------------------------------------
    @rule(target=SEQS, data=st.data())
    def activate_root(self, data):
        S = self.oracle.f.max_context
        if len(self.oracle.seqs) >= self.oracle.f.max_concurrency and data.draw(st.integers(0, 3)) < 3:
            return multiple()  # every row is leased: mostly do something else
        gate = data.draw(st.integers(0, 15))
        prompt = data.draw(st.integers(S + 1, S + 64) if gate == 15 else st.integers(0, S) if gate > 10
                           else st.integers(0, S // 2))
        budget = data.draw(st.integers(0, S) if data.draw(st.integers(0, 3)) == 3 else st.integers(0, S // 4))
        return self.activate("activate", self.fresh("s"), prompt, budget, None, True)

    @rule(target=SEQS, ck=CKPTS, keep=st.booleans(), data=st.data())
    def activate_from(self, ck, keep, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:  # released or moved: a stale checkpoint (CKPT-2 / TRACE-2)
            self.do("activate_from:stale", kt.Activate(seq=self.fresh("s"), prompt=1, budget=1, from_=ck), "reject")
            return multiple()
        wide = data.draw(st.integers(0, 3)) == 3
        extra = data.draw(st.integers(-2, 300) if wide else st.integers(0, 16))
        if o.ckpts[ck]["main"].frontier and data.draw(st.integers(0, 7)) == 7:  # below the frontier: refused
            extra = -data.draw(st.integers(1, P))
        budget = data.draw(st.integers(0, 300) if wide else st.integers(0, 64))
        prompt = max(0, o.ckpts[ck]["main"].frontier + extra)
        return self.activate("activate_from:" + ("fork" if keep else "move"), self.fresh("s"), prompt, budget, ck, keep)

    @precondition(lambda self: self.driver is not None and (self.oracle.ckpts or self.oracle.seqs))
    @rule(data=st.data())
    def branch(self, data) -> None:
        """Retain a sequence and continue it (Fork or Move): the prefix-sharing path engines take most."""
        o = self.oracle
        cands = sorted(c for c in o.ckpts if o.ckpts[c]["main"].frontier)
        if not cands or data.draw(st.booleans()):
            done = [n for n in sorted(o.seqs) if not self.busy(n) and o.seqs[n].spaces["main"].frontier]
            if done:
                name, ck = data.draw(st.sampled_from(done)), self.fresh("k")
                self.do("branch:retain", kt.Finish(seq=name, retain=ck), "ok")
                o.finish(name, ck)
                cands = [ck]
        if not cands:
            return
        ck = data.draw(st.sampled_from(cands))
        # (draws lean to 0: the common path is the zero one)
        if o.f.host_bytes and data.draw(st.integers(0, 2)) != 2:  # keep a Host copy of the continuation first
            pool = data.draw(st.sampled_from(self.pools))
            idle = [i for i, b in enumerate(o.ckpts[ck][pool].blocks) if b.dev and not b.pins]
            if idle and len(o.offload_todo(ck, pool, idle)) * o.f.page_bytes[pool] <= o.host_free():
                if self.do("branch:offload", kt.Offload(ckpt=ck, pool=pool, blocks=tuple(idle)), "either"):
                    o.offload(ck, pool, idle)
        offloaded = any(b.host is not None for p in self.pools for b in o.ckpts[ck][p].blocks)
        # mostly Fork; mostly Move when a Host copy exists (a Move then rewrites pages that have one: stale copies)
        keep = data.draw(st.integers(0, 2)) != 2 if not offloaded else data.draw(st.integers(0, 2)) == 2
        prompt = o.ckpts[ck]["main"].frontier + data.draw(st.integers(0, 8))
        seq = self.fresh("s")
        budget = data.draw(st.integers(0, 64))
        plan = o.plan_activate(prompt, budget, ck, keep)
        if not isinstance(plan, str) and data.draw(st.integers(0, 2)) == 2:
            self.follow(seq, prompt, budget, ck, keep, plan, data)
        else:
            self.activate("branch:" + ("fork" if keep else "move"), seq, prompt, budget, ck, keep)
        if seq in o.seqs and data.draw(st.integers(0, 2)) != 2:  # rewrite part of the continued prefix
            for pool, s in o.seqs[seq].spaces.items():
                f = data.draw(st.integers(0, s.frontier))
                if o.trims_provisional(seq, pool, f):  # a mapping a stage not yet launched needs (UNIT-4)
                    self.do("branch:truncate-provisional", kt.Truncate(seq=seq, pool=pool, frontier=f), "reject")
                    continue
                self.do("branch:truncate", kt.Truncate(seq=seq, pool=pool, frontier=f), "ok")
                o.truncate(seq, pool, f)
            if data.draw(st.integers(0, 2)) != 2:  # and checkpoint the rewritten continuation again
                again = self.fresh("k")
                self.do("branch:retain-again", kt.Finish(seq=seq, retain=again), "ok")
                o.finish(seq, again)
                self.drop_stale(again, data)
        self.observe(data)

    def follow(self, seq, prompt, budget, ck, keep, plan, data) -> None:
        """The engine chose the pages of a continuation itself (its activation result lists them): the model
        adopts them when they are free and keep every shared or moved page's identity; an engine that
        drops the partial tail (WR-4), moves a tail it had to copy (CKPT-3) or hands out a page whose lease
        the engine itself named (PAGE-1) is rejected (a lease the model guessed moves aside: kvmodel.store.adopt)."""
        o = self.oracle
        pages = {}
        for pool, (members, _) in plan[1].items():
            src = self.view.device_ids("ckpt", ck, pool)
            free = self.view.free_ids(pool)
            ids = []
            for i, m in enumerate(members):
                if m[0] == "keep" and m[1].dev:
                    ids.append(src[i])
                elif not free:  # fewer free pages than the oracle counts: the refinement check says why
                    self.refines()
                    self.fail("refinement", f"{pool}: no free page left for the continuation of {ck}")
                else:
                    ids.append(free.pop(0))
            pages[pool] = ids
        members, src = plan[1]["main"][0], self.view.device_ids("ckpt", ck, "main")
        fresh = [i for i, m in enumerate(members) if m[0] == "cow" or not m[1].dev]
        leased = [d for d in src if d >= 0 and self.view.confirmed("main", d)]  # a guessed id may be adopted
        options = ["legal", "legal"] + (["leased"] if fresh and leased else []) + \
            (["dropped-tail", "moved-tail"] if members and members[-1][0] == "cow" and src[-1] >= 0 else [])
        variant = data.draw(st.sampled_from(options))
        ids = list(pages["main"])
        if variant == "leased":
            ids[fresh[0]] = leased[-1] if leased[-1] != ids[fresh[0]] else leased[0]
        elif variant == "dropped-tail":
            ids = ids[:-1]
        elif variant == "moved-tail":
            ids[-1] = src[-1]
        pages["main"] = ids
        ev = kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=ck, keep_source=keep,
                         result=kt.ActivateResult(ok=True, pages={p: tuple(v) for p, v in pages.items()}))
        if variant == "legal":
            self.do("branch:engine-pages", ev, "ok")
            o.activate(seq, plan, ck, keep)
        else:
            self.do(f"branch:engine-{variant}", ev, "reject")

    @rule(seq=SEQS, gate=st.integers(0, 3))
    def activate_twice(self, seq, gate) -> None:
        if gate == 3 and self.live_seq(seq) is not None:  # already active (TRACE-2)
            self.do("activate:active", kt.Activate(seq=seq, prompt=0, budget=1), "reject")

    def activate(self, label, seq, prompt, budget, src, keep):
        plan = self.oracle.plan_activate(prompt, budget, src, keep)
        granted = not isinstance(plan, str)
        ev = kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=src, keep_source=keep)
        res = kt.ActivateResult(ok=True) if granted else kt.ActivateResult(ok=False, error=plan)
        if self.request(label if granted else f"{label}:refused", ev, granted, res):
            self.oracle.activate(seq, plan, src, keep)
            return seq
        return multiple()

    # -- mapping, growth, COW -------------------------------------------------------------------------
    @rule(seq=SEQS, data=st.data())
    def map(self, seq, data) -> None:
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        pool = data.draw(st.sampled_from(self.pools))
        if q is None or q.spaces[pool].unit is not None:
            self.do("map:" + ("stale" if q is None else "in-flight"), kt.Map(seq=seq, pool=pool, tokens=1), "reject")
            return
        s = q.spaces[pool]
        tokens = data.draw(st.integers(0, (s.entitlement + 1) * P))
        refusal = self.oracle.plan_map(seq, pool, tokens)
        res = kt.MapResult(ok=True) if refusal is None else kt.MapResult(ok=False, error=refusal)
        if self.request("map" if refusal is None else "map:refused", kt.Map(seq=seq, pool=pool, tokens=tokens),
                        refusal is None, res):
            self.oracle.map(seq, pool, tokens)

    @rule(seq=SEQS, data=st.data())
    def grow(self, seq, data) -> None:
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        if q is None:
            self.do("grow:stale", kt.Grow(seq=seq), "reject")
            return
        if self.busy(seq):
            if self.oracle.f.growth_window is not None:  # growth only at round boundaries (ENT-3)
                self.do("grow:in-flight", kt.Grow(seq=seq), "reject")
            return
        plan = self.oracle.plan_grow(seq)
        granted = not isinstance(plan, tuple)
        res = kt.GrowResult(ok=True) if granted else kt.GrowResult(ok=False, bounded_at=plan[1])
        self.request("grow" if granted else f"grow:{plan[0]}", kt.Grow(seq=seq), granted, res)
        self.oracle.grow(seq, plan)

    @rule(seq=SEQS, data=st.data())
    def cow(self, seq, data) -> None:
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        pool = data.draw(st.sampled_from(self.pools))
        if q is None or q.spaces[pool].unit is not None:
            self.do("cow:" + ("stale" if q is None else "in-flight"), kt.Cow(seq=seq, pool=pool, block=0), "reject")
            return
        s = q.spaces[pool]
        shared = [b for b in range(len(s.blocks)) if not s.private(b)]
        if not s.blocks or data.draw(st.integers(0, 9)) == 9:
            self.do("cow:beyond", kt.Cow(seq=seq, pool=pool, block=len(s.blocks)), "reject")
            return
        block = data.draw(st.sampled_from(shared)) if shared and data.draw(st.integers(0, 3)) < 3 else \
            data.draw(st.integers(0, len(s.blocks) - 1))
        plan = self.oracle.plan_cow(seq, pool, block)
        granted = plan != "capacity"
        res = kt.CowResult(ok=True) if granted else kt.CowResult(ok=False, error="capacity")
        label = "cow" if plan is None else f"cow:{plan}"
        ev = kt.Cow(seq=seq, pool=pool, block=block)
        self.count(label)
        try:
            viol = self.driver.step(ev, ev if granted else kt.Cow(seq=seq, pool=pool, block=block, result=res))
        except Exception as exc:  # noqa: BLE001
            self.fail("crash", f"{label}: {type(exc).__name__}: {exc}")
        if viol:
            self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
        self.reached(ev, None if granted else "capacity")
        if plan is None:
            self.oracle.cow(seq, pool, block)

    # -- truncate, finish, release --------------------------------------------------------------------
    @rule(seq=SEQS, data=st.data())
    def truncate(self, seq, data) -> None:
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        pool = data.draw(st.sampled_from(self.pools))
        if q is None:
            self.do("truncate:stale", kt.Truncate(seq=seq, pool=pool, frontier=0), "reject")
            return
        s = q.spaces[pool]
        if s.unit is not None:  # never truncates a space a unit holds in flight (UNIT-1)
            self.do("truncate:in-flight", kt.Truncate(seq=seq, pool=pool, frontier=s.frontier), "reject")
            return
        how = data.draw(st.integers(0, 9))
        if how == 9:
            self.do("truncate:forward", kt.Truncate(seq=seq, pool=pool, frontier=s.frontier + 1), "reject")
            return
        f = s.frontier if how < 4 else data.draw(st.integers(0, s.frontier))  # settle (trim) or destructive
        if self.oracle.trims_provisional(seq, pool, f):
            self.do("truncate:provisional", kt.Truncate(seq=seq, pool=pool, frontier=f), "reject")
            return
        self.do("truncate:settle" if f == s.frontier else "truncate", kt.Truncate(seq=seq, pool=pool, frontier=f), "ok")
        self.oracle.truncate(seq, pool, f)

    @rule(target=CKPTS, seq=SEQS, retain=st.booleans(), how=st.integers(0, 9), data=st.data())
    def finish(self, seq, retain, how, data):
        o = self.oracle
        seq = self.steer(seq, o.seqs, data)
        if seq not in o.seqs:
            self.do("finish:stale", kt.Finish(seq=seq), "reject")
            return multiple()
        if self.busy(seq):
            self.do("finish:in-flight", kt.Finish(seq=seq), "reject")
            return multiple()
        if retain and how == 9:
            self.do("finish:no-state-image", kt.Finish(seq=seq, retain=self.fresh("k"), state_image=False), "reject")
            return multiple()
        if retain and how == 8 and o.ckpts:
            self.do("finish:retain-live-id", kt.Finish(seq=seq, retain=sorted(o.ckpts)[0]), "reject")
            return multiple()
        ck = self.fresh("k") if retain else None
        self.do("finish:retain" if retain else "finish", kt.Finish(seq=seq, retain=ck), "ok")
        o.finish(seq, ck)
        if ck:
            self.drop_stale(ck, data)
        return ck if ck else multiple()

    @rule(ck=CKPTS, data=st.data())
    def release(self, ck, data) -> None:
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("release:" + ("double" if ck in o.released else "moved"), kt.Release(ckpt=ck), "reject")
            return
        self.do("release", kt.Release(ckpt=ck), "ok")
        o.release(ck)


class HostMachine(StoreMachine):
    """The Host arena and replica publication under interleaved transfers, drops and restores: small
    arenas (one to three pages of the widest stride, an odd remainder) and Host rules drawn twice as often."""

    name = "host"
    config_strategy = configs(host_pages=st.sampled_from((1, 2, 3, 4)))

    @initialize(cfg=config_strategy)
    def setup(self, cfg) -> None:
        self.start(cfg)

    @rule(ck=CKPTS, data=st.data())
    def offload_again(self, ck, data) -> None:
        self.offload(ck, data)

    @rule(ck=CKPTS, data=st.data())
    def drop_device_again(self, ck, data) -> None:
        self.drop_device(ck, data)

    @rule(ck=CKPTS, data=st.data())
    def drop_host_again(self, ck, data) -> None:
        self.drop_host(ck, data)

    @rule(x=XFERS, data=st.data())
    def xfer_next_again(self, x, data) -> None:
        self.xfer_next(x, data)
