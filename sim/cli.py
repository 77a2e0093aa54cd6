"""The `kvsim` command line: replay, check, rules, capacity and benchmarks.

Exit codes (DESIGN §8): 0 no violation (for `check`: every scenario behaved as its name says), 1 at
least one violation (or a scenario that misbehaved), 2 input error — always one line `file:line:
reason` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from .trace_io import TraceInputError

EXIT_OK, EXIT_VIOLATION, EXIT_INPUT = 0, 1, 2


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def reports_dir() -> Path:
    return Path(os.environ.get("KVSIM_REPORTS", "reports"))


class InputError(Exception):
    """A bad command-line input (a file that cannot be read, a bad option value): exit 2."""


def _write(path: str | Path, data: bytes | str) -> None:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        p.write_bytes(data)
    except OSError as exc:
        raise InputError(f"{p}:0: cannot write: {exc.strerror or exc}") from None


def write_reports(report: dict, timelines: dict, json_path=None, junit=None, markdown=None, html=None) -> None:
    from .report_json import dumps_report
    if json_path:
        _write(json_path, dumps_report(report))
    if junit:
        from .report_junit import render_junit
        _write(junit, render_junit(report))
    if markdown:
        from .report_markdown import render_markdown
        _write(markdown, render_markdown(report))
    if html:
        from .report_html import render_html
        _write(html, render_html(report, timelines))


def _remember(report: dict) -> None:
    """Keep the last run's report so that `kvsim rules` can show its coverage."""
    from .report_json import dumps_report
    try:
        _write(reports_dir() / "last-run.json", dumps_report(report))
    except InputError:
        pass  # an unwritable reports folder must not fail a replay


def run_traces(paths, stop_at_first=False, lockstep=False, console=None, lockstep_profile=None):
    """Replay traces in order; returns the results (stops after the first violating trace if asked)."""
    from .replay import replay_trace
    observer = None
    if lockstep:
        from .lockstep import lockstep_factory
        observer = (lambda st: lockstep_factory(st, lockstep_profile))
    results = []
    err = console if console is not None else Console(stderr=True)
    for path in paths:
        if err.is_terminal:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed:,} events"),
                          TimeElapsedColumn(), console=err, transient=True) as prog:
                task = prog.add_task(str(path), total=None)
                r = replay_trace(path, stop_at_first, observer_factory=observer,
                                 progress=lambda n: prog.advance(task, n))
        else:
            r = replay_trace(path, stop_at_first, observer_factory=observer)
        results.append(r)
        if stop_at_first and r.violations:
            break
    return results


def cmd_replay(args) -> int:
    from .report import build_report, timelines
    from .report_console import print_report
    results = run_traces(args.traces, args.stop_at_first, args.lockstep or bool(args.lockstep_profile),
                         lockstep_profile=args.lockstep_profile)
    report = build_report(results)
    write_reports(report, timelines(results), args.json, args.junit, args.markdown, args.html)
    _remember(report)
    if not args.quiet:
        print_report(report, Console())
    return EXIT_VIOLATION if report["violations"] else EXIT_OK


def cmd_check(args) -> int:
    from .check import run_check
    return run_check(args.scenarios, args.out, args.lockstep, Console())


def cmd_rules(args) -> int:
    from spec.catalogue import all_rules
    from .report_console import print_rules
    rows = [r.as_dict() for r in all_rules()]
    path = Path(args.report) if args.report else reports_dir() / "last-run.json"
    if path.exists():
        from .report_json import ReportFormatError, load_report
        try:
            counters = load_report(path)["rules"]
        except (ReportFormatError, KeyError) as exc:
            raise InputError(f"{path}:0: {exc}") from None
        for row in rows:
            row.update({k: counters.get(row["id"], {}).get(k, 0) for k in ("checked", "exercised", "violated")})
    if args.json:
        keys = ("id", "title", "clause", "kind", "checker", "decisions", "checked", "exercised", "violated")
        sys.stdout.write(json.dumps([{k: r[k] for k in keys if k in r} for r in rows], indent=2,
                                    ensure_ascii=False) + "\n")
    else:
        print_rules(rows, Console())
    return EXIT_OK


def cmd_capacity(args) -> int:
    from .capacity_view import capacity_command
    return capacity_command(args, Console())


def cmd_bench(args) -> int:
    if args.what == "replay":
        from .bench import bench_replay
        result = bench_replay(args.events, args.seed, args.concurrency)
    else:
        from gpu.bench import run_attention_bench
        result = run_attention_bench(contexts=tuple(args.contexts))
    text = json.dumps(result, indent=2) + "\n"
    if args.json:
        _write(args.json, text)
    sys.stdout.write(text)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvsim", description="Executable specification and test harness for "
                                "paged KV-cache stores (kvtrace/1 replay, rule checking, reports).")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("replay", help="replay kvtrace/1 traces against the store contract")
    r.add_argument("traces", nargs="+")
    r.add_argument("--lockstep", action="store_true", help="run the physical implementation beside the model")
    r.add_argument("--lockstep-profile", choices=("bf16", "int8", "fp8", "nvfp4", "k8v4"),
                   help="lockstep with the Main/MTP planes under this profile (the accounting follows the header)")
    r.add_argument("--json")
    r.add_argument("--junit")
    r.add_argument("--markdown")
    r.add_argument("--html")
    r.add_argument("--stop-at-first", action="store_true")
    r.add_argument("--quiet", action="store_true", help="no console report")
    r.set_defaults(fn=cmd_replay)

    c = sub.add_parser("check", help="replay every bundled scenario and write all reports (the main job)")
    c.add_argument("--scenarios", default=str(repo_root() / "scenarios"))
    c.add_argument("--out", default=None, help="report folder (default: reports/)")
    c.add_argument("--lockstep", action="store_true")
    c.set_defaults(fn=cmd_check)

    ru = sub.add_parser("rules", help="the rule catalogue, with the last run's coverage")
    ru.add_argument("--json", action="store_true")
    ru.add_argument("--report", help="a kvreport/1 file (default: reports/last-run.json)")
    ru.set_defaults(fn=cmd_rules)

    cap = sub.add_parser("capacity", help="capacity and byte tables for a configuration")
    cap.add_argument("trace", nargs="?", help="take the configuration from this trace's header")
    cap.add_argument("--max-context", type=int, default=4096)
    cap.add_argument("--concurrency", type=int, default=4)
    cap.add_argument("--profile", default="bf16")
    cap.add_argument("--backend", default="off", help="off | mtp:K | dflash:FULL_LAYERS | dflash2")
    cap.add_argument("--layers", type=int, default=1, help="full-attention layers")
    cap.add_argument("--kv-heads", type=int, default=2)
    cap.add_argument("--kv-tokens", type=int, help="explicit kv_capacity in tokens")
    cap.add_argument("--free-bytes", type=int, help="automatic kv_capacity: free Device bytes")
    cap.add_argument("--headroom-bytes", type=int, default=0)
    cap.add_argument("--reserved-bytes", type=int, default=0)
    cap.add_argument("--json", action="store_true")
    cap.set_defaults(fn=cmd_capacity)

    b = sub.add_parser("bench", help="benchmarks (they print measured figures)")
    b.add_argument("what", choices=("replay", "attention"))
    b.add_argument("--json", help="also write the result here")
    b.add_argument("--events", type=int, default=1_000_000)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--concurrency", type=int, default=4)
    b.add_argument("--contexts", type=int, nargs="+", default=[4096, 32768])
    b.set_defaults(fn=cmd_bench)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except TraceInputError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INPUT
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
