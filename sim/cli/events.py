"""`kvsim events LOG...`: judge KV-event logs (vLLM / SGLang subscriber batches, TokenSpeed's drained
events, or a cachetrace/1 file's kv lines): every finding as ``file:line: RULE message``.

``--hash sha256`` recomputes every block hash with TokenSpeed's SHA-256 prefix framing, ``--hash fnv1a64``
with TokenSpeed's KV-event hash (the hashes its event stream actually carries); ``none`` checks structure
only. ``--partial-tails`` accepts a last block shorter than the block size (TokenSpeed publishes its growing
tail page); it is on by default for cachetrace/1 input, whose scheduler documents it.
"""

from __future__ import annotations

import contextlib

from rich.console import Console

from kvsim.sim.cli.argtypes import integer, output_path
from kvsim.sim.cli.common import (
    InputError,
    add_output_options,
    once_stdin,
    open_input,
    output_style,
    progress_bar,
    write,
)
from kvsim.sim.report.console import print_findings, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import stamp


def add_parser(sub) -> None:
    p = sub.add_parser("events", help="judge KV-event logs (BlockStored / BlockRemoved / AllBlocksCleared)")
    p.add_argument("logs", nargs="+", metavar="LOG", help="KV-event log (JSON Lines) or cachetrace/1 file; '-' "
                   "reads standard input")
    p.add_argument("--block-size", type=integer(1), default=None,
                   help="every BlockStored must declare this size (default: not checked)")
    p.add_argument("--hash", choices=("none", "sha256", "fnv1a64"), default="none",
                   help="recompute every hash under this scheme")
    p.add_argument("--capacity", type=integer(0), default=None,
                   help="live blocks (per medium) may not exceed this (default: unbounded)")
    p.add_argument("--partial-tails", action="store_true",
                   help="accept a partial last block per store (an engine that documents growing tails)")
    p.add_argument("--json", type=output_path, metavar="F", help="write the kvreport/1-style report")
    add_output_options(p)
    p.set_defaults(fn=run)


def run(args) -> int:
    from kvsim.sim.peers.events import EventChecker, EventLogError, read_event_log
    from kvsim.sim.peers.report import build

    once_stdin("events", args.logs)
    reports = []
    prog = progress_bar(Console(stderr=True), "{task.description}", "bytes")
    for arg in args.logs:
        src = open_input(arg)  # read once, as a stream; its SHA-256 taken in the same pass
        path = src.name
        try:
            with prog if prog is not None else contextlib.nullcontext():
                task = prog.add_task(path, total=src.size) if prog is not None else None
                form, batches = read_event_log(path, src)
                checker = EventChecker(args.block_size, args.hash, args.capacity,
                                       args.partial_tails or form == "cachetrace/1")
                for n, (line, events) in enumerate(batches):
                    checker.batch(events, line)
                    if prog is not None and not n % 256:
                        prog.update(task, completed=src.consumed)
                if prog is not None:
                    prog.remove_task(task)
        except EventLogError as exc:
            raise InputError(str(exc)) from None
        if form == "empty" or not checker.stats["batches"]:
            raise InputError(f"{path}:1: empty log: no KV-event batch to judge")
        inputs = [{"path": path, "sha256": src.sha256(), "events": checker.stats["batches"]}]
        reports.append(build(inputs, path, None, checker, {"log": {"form": form, "hash": args.hash}}))
    report = reports[0] if len(reports) == 1 else _merge(reports)
    verdict = stamp(report)
    if args.json:
        write(args.json, dumps_report(report))
    console = Console()
    style = output_style(args, console)
    for r in reports:
        if not style.plain and not style.quiet:  # on a terminal, a summary per log before its findings
            kv = r["stats"]["kv_events"]
            console.print(f"{r['inputs'][0]['path']}: {r['verdict'].upper()} ({r['stats']['log']['form']} form, "
                          f"{kv['batches']:,} batches, {kv['stored']:,} stored, {kv['removed']:,} removed, "
                          f"peak live {kv['peak_live']:,})", markup=False, soft_wrap=True)
        print_findings(r["violations"], console, style)
    print_verdict(verdict, console, style, "kvsim events")
    return verdict.exit_code


def _merge(reports: list[dict]) -> dict:
    out = {"format": "kvreport/1", "inputs": [], "verdict": "pass", "violations": [], "refusals": [],
           "rules": {}, "stats": {"logs": {}}}
    for r in reports:
        out["inputs"] += r["inputs"]
        out["violations"] += r["violations"]
        if r["verdict"] == "fail":
            out["verdict"] = "fail"
        for rid, c in r["rules"].items():
            acc = out["rules"].setdefault(rid, {**c, "checked": 0, "exercised": 0, "violated": 0})
            for k in ("checked", "exercised", "violated"):
                acc[k] += c[k]
        out["stats"]["logs"][r["inputs"][0]["path"]] = r["stats"]
    return out
