"""`kvsim fuzz`: a stateful fuzzing campaign against the oracle, within a time budget.

Prints a summary and writes JSON (`--json`, default reports/fuzz.json): per machine the steps, examples,
failures with their counterexample traces (reports/found/<machine>-<hash>.jsonl, replayable with
`kvsim replay`), per-rule coverage and the blind spots (catalogue rules whose premise never held), and the
reachability table (sim.fuzz.reach: refusal reasons, transfers left open per phase while other operations
run, appends into Host-backed pages; printed with `--coverage`, with the blind spots that remain and why).
Exit 1 when a failure was found. A progress bar shows on a terminal only.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from kvsim.sim.cli.argtypes import integer, output_path, real
from kvsim.sim.cli.common import InputError, add_output_options, output_style, reports_dir, write
from kvsim.sim.report.console import print_verdict
from kvsim.sim.report.verdict import fuzz_verdict


def add_parser(sub) -> None:
    from kvsim.sim.fuzz.campaign import MACHINES
    from kvsim.sim.fuzz.profiles import PROFILES
    f = sub.add_parser("fuzz", help="fuzz the store model against the abstract oracle (stateful Hypothesis machines)")
    f.add_argument("--machine", default="all", choices=(*MACHINES, "all"), help="the state machine to run")
    f.add_argument("--budget", type=real(0.0, lo_open=True, what="a number of seconds"), default=60.0,
                   metavar="SECONDS", help="time budget (split evenly between machines with --machine all)")
    f.add_argument("--seed", type=integer(0), default=0, help="Hypothesis seed")
    f.add_argument("--profile", default="ci", choices=tuple(PROFILES), help="Hypothesis settings profile")
    f.add_argument("--database", metavar="DIR|redis://HOST:PORT", help="shared Hypothesis example database")
    f.add_argument("--json", type=output_path, metavar="F", help="write the result here (default: "
                   "reports/fuzz.json)")
    f.add_argument("--found", metavar="DIR", help="where counterexamples go (default: reports/found)")
    f.add_argument("--coverage", action="store_true",
                   help="print the reachability table: refusal reasons, transfers left open in each phase while "
                        "other operations run, appends into Host-backed pages; the blind spots and why")
    add_output_options(f, findings=False)
    f.set_defaults(fn=run)


def run(args) -> int:
    from kvsim.sim.fuzz.campaign import MACHINES, run_campaign
    from kvsim.sim.fuzz.database import open_database
    from kvsim.sim.fuzz.reach import render
    try:
        db = open_database(args.database)
    except ValueError as exc:
        raise InputError(f"kvsim fuzz: --database: {exc}") from None
    names = MACHINES if args.machine == "all" else (args.machine,)
    found = args.found or str(reports_dir() / "found")
    console = Console(stderr=True)
    results = []
    for name in names:
        budget = args.budget / len(names)
        if console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            with Progress(TextColumn(f"fuzz {name}"), BarColumn(), TextColumn("{task.fields[what]}"),
                          TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True) as prog:
                task = prog.add_task(name, total=budget, what="")

                def advance(t: float, ex: int, steps: int, prog: Progress = prog, task: Any = task,
                            budget: float = budget) -> None:
                    prog.update(task, completed=min(t, budget), what=f"{ex} examples, {steps} steps")
                r = run_campaign(name, budget, args.seed, args.profile, db, found, progress=advance)
        else:
            r = run_campaign(name, budget, args.seed, args.profile, db, found)
        results.append(r)
    verdict = fuzz_verdict((r.machine, r.failed, r.examples) for r in results)
    doc = {"format": "kvfuzz/1", "seed": args.seed, "profile": args.profile, "budget_s": args.budget,
           "machines": [r.to_json() for r in results], "failed": not verdict.passed, "verdict": verdict.status,
           "headline": verdict.headline}
    write(args.json or reports_dir() / "fuzz.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    out = Console()
    style = output_style(args, out)
    for r in results if not style.quiet else ():
        state = "FAIL" if r.failed else "ok"
        out.print(f"{r.machine}: {state}  {r.examples:,} examples, {r.steps:,} steps, {r.seconds:.1f} s; "
                  f"blind spots: {', '.join(r.blind_spots) or 'none'}", markup=False, soft_wrap=True)
        if args.coverage:
            for line in render(r.machine, r.reachability):
                out.print(line, markup=False, highlight=False, soft_wrap=True)
        for f in r.failures:
            where = f"{f['trace']}:1: " if f.get("trace") else ""
            out.print(f"{where}{f['rule'] or '?'} ({f['kind']}) {f['message']}", markup=False, soft_wrap=True)
            if f.get("trace"):
                out.print(f"  counterexample: kvsim replay {f['trace']}", markup=False, soft_wrap=True)
    print_verdict(verdict, out, style, "kvsim fuzz")
    return verdict.exit_code
