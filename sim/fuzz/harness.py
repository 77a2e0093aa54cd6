"""The common ground of the fuzzing machines: driving the model, judging each step, failing replayably.

`FuzzMachine` owns one run: the `Driver` (the model behind kvtrace/1 replay, every rule checked on what a
step touched), the `ModelView` and the `Oracle`. A rule builds an event and says what a correct store
must do with it (`do`: pass, be rejected leaving the state exactly as it was, or either for an arena
plan; `request`: be granted or refused as the oracle decides, the record carrying that answer). After
every step the refinement check runs (`refines`); at the end of a run, the full audit. Any difference
fails the run: the failing run is written as a kvtrace/1 counterexample (on Hypothesis' final, shrunk
run) whose replay names the rule. Handles live in the Bundles below; `steer` mostly swaps a stale handle
for a live one, so stale handles make the illegal attempts without starving the legal paths.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.configs import facts_for
from kvsim.sim.fuzz.driver import Driver, write_counterexample
from kvsim.sim.fuzz.oracle import Oracle
from kvsim.sim.fuzz.refine import differences
from kvsim.sim.fuzz.stats import RUN
from kvsim.sim.fuzz.view import ModelView
from kvsim.sim.trace import records as kt

SEQS, CKPTS, UNITS, XFERS = Bundle("seqs"), Bundle("ckpts"), Bundle("units"), Bundle("xfers")


class FuzzFailure(AssertionError):
    """The model disagreed with the oracle or broke a rule; names the kind, the rule replay reports and the
    written counterexample (on the final, shrunk run)."""


class FuzzMachine(RuleBasedStateMachine):
    name = "fuzz"
    lockstep = False
    oracles = ("store",)  # the prefixes of the oracle branches it reaches (sim.fuzz.stats)

    def __init__(self) -> None:
        super().__init__()
        # set by start(); the rules' preconditions test for None before a run begins
        self.driver: Driver = None  # type: ignore[assignment]
        self.failed = False
        self.ids = 0
        self.origin: dict = {}  # seq -> "move" | "fork": resumed from a checkpoint, not cut since (sim.fuzz.reach)

    # -- plumbing -----------------------------------------------------------------------------------
    def observer_factory(self, cfg):
        return None

    def start(self, cfg) -> None:
        """Begin a run under `cfg` (each machine's @initialize rule draws it from its own strategy)."""
        header = kt.Header(format="kvtrace/1", config=cfg, meta={"source": f"kvsim fuzz --machine {self.name}"})
        self.driver = Driver(header, self.observer_factory(cfg))
        self.view = ModelView(self.driver.st)
        self.oracle = Oracle(facts_for(cfg, self.view))
        self.pools = self.oracle.f.pools
        RUN.examples += 1
        RUN.reach.configured(self.oracle.f)

    def fresh(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    def fail(self, kind: str, message: str):
        self.failed = True
        try:
            events, notes = differences(self.oracle, self.view)
        except Exception:  # noqa: BLE001 — a crashing model cannot be read; the trace still replays
            events, notes = [], []
        data = self.driver.trace_bytes(events)
        text = f"{kind}: {message}" + (f" [{'; '.join(notes[:4])}]" if notes and kind != "refinement" else "")
        final = False
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        latest = None if RUN.found_dir is None else RUN.found_dir / f"{self.name}-latest.jsonl"
        if not final and latest is not None:  # a runner that never marks its last run (HypoFuzz): the latest
            latest.parent.mkdir(parents=True, exist_ok=True)  # failing run, which is the shrunk one at the end
            write_atomic(latest, data)
        if final and RUN.found_dir is not None:
            if latest is not None and latest.exists():
                latest.unlink()
            ce = write_counterexample(self.name, data, RUN.found_dir, lockstep=self.lockstep)
            RUN.last_failure = {"kind": kind, "message": text, "rule": ce.rule or f"ORACLE-{kind}",
                                "reproduced": bool(ce.rule), "trace": ce.path, "steps": self.driver.steps,
                                "replay": ce.message}
            text = f"{RUN.last_failure['rule']} ({kind}) — counterexample {ce.path}: {text}"
        raise FuzzFailure(text)

    def do(self, label: str, ev, expect: str, record=None) -> bool:
        """Step `ev`; expect 'ok' (must pass), 'reject' (must be rejected, state unchanged) or 'either'
        (may be rejected by REP-3 only). Returns whether the model applied it."""
        self.count(label)
        before = self.view.snapshot() if expect != "ok" else None
        try:
            viol = self.driver.step(ev, record)
        except Exception as exc:  # noqa: BLE001 — a crash inside the model or a checker
            self.fail("crash", f"{label}: {type(exc).__name__}: {exc}")
        if expect == "ok":
            if viol:
                self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
            self.reached(ev)
            return True
        if not viol:
            if expect == "reject":
                self.fail("accepted", f"{label}: the model accepted an illegal {ev.op}")
            self.reached(ev)
            return True
        if expect == "either" and any(v["rule"] != "REP-3" for v in viol):
            self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
        if self.view.snapshot() != before:
            self.fail("changed", f"{label}: rejected ({viol[0]['rule']}) but the state changed")
        self.driver.forget_last()
        return False

    def request(self, label: str, ev, granted: bool, result) -> bool:
        """Step a request; the record carries the oracle's answer. Returns whether the model granted it."""
        self.count(label)
        before = self.view.snapshot()
        n = len(self.driver.replay.result.refusals)
        try:
            viol = self.driver.step(ev, ev.__class__(**{**fields(ev), "result": result}))
        except Exception as exc:  # noqa: BLE001
            self.fail("crash", f"{label}: {type(exc).__name__}: {exc}")
        if viol:
            self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
        refused = len(self.driver.replay.result.refusals) > n
        if refused == granted:
            self.fail("outcome", f"{label}: the model {'refused' if refused else 'granted'} {ev.op} "
                      f"{fields(ev)}; the oracle {'grants' if granted else 'refuses'} it")
        if refused and ev.op != "grow" and self.view.snapshot() != before:
            self.fail("changed", f"{label}: refused but the state changed")
        self.reached(ev, self.driver.replay.result.refusals[-1]["reason"] if refused else None)
        return not refused

    def reached(self, ev, refusal: str | None = None) -> None:
        """A legal step (accepted, or refused as the oracle refuses it), before the oracle follows it: count
        the reachability targets it hits (sim.fuzz.reach)."""
        reach = RUN.reach
        if refusal is not None:
            reach.refusal(refusal)
        reach.other_op(self.oracle, ev)
        op = ev.op
        if op == "launch":
            if self.origin:
                reach.append(self.oracle, self.origin, [(r.seq, r.pool, r.write) for r in ev.rows])
        elif op == "truncate":
            q = self.oracle.seqs.get(ev.seq)
            if q is not None and ev.frontier < q.spaces[ev.pool].frontier:
                self.origin.pop(ev.seq, None)  # a destructive cut
        elif op == "finish":
            self.origin.pop(ev.seq, None)
        elif op == "activate" and ev.from_ is not None and refusal is None:
            self.origin[ev.seq] = "fork" if ev.keep_source else "move"

    def observe(self, data) -> None:
        """Sometimes the engine reports what a correct store holds (the oracle's view): pool counters, or a
        sequence's or checkpoint's frontier and content; a correct model agrees (TRACE-1, AS-2, REP-4 premises)."""
        o = self.oracle
        if data.draw(st.integers(0, 3)) < 3:
            return
        spaces = list(o.live_spaces())
        if spaces and data.draw(st.booleans()):
            kind, owner, pool, s = data.draw(st.sampled_from(spaces))
            who = {"seq": owner} if kind == "seq" else {"ckpt": owner}
            ev = kt.Observe(pool=pool, frontier=s.frontier, content=tuple(s.content), **who)
        else:
            pool = data.draw(st.sampled_from(self.pools))
            ev = kt.Observe(pool=pool, **o.counters(pool))
        self.do("observe", ev, "ok")

    # -- refinement after every step ----------------------------------------------------------------
    @invariant()
    def refines(self) -> None:
        if self.driver is None or self.failed:
            return
        events, notes = differences(self.oracle, self.view)
        if notes:
            self.fail("refinement", "; ".join(notes[:6]))

    def teardown(self) -> None:
        if self.driver is None:
            return
        RUN.coverage.merge(self.driver.st.cov)
        if not self.failed:
            found = self.driver.audit()
            if found:
                self.fail("audit", f"{found[0].rule}: {found[0].message}")

    # -- handles ------------------------------------------------------------------------------------
    def steer(self, handle, live, data):
        """Mostly a live handle (the bundle's stale ones make the illegal attempts, one time in eight)."""
        live = sorted(live)
        if live and handle not in live and data.draw(st.integers(0, 7)) < 7:
            return data.draw(st.sampled_from(live))
        return handle

    def live_seq(self, seq):
        return self.oracle.seqs.get(seq)

    def space(self, seq, pool):
        return self.oracle.seqs[seq].spaces[pool]

    def busy(self, seq) -> bool:
        return any(s.unit is not None for s in self.oracle.seqs[seq].spaces.values())



def fields(ev) -> dict:
    return {f: getattr(ev, f) for f in ev.__struct_fields__}
