"""`kvsim peer tokenspeed WORKLOAD`: drive the real TokenSpeed scheduler with a Mooncake workload and judge
every plan against the observable contract and its KV events (extra ``peers``: tokenspeed-scheduler).

The report (kvreport/1 shape) carries the verdict, every violation, hit ratio against the trace's own bound,
and -- under ``stats.timing``, the only wall-clock figures, left out with ``--no-timing`` -- the scheduler's
per-plan cost percentiles and the ratio of judging time to scheduler-call time.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from rich.console import Console

from kvsim.sim.cli.common import InputError, add_output_options, output_style, write
from kvsim.sim.report.console import Style, print_findings, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import stamp


def add_parser(sub) -> None:
    p = sub.add_parser("peer", help="drive a real scheduler (tokenspeed) with a workload and judge every plan")
    p.add_argument("peer", choices=["tokenspeed"])
    p.add_argument("workload", help="Mooncake JSON Lines (input_length, output_length, hash_ids)")
    p.add_argument("--requests", type=int, default=None, help="first N rows (default: all)")
    p.add_argument("--pages", type=int, default=None,
                   help="num_device_pages, null page 0 included (default: unbounded, never evicts)")
    p.add_argument("--host-pages", type=int, default=0,
                   help="Host (L2) pages: enables write-back / load-back cache ops, each acknowledged once")
    p.add_argument("--swa-window", type=int, default=None,
                   help="add a sliding-window group 'swa' (window in tokens) beside the full-attention group")
    p.add_argument("--max-output", type=int, default=None, help="cap each request's output tokens")
    p.add_argument("--prefix-granularity", type=int, default=64)
    p.add_argument("--max-plans", type=int, default=None, help="stop after N plans")
    p.add_argument("--stagger", type=int, default=0,
                   help="submit request i before plan i*K (default 0: all at once; -1: one at a time, "
                   "each once the scheduler is idle)")
    p.add_argument("--swa-replayable", action="store_true",
                   help="declare the sliding-window group replayable (re-fed before a hit, never cached)")
    p.add_argument("--ack-delay", type=int, default=0,
                   help="hold each cache op's acknowledgement for 0..N plans (drawn from --seed)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --ack-delay draws")
    p.add_argument("--snapshot-pages", type=int, default=1,
                   help="num_snapshot_pages, the retraction snapshot pool (1: none, retraction off)")
    p.add_argument("--max-retracted", type=int, default=0,
                   help="max_retracted_requests (needs --snapshot-pages > 1)")
    p.add_argument("--force-retraction", type=int, default=0,
                   help="the wheel's debug_force_retraction_interval: retract a decode every N plans")
    p.add_argument("--clear-every", type=int, default=0, help="request ClearCache after every N-th answer")
    p.add_argument("--inject-fault", default=None, metavar="NAME",
                   help="perturb the recorded plans with one named fault (sim.peers.faults), to see its rule fire")
    p.add_argument("--record", help="write every plan as cachetrace/1")
    p.add_argument("--events-log", help="write the scheduler's KV events as JSON Lines batches (object form)")
    p.add_argument("--json", help="write the kvreport/1-style report")
    p.add_argument("--no-timing", action="store_true", help="leave wall-clock figures out of the report")
    add_output_options(p)
    p.set_defaults(fn=run)


def run(args) -> int:
    from kvsim.sim.peers import tokenspeed as ts
    from kvsim.sim.peers.report import build, file_sha256, percentiles
    from kvsim.sim.peers.workload import WorkloadError, read_mooncake

    if not ts.available():
        raise InputError("tokenspeed-scheduler:0: not installed (pip install 'kvsim[peers]')")
    for name in ("requests", "pages", "max_output", "max_plans"):
        v = getattr(args, name)
        if v is not None and v < (2 if name == "pages" else 1):
            raise InputError(f"--{name.replace('_', '-')}:0: must be at least {2 if name == 'pages' else 1}")
    try:
        reqs = read_mooncake(args.workload, args.requests, args.max_output)
    except WorkloadError as exc:
        raise InputError(str(exc)) from None
    if not reqs:
        raise InputError(f"{args.workload}:1: no requests")
    p = args.prefix_granularity
    pages = args.pages if args.pages is not None else ts.unbounded_pages(reqs, p, 1 + (args.swa_window is not None))
    if args.stagger < -1:
        raise InputError("--stagger:0: must be at least -1")
    if args.host_pages < 0:
        raise InputError("--host-pages:0: must be at least 0")
    if args.swa_replayable and args.swa_window is None:
        raise InputError("--swa-replayable:0: needs --swa-window")
    if args.swa_window is not None and args.swa_window < 1:
        raise InputError("--swa-window:0: must be at least 1")
    for name in ("ack_delay", "seed", "max_retracted", "force_retraction", "clear_every"):
        if getattr(args, name) < 0:
            raise InputError(f"--{name.replace('_', '-')}:0: must be at least 0")
    if args.snapshot_pages < 1:
        raise InputError("--snapshot-pages:0: must be at least 1 (the null page)")
    if (args.snapshot_pages > 1) != (args.max_retracted > 0):
        raise InputError("--max-retracted:0: a snapshot pool (--snapshot-pages > 1) and --max-retracted > 0 go "
                         "together")
    if args.force_retraction and args.max_retracted == 0:
        raise InputError("--force-retraction:0: needs --max-retracted > 0")
    if args.ack_delay and args.host_pages == 0 and args.max_retracted == 0:
        raise InputError("--ack-delay:0: no cache ops to delay without --host-pages")
    from kvsim.sim.peers import faults
    if args.inject_fault is not None and args.inject_fault not in faults.NAMES:
        raise InputError(f"--inject-fault:0: unknown fault {args.inject_fault!r} (known: "
                         f"{', '.join(sorted(faults.NAMES))})")
    cfg = ts.RunConfig(pages=pages, prefix_granularity=p, stagger=args.stagger, host_pages=args.host_pages,
                       swa_window=args.swa_window, swa_replayable=args.swa_replayable, ack_delay=args.ack_delay,
                       seed=args.seed,
                       snapshot_pages=args.snapshot_pages, max_retracted=args.max_retracted,
                       force_retraction=args.force_retraction, clear_every=args.clear_every,
                       fault=args.inject_fault)
    meta = {"workload": Path(args.workload).name, "requests": len(reqs),
            "pool": "unbounded" if args.pages is None else "bounded"}
    for target in (args.record, args.events_log, args.json):
        if target and not Path(target).parent.exists():
            Path(target).parent.mkdir(parents=True, exist_ok=True)
    try:
        out = ts.run(reqs, cfg, record=args.record, meta=meta, max_plans=args.max_plans,
                     events_log=args.events_log)
    except OSError as exc:
        raise InputError(f"{exc.filename}:0: cannot write: {exc.strerror or exc}") from None
    stats = {"peer": {"scheduler": f"tokenspeed-scheduler {ts.version()}", "requests": len(reqs),
                      "num_device_pages": pages, "num_host_pages": args.host_pages, "pool": meta["pool"],
                      "prefix_granularity": p,
                      "plans": out.plans, "stalled_requests": len(out.stalled),
                      "ack_delay": args.ack_delay, "seed": args.seed, "snapshot_pages": args.snapshot_pages,
                      "max_retracted": args.max_retracted, "force_retraction": args.force_retraction,
                      "clears": out.clears, "clears_accepted": out.clears_accepted,
                      **({"fault": args.inject_fault} if args.inject_fault else {}),
                      "rejected_requests": len(out.rejected),
                      "rejections": [{"request": r, "reason": why} for r, why in out.rejected[:20]]}}
    if not args.no_timing:
        stats["timing"] = {
            "scheduler_s": round(out.sched_s, 3), "judge_s": round(out.judge_s, 3),
            "observe_s": round(out.observe_s, 3),
            "judge_to_scheduler": round(out.judge_s / out.sched_s, 4) if out.sched_s else None,
            "plan_cost_ms": percentiles(out.plan_costs_ms),
            "plan_cost_mean_ms": round(sum(out.plan_costs_ms) / len(out.plan_costs_ms), 3) if out.plan_costs_ms
            else None}
    inputs = [{"path": str(args.workload), "sha256": file_sha256(args.workload), "events": out.plans}]
    # violations name the cachetrace/1 line (the recorded file when --record is given)
    report = build(inputs, args.record or str(args.workload), out.contract, out.events, stats)
    verdict = stamp(report)  # an incomplete run (requests the scheduler stopped serving) is not a pass
    if args.json:
        write(args.json, dumps_report(report))
    console = Console()
    style = output_style(args, console)
    if not style.quiet:
        _print(report, console, style)
    print_verdict(verdict, console, style, "kvsim peer")
    if args.events_log and not style.quiet:
        sys.stderr.write(f"kvsim peer: check its KV-event log with: {events_command(args.events_log, p, pages)}\n")
    return verdict.exit_code


def events_command(log: str, prefix_granularity: int, pages: int) -> str:
    """The exact `kvsim events` command a TokenSpeed events log of this run needs (its preset, its pool)."""
    block = "" if prefix_granularity == 64 else f" --block-size {prefix_granularity}"
    return f"kvsim events {shlex.quote(str(log))} --engine tokenspeed{block} --capacity {pages - 1}"


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:,.3f} ms"


def _print(report: dict, console: Console, style: Style) -> None:
    """The run's figures (one line each), then every finding listed (at most 20) as `path:line: RULE message`."""
    s = report["stats"]
    sc, kv = s["scheduler"], s["kv_events"]
    console.print(f"plans {s['peer']['plans']:,}  requests {sc['requests']:,}  pages {s['peer']['num_device_pages']:,}"
                  f"  hit ratio {100 * sc['hit_ratio']:.2f} % (trace bound {100 * sc['trace_bound_ratio']:.2f} %)  "
                  f"KV events: {kv['stored']:,} stored, {kv['removed']:,} removed", markup=False, soft_wrap=True)
    t = s.get("timing")
    if s["peer"]["stalled_requests"] or s["peer"]["rejected_requests"]:
        console.print(f"stalled requests {s['peer']['stalled_requests']}, refused at submission "
                      f"{s['peer']['rejected_requests']}", markup=False, soft_wrap=True)
    if t:
        ratio = "n/a" if t["judge_to_scheduler"] is None else f"{t['judge_to_scheduler']:.2f}"
        cost = ", ".join(f"{q} {_ms(v)}" for q, v in (t.get("plan_cost_ms") or {}).items()) or "n/a"
        console.print(f"scheduler {t['scheduler_s']:,.3f} s, judge {t['judge_s']:,.3f} s (judge / scheduler "
                      f"{ratio}); plan cost {cost}", markup=False, soft_wrap=True)
    print_findings(report["violations"], console, style, 20)
