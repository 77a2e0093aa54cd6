"""`kvsim replay`: replay kvtrace/1 traces against the store contract and report every violation."""

from __future__ import annotations

from rich.console import Console

from kvsim.kvmodel.store import PROFILES
from kvsim.sim.cli.common import add_output_options, output_style, remember, run_traces, write_reports
from kvsim.sim.report.build import build_report, timelines
from kvsim.sim.report.console import print_report
from kvsim.sim.report.verdict import stamp
from kvsim.sim.trace.cachetrace import is_cachetrace


def add_parser(sub) -> None:
    r = sub.add_parser("replay", help="replay kvtrace/1 traces against the store contract (cachetrace/1 files "
                       "against the scheduler's observable contract)")
    r.add_argument("traces", nargs="+")
    r.add_argument("--lockstep", action="store_true", help="run the physical implementation beside the model")
    r.add_argument("--lockstep-profile", choices=PROFILES,
                   help="lockstep with the Main/MTP planes under this profile (the accounting follows the header)")
    r.add_argument("--json")
    r.add_argument("--junit")
    r.add_argument("--markdown")
    r.add_argument("--html")
    r.add_argument("--stop-at-first", action="store_true")
    add_output_options(r, coverage=True)
    r.set_defaults(fn=run)


def run(args) -> int:
    cache = [t for t in args.traces if is_cachetrace(t)]  # cachetrace/1, detected from the header
    results = run_traces([t for t in args.traces if t not in cache], args.stop_at_first,
                         args.lockstep or bool(args.lockstep_profile), lockstep_profile=args.lockstep_profile)
    report = build_report(results)
    if cache:
        from kvsim.sim.peers.judge import merge_cachetraces
        merge_cachetraces(report, cache)
    verdict = stamp(report)  # the one verdict: exit code, console line and every report say the same
    write_reports(report, timelines(results), args.json, args.junit, args.markdown, args.html)
    kept = remember(report)
    console = Console()
    style = output_style(args, console)
    if kept is not None and not style.quiet:  # on stderr: stdout holds the findings and the verdict only
        Console(stderr=True).print(f"coverage of this run kept in {kept} (kvsim rules shows it)", soft_wrap=True,
                                   markup=False, highlight=False)
    print_report(report, console, style=style)
    return verdict.exit_code
