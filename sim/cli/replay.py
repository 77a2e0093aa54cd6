"""`kvsim replay`: replay kvtrace/1 traces against the store contract and report every violation.

Each TRACE is read once, as a stream: ``-`` is standard input, and ``/dev/stdin`` or ``<(...)`` work (its
first line tells a cachetrace/1 from a kvtrace/1 without being consumed). A trace that holds nothing to
judge -- a header and no event, with nothing wrong in the header -- is an input error (exit 2), never a pass.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from kvsim.kvmodel.store import PROFILES
from kvsim.sim.cli.argtypes import output_path
from kvsim.sim.cli.common import (
    InputError,
    add_output_options,
    once_stdin,
    open_input,
    output_style,
    remember,
    run_traces,
    sniff,
    write_reports,
)
from kvsim.sim.files import Source, label
from kvsim.sim.peers.peer_log import is_peer_log
from kvsim.sim.report.build import build_report, timelines
from kvsim.sim.report.console import print_report
from kvsim.sim.report.verdict import stamp
from kvsim.sim.trace.cachetrace import is_cachetrace_header


def add_parser(sub: Any) -> None:
    r = sub.add_parser("replay", help="replay kvtrace/1 traces against the store contract (cachetrace/1 files "
                       "against the scheduler's observable contract)")
    r.add_argument("traces", nargs="+", metavar="TRACE", help="kvtrace/1 or cachetrace/1 file; '-' reads standard "
                   "input")
    r.add_argument("--lockstep", action="store_true", help="run the physical implementation beside the model")
    r.add_argument("--lockstep-profile", choices=PROFILES,
                   help="lockstep with the Main/MTP planes under this profile (the accounting follows the header)")
    r.add_argument("--json", type=output_path, metavar="F", help="write the kvreport/1 JSON here")
    r.add_argument("--junit", type=output_path, metavar="F", help="write JUnit XML here")
    r.add_argument("--markdown", type=output_path, metavar="F", help="write the Markdown summary here")
    r.add_argument("--html", type=output_path, metavar="F", help="write the HTML report here")
    r.add_argument("--stop-at-first", action="store_true", help="stop at the first violation")
    add_output_options(r, coverage=True)
    r.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    once_stdin("replay", args.traces)
    kv: list[tuple[str, Source]] = []
    cache: list[tuple[str, Source]] = []
    for t in args.traces:  # each input opened once; its first line says which format it is
        src = open_input(t)
        first = src.first_line()
        if is_peer_log(first):  # a real engine's run (kvsim peer --record): re-judged alone, without the engine
            if len(args.traces) > 1:
                raise InputError(f"{src.name}:1: a kvsim-peer/1 log (a recorded engine run) is re-judged on its own: "
                                 f"`kvsim replay {t}`")
            from kvsim.sim.cli.peer_replay import replay_peer_log
            return replay_peer_log(t, args, "kvsim replay", src)
        kind = sniff(first)
        if kind == "kv-events":
            raise InputError(f"{src.name}:1: this is a KV-event log (BlockStored / BlockRemoved batches), not a "
                             f"kvtrace/1 trace: judge it with `kvsim events {t}`")
        if kind == "mooncake":
            raise InputError(f"{src.name}:1: this is a Mooncake request workload, not a kvtrace/1 trace: serve it "
                             f"through the store model with `kvsim simulate {t}`")
        (cache if is_cachetrace_header(first) else kv).append((t, src))
    results = run_traces([t for t, _ in kv], args.stop_at_first, args.lockstep or bool(args.lockstep_profile),
                         lockstep_profile=args.lockstep_profile, streams=[s for _, s in kv])
    for r in results:
        if r.events == 0 and not r.violations:
            raise InputError(f"{r.path}:1: no events after the header: nothing to judge")
    report = build_report(results)
    if cache:
        from kvsim.sim.peers.cachetrace.judge import merge_cachetraces
        merge_cachetraces(report, [(label(t), s) for t, s in cache])
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
