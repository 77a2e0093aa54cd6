"""`kvsim replay`: replay kvtrace/1 traces against the store contract and report every violation."""

from __future__ import annotations

from rich.console import Console

from kvsim.sim.cli.common import EXIT_OK, EXIT_VIOLATION, remember, run_traces, write_reports
from kvsim.sim.report.build import build_report, timelines
from kvsim.sim.report.console import print_report
from kvsim.kvmodel.store import PROFILES


def add_parser(sub) -> None:
    r = sub.add_parser("replay", help="replay kvtrace/1 traces against the store contract")
    r.add_argument("traces", nargs="+")
    r.add_argument("--lockstep", action="store_true", help="run the physical implementation beside the model")
    r.add_argument("--lockstep-profile", choices=PROFILES,
                   help="lockstep with the Main/MTP planes under this profile (the accounting follows the header)")
    r.add_argument("--json")
    r.add_argument("--junit")
    r.add_argument("--markdown")
    r.add_argument("--html")
    r.add_argument("--stop-at-first", action="store_true")
    r.add_argument("--quiet", action="store_true", help="no console report")
    r.set_defaults(fn=run)


def run(args) -> int:
    results = run_traces(args.traces, args.stop_at_first, args.lockstep or bool(args.lockstep_profile),
                         lockstep_profile=args.lockstep_profile)
    report = build_report(results)
    write_reports(report, timelines(results), args.json, args.junit, args.markdown, args.html)
    remember(report)
    if not args.quiet:
        print_report(report, Console())
    return EXIT_VIOLATION if report["violations"] else EXIT_OK
