"""`kvsim check`, the main job: replay every bundled scenario and write every report format.

Legal scenarios (scenarios/*.jsonl) must replay without a violation. Violation scenarios
(scenarios/violations/*.jsonl, each named after the rule it must trigger) declare in their header what
they must produce: `"meta": {"expect": [{"rule": "WR-2", "event": 7, "line": 9}, ...]}`; the run must
report exactly those (rule, event, line) triples, and, where the header declares `"consequences": N`, exactly
N consequences (findings error recovery attributes to an earlier one; sim.recovery). Consequences never
count as violations. The reports list every violation, each marked expected
(declared) or not; their verdict, like the exit code, says whether every scenario behaved as declared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from kvsim.sim.cli.argtypes import folder
from kvsim.sim.cli.common import (
    InputError,
    Stopped,
    add_output_options,
    open_input,
    output_style,
    partial_mark,
    remember,
    reports_dir,
    run_traces,
    scenarios_dir,
    write_reports,
)
from kvsim.sim.files import OutputClash, guard_outputs
from kvsim.sim.replay import Interrupted
from kvsim.sim.report.build import build_report, timelines
from kvsim.sim.report.console import Style, print_findings, print_verdict
from kvsim.sim.report.verdict import PARTIAL_KEY, stamp
from kvsim.sim.trace.stream import open_trace


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="replay every bundled scenario and write all reports (the main job)")
    c.add_argument("--scenarios", type=folder, default=None, metavar="DIR",
                   help="scenario folder: *.jsonl legal, violations/*.jsonl declared (default: the bundled scenarios)")
    c.add_argument("--out", default=None, metavar="DIR", help="report folder (default: reports/, or $KVSIM_REPORTS)")
    c.add_argument("--lockstep", action="store_true", help="run the physical implementation beside the model")
    add_output_options(c)
    c.set_defaults(fn=run)


def run(args) -> int:
    console = Console()
    return run_check(args.scenarios or scenarios_dir(), args.out, args.lockstep, console, output_style(args, console))


REPORT_FILES = {"json": "kvreport.json", "junit": "junit.xml", "markdown": "summary.md", "html": "report.html"}


def scenario_files(root: str | Path) -> tuple[list[Path], list[Path]]:
    root = Path(root)
    legal = sorted(root.glob("*.jsonl"))
    bad = sorted((root / "violations").glob("*.jsonl"))
    return legal, bad


def expected(path: Path) -> list[tuple[str, int, int]]:
    with open_trace(path) as r:
        meta = r.header.meta or {}
    return sorted((e["rule"], e["event"], e["line"]) for e in meta.get("expect", []))


def expected_consequences(path: Path) -> int | None:
    with open_trace(path) as r:
        meta = r.header.meta or {}
    n = meta.get("consequences")
    return n if isinstance(n, int) else None


def got(result) -> list[tuple[str, int, int]]:
    return sorted({(v["rule"], v["event"], v["line"]) for v in result.violations})


def display_path(p: Path) -> str:
    """How a scenario is named in reports (deterministic, and a path a reader can open): relative to the
    working directory when the file lies below it; a bundled scenario otherwise as ``scenarios/NAME`` (never
    the install's link tree, ``build/__editable__…/kvsim/scenarios/``); any other file as given."""
    real = p.resolve()
    try:
        return str(real.relative_to(Path.cwd().resolve()))
    except ValueError:
        pass
    for root in (scenarios_dir(), scenarios_dir().resolve()):
        try:
            return str(Path("scenarios") / p.relative_to(root))
        except ValueError:
            continue
    return str(p)


class _Opened:
    """The scenario files, each opened (once) when the replay reaches it, named by `display_path`."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __getitem__(self, i: int) -> Any:
        return open_input(self.paths[i])


def differences(path: str, want: list[tuple[str, int, int]], violations: list[dict], declares: bool) -> list[dict]:
    """What differed between a scenario's declaration and its replay, one finding each (rule, trace, line,
    event, message): every violation not declared, every declaration not reported, and a violation scenario
    that declares nothing."""
    have = {(v["rule"], v["event"], v["line"]) for v in violations}
    out: list[dict] = [dict(v, message=f"{v.get('message', '')} [not declared by the scenario]",
                            difference="undeclared") for v in violations if not v.get("expected")]
    out += [{"rule": rule, "trace": path, "line": line, "event": event, "difference": "not-reported",
             "message": f"declared at event {event} but not reported"}
            for rule, event, line in want if (rule, event, line) not in have]
    if declares and not want:
        out.append({"rule": "-", "trace": path, "line": 1, "event": None, "difference": "declares-nothing",
                    "message": "a violation scenario must declare what it triggers (meta.expect is empty)"})
    return sorted(out, key=lambda d: (int(d.get("line") or 0), str(d.get("rule"))))


def run_check(scenarios: str | Path, out: str | None, lockstep: bool, console: Console,
              style: Style | None = None) -> int:
    style = style or Style.of(console)
    legal, bad = scenario_files(scenarios)
    if not legal and not bad:
        raise InputError(f"kvsim check: no scenarios in {scenarios} (expected *.jsonl, and violations/*.jsonl for "
                         "the declared violations): nothing to judge")
    paths = [display_path(p) for p in legal + bad]
    guard_reports(out, legal + bad)
    stopped = None
    try:
        results = run_traces(paths, lockstep=lockstep, streams=_Opened(legal + bad))  # type: ignore[arg-type]
    except Interrupted as exc:  # the scenarios replayed whole are judged and reported, marked partial
        results = getattr(exc, "results", [])
        stopped = f"{len(results)} of {len(paths)} scenarios"
        legal, bad = legal[:len(results)], bad[:max(0, len(results) - len(legal))]
    mismatches: list[dict[str, Any]] = []
    for path, r in zip(legal + bad, results):
        want = expected(path) if path in bad else []
        have = got(r)
        declared = set(want)
        for v in r.violations:  # a declared violation is expected; anything else is not
            v["expected"] = (v["rule"], v["event"], v["line"]) in declared
        cons = expected_consequences(path) if path in bad else None
        if want != have or (path in bad and not want) or (cons is not None and cons != r.suppressed):
            why = differences(display_path(path), want, r.violations, path in bad)
            m: dict[str, Any] = {"trace": display_path(path), "expected": [list(t) for t in want],
                                 "reported": [list(t) for t in have], "why": why}
            if cons is not None and cons != r.suppressed:
                m["consequences"] = {"expected": cons, "reported": r.suppressed}
                why.append({"rule": "-", "trace": display_path(path), "line": 1, "event": None,
                            "difference": "consequences", "message": f"declares {cons} consequences (meta."
                            f"consequences), the replay suppressed {r.suppressed}"})
            mismatches.append(m)
    report = build_report(results)
    report["stats"]["check"] = {"legal_scenarios": len(legal), "violation_scenarios": len(bad),
                                "rules_fired": sorted({v["rule"] for v in report["violations"] if v.get("expected")}),
                                "mismatches": mismatches}
    if stopped:
        report[PARTIAL_KEY] = partial_mark(stopped)
    verdict = stamp(report)  # the verdict of the check: scenarios against their declarations
    outdir = Path(out) if out else reports_dir()
    write_reports(report, timelines(results), *(outdir / f for f in REPORT_FILES.values()))
    kept = remember(report) if not stopped else None  # a partial run is not the last run's coverage
    print_findings([d for m in mismatches for d in m["why"]], console, style)
    fired = report["stats"]["check"]["rules_fired"]
    if not style.quiet:  # on stderr: stdout holds the findings and the verdict only
        kept_in = f"; coverage kept in {kept} (kvsim rules shows it)" if kept is not None else ""
        Console(stderr=True).print(Text(f"{len(fired)} distinct rules fired as declared; reports in {outdir}/ "
                                        f"({', '.join(REPORT_FILES.values())}){kept_in}"), soft_wrap=True,
                                   highlight=False)
    print_verdict(verdict, console, style, "kvsim check")
    if stopped:
        raise Stopped(stopped)
    return verdict.exit_code


def guard_reports(out: str | None, scenarios: list[Path]) -> None:
    """A report folder holding a scenario under a report's name: refused before anything runs."""
    outdir = Path(out) if out else reports_dir()
    try:
        guard_outputs([str(outdir / name) for name in REPORT_FILES.values()], [str(p) for p in scenarios])
    except OutputClash as exc:
        raise InputError(f"kvsim check: {exc.filename}: {exc.strerror}") from None
