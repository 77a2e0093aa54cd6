"""`kvsim check`, the main job: replay every bundled scenario and write every report format.

Legal scenarios (scenarios/*.jsonl) must replay without a violation. Violation scenarios
(scenarios/violations/*.jsonl, each named after the rule it must trigger) declare in their header what
they must produce: `"meta": {"expect": [{"rule": "WR-2", "event": 7, "line": 9}, ...]}`; the run must
report exactly those (rule, event, line) triples. The reports list every violation, each marked expected
(declared) or not; their verdict, like the exit code, says whether every scenario behaved as declared.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from kvsim.sim.cli.argtypes import folder
from kvsim.sim.cli.common import InputError, remember, reports_dir, run_traces, scenarios_dir, write_reports
from kvsim.sim.report.build import build_report, timelines
from kvsim.sim.report.kvreport import headline
from kvsim.sim.trace.stream import open_trace


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="replay every bundled scenario and write all reports (the main job)")
    c.add_argument("--scenarios", type=folder, default=None, metavar="DIR",
                   help="scenario folder: *.jsonl legal, violations/*.jsonl declared (default: the bundled scenarios)")
    c.add_argument("--out", default=None, metavar="DIR", help="report folder (default: reports/, or $KVSIM_REPORTS)")
    c.add_argument("--lockstep", action="store_true", help="run the physical implementation beside the model")
    c.set_defaults(fn=run)


def run(args) -> int:
    return run_check(args.scenarios or scenarios_dir(), args.out, args.lockstep, Console())


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


def got(result) -> list[tuple[str, int, int]]:
    return sorted({(v["rule"], v["event"], v["line"]) for v in result.violations})


def display_path(p: Path) -> str:
    """Paths in reports are relative to the working directory when possible (deterministic reports)."""
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def run_check(scenarios, out, lockstep, console) -> int:
    legal, bad = scenario_files(scenarios)
    if not legal and not bad:
        raise InputError(f"kvsim check: no scenarios in {scenarios} (expected *.jsonl, and violations/*.jsonl for "
                         "the declared violations): nothing to judge")
    paths = [display_path(p) for p in legal + bad]
    results = run_traces(paths, lockstep=lockstep)
    mismatches = []
    for path, r in zip(legal + bad, results, strict=True):
        want = expected(path) if path in bad else []
        have = got(r)
        declared = set(want)
        for v in r.violations:  # a declared violation is expected; anything else is not
            v["expected"] = (v["rule"], v["event"], v["line"]) in declared
        if want != have or (path in bad and not want):
            mismatches.append({"trace": display_path(path), "expected": [list(t) for t in want],
                               "reported": [list(t) for t in have]})
    report = build_report(results)
    report["verdict"] = "fail" if mismatches else "pass"  # the verdict of the check: scenarios vs declarations
    report["stats"]["check"] = {"legal_scenarios": len(legal), "violation_scenarios": len(bad),
                                "rules_fired": sorted({v["rule"] for v in report["violations"]}),
                                "mismatches": mismatches}
    outdir = Path(out) if out else reports_dir()
    write_reports(report, timelines(results), *(outdir / f for f in REPORT_FILES.values()))
    remember(report)
    console.print(Text(headline(report), style="bold green" if not mismatches else "bold red"))
    for m in mismatches:
        console.print(Text(f"MISMATCH {m['trace']}: expected {m['expected']}, reported {m['reported']}", style="red"))
    fired = report["stats"]["check"]["rules_fired"]
    console.print(f"{len(fired)} distinct rules fired as declared; reports in {outdir}/ "
                  f"({', '.join(REPORT_FILES.values())})", highlight=False)
    return 1 if mismatches else 0
