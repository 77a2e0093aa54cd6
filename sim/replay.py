"""Replaying kvtrace/1 traces against the store model: refinement checking event by event.

DESIGN §6: requests (`activate`, `map`, `grow`, and the `cow` extension) may be refused by a correct
store — a refusal is recorded, not a violation, unless the engine's `result` contradicts what the
contract requires (TRACE-1, or the rule the result breaks). Facts (every other op) assert that
something happened; a fact the contract forbids is a violation and the model does not apply it (its
state is unchanged by the bad event), then replay goes on unless `stop_at_first`. Page ids and rows in a
result are the engine's choice: the model adopts them after checking they were free (follow mode).
After every applied event the state rules run on what it touched; a full audit runs every
`audit_every` events and at the end, and must agree. A fact whose result says ok:false did not take
effect: it is recorded as a refusal with reason "engine".
This module knows nothing of report formats; `sim.report.build` turns results into kvreport/1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvsim.kvmodel.store import ContractViolation, Finding, Refusal, units
from kvsim.kvmodel.store.activation import note_refused, plan_activation
from kvsim.kvmodel.store.coverage import Coverage
from kvsim.kvmodel.store.errors import violation
from kvsim.kvmodel.store.mapping import active_space, would_cow, would_map
from kvsim.sim.recovery import Recovery, event_keys
from kvsim.sim.timeline import Timeline
from kvsim.sim.trace import records as kt
from kvsim.sim.trace.config import store_for
from kvsim.sim.trace.stream import TraceInputError, open_trace
from kvsim.spec.checking import Checker

AUDIT_EVERY = 50_000


class InternalError(Exception):
    """A bug inside kvsim (not in the trace): the model or a checker crashed at this event (exit code 3).

    Carries the trace, event index, line and op where it happened; the original exception is chained.
    """

    def __init__(self, path: str, index: int, line: int, op: str, exc: BaseException) -> None:
        self.path, self.index, self.line, self.op = path, index, line, op
        super().__init__(f"{path}:{line}: internal error while applying event {index} ({op}): "
                         f"{type(exc).__name__}: {exc}")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a run; ``done`` says how far it got ("12,288 events"), ``events`` counts the
    events when that is what it counted."""

    def __init__(self, done: str, events: int | None = None):
        self.done, self.events = done, events
        super().__init__(done)


@dataclass
class TraceResult:
    """What replaying one trace produced."""

    path: str
    sha256: str = ""
    events: int = 0
    violations: list = field(default_factory=list)  # root causes, each with its number `id`
    consequences: list = field(default_factory=list)  # the first consequence per desynchronized entity
    suppressed: int = 0  # consequence findings in all (listed or not)
    refusals: list = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)
    pools: dict = field(default_factory=dict)
    timeline: dict = field(default_factory=dict)
    stopped: bool = False


