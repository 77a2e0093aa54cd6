"""`kvsim selfcheck`: every seeded bug of the model killed by a fuzz machine, every engine fault flagged.

Runs `sim.selfcheck.selfcheck` (mutants from `tests/mutants/catalogue.py`, each applied to a copy of the
package and fuzzed in a subprocess, `--workers` at a time; engine faults generated and replayed) and prints
one table: name, killed / flagged, the rule that caught it, steps and seconds (the fuzz campaign's time to
its first failure). `--json F` writes {"mutants", "faults", "killed", "total", "median_seconds", ...}.
Exit 0 when every mutant was killed and every fault flagged, 1 otherwise. Progress: a bar on a terminal, plain
lines every 30 s in a log. Stopped by SIGINT/SIGTERM, the mutants judged so far are written, marked partial.
"""

from __future__ import annotations

import contextlib
import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvsim.sim.cli.argtypes import integer, output_path, real
from kvsim.sim.cli.common import (
    InputError,
    Stopped,
    add_output_options,
    output_style,
    partial_mark,
    progress_bar,
    stopping,
    write,
)
from kvsim.sim.report.console import print_table, print_verdict
from kvsim.sim.report.verdict import PARTIAL_KEY, partial, selfcheck_verdict


def add_parser(sub) -> None:
    s = sub.add_parser("selfcheck", help="seeded model bugs killed by the fuzz machines; engine faults flagged")
    s.add_argument("--json", type=output_path, metavar="F", help="also write the result here")
    s.add_argument("--budget", type=real(0.0, lo_open=True, what="a number of seconds"), default=60.0,
                   help="seconds of fuzzing per mutant at most")
    s.add_argument("--workers", type=integer(1), default=2, help="mutants fuzzed in parallel processes")
    s.add_argument("--seed", type=integer(0), default=0, help="seed of the fuzz campaigns")
    s.add_argument("--only", nargs="+", metavar="MUTANT", help="run only these mutants (default: every mutant)")
    s.add_argument("--no-faults", action="store_true", help="skip the engine faults")
    add_output_options(s, findings=False)
    s.set_defaults(fn=run)


def run(args) -> int:
    from kvsim.sim.selfcheck import MutantError, load_mutants, selfcheck
    console = Console()
    style = output_style(args, console)
    try:
        known = [m.name for m in load_mutants()]
        unknown = [name for name in args.only or () if name not in known]
        if unknown:
            raise InputError(f"kvsim selfcheck: --only: unknown mutant {unknown[0]!r} (known: {', '.join(known)})")
        total = len(set(args.only)) if args.only else len(known)
        prog = progress_bar(Console(stderr=True), "selfcheck", "mutants")
        rows: list[dict] = []

        def done(row: dict) -> None:
            if not stopping():  # a mutant whose fuzz process the signal ended was not judged
                rows.append(row)
                if prog is not None:
                    prog.advance(task, 1)
        stopped = None
        try:
            with prog if prog is not None else contextlib.nullcontext():
                task = prog.add_task("mutants", total=total) if prog is not None else None
                result = selfcheck(args.budget, args.workers, args.seed, args.only, not args.no_faults,
                                   progress=done)
        except KeyboardInterrupt:  # the mutants judged so far are written, marked partial
            stopped = f"{len(rows)} of {total} mutants"
            killed = [r for r in rows if r["killed"]]
            result = {"mutants": sorted(rows, key=lambda r: r["name"]), "faults": [], "killed": len(killed),
                      "total": len(rows), "median_seconds": None, "flagged": 0, "faults_total": 0,
                      "seconds": 0.0, "budget_s": args.budget, "workers": args.workers, "seed": args.seed}
    except MutantError as exc:
        raise InputError(f"kvsim selfcheck: {exc}") from None
    table = Table(title="kvsim selfcheck")
    for col in ("kind", "name", "caught", "rule", "steps / event", "seconds"):
        table.add_column(col, overflow="fold")
    for m in result["mutants"]:
        table.add_row("mutant", m["name"], "killed" if m["killed"] else Text("survived", "red"), m["rule"] or "-",
                      _n(m["steps"]), "-" if m["seconds"] is None else f"{m['seconds']:.2f}")
    for f in result["faults"]:
        table.add_row("fault", f["name"], "flagged" if f["flagged"] else Text("missed", "red"), f["rule"] or "-",
                      _n(f["event"]), "")
    verdict = selfcheck_verdict(result["killed"], result["total"], result["flagged"], result["faults_total"])
    if stopped:
        verdict = partial(verdict, partial_mark(stopped))
        result[PARTIAL_KEY] = partial_mark(stopped)
    if not style.quiet:
        print_table(table, console, style.plain)
        median = "n/a" if result["median_seconds"] is None else f"{result['median_seconds']} s"
        if stopped:
            median = "n/a (interrupted)"
        console.print(f"median time-to-kill {median}; {result['seconds']:.1f} s with {result['workers']} workers",
                      markup=False, soft_wrap=True)
    if args.json:
        write(args.json, json.dumps({**result, "verdict": verdict.status, "headline": verdict.headline}, indent=2)
              + "\n")
    print_verdict(verdict, console, style, "kvsim selfcheck")
    if stopped:
        raise Stopped(stopped)
    return verdict.exit_code


def _n(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
