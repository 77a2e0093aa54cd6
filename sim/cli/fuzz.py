"""`kvsim fuzz`: a stateful fuzzing campaign against the oracle, within a time budget.

Prints a summary and writes JSON (`--json`, default reports/fuzz.json): per machine the steps, examples,
failures with their counterexample traces (reports/found/<machine>-<hash>.jsonl, replayable with
`kvsim replay`), per-rule coverage and the blind spots (catalogue rules whose premise never held), and the
reachability table (sim.fuzz.reach: refusal reasons, transfers left open per phase while other operations
run, appends into Host-backed pages; printed with `--coverage`, with the blind spots that remain and why),
and per machine the oracle branches reached (sim.fuzz.stats.reached; one summary line each, every count with
`--coverage`).
Exit 1 when a failure was found. A progress bar shows on a terminal, plain progress lines every 30 s in a
log. Stopped by SIGINT/SIGTERM, the machines run whole are written, marked partial (exit 130/143).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from kvsim.sim.cli.argtypes import integer, output_path, real
from kvsim.sim.cli.common import (
    InputError,
    Stopped,
    add_output_options,
    output_style,
    partial_mark,
    plain_progress,
    reports_dir,
    write,
)
from kvsim.sim.report.console import print_verdict
from kvsim.sim.report.verdict import PARTIAL_KEY, fuzz_verdict, partial


def add_parser(sub) -> None:
    from kvsim.sim.fuzz.campaign import MACHINES
    from kvsim.sim.fuzz.profiles import PROFILES
    f = sub.add_parser("fuzz", help="fuzz the store and cache models against their oracles (stateful Hypothesis "
                                    "machines)")
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
                   help="print per machine the machine rules run, the catalogue rules checked / exercised, every "
                        "oracle branch with its visits, and the store's reachability table (refusal reasons, "
                        "transfers left open in each phase, appends into Host-backed pages; the blind spots and why)")
    add_output_options(f, findings=False)
    f.set_defaults(fn=run)


def run(args) -> int:
    from kvsim.sim.fuzz.campaign import MACHINES
    from kvsim.sim.fuzz.database import open_database
    from kvsim.sim.fuzz.reach import render
    try:
        db = open_database(args.database)
    except ValueError as exc:
        raise InputError(f"kvsim fuzz: --database: {exc}") from None
    names = MACHINES if args.machine == "all" else (args.machine,)
    found = args.found or str(reports_dir() / "found")
    console = Console(stderr=True)
    results: list[Any] = []
    stopped = None
    for name in names:
        budget = args.budget / len(names)
        try:
            r = _campaign(name, budget, args, db, found, console)
        except KeyboardInterrupt:  # the machines run whole are reported, marked partial
            stopped = f"{len(results)} of {len(names)} machines ({name} interrupted)"
            break
        results.append(r)
    verdict = fuzz_verdict((r.machine, r.failed, r.examples) for r in results)
    if stopped:
        verdict = partial(verdict, partial_mark(stopped))
    doc = {"format": "kvfuzz/1", "seed": args.seed, "profile": args.profile, "budget_s": args.budget,
           "machines": [r.to_json() for r in results], "failed": verdict.status == "fail", "verdict": verdict.status,
           "headline": verdict.headline, **({PARTIAL_KEY: partial_mark(stopped)} if stopped else {})}
    write(args.json or reports_dir() / "fuzz.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    out = Console()
    style = output_style(args, out)
    for r in results if not style.quiet else ():
        state = "FAIL" if r.failed else "ok"
        out.print(f"{r.machine}: {state}  {r.examples:,} examples, {r.steps:,} steps, {r.seconds:.1f} s; "
                  f"blind spots: {', '.join(r.blind_spots) or 'none'}", markup=False, soft_wrap=True)
        plain: dict[str, Any] = dict(markup=False, emoji=False, highlight=False, soft_wrap=True)  # no :cow: emoji
        hit = [n for n, v in r.branches.items() if v]
        never = [n for n, v in r.branches.items() if not v]
        if r.branches:
            out.print(f"  oracle branches: {len(hit)} of {len(r.branches)} reached"
                      + (f"; never: {', '.join(never)}" if never else ""), **plain)
        elif not args.coverage:  # a machine without branch counters: its own rule counts are its coverage
            out.print("  machine rules: " + ", ".join(f"{k} {v:,}" for k, v in r.rules.items()), **plain)
        if args.coverage:
            out.print("  machine rules: " + ", ".join(f"{k} {v:,}" for k, v in r.rules.items()), **plain)
            if r.coverage:
                out.print("  catalogue rules (checked / exercised): " + ", ".join(
                    f"{k} {c['checked']:,}/{c['exercised']:,}" for k, c in r.coverage.items()), **plain)
            judged = {k[5:]: v for k, v in r.rules.items() if k.startswith("rule:")}
            if judged:  # a judge machine: the catalogue rules its judge reported, as its reference expected
                out.print("  judge rules reported: " + ", ".join(f"{k} {v:,}" for k, v in judged.items()), **plain)
            if r.branches:
                out.print("  oracle branches: " + ", ".join(f"{k} {v:,}" for k, v in r.branches.items()), **plain)
            for line in render(r.machine, r.reachability) if r.reachability.get("reached") else ():
                out.print(line, markup=False, highlight=False, soft_wrap=True)
        for f in r.failures:
            where = f"{f.get('trace') or f['log']}:1: " if f.get("trace") or f.get("log") else ""
            out.print(f"{where}{f['rule'] or '?'} ({f['kind']}) {f['message']}", markup=False, soft_wrap=True)
            if f.get("trace"):  # a kvtrace/1 file, or a workload with the command that serves it (simulate)
                again = f.get("command") or f"kvsim replay {f['trace']}"
                out.print(f"  counterexample: {again}", markup=False, soft_wrap=True)
            elif f.get("log"):
                out.print(f"  step log: {f['log']}", markup=False, soft_wrap=True)
    print_verdict(verdict, out, style, "kvsim fuzz")
    if stopped:
        raise Stopped(stopped)
    return verdict.exit_code


def _campaign(name: str, budget: float, args: Any, db: Any, found: str, console: Console) -> Any:
    """One machine's campaign: a progress bar on a terminal, plain progress lines in a log (unless --quiet)."""
    from kvsim.sim.fuzz.campaign import run_campaign
    if console.is_terminal:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        with Progress(TextColumn(f"fuzz {name}"), BarColumn(), TextColumn("{task.fields[what]}"),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True) as prog:
            task = prog.add_task(name, total=budget, what="")

            def advance(t: float, ex: int, steps: int) -> None:
                prog.update(task, completed=min(t, budget), what=f"{ex} examples, {steps} steps")
            return run_campaign(name, budget, args.seed, args.profile, db, found, progress=advance)
    plain = plain_progress("fuzz", "s of budget")
    if plain is None:
        return run_campaign(name, budget, args.seed, args.profile, db, found)
    with plain:
        key = plain.add_task(f"machine {name}", total=round(budget, 1))

        def tick(t: float, ex: int, steps: int) -> None:
            plain.update(key, completed=round(min(t, budget), 1), examples=ex)
        return run_campaign(name, budget, args.seed, args.profile, db, found, progress=tick)
