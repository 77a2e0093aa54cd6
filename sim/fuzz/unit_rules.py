"""The GPU-unit rules: launch (speculative rows over Main and the backend pool), a whole decode round
(map ahead, launch, complete with each pool's accepted prefix, settle), illegal launches (below or
beyond the frontier, beyond the mapping, into a shared page, a row already in flight, a stale sequence),
complete (and commits beyond the written extent) and fail. Committed content is learned from the model
as it commits and must be new: it never repeats what another live continuation holds there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from kvsim.kvmodel.store.config import PAGE_SIZE as P
from kvsim.sim.fuzz.harness import UNITS
from kvsim.sim.trace import records as kt

if TYPE_CHECKING:  # a mixin of FuzzMachine: type-check it as one
    from kvsim.sim.fuzz.harness import FuzzMachine as _Machine
else:
    _Machine = object


class UnitRules(_Machine):
    def free_spaces(self):
        return [(name, pool) for name, q in sorted(self.oracle.seqs.items()) for pool, s in q.spaces.items()
                if s.unit is None]

    @precondition(lambda self: self.driver is not None and self.free_spaces())
    @rule(target=UNITS, data=st.data())
    def launch(self, data):
        free = self.free_spaces()
        names = sorted({n for n, _ in free})
        chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=min(3, len(names)), unique=True))
        rows = []
        for name in chosen:
            pools = [p for n, p in free if n == name]
            if len(pools) > 1 and data.draw(st.integers(0, 3)) == 3:
                pools = [data.draw(st.sampled_from(pools))]  # a phase that writes only one pool
            for pool in pools:
                s = self.space(name, pool)
                end = self.oracle.writable_end(name, pool)
                b = data.draw(st.integers(s.frontier, end))
                # an empty write still names its page (the model holds it to WR-2): a read-only row instead
                rows.append((name, pool, None if b == s.frontier or data.draw(st.integers(0, 7)) == 7
                             else (s.frontier, b)))
        unit = self.fresh("u")
        ev = kt.Launch(unit=unit, rows=tuple(kt.LaunchRow(seq=n, pool=p, write=w) for n, p, w in rows))
        self.do("launch:speculative" if len({n for n, _, _ in rows}) < len(rows) else "launch", ev, "ok")
        self.oracle.launch(unit, rows)
        return unit

    @precondition(lambda self: self.driver is not None and self.free_spaces())
    @rule(data=st.data())
    def decode_round(self, data) -> None:
        """An engine round for one sequence: map ahead, launch over every pool, complete (speculative:
        each pool accepts its own prefix), then settle (trim what was mapped beyond the frontier)."""
        names = sorted({n for n, _ in self.free_spaces() if not self.busy(n)})
        if not names:
            return
        self.round_for(data.draw(st.sampled_from(names)), data)

    def round_for(self, name, data) -> None:
        """decode_round's body for one idle sequence (also the append of sim.fuzz.reach_rules)."""
        o = self.oracle
        q = o.seqs[name]
        k = data.draw(st.integers(1, 2 * P))
        for pool, s in q.spaces.items():
            tokens = min(s.entitlement * P, s.frontier + k)
            refusal = o.plan_map(name, pool, tokens)
            res = kt.MapResult(ok=True) if refusal is None else kt.MapResult(ok=False, error=refusal)
            if self.request("round:map", kt.Map(seq=name, pool=pool, tokens=tokens), refusal is None, res):
                o.map(name, pool, tokens)
        rows = [(name, pool, (s.frontier, o.writable_end(name, pool))) for pool, s in q.spaces.items()]
        rows = [(n, p, None if w[0] == w[1] else w) for n, p, w in rows]  # type: ignore[misc]  # read-only rows
        unit = self.fresh("u")
        self.do("round:launch", kt.Launch(unit=unit, rows=tuple(kt.LaunchRow(seq=n, pool=p, write=w)
                                                                 for n, p, w in rows)), "ok")
        o.launch(unit, rows)
        if data.draw(st.integers(0, 9)) == 9:
            self.do("round:fail", kt.Fail(unit=unit), "ok")
            o.fail(unit)
            return
        commits = [(n, p, o.seqs[n].spaces[p].frontier if w is None else
                    w[1] if data.draw(st.integers(0, 2)) == 2 else data.draw(st.integers(w[0], w[1])))
                   for n, p, w in rows]
        self.commit(unit, commits, "round:complete")
        if data.draw(st.booleans()):
            for pool, s in q.spaces.items():
                if o.trims_provisional(name, pool, s.frontier):
                    continue  # a mapping a stage not yet launched needs stays (UNIT-4)
                self.do("round:settle", kt.Truncate(seq=name, pool=pool, frontier=s.frontier), "ok")
                o.truncate(name, pool, s.frontier)
        self.observe(data)

    def commit(self, unit, commits, label) -> None:
        o = self.oracle
        ev = kt.Complete(unit=unit, commit=tuple(kt.CommitRow(seq=n, pool=p, frontier=f) for n, p, f in commits))
        self.do(label, ev, "ok")
        learned = {}
        for n, p, f in commits:
            s = self.space(n, p)
            if f > s.frontier:
                keys, _ = self.view.content("seq", n, p)
                new = keys[s.frontier:f]
                learned[(n, p)] = new + [0] * (f - s.frontier - len(new))  # unreadable: refinement reports it
                self.fresh_keys(n, p, s.frontier, learned[(n, p)])
        o.complete(unit, commits, learned)

    @precondition(lambda self: self.driver is not None and self.oracle.seqs)
    @rule(data=st.data())
    def launch_illegal(self, data) -> None:
        o = self.oracle
        free = self.free_spaces()
        busy = [(n, p) for n, q in sorted(o.seqs.items()) for p, s in q.spaces.items() if s.unit is not None]
        options = (["busy"] if busy else []) + ([] if free and data.draw(st.integers(0, 7)) < 7 else ["stale"])
        for n, p in free:
            s = self.space(n, p)
            if s.frontier:
                options.append("below")
            if len(s.blocks) * P > s.frontier:
                options.append("gap")
            options.append("beyond")
            if s.frontier // P < len(s.blocks) and not s.private(s.frontier // P):
                options.append("shared")
            if _fits(s, "pinned"):
                options.append("pinned")
        kind = data.draw(st.sampled_from(sorted(set(options))))
        unit = self.fresh("u")
        if kind == "stale":
            row = kt.LaunchRow(seq=self.fresh("s"), pool="main", write=(0, 1))
        elif kind == "busy":
            n, p = data.draw(st.sampled_from(busy))
            s = self.space(n, p)  # readers may share a space; a written row needs it to itself (UNIT-1)
            row = kt.LaunchRow(seq=n, pool=p, write=None if s.write is not None else (s.frontier, s.frontier + 1))
        else:
            n, p = data.draw(st.sampled_from([(n, p) for n, p in free if _fits(self.space(n, p), kind)]))
            s = self.space(n, p)
            F, top = s.frontier, len(s.blocks) * P
            w = {"below": (max(0, F - data.draw(st.integers(1, P))), F),
                 "gap": (F + 1, max(F + 1, top)),
                 "beyond": (F, top + data.draw(st.integers(1, P))),
                 "shared": (F, F + 1), "pinned": (F, F + 1)}[kind]
            row = kt.LaunchRow(seq=n, pool=p, write=w)
        self.do(f"launch:illegal-{kind}", kt.Launch(unit=unit, rows=(row,)), "reject")

    @rule(unit=UNITS, data=st.data())
    def complete(self, unit, data) -> None:
        o = self.oracle
        unit = self.steer(unit, o.units, data)
        if unit not in o.units:
            self.do("complete:stale", kt.Complete(unit=unit, commit=()), "reject")
            return
        spaces = o.units[unit]
        if data.draw(st.integers(0, 9)) == 9:  # an illegal commit: beyond the written extent (UNIT-2)
            s = data.draw(st.sampled_from(spaces))
            end = s.write[1] if s.write else s.frontier
            ev = kt.Complete(unit=unit, commit=(kt.CommitRow(seq=s.owner, pool=s.pool, frontier=end + 1),))
            self.do("complete:beyond-written", ev, "reject")
            return
        commits = []
        for s in spaces:
            end = s.write[1] if s.write else s.frontier
            f = end if data.draw(st.booleans()) else data.draw(st.integers(s.frontier, end))
            commits.append((s.owner, s.pool, f))
        self.commit(unit, commits, "complete")

    def fresh_keys(self, seq, pool, lo, keys) -> None:
        """New content never repeats content another live continuation holds at the same position."""
        for kind, owner, p, s in self.oracle.live_spaces():
            if p != pool or (kind == "seq" and owner == seq):
                continue
            for i, k in enumerate(keys):
                if lo + i < len(s.content) and s.content[lo + i] == k:
                    self.fail("content", f"{seq} ({pool}) committed position {lo + i} with the content key {kind} "
                              f"{owner} holds there (a write must be new content)")

    @rule(unit=UNITS, data=st.data())
    def fail_unit(self, unit, data) -> None:
        unit = self.steer(unit, self.oracle.units, data)
        if unit not in self.oracle.units:
            self.do("fail:stale", kt.Fail(unit=unit), "reject")
            return
        self.do("fail", kt.Fail(unit=unit), "ok")
        self.oracle.fail(unit)


def _fits(s, kind: str) -> bool:
    if kind == "below":
        return s.frontier > 0
    if kind == "gap":
        return len(s.blocks) * P > s.frontier
    if kind == "shared":
        return s.frontier // P < len(s.blocks) and not s.private(s.frontier // P)
    if kind == "pinned":  # a private page an in-flight copy pins takes no write (REP-2)
        b = s.frontier // P
        return s.private(b) and s.blocks[b].pins > 0
    return True

