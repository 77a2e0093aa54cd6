"""One verdict per run: the value every output of a command derives from.

DESIGN §8: "One verdict object per run feeds the exit code, the console headline and every report". A
`Verdict` holds the status (pass / fail), the one-line headline, the exit code and the counts behind them.
`verdict_of(report)` judges a kvreport/1 dict — a replay (or an event log, a peer run), a `kvsim check`
run (scenarios against their declarations), a simulation with injected faults ("every injected fault
flagged at its event with its rule, nothing else") — and `stamp` writes the result into the dict, so the
JSON's `verdict`, the JUnit counts, the Markdown and HTML headline and the console agree by
construction. Sweeps, fuzz campaigns and the self-check have their own small constructors.

Root causes and consequences: a violation carrying `CONSEQUENCE_KEY` (the number of the finding it follows
from) is a consequence; it is listed, never counted as a violation, and never fails the verdict. Replay's
error recovery (sim.recovery) keeps its consequences out of `violations` altogether (`consequences`, each
with `of`) and counts them in `stats.consequences`: "N findings (M consequences suppressed)". The verdict
fails on root causes. A KV-event stream's router-compatibility hazards (`hazards`: a behaviour the contract
designs, EV-3's entry) are named in the headline with their consequences and never fail it.

This module knows the report dict's shape, not how reports are produced nor how any renderer lays it out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Verdict", "STATUSES", "PARTIAL_KEY", "partial", "CONSEQUENCE_KEY", "EXIT_PASS", "EXIT_FAIL", "FAULTS_CLAIM",
           "verdict_of", "stamp", "root_causes", "consequences", "sweep_verdict", "fuzz_verdict",
           "selfcheck_verdict", "plural", "unlisted"]

EXIT_PASS, EXIT_FAIL = 0, 1
CONSEQUENCE_KEY = "consequence_of"
FAULTS_CLAIM = "every injected fault flagged at its event with its rule, nothing else"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 event`, `2 events`, `1,024 events`."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


STATUSES = ("pass", "fail", "incomplete")
"""A run that found a violation fails; one that judged everything it was given and found none passes; one
stopped before the end (a signal) without a violation is incomplete: never a pass, whatever it judged."""


@dataclass(frozen=True)
class Verdict:
    """status "pass", "fail" or "incomplete"; `headline` starts with PASS, FAIL or INCOMPLETE and is one line;
    `counts` are the figures it states (violations, root causes, consequences, scenarios, faults, ...), named."""

    status: str
    headline: str
    counts: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"verdict status must be one of {STATUSES}, not {self.status!r}")
        object.__setattr__(self, "counts", MappingProxyType(dict(self.counts)))

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_FAIL

    @property
    def word(self) -> str:
        return self.status.upper()

    def as_dict(self) -> dict:
        return {"status": self.status, "headline": self.headline, "exit_code": self.exit_code,
                "counts": dict(self.counts)}


def _make(passed: bool, text: str, counts: Mapping[str, int]) -> Verdict:
    return Verdict("pass" if passed else "fail", f"{'PASS' if passed else 'FAIL'}: {text}", counts)


def root_causes(violations: Iterable[dict]) -> list[dict]:
    return [v for v in violations if v.get(CONSEQUENCE_KEY) is None]


def consequences(violations: Iterable[dict]) -> list[dict]:
    return [v for v in violations if v.get(CONSEQUENCE_KEY) is not None]


# --- kvreport/1 ---------------------------------------------------------------------------------------------


PARTIAL_KEY = "partial"
"""A run stopped by a signal writes what it had with ``"partial": {"signal": "SIGINT", "done": "..."}``; its
headline says so (`partial`), whatever renders it."""


def partial(v: Verdict, mark: Mapping[str, Any] | None) -> Verdict:
    """The verdict of a run cut short: a violation found so far still fails it ("FAIL: PARTIAL, interrupted by
    SIGINT after 4 of 110 scenarios: ..."); otherwise it is incomplete, never a pass ("INCOMPLETE: interrupted
    by SIGINT after 4 of 110 scenarios; so far: no violation ..."), whatever it judged before the signal (nothing,
    possibly). The counts stay those of the part judged."""
    if not mark:
        return v
    rest = v.headline[len(v.word):].lstrip(":—- ") if v.headline.startswith(v.word) else v.headline
    done = f" after {mark['done']}" if mark.get("done") else ""
    stopped = f"interrupted by {mark.get('signal', 'a signal')}{done}"
    if v.status == "fail":
        return Verdict("fail", f"FAIL: PARTIAL, {stopped}: {rest}", v.counts)
    return Verdict("incomplete", f"INCOMPLETE: {stopped}; so far: {rest}", v.counts)


def verdict_of(report: Mapping[str, Any]) -> Verdict:
    """The verdict a kvreport/1 dict states: a check run, a run with injected faults, or a plain replay; a run
    stopped by a signal says it is partial."""
    return partial(_verdict_of(report), report.get(PARTIAL_KEY))


def _verdict_of(report: Mapping[str, Any]) -> Verdict:
    stats = report.get("stats", {}) or {}
    if isinstance(stats.get("check"), dict):
        return _check(report, stats["check"])
    if "faults_injected" in stats:
        return _faults(report, stats)
    return _replay(report, stats)


def _noun(stats: Mapping[str, Any]) -> str | None:
    """What the inputs are: event logs, a live peer run (one input, counted in plans) or kvtrace/1 traces."""
    if "peer" in stats:
        return None
    return "log" if "kv_events" in stats or "logs" in stats else "trace"


def _scope(report: Mapping[str, Any], stats: Mapping[str, Any]) -> tuple[str, dict]:
    inputs = report.get("inputs", []) or []
    events = sum(int(entry.get("events", 0) or 0) for entry in inputs)
    refusals = len(report.get("refusals", []) or [])
    noun = _noun(stats)
    if noun == "log":
        text = f"{plural(len(inputs), 'log')}, {plural(events, 'batch', 'batches')}"
    elif noun is None:
        text = plural(events, "plan")
    else:
        text = f"{plural(len(inputs), 'trace')}, {plural(events, 'event')}, {plural(refusals, 'refusal')}"
    return text, {"inputs": len(inputs), "events": events, "refusals": refusals}


def unlisted(stats: Mapping[str, Any]) -> int:
    """Violations counted but not listed (a judge keeps at most so many findings), nested inputs included."""
    n = int(stats.get("violations_not_listed", 0) or 0)
    for key in ("cachetraces", "logs"):
        for sub in (stats.get(key) or {}).values():
            if isinstance(sub, Mapping):
                n += int(sub.get("violations_not_listed", 0) or 0)
    return n


def _replay(report: Mapping[str, Any], stats: Mapping[str, Any]) -> Verdict:
    violations = report.get("violations", []) or []
    roots, after = root_causes(violations), consequences(violations)
    scope, counts = _scope(report, stats)
    stalled = int((stats.get("peer") or {}).get("stalled_requests", 0) or 0)
    n = len(roots) + unlisted(stats)
    suppressed = int(stats.get("consequences", 0) or 0)  # replay's error recovery counts them apart (sim.recovery)
    counts.update(violations=n, root_causes=n, consequences=len(after) + suppressed, stalled_requests=stalled)
    tail = f"; {plural(len(after), 'consequence')} of earlier findings, not counted" if after else ""
    hazards = report.get("hazards", []) or []
    # a hazard counts its own consequences; the rest follow from root findings
    of_hazards = sum(int(h.get("consequences", 0) or 0) for h in hazards)
    if suppressed > of_hazards:
        tail += f"; {plural(n, 'finding')} ({plural(suppressed - of_hazards, 'consequence')} suppressed)"
    if hazards:  # a router-compatibility hazard the contract designs (the EV-3 entry): reported, never failing
        counts.update(hazards=len(hazards))
        at = ", ".join(f"{h.get('rule')} at line {h.get('line')}" for h in hazards[:3])
        tail += (f"; {plural(len(hazards), 'router-compatibility hazard')} ({at}; "
                 f"{plural(of_hazards, 'consequence')} counted apart)")
    if n:
        rules = {v.get("rule") for v in roots}
        noun = _noun(stats)
        where = f" in {plural(len({v.get('trace') for v in roots}), noun)}" if noun else ""
        counts.update(rules=len(rules))
        return _make(False, f"{plural(n, 'violation')} of {plural(len(rules), 'rule')}{where} ({scope}){tail}",
                     counts)
    if stalled:
        return _make(False, f"incomplete: the scheduler stopped serving {plural(stalled, 'request')} ({scope})",
                     counts)
    cov = stats.get("coverage")
    if isinstance(cov, Mapping) and cov.get("not_exercised"):  # a peer run's PASS says which paths never ran
        counts.update(engine_paths=int(cov["paths"]), engine_paths_exercised=int(cov["exercised"]))
        return Verdict("pass", f"PASS ({cov['exercised']} of {cov['paths']} engine paths exercised; not exercised: "
                               f"{', '.join(cov['not_exercised'])}): no violation ({scope}){tail}"
                               + (f"; {cov['hint']}" if cov.get("hint") else ""),
                       counts)
    return _make(True, f"no violation ({scope}){tail}", counts)


def _faults(report: Mapping[str, Any], stats: Mapping[str, Any]) -> Verdict:
    injected, flagged = int(stats.get("faults_injected", 0)), int(stats.get("faults_flagged", 0))
    missed = len(stats.get("faults_missed", []) or [])
    not_injected = len(stats.get("faults_not_injected", []) or [])
    other = int(stats.get("violations_unexpected", 0))
    counts = {"faults_injected": injected, "faults_flagged": flagged, "faults_missed": missed,
              "faults_not_injected": not_injected, "violations_unexpected": other,
              "violations": len(report.get("violations", []) or [])}
    passed = injected > 0 and flagged == injected and not missed and not not_injected and other == 0
    parts = [f"{flagged:,} of {plural(injected, 'injected fault')} flagged"]
    if missed:
        parts.append(f"{missed:,} missed")
    if not_injected:
        parts.append(f"{plural(not_injected, 'fault')} never injected")
    parts.append(f"{plural(other, 'other violation')}")
    claim = FAULTS_CLAIM if passed else f"not {FAULTS_CLAIM}"
    return _make(passed, f"{claim} ({', '.join(parts)})", counts)


def _check(report: Mapping[str, Any], check: Mapping[str, Any]) -> Verdict:
    legal, declared = int(check.get("legal_scenarios", 0)), int(check.get("violation_scenarios", 0))
    mismatches = check.get("mismatches", []) or []
    expected = sum(1 for v in report.get("violations", []) or [] if v.get("expected"))
    counts = {"scenarios": legal + declared, "legal_scenarios": legal, "violation_scenarios": declared,
              "failed_scenarios": len(mismatches), "expected_violations": expected,
              "unexpected_violations": len(root_causes(v for v in report.get("violations", []) or []
                                                       if not v.get("expected"))),
              "consequences": int((report.get("stats") or {}).get("consequences", 0) or 0)}
    if not mismatches:
        suppressed = f"; {plural(counts['consequences'], 'consequence')} suppressed" if counts["consequences"] else ""
        return Verdict("pass", f"PASS — every scenario behaved as declared ({plural(legal, 'legal scenario')} without "
                               f"a violation, {plural(declared, 'violation scenario')} reporting exactly their "
                               f"{plural(expected, 'declared violation')}{suppressed})", counts)
    names = ", ".join(str(m.get("trace")) for m in mismatches)
    return Verdict("fail", f"FAIL — {len(mismatches):,} of {plural(legal + declared, 'scenario')} did not behave as "
                           f"declared: {names}", counts)


def stamp(report: dict, verdict: Verdict | None = None) -> Verdict:
    """Judge the report (unless given its verdict) and write it in: `verdict` (the status, where DESIGN §8 has
    it) then `headline` and `counts` right after it. Returns the verdict."""
    v = verdict or verdict_of(report)
    items = [(k, val) for k, val in report.items() if k not in ("verdict", "headline", "counts")]
    report.clear()
    placed = False
    for key, val in items:
        report[key] = val
        if key == "inputs":
            report.update(verdict=v.status, headline=v.headline, counts=dict(v.counts))
            placed = True
    if not placed:
        report.update(verdict=v.status, headline=v.headline, counts=dict(v.counts))
    return v


# --- runs that are not one kvreport/1 -------------------------------------------------------------------------


def sweep_verdict(rows: Iterable[Mapping[str, Any]]) -> Verdict:
    """A what-if sweep passes when no point broke a rule."""
    rows = list(rows)
    bad = [r for r in rows if r.get("violations")]
    total = sum(int(r.get("violations", 0)) for r in rows)
    counts = {"points": len(rows), "failed_points": len(bad), "violations": total}
    if bad:
        return _make(False, f"{plural(total, 'violation')} in {len(bad):,} of {plural(len(rows), 'point')}", counts)
    return _make(True, f"{plural(len(rows), 'point')}, no violation", counts)


def fuzz_verdict(machines: Iterable[tuple[str, bool, int]]) -> Verdict:
    """(machine, failed, examples) per machine: passes when no machine found a failure."""
    machines = list(machines)
    failed = [name for name, bad, _ in machines if bad]
    examples = sum(n for _, _, n in machines)
    counts = {"machines": len(machines), "failed_machines": len(failed), "examples": examples}
    if failed:
        return _make(False, f"{len(failed):,} of {plural(len(machines), 'machine')} found a failure: "
                            f"{', '.join(failed)}", counts)
    return _make(True, f"{plural(len(machines), 'machine')}, {plural(examples, 'example')}, no failure", counts)


def selfcheck_verdict(killed: int, mutants: int, flagged: int, faults: int) -> Verdict:
    """Passes when every seeded mutant was killed and every engine fault flagged."""
    counts = {"mutants": mutants, "killed": killed, "faults": faults, "flagged": flagged}
    passed = killed == mutants and flagged == faults
    return _make(passed, f"{killed:,} of {plural(mutants, 'mutant')} killed, {flagged:,} of "
                         f"{plural(faults, 'engine fault')} flagged", counts)