class TraceReplay:
    """One trace's replay state: the model, its checker, and what was seen so far."""

    def __init__(self, path: str, header: kt.Header, stop_at_first: bool = False, audit_every: int = AUDIT_EVERY,
                 observer_factory=None, recover: bool = False) -> None:
        self.path = path
        self.st = store_for(header, path)
        self.checker = Checker(self.st)
        self.stop_at_first = stop_at_first
        self.audit_every = audit_every
        # lockstep driver: told about every applied event, asked for its findings after each one
        self.observer = None if observer_factory is None else observer_factory(self.st)
        self.result = TraceResult(path, coverage=self.st.cov)
        # error recovery: None when every finding is reported as it comes (the fuzzer judges each step alone)
        self.recovery = Recovery() if recover else None
        self.adopting = recover and self.observer is None  # the physical follower learns only applied events
        self.timeline = Timeline(self.st.pools)
        self.peaks = {n: [p.capacity, 0, 0, p.capacity] for n, p in self.st.pools.items()}
        handlers = {kt.Activate: self._activate, kt.Map: self._map, kt.Grow: self._grow, kt.Cow: self._cow,
                    kt.Launch: self._launch, kt.Complete: self._complete, kt.Fail: self._fail,
                    kt.Truncate: self._truncate, kt.Finish: self._finish, kt.Release: self._release,
                    kt.Offload: self._offload, kt.DropDevice: self._drop_device, kt.DropHost: self._drop_host,
                    kt.Xfer: self._xfer, kt.Observe: self._observe}
        # event type -> (handler, op name): every kvtrace/1 record is tagged by its op name (a str)
        self._dispatch: dict[type, tuple[Callable[[Any], Any], str]] = {
            t: (fn, str(t.__struct_config__.tag)) for t, fn in handlers.items()}
        self._config_findings(self.checker.config())
        self.timeline.record(-1, self.st.pools, force=True)

    def _config_findings(self, findings) -> None:
        for f in findings:
            self._violation(f, -1, 1, "header")

    # -- bookkeeping --------------------------------------------------------------------------------
    def _violation(self, f: Finding, index: int, line: int, op: str) -> dict:
        out = self.result.violations
        v = {"id": len(out) + 1, "rule": f.rule, "trace": self.path, "event": index, "line": line, "op": op,
             "message": f.message, "context": dict(f.context)}
        out.append(v)
        return v

    def _refusal(self, index: int, op: str, reason: str) -> None:
        self.result.refusals.append({"trace": self.path, "event": index, "op": op, "reason": reason})

    def step(self, index: int, line: int, ev) -> bool:
        """Apply one event; returns False when replay must stop (stop_at_first after a violation)."""
        st = self.st  # touched sets are empty here: the checks of every step consume them
        handler, op = self._dispatch[type(ev)]
        res = ev.result
        bad = None
        try:
            if res is not None and op not in kt.REQUEST_OPS and not res.ok:
                self._refusal(index, op, "engine" + (f": {res.error}" if res.error else ""))
                self._unapplied(ev, op)
            else:
                outcome = handler(ev)
                if outcome is not None and isinstance(outcome, Refusal):
                    self._refusal(index, op, outcome.reason)
                elif self.observer is not None:
                    self.observer.applied(ev, outcome, index, line)
        except ContractViolation as exc:
            bad = exc.findings
        pools_moved = bool(st.t_pools)
        found = self.checker.incremental(op)
        if self.observer is not None and bad is None:
            found = list(found) + self.observer.check(index, line)
        if index and index % self.audit_every == 0:
            found = list(found) + self.checker.audit()
        if bad or found:
            if self.recovery is not None:
                self._recover(self.recovery, index, line, ev, op, bad or [], list(found))
            else:
                for f in bad or ():
                    self._violation(f, index, line, op)
                for f in found:
                    self._violation(f, index, line, op)
        elif self.recovery is not None and self.recovery.marks and op in _RENEWS:
            self.recovery.renew(_RENEWS[op](ev))
        if pools_moved or bad or found:
            self._sample(index, force=bool(bad or found))
        if (bad or found) and self.stop_at_first:
            self.result.stopped = True
            return False
        return True

    # -- error recovery (sim.recovery) -------------------------------------------------------------------
    def _recover(self, rec: Recovery, index: int, line: int, ev, op: str, bad: list, found: list) -> None:
        """Report root causes once: findings on a desynchronized entity are consequences of the finding
        that desynchronized it; a new root-cause fact is adopted where the engine's claim determines the
        state, else its entities are desynchronized."""
        lookup, marked = event_keys(ev, op, self.st.pools) if ev is not None else ([], [])
        of, key = rec.cause(lookup, bad + found)
        where = {"trace": self.path, "event": index, "line": line, "op": op}
        if of is not None and key is not None:
            rec.consequence(of, key, bad + found, where)
            self._uncount(bad + found)
            if bad:  # not applied either: what it names is now out of step too
                rec.mark(marked, of)
            return
        numbered = [self._violation(f, index, line, op) for f in bad + found]
        for f, v in zip(found, numbered[len(bad):], strict=True):
            rec.remember_state(f, v["id"])
        if not bad:
            return
        first: dict = numbered[0]
        res = getattr(ev, "result", None)
        if res is not None and not res.ok:  # the engine says it did not happen either: still in step
            first["recovery"] = "in step"
            return
        if self.adopting and self._adopt(ev, op, bad):
            first["recovery"] = "adopted"
            after = self.checker.incremental(op)  # what the adopted claim breaks follows from this finding
            if after:
                rec.consequence(first["id"], ("event", index), list(after), where)
                self._uncount(after)
            return
        first["recovery"] = "desynchronized"
        rec.mark(marked, first["id"])
        for f in bad:  # entities the findings name beyond the event's own (e.g. a unit's other sequence)
            rec.mark((("seq", f.context["seq"]),) if isinstance(f.context.get("seq"), str) else (), first["id"])

    def _uncount(self, findings) -> None:
        """A consequence is no violation of its rule: the coverage's violated count keeps root causes only."""
        cov = self.st.cov
        for f in findings:
            cell = cov.cell(f.rule)
            if cell.violated:
                cell.violated -= 1

    def _adopt(self, ev, op: str, bad: list) -> bool:
        """Apply the engine's claimed outcome of a rejected fact when that claim alone fixes the new state:
        a finish that retains (the checkpoint exists, as the engine says), an activation the engine says
        succeeded beyond S (active, at the model's ceiling), a launch whose write lies in the sequence's own
        mapped, unpinned, private pages (the unit runs), a commit within the mapped pages (the frontier the
        engine published), a trim of a provisional mapping (the shorter table). Anything else (pages or
        counters the contract cannot give, stale handles) is not determined by the claim: False, and the
        state is exactly as before (every transaction checks before it applies)."""
        st = self.st
        rules = frozenset(f.rule for f in bad)
        try:
            if op == "finish" and rules == {"CKPT-1"} and ev.retain is not None:
                st.finish(ev.seq, ev.retain, True)
            elif op == "activate" and rules == {"AS-6"} and ev.prompt <= st.S and ev.result is not None:
                res = ev.result
                out = st.activate(ev.seq, ev.prompt, st.S - ev.prompt, ev.from_, ev.keep_source,
                                  None if res.rows is None else dict(res.rows),
                                  None if res.pages is None else {k: list(v) for k, v in res.pages.items()})
                if isinstance(out, Refusal):  # capacity or rows the contract cannot give
                    return False
            elif op in ("launch", "complete", "truncate") and not rules & {"TRACE-2", "UNIT-1", "AS-5"}:
                st.waived = rules
                try:
                    self._dispatch[type(ev)][0](ev)
                finally:
                    st.waived = frozenset()
            else:
                return False
        except ContractViolation:
            return False
        return True

    def _sample(self, index: int, force: bool) -> None:
        self.timeline.record(index, self.st.pools, force)
        for name in self.st.pools:
            p = self.st.pools[name]
            pk = self.peaks[name]
            if p.allocated > pk[1]:
                pk[1] = p.allocated
            if p.reserved > pk[2]:
                pk[2] = p.reserved
            if p.available < pk[3]:
                pk[3] = p.available

    def finish(self, events: int, sha256: str) -> TraceResult:
        st = self.st
        st.reset_touched()
        found = list(self.checker.audit())
        final_audit = getattr(self.observer, "audit", None)  # the lockstep's whole-content audit
        if final_audit is not None and not self.result.stopped:
            found += final_audit()
        if found and self.recovery is not None:
            self._recover(self.recovery, events, 0, None, "audit", [], found)
        else:
            for f in found:
                self._violation(f, events, 0, "audit")
        r = self.result
        if self.recovery is not None:
            r.consequences, r.suppressed = self.recovery.first, self.recovery.suppressed
        r.events, r.sha256 = events, sha256
        r.pools = {n: {"capacity": pk[0], "peak_allocated": pk[1], "peak_reserved": pk[2], "min_available": pk[3]}
                   for n, pk in self.peaks.items()}
        r.timeline = self.timeline.as_dict()
        return r

    def _unapplied(self, ev, op: str) -> None:
        """A fact the engine says did not take effect is not applied, but the checks that do not depend on
        its effect still run: stale handles (TRACE-2) and, for a launch, the write set itself (a unit that
        never ran still shows the engine tried an illegal write). A `verify` that failed does take effect: the
        copy is abandoned, never published (decision 27, kvmodel.store.transfers.verify_failed)."""
        st = self.st
        try:
            self._stale_or_illegal(ev, op)
        except ContractViolation as exc:
            st.cov.count([(f.rule, True) for f in exc.findings])
            for f in exc.findings:
                st.cov.violate(f.rule)
            raise
        if op == "xfer" and ev.phase == "verify":  # a failed verify abandons the copy (kvmodel.store.transfers)
            st.xfer_verify_failed(ev.xfer, ev.dir, ev.ckpt, ev.pool, ev.blocks)

    def _stale_or_illegal(self, ev, op: str) -> None:
        st = self.st
        if op == "launch":
            units.plan_launch(st, ev.unit, ev.rows)  # validated, never applied: the unit did not run
        elif op in ("complete", "fail"):
            units._live_unit(st, ev.unit, op)
        elif op in ("truncate", "finish") or (op == "observe" and ev.seq is not None):
            if ev.seq not in st.bundles:
                active_space(st, ev.seq, getattr(ev, "pool", "main"), op)
        elif op in ("release", "offload", "drop_device", "drop_host") or (op == "xfer" and ev.phase == "reserve"):
            st.resolve_blocks(ev.ckpt, getattr(ev, "pool", "main"), getattr(ev, "blocks", ()))
        elif op == "xfer" and ev.xfer not in st.xfers:
            raise violation("TRACE-2", f"transfer {ev.xfer!r} phase {ev.phase}: the transfer " +
                            ("has ended" if ev.xfer in st.ended_xfers else "was never reserved"), xfer=ev.xfer)

    # -- requests -------------------------------------------------------------------------------------
    def _diverged(self, rule: str, message: str, **ctx):
        self.st.cov.check(rule, exercised=True)
        self.st.cov.violate(rule)
        return violation(rule, message, **ctx)

    def _activate(self, ev):
        st, res = self.st, ev.result
        if res is not None and not res.ok:
            note_refused(st, ev.from_)
            try:
                planned = plan_activation(st, ev.seq, ev.prompt, ev.budget, ev.from_, ev.keep_source, None, None)
            except ContractViolation:
                return Refusal(res.error or "engine")
            if isinstance(planned, Refusal):
                return Refusal(planned.reason)
            raise self._diverged("TRACE-1", f"engine refused activating {ev.seq!r} ({res.error or 'no reason'}), "
                                 "but the contract's accounting admits it (capacity and a row are free)", seq=ev.seq)
        rows = None if res is None or res.rows is None else dict(res.rows)
        pages = None if res is None or res.pages is None else {k: list(v) for k, v in res.pages.items()}
        out = st.activate(ev.seq, ev.prompt, ev.budget, ev.from_, ev.keep_source, rows, pages)
        if isinstance(out, Refusal) and res is not None:
            rule = "AS-6" if out.reason == "context" else "TRACE-1"
            raise self._diverged(rule, f"engine activated {ev.seq!r}, the contract requires a refusal "
                                 f"({out.reason}: {out.detail})", seq=ev.seq, reason=out.reason)
        return out

    def _map(self, ev):
        st, res = self.st, ev.result
        if res is not None and not res.ok:
            refusal = would_map(st, ev.seq, ev.pool, ev.tokens)
            if refusal is None:
                raise self._diverged("ENT-2", f"ensure_mapped_to_tokens({ev.tokens}) failed for {ev.seq!r} "
                                     f"({ev.pool}) although the entitlement covers it", seq=ev.seq, pool=ev.pool)
            return refusal
        pages = None if res is None or res.pages is None else list(res.pages)
        out = st.map(ev.seq, ev.pool, ev.tokens, pages)
        if isinstance(out, Refusal) and res is not None and out.reason == "busy":  # decision 26
            raise self._diverged("REP-2", f"engine mapped {ev.seq!r} ({ev.pool}) to {ev.tokens} tokens onto a page "
                                 f"group a copy still pins ({out.detail})", seq=ev.seq, pool=ev.pool, tokens=ev.tokens)
        if isinstance(out, Refusal) and res is not None:
            raise self._diverged("ENT-2", f"engine mapped {ev.seq!r} ({ev.pool}) to {ev.tokens} tokens beyond the "
                                 f"entitlement ({out.detail})", seq=ev.seq, pool=ev.pool, tokens=ev.tokens)
        return out

    def _grow(self, ev):
        """The engine's growth answer is judged by what the contract fixes (kvmodel.store.mapping.
        check_engine_growth), never by the model's own step choices."""
        res = ev.result
        if res is None:
            return self.st.grow(ev.seq)
        entitlement = None if res.entitlement is None else dict(res.entitlement)
        return self.st.grow(ev.seq, res.bounded_at, (res.ok, entitlement))

    def _cow(self, ev):
        """`cow` is judged like every request: a refusal where the contract copies, or an ok where it must
        refuse, is TRACE-1; an accepted destination page is adopted after the PAGE-1 check."""
        st, res = self.st, ev.result
        if res is not None and not res.ok:
            outcome = would_cow(st, ev.seq, ev.pool, ev.block)
            if outcome is None:
                raise self._diverged("TRACE-1", f"engine refused the COW of {ev.seq!r} ({ev.pool}) block {ev.block} "
                                     f"({res.error or 'no reason'}), but a page is available for the private copy",
                                     seq=ev.seq, pool=ev.pool, block=ev.block)
            if not isinstance(outcome, Refusal):
                raise self._diverged("TRACE-1", f"engine refused the COW of {ev.seq!r} ({ev.pool}) block {ev.block}, "
                                     "which is already private (nothing to copy, nothing to refuse)",
                                     seq=ev.seq, pool=ev.pool, block=ev.block)
            return outcome
        out = st.cow(ev.seq, ev.pool, ev.block, None if res is None else res.page)
        if isinstance(out, Refusal) and res is not None:
            raise self._diverged("TRACE-1", f"engine copied {ev.seq!r} ({ev.pool}) block {ev.block}, the contract "
                                 f"requires a refusal ({out.reason}: {out.detail})", seq=ev.seq, pool=ev.pool,
                                 block=ev.block)
        return out

    # -- facts ------------------------------------------------------------------------------------
    def _launch(self, ev):  # the trace's LaunchRow records have the model's LaunchRow fields (seq, pool, write)
        return self.st.launch(ev.unit, ev.rows)

    def _complete(self, ev):  # the trace's CommitRow records have the model's CommitRow fields (seq, pool, frontier)
        return self.st.complete(ev.unit, ev.commit)

    def _fail(self, ev):
        return self.st.fail(ev.unit)

    def _truncate(self, ev):
        return self.st.truncate(ev.seq, ev.pool, ev.frontier)

    def _finish(self, ev):
        return self.st.finish(ev.seq, ev.retain, ev.state_image)

    def _release(self, ev):
        return self.st.release(ev.ckpt)

    def _offload(self, ev):
        res = ev.result
        return self.st.offload(ev.ckpt, ev.pool, ev.blocks, None if res is None else res.offsets)

    def _drop_device(self, ev):
        return self.st.drop_device(ev.ckpt, ev.pool, ev.blocks)

    def _drop_host(self, ev):
        return self.st.drop_host(ev.ckpt, ev.pool, ev.blocks)

    def _xfer(self, ev):
        res = ev.result
        return self.st.xfer(ev.xfer, ev.dir, ev.ckpt, ev.pool, ev.blocks, ev.phase,
                            None if res is None else res.pages, None if res is None else res.offsets)

    def _observe(self, ev):
        if ev.ckpt is not None:
            return self.st.observe_checkpoint(ev.ckpt, ev.pool, None if ev.table is None else list(ev.table),
                                              ev.frontier, None if ev.replicas is None else list(ev.replicas),
                                              ev.content)
        if ev.seq is None:
            return self.st.observe_pool(ev.pool, ev.allocated, ev.reserved, ev.available)
        return self.st.observe_row(ev.seq, ev.pool, None if ev.table is None else list(ev.table), ev.frontier,
                                   ev.content)


