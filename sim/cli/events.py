"""`kvsim events LOG...` / `kvsim events --zmq ENDPOINT`: judge KV-event logs or a live KV-event stream
(vLLM / SGLang batches in array or native object form, TokenSpeed's drained events, a cachetrace/1 file's
kv lines): every finding as ``file:line: RULE message`` (live: ``endpoint:seq: RULE message``).

``--engine tokenspeed|vllm|sglang`` presets block size, hash scheme, tail policy, per-group keys and the
engine-documented allowances (``sim.peers.judges.events.PRESETS``; the rule entries argue each allowance).
Without it, ``events`` learns each group's block size from its first store, recognises the hash scheme
when the stream's first root blocks recompute under exactly one, and says on stderr which flags it
guessed and which it needs. ``--hash`` names a scheme (``sim.peers.judges.block_hash``): ``fnv1a64`` and
``sha256`` are TokenSpeed's event and prefix hashes, ``vllm-sha256`` / ``vllm-sha256-cbor`` vLLM's,
``sglang-sha256`` SGLang's; ``none`` checks structure only.

Live mode subscribes to the engine's ZMQ publisher (``--zmq``; ``--replay`` its replay socket) and prints
findings as they happen until Ctrl-C (exit 130, with the summary) or ``--duration`` seconds.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from rich.console import Console

from kvsim.sim.cli.argtypes import integer, output_path, real
from kvsim.sim.cli.common import (
    InputError,
    add_output_options,
    interrupted_status,
    once_stdin,
    open_input,
    output_style,
    progress_bar,
    sniff,
    write,
)
from kvsim.sim.report.console import print_findings, print_hazards, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import stamp


def add_parser(sub: Any) -> None:
    from kvsim.sim.peers.judges.block_hash import SCHEMES
    from kvsim.sim.peers.judges.events import PRESETS

    p = sub.add_parser("events", help="judge KV-event logs or a live stream (BlockStored / BlockRemoved / "
                                      "AllBlocksCleared)")
    p.add_argument("logs", nargs="*", metavar="LOG", help="JSON Lines event logs (or cachetrace/1 files); '-' reads "
                   "standard input")
    p.add_argument("--engine", choices=sorted(PRESETS), default=None,
                   help="the engine that wrote the stream: presets block size, hash scheme, tail policy and its "
                        "documented allowances (default: guess, and say what was guessed)")
    p.add_argument("--block-size", type=integer(1), default=None,
                   help="every BlockStored must declare this size (default: the preset's, else each group's "
                        "first store)")
    p.add_argument("--hash", choices=SCHEMES, default=None,
                   help="recompute every hash under this scheme (default: the preset's, else recognised from "
                        "the first root blocks)")
    p.add_argument("--hash-seed", default="vllm-none-hash",
                   help="vLLM's NONE_HASH seed: PYTHONHASHSEED when the engine ran with it set (default: "
                        "%(default)s)")
    p.add_argument("--hash-block-size", type=integer(1), default=None,
                   help="vLLM's hash block size when a group's blocks are wider (default: the block size)")
    p.add_argument("--capacity", type=integer(0), default=None,
                   help="live blocks (per medium and group) may not exceed this (default: unchecked)")
    p.add_argument("--partial-tails", action="store_true",
                   help="accept a partial last block per store (an engine that documents growing tails)")
    p.add_argument("--folded-groups", action="store_true",
                   help="the engine folds a sliding-window or state group into each prefix event (TokenSpeed with "
                        "such a group): stores under parents the stream does not hold are one router-compatibility "
                        "hazard, not violations (EV-3's entry)")
    p.add_argument("--no-reuse-reports", action="store_true",
                   help="with --engine vllm: the engine ran without kv_cache_report_mode='full', so a parent-less "
                        "store of live blocks is a second copy, not a reuse report (a `kvsim peer vllm` log)")
    p.add_argument("--zmq", metavar="ENDPOINT", default=None,
                   help="subscribe to a running engine's KV-event publisher (ipc://... or tcp://127.0.0.1:PORT)")
    p.add_argument("--replay", metavar="ENDPOINT", default=None,
                   help="the publisher's replay socket: lost batches are fetched from it before they count as gaps")
    p.add_argument("--topic", default="", help="ZMQ topic to subscribe to (default: every topic)")
    p.add_argument("--duration", type=real(0.0, lo_open=True, what="a number of seconds"), default=None,
                   help="stop a live run after this many seconds (default: until Ctrl-C)")
    p.add_argument("--json", type=output_path, metavar="F", help="write the kvreport/1-style report")
    add_output_options(p)
    p.set_defaults(fn=run)


def _checker(args: Any) -> Any:
    from kvsim.sim.peers.judges.events import PRESETS, EventChecker

    preset = PRESETS[args.engine] if args.engine else None
    if preset is not None and args.no_reuse_reports:
        import dataclasses
        preset = dataclasses.replace(preset, reuse_reports=False)
    scheme = args.hash if args.hash is not None else (None if preset is not None else "auto")
    return EventChecker(args.block_size, scheme, args.capacity, args.partial_tails, preset=preset,
                        hash_seed=args.hash_seed, hash_block_size=args.hash_block_size,
                        folded_groups=args.folded_groups)


def _validate(args: Any) -> None:
    """What the option types cannot see alone (their ranges are checked while parsing)."""
    if args.zmq and args.logs:
        raise InputError("kvsim events: --zmq: judge either logs or a live stream, not both")
    if not args.zmq and not args.logs:
        raise InputError("kvsim events: name a log ('-': standard input), or --zmq ENDPOINT for a live stream")
    if (args.replay or args.duration is not None) and not args.zmq:
        raise InputError(f"kvsim events: --{'replay' if args.replay else 'duration'}: only with --zmq")
    once_stdin("events", args.logs)


def _advice(args: Any, checker: Any) -> list[str]:
    """What was guessed and which flags a user would pass (only without --engine)."""
    if args.engine:
        return list(checker.warnings)
    lines = list(checker.notes) + list(checker.warnings)
    c = checker.counts
    if c["EV-4"] and not args.partial_tails:
        lines.append("a store carries a partial last block: --partial-tails (or --engine tokenspeed) if the "
                     "engine documents growing tails")
    if (c["EV-2"] or c["EV-1"]) and checker.grouped:
        lines.append("--engine vllm allows vLLM's duplicate copies and reuse reports (see the EV-2 entry)")
    if checker.scheme == "none" and args.hash is None and not any("hashes not" in n for n in lines):
        lines.append("hashes not recomputed: --hash or --engine tokenspeed|vllm|sglang names the scheme")
    return lines


def _note(args: Any, lines: list[str]) -> None:
    if lines and not args.quiet:
        sys.stderr.write("".join(f"kvsim events: note: {n}\n" for n in lines))


def _headline(r: dict) -> str:
    kv = r["stats"]["kv_events"]
    log = r["stats"]["log"]
    hashes = (f", {kv['recomputed']:,} hashes recomputed under {kv['hash_scheme']}"
              + (f" ({kv['unverifiable']:,} not recomputable)" if kv["unverifiable"] else "")
              if kv["hash_scheme"] != "none" else ", hashes not recomputed")
    extra = "".join(f", {kv[k]:,} {label}" for k, label in (("copies", "duplicate copies"),
                                                           ("reuse_reports", "reuse reports"),
                                                           ("sequence_gaps", "sequence gaps")) if kv.get(k))
    engine = f", engine {log['engine']}" if log.get("engine") else ""
    return (f"{r['inputs'][0]['path']}: {r['verdict'].upper()} ({log['form']} form{engine}, {kv['batches']:,} "
            f"batches, {kv['stored']:,} stored, {kv['removed']:,} removed, peak live {kv['peak_live']:,}{hashes}"
            f"{extra})")


def run(args: Any) -> int:
    _validate(args)
    if args.zmq:
        return _run_live(args)
    from kvsim.sim.peers.judges.events import EventLogError, read_event_log_seq
    from kvsim.sim.peers.report import build

    reports = []
    advice: list[str] = []
    prog = progress_bar(Console(stderr=True), "{task.description}", "bytes")
    for arg in args.logs:
        src = open_input(arg)  # read once, as a stream; its SHA-256 taken in the same pass
        path = src.name
        from kvsim.sim.peers.peer_log import is_peer_log
        if is_peer_log(src.first_line()):  # a recorded engine run: every step re-judged, its events among them
            if len(args.logs) > 1:
                raise InputError(f"{path}:1: a kvsim-peer/1 log (a recorded engine run) is re-judged on its own: "
                                 f"`kvsim events {arg}`")
            from kvsim.sim.cli.peer_replay import replay_peer_log
            return replay_peer_log(arg, args, "kvsim events", src)
        if sniff(src.first_line()) == "kvtrace/1":
            raise InputError(f"{path}:1: this is a kvtrace/1 trace (store events), not a KV-event log: replay it "
                             f"with `kvsim replay {arg}`")
        try:
            with prog if prog is not None else contextlib.nullcontext():
                task = prog.add_task(path, total=src.size) if prog is not None else None
                form, batches = read_event_log_seq(path, src)
                if form == "empty":
                    raise InputError(f"{path}:1: empty log: no KV-event batch to judge")
                checker = _checker(args)
                if form == "cachetrace/1" and not args.engine:
                    checker.partial_tails = True  # TokenSpeed's recorded streams: its scheduler documents them
                for n, (line, events, seq) in enumerate(batches):
                    if seq is not None:
                        checker.sequence(seq, line)
                    checker.batch(events, line)
                    if prog is not None and not n % 256:
                        prog.update(task, completed=src.consumed)
                if prog is not None:
                    prog.remove_task(task)
        except EventLogError as exc:
            raise InputError(str(exc)) from None
        if not checker.stats["batches"]:
            raise InputError(f"{path}:1: empty log: no KV-event batch to judge")
        inputs = [{"path": path, "sha256": src.sha256(), "events": checker.stats["batches"]}]
        log = {"form": form, "hash": checker.scheme, "engine": args.engine}
        reports.append(build(inputs, path, None, checker, {"log": log}))
        advice += [f"{path}: {a}" if len(args.logs) > 1 else a for a in _advice(args, checker)]
    report = reports[0] if len(reports) == 1 else _merge(reports)
    verdict = stamp(report)
    if args.json:
        write(args.json, dumps_report(report))
    console = Console()
    style = output_style(args, console)
    if style.plain and not style.quiet:  # stdout holds only findings and the verdict: the figures go to stderr
        sys.stderr.write("".join(f"kvsim events: {_headline(r)}\n" for r in reports))
    _note(args, advice)
    for r in reports:
        if not style.plain and not style.quiet:  # on a terminal, a summary per log before its findings
            console.print(_headline(r), markup=False, soft_wrap=True, highlight=False)
        print_findings(r["violations"], console, style)
        print_hazards(r.get("hazards", []), console, style)
    print_verdict(verdict, console, style, "kvsim events")
    return verdict.exit_code


def _run_live(args: Any) -> int:
    from kvsim.sim.peers.judges import live
    from kvsim.sim.peers.report import build

    checker = _checker(args)
    out = Console()
    style = output_style(args, out)
    interrupted = False

    def show(f: Any) -> None:
        print_findings([f.as_dict(args.zmq)], out, style)

    run = live.LiveRun()
    try:
        run = live.judge(checker, args.zmq, replay=args.replay, topic=args.topic, duration=args.duration,
                         on_finding=show)
    except live.LiveInputError as exc:
        raise InputError(str(exc)) from None
    except KeyboardInterrupt:
        interrupted = True
    if interrupted:
        sys.stderr.write(f"kvsim events: interrupted after {checker.stats['batches']:,} batches: summary follows"
                         + (f" (report: {args.json})" if args.json else "") + "\n")
    elif checker.stats["batches"] == 0:
        raise InputError(f"--zmq: no KV-event batch from {args.zmq} in {args.duration:g} s")
    inputs = [{"path": args.zmq, "sha256": None, "events": checker.stats["batches"]}]
    log = {"form": "msgpack (live)", "hash": checker.scheme, "engine": args.engine,
           "replayed_batches": run.replayed}
    report = build(inputs, args.zmq, None, checker, {"log": log})
    verdict = stamp(report)
    if args.json:
        write(args.json, dumps_report(report))
    if style.plain and not style.quiet:
        sys.stderr.write(f"kvsim events: {_headline(report)}\n")
    _note(args, run.notes + _advice(args, checker))
    if not style.plain and not style.quiet:
        out.print(_headline(report), markup=False, soft_wrap=True, highlight=False)
    print_verdict(verdict, out, style, "kvsim events")
    return interrupted_status() if interrupted else verdict.exit_code


def _merge(reports: list[dict]) -> dict:
    out: dict = {"format": "kvreport/1", "inputs": [], "verdict": "pass", "violations": [], "refusals": [],
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
        if "hazards" in r:  # one cause per log (EV-3's entry); consequences counted apart
            out.setdefault("hazards", []).extend(r["hazards"])
            out.setdefault("consequences", []).extend(r["consequences"])
            out["stats"]["consequences"] = out["stats"].get("consequences", 0) + r["stats"]["consequences"]
    return out
