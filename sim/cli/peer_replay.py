"""`kvsim replay RUN.jsonl` (or `kvsim events RUN.jsonl`) of a kvsim-peer/1 log: a real engine's run re-judged
without the engine.

``kvsim peer vllm|sglang ... --record RUN.jsonl`` writes the log (``sim.peers.peer_log``); this command feeds its
recorded driver messages to the same judge the live run used (``sim.peers.engines.replay_log``) and reports the
same root findings and consequences -- decisions, structures, counters and KV events alike -- with the lines of
the log. The report's ``run`` says where the log came from (the recorded command line, versions and workload
digest) and that it was re-judged.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from kvsim.sim.cli.common import InputError, open_input, output_style, write
from kvsim.sim.report.console import print_findings, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import stamp

__all__ = ["replay_peer_log"]


def replay_peer_log(path: str, args: Any, command: str, src: Any = None) -> int:
    """Re-judge one kvsim-peer/1 log (``src``: the input already opened); write ``--json`` / ``--html`` where
    ``args`` asks; the exit status."""
    from kvsim.sim.cli.peer_engine import engine_report
    from kvsim.sim.peers.engines import ENGINES, config_of, replay_log
    from kvsim.sim.peers.peer_log import PeerLogError, read

    src = src if src is not None else open_input(path)
    try:
        head, reqs, messages = read(src.name, src)
        engine = head["engine"]
        if engine not in ENGINES:
            raise InputError(f"{src.name}:1: engine {engine!r} is not one kvsim drives ({', '.join(ENGINES)})")
        try:
            cfg = config_of(head["config"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{src.name}:1: header config: {exc}") from None
        try:
            out = replay_log(head, reqs, messages)
            for _rest in messages:  # read to the end: the log's SHA-256 covers all of it
                pass
        except PeerLogError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{src.name}: a recorded message the judge cannot read: {type(exc).__name__}: "
                             f"{exc}") from None
    except PeerLogError as exc:
        raise InputError(str(exc)) from None
    if not out.steps:
        raise InputError(f"{src.name}:1: no engine step recorded: nothing to judge")
    run = dict(head.get("run") or {})
    wl = run.get("workload") or {}
    inputs = [{"path": src.name, "sha256": src.sha256(), "events": out.steps}]
    report = engine_report(engine, out, src.name, inputs, cfg, str(wl.get("name", "")), len(reqs),
                           bool(head["judge"].get("bounded", True)), False, {**run, "rejudged": src.name}, gap=False)
    verdict = stamp(report)
    if getattr(args, "json", None):
        write(args.json, dumps_report(report))
    if getattr(args, "html", None):
        from kvsim.sim.report.html_page import render_html
        write(args.html, render_html(report, {}))
    console = Console()
    style = output_style(args, console)
    if not style.quiet:
        from kvsim.sim.report.console import print_consequences
        console.print(f"{report['run'].get('engine', engine)} run re-judged from {src.name} (recorded by: "
                      f"{run.get('command', '?')})", markup=False, soft_wrap=True, highlight=False)
        print_findings(report["violations"], console, style)
        print_consequences(report, console, style)
    print_verdict(verdict, console, style, command)
    return verdict.exit_code