# an applied event that starts a new incarnation of an id: the key it synchronizes again (a finish that retains a
# checkpoint under an id used before starts that checkpoint's new incarnation)
_RENEWS = {"activate": lambda ev: ("seq", ev.seq), "launch": lambda ev: ("unit", ev.unit),
           "finish": lambda ev: ("ckpt", ev.retain),
           "xfer": lambda ev: ("xfer", ev.xfer) if ev.phase == "reserve" else ("xfer", None)}


def replay_trace(path, stop_at_first: bool = False, audit_every: int = AUDIT_EVERY, observer_factory=None,
                 progress=None, recover: bool = True, stream=None) -> TraceResult:
    """Replay one trace file (``-``: standard input; ``stream``: the input already opened, which ``path``
    names); raises TraceInputError for malformed input (exit code 2). With `recover`, a finding's
    consequences are reported apart (sim.recovery), not as violations."""
    with open_trace(path, stream) as reader:
        path = reader.path
        rep = TraceReplay(path, reader.header, stop_at_first, audit_every, observer_factory, recover)
        step = rep.step
        n = 0
        try:
            for index, line, ev in reader:
                n = index + 1
                try:
                    go_on = step(index, line, ev)
                except (TraceInputError, InternalError):
                    raise
                except Exception as exc:  # a crash inside the model or a checker: classified, never "violations"
                    raise InternalError(path, index, line, str(type(ev).__struct_config__.tag), exc) from exc
                if not go_on:
                    break
                if progress is not None and not n & 4095:
                    progress(4096)
        except KeyboardInterrupt:
            raise Interrupted(f"{n:,} events", n) from None
        sha = reader.sha256
        events = reader.events if not rep.result.stopped else n
    return rep.finish(events, sha)


__all__ = ["InternalError", "Interrupted", "TraceResult", "TraceReplay", "replay_trace", "TraceInputError"]
