"""`kvsim peer tokenspeed WORKLOAD`: drive the real TokenSpeed scheduler with a Mooncake workload and judge
every plan against the observable contract and its KV events (extra ``peers``: tokenspeed-scheduler).

The report (kvreport/1 shape) carries the verdict, every violation, hit ratio against the trace's own bound,
and -- under ``stats.timing``, the only wall-clock figures, left out with ``--no-timing`` -- the scheduler's
per-plan cost percentiles and the ratio of judging time to scheduler-call time.

`kvsim peer vllm|sglang` and `kvsim peer compare` live in ``sim.cli.peer_engine`` (engines in their own venvs).
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from kvsim.sim.cli.argtypes import integer, interpreter, output_path
from kvsim.sim.cli.common import (
    WRITTEN,
    InputError,
    Stopped,
    add_output_options,
    open_input,
    output_style,
    partial_mark,
    progress_bar,
    write,
)
from kvsim.sim.files import atomic_path
from kvsim.sim.report.console import Style, print_findings, print_hazards, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import PARTIAL_KEY, stamp


def add_parser(sub: Any) -> None:
    p = sub.add_parser("peer", help="drive a real scheduler (tokenspeed, vllm, sglang) with a workload and judge "
                       "every step; compare: their hit ratios beside kvsim simulate's")
    p.add_argument("peer", choices=["tokenspeed", "vllm", "sglang", "compare"], help="the scheduler to drive")
    p.add_argument("workload", metavar="WORKLOAD", nargs="?", help="Mooncake JSON Lines (input_length, output_length, "
                   "hash_ids); '-' reads standard input; synthetic:prefix-stress[:SEED] and "
                   "synthetic:hybrid-stress[:SEED] generate the stress workloads; any name kvsim simulate reads: "
                   "excerpt:NAME, synthetic[:SEED], an Azure .csv")
    p.add_argument("--requests", type=integer(1), default=None, metavar="N", help="first N rows (default: all)")
    p.add_argument("--pages", type=integer(2), default=None,
                   help="num_device_pages, null page 0 included (default: unbounded, never evicts)")
    p.add_argument("--host-pages", type=integer(0), default=0,
                   help="Host (L2) pages: enables write-back / load-back cache ops, each acknowledged once")
    p.add_argument("--swa-window", type=integer(1), default=None,
                   help="add a sliding-window group 'swa' (window in tokens) beside the full-attention group "
                   "(default: none)")
    p.add_argument("--max-output", type=integer(1), default=None,
                   help="cap each request's output tokens (default: the workload's)")
    p.add_argument("--prefix-granularity", type=integer(1), default=64, help="tokens per prefix-cache block")
    p.add_argument("--max-plans", type=integer(1), default=None, help="stop after N plans (default: until done)")
    p.add_argument("--stagger", type=integer(-1), default=0, help="submit request i before plan i*K (0: all at "
                   "once; -1: one at a time, each once the scheduler is idle)")
    p.add_argument("--swa-replayable", action="store_true",
                   help="declare the sliding-window group replayable (re-fed before a hit, never cached)")
    p.add_argument("--ack-delay", type=integer(0), default=0,
                   help="hold each cache op's acknowledgement for 0..N plans (drawn from --seed)")
    p.add_argument("--seed", type=integer(0), default=0, help="seed of the --ack-delay and --l3-miss-rate draws")
    p.add_argument("--snapshot-pages", type=integer(1), default=1,
                   help="num_snapshot_pages, the retraction snapshot pool (1: none, retraction off)")
    p.add_argument("--max-retracted", type=integer(0), default=0,
                   help="max_retracted_requests (needs --snapshot-pages > 1)")
    p.add_argument("--force-retraction", type=integer(0), default=0,
                   help="the wheel's debug_force_retraction_interval: retract a decode every N plans (0: never)")
    p.add_argument("--clear-every", type=integer(0), default=0,
                   help="request ClearCache after every N-th answer (0: never)")
    p.add_argument("--block-granularity", type=integer(1), default=None, metavar="N",
                   help="tokens per block of every group, dividing --prefix-granularity (default: equal to it)")
    p.add_argument("--state-group", action="store_true",
                   help="tokenspeed: add the wheel's snapshot-state group 'state' (AttnKind.State) beside the "
                   "full-attention group; its rows are judged by the TS-ST rules")
    p.add_argument("--no-state-checkpoints", action="store_true",
                   help="tokenspeed, with --state-group: state_checkpoint_in_forward off (no internal checkpoints)")
    p.add_argument("--max-scheduled-tokens", type=integer(1), default=8192, metavar="N",
                   help="tokenspeed: the chunk budget of one plan (default 8192)")
    p.add_argument("--probe-config", action="store_true",
                   help="tokenspeed: instead of a run, probe the wheel's configuration gate against the cache "
                   "concepts' configuration clauses (TS-GEO-3..7); no WORKLOAD")
    p.add_argument("--l3", action="store_true",
                   help="L3 storage below the Host tier (needs --host-pages), answered by an in-process object store")
    p.add_argument("--l3-miss-rate", type=float, default=0.0, metavar="R",
                   help="each L3 get key fails with probability R, drawn from --seed (needs --l3)")
    p.add_argument("--l3-host-blocks", type=integer(1), default=None, metavar="N",
                   help="Host pages L3 gets may hold at once (default: half the usable Host pages)")
    p.add_argument("--l3-wait-plans", type=integer(1), default=None, metavar="N",
                   help="plans an unanswered L3 op may wait before the scheduler cancels it (default: never)")
    p.add_argument("--inject-fault", default=None, metavar="NAME",
                   help="perturb the recorded plans with one named fault (sim.peers.tokenspeed.faults), to see its "
                   "rule fire")
    p.add_argument("--record", type=output_path, metavar="F", help="tokenspeed: write every plan as cachetrace/1; "
                   "vllm/sglang: write the run as a kvsim-peer/1 log (every step the driver reported), which "
                   "`kvsim replay F` re-judges without the engine")
    p.add_argument("--engine-python", metavar="PYTHON", type=interpreter,
                   help="vllm/sglang: the engine venv's python, or the venv (scripts/install-engine ENGINE VENV)")
    p.add_argument("--blocks", type=integer(1), default=None,
                   help="vllm/sglang/compare: usable KV blocks of the pool (default: unbounded, never evicts)")
    p.add_argument("--block-size", type=integer(1), default=None,
                   help="vllm/sglang/compare: tokens per block (default 16)")
    p.add_argument("--offload-blocks", type=integer(1), default=None, metavar="N",
                   help="vllm: a Host tier of N CPU chunks behind the engine (its OffloadingConnector and "
                   "CPUOffloadingManager), kvsim playing the worker side; with --ack-delay and --seed")
    p.add_argument("--offload-policy", choices=["lru", "arc"], default="lru",
                   help="vllm, with --offload-blocks: the CPU offloading manager's eviction policy (default lru)")
    p.add_argument("--fail-loads", type=float, default=0.0, metavar="R",
                   help="vllm, with --offload-blocks: each async Host load fails with probability R (drawn from "
                   "--seed); the engine recomputes the request")
    p.add_argument("--kv-groups", metavar="SPEC", default=None,
                   help="vllm/sglang: the engine's own hybrid cache, one group per item: full:BLOCK, "
                   "sliding:BLOCK:WINDOW, mamba:BLOCK (e.g. full:16,sliding:16:128); every group judged (PEER-20..22)")
    p.add_argument("--vllm-python", metavar="PYTHON", type=interpreter,
                   help="compare: vLLM's venv python or venv (vLLM skipped without it)")
    p.add_argument("--sglang-python", metavar="PYTHON", type=interpreter,
                   help="compare: SGLang's venv python or venv (SGLang skipped without it)")
    p.add_argument("--html", type=output_path, metavar="F", help="vllm/sglang: write the report as an HTML page")
    p.add_argument("--events-log", type=output_path, metavar="F",
                   help="write the scheduler's KV events as JSON Lines batches (tokenspeed: object form; vllm/sglang: "
                   "the engine's wire form, ts = step), for `kvsim events`")
    p.add_argument("--shrink", action="store_true",
                   help="reduce a failing run to a small one failing with the same root rule (fewest requests, "
                   "shortest prompts and outputs, smallest pool; every trial in one engine process); writes "
                   "NAME.min.jsonl and prints the one command that reproduces it")
    p.add_argument("--shrink-out", type=output_path, metavar="F",
                   help="with --shrink: where the minimal workload goes (default: NAME.min.jsonl in the current "
                   "folder, NAME from WORKLOAD)")
    p.add_argument("--shrink-trials", type=integer(1), default=400, metavar="N",
                   help="with --shrink: the most trial runs it may take (default 400)")
    p.add_argument("--json", type=output_path, metavar="F", help="write the kvreport/1-style report")
    p.add_argument("--no-timing", action="store_true", help="leave wall-clock figures out of the report")
    add_output_options(p)
    p.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    if args.probe_config:
        if args.peer != "tokenspeed" or args.workload is not None:
            raise InputError("kvsim peer: --probe-config: probes the tokenspeed wheel's configuration gate and takes "
                             "no WORKLOAD (kvsim peer tokenspeed --probe-config)")
        return _probe_config(args)
    if args.workload is None:
        raise InputError(f"kvsim peer {args.peer}: WORKLOAD is required (a Mooncake JSON Lines file, '-' for stdin, "
                         "or a name kvsim simulate reads: excerpt:NAME, synthetic[:SEED], synthetic:prefix-stress)")
    if args.peer in ("vllm", "sglang", "compare"):
        from kvsim.sim.cli.peer_engine import prepare, run_compare, run_engine_peer
        if args.shrink and args.peer != "compare":
            from kvsim.sim.cli.peer_shrink import run_shrink
            return run_shrink(args, *prepare(args))
        return run_compare(args) if args.peer == "compare" else run_engine_peer(args)
    from kvsim.sim.peers import tokenspeed as ts
    from kvsim.sim.peers.report import build, percentiles, recover
    from kvsim.sim.peers.workload import WorkloadError, is_requests_header, read_mooncake, read_requests

    if not ts.available():
        raise InputError("kvsim peer: tokenspeed-scheduler is not installed (pip install 'kvsim[peers]')")
    from kvsim.sim.cli.peer_engine import stress_requests
    stress = stress_requests(args)
    if stress is not None:
        reqs, name, sha = stress
    else:
        src = open_input(args.workload)  # read once; its SHA-256 taken in the same pass
        try:
            if is_requests_header(src.first_line()):  # token ids as given (what --shrink writes)
                reqs = read_requests(src, args.requests, args.max_output)
            else:
                reqs = read_mooncake(src.name, args.requests, args.max_output, src)
        except WorkloadError as exc:
            raise InputError(str(exc)) from None
        if not reqs:
            raise InputError(f"{src.name}:1: no requests: nothing to drive the scheduler with")
        name, sha = src.name, src.sha256()
    p = args.prefix_granularity
    pages = args.pages if args.pages is not None else ts.unbounded_pages(
        reqs, args.block_granularity or p, 1 + (args.swa_window is not None) + 2 * args.state_group)
    if args.swa_replayable and args.swa_window is None:
        raise InputError("kvsim peer: --swa-replayable needs --swa-window")
    if (args.snapshot_pages > 1) != (args.max_retracted > 0):
        raise InputError("kvsim peer: --max-retracted: a snapshot pool (--snapshot-pages > 1) and --max-retracted > 0 "
                         "go together")
    if args.force_retraction and args.max_retracted == 0:
        raise InputError("kvsim peer: --force-retraction needs --max-retracted > 0")
    if args.ack_delay and args.host_pages == 0 and args.max_retracted == 0:
        raise InputError("kvsim peer: --ack-delay: no cache ops to delay without --host-pages")
    if args.block_granularity is not None and p % args.block_granularity:
        raise InputError(f"kvsim peer: --block-granularity: {args.block_granularity} does not divide "
                         f"--prefix-granularity {p}")
    if args.no_state_checkpoints and not args.state_group:
        raise InputError("kvsim peer: --no-state-checkpoints needs --state-group")
    if args.l3 and args.host_pages < 2:
        raise InputError("kvsim peer: --l3: L3 storage sits below the Host tier: give --host-pages (at least 2)")
    if not args.l3 and (args.l3_miss_rate or args.l3_host_blocks is not None or args.l3_wait_plans is not None):
        raise InputError("kvsim peer: --l3-miss-rate/--l3-host-blocks/--l3-wait-plans need --l3")
    if not 0.0 <= args.l3_miss_rate <= 1.0:
        raise InputError(f"kvsim peer: --l3-miss-rate: {args.l3_miss_rate} is outside [0, 1]")
    if args.l3_host_blocks is not None and args.l3_host_blocks >= args.host_pages:
        raise InputError(f"kvsim peer: --l3-host-blocks: {args.l3_host_blocks} exceeds the {args.host_pages - 1} "
                         "usable Host pages")
    from kvsim.sim.peers.tokenspeed import faults
    if args.inject_fault is not None and args.inject_fault not in faults.NAMES:
        raise InputError(f"kvsim peer: --inject-fault: unknown fault {args.inject_fault!r} (known: "
                         f"{', '.join(sorted(faults.NAMES))})")
    cfg = ts.RunConfig(pages=pages, prefix_granularity=p, stagger=args.stagger, host_pages=args.host_pages,
                       swa_window=args.swa_window, swa_replayable=args.swa_replayable, ack_delay=args.ack_delay,
                       seed=args.seed,
                       snapshot_pages=args.snapshot_pages, max_retracted=args.max_retracted,
                       force_retraction=args.force_retraction, clear_every=args.clear_every,
                       fault=args.inject_fault, block_granularity=args.block_granularity, l3=args.l3,
                       l3_miss_rate=args.l3_miss_rate, l3_host_blocks=args.l3_host_blocks or 0,
                       l3_wait_plans=args.l3_wait_plans or 0, state_group=args.state_group,
                       state_checkpoints=not args.no_state_checkpoints,
                       max_scheduled_tokens=args.max_scheduled_tokens)
    meta = {"workload": Path(name).name, "requests": len(reqs),
            "pool": "unbounded" if args.pages is None else "bounded"}
    if args.shrink:
        from kvsim.sim.cli.peer_shrink import run_ts_shrink
        return run_ts_shrink(args, reqs, name, sha, cfg)
    prog = progress_bar(Console(stderr=True), "tokenspeed", "requests")
    try:
        with contextlib.ExitStack() as stack:  # outputs written under temporary names, renamed when complete
            record = stack.enter_context(atomic_path(args.record)) if args.record else None
            events_log = stack.enter_context(atomic_path(args.events_log)) if args.events_log else None
            try:
                if prog is not None:
                    with prog:
                        task = prog.add_task("requests", total=len(reqs))
                        out = ts.run(reqs, cfg, record=record, meta=meta, max_plans=args.max_plans,
                                     events_log=events_log, progress=lambda n: prog.advance(task, n))
                else:
                    out = ts.run(reqs, cfg, record=record, meta=meta, max_plans=args.max_plans,
                                 events_log=events_log)
            except OSError as exc:
                raise InputError(f"{exc.filename}:0: cannot write: {exc.strerror or exc}") from None
            if out.interrupted:  # leave the block: the record and event log are not renamed into place
                raise _Cut(out)
    except _Cut as cut:
        out = cut.out
        for target in (args.record, args.events_log):
            if target:
                sys.stderr.write(f"{target}: not written (interrupted)\n")
    else:
        WRITTEN.extend(t for t in (args.record, args.events_log) if t)
    stats = {"peer": {"scheduler": f"tokenspeed-scheduler {ts.version()}", "requests": len(reqs),
                      "num_device_pages": pages, "num_host_pages": args.host_pages, "pool": meta["pool"],
                      "prefix_granularity": p,
                      "plans": out.plans, "stalled_requests": len(out.stalled),
                      "ack_delay": args.ack_delay, "seed": args.seed, "snapshot_pages": args.snapshot_pages,
                      "max_retracted": args.max_retracted, "force_retraction": args.force_retraction,
                      "clears": out.clears, "clears_accepted": out.clears_accepted,
                      **({"fault": args.inject_fault, "fault_applied": out.fault_applied} if args.inject_fault
                         else {}),
                      **({"block_granularity": args.block_granularity} if args.block_granularity else {}),
                      **({"state_group": True, "state_checkpoint_in_forward": not args.no_state_checkpoints}
                         if args.state_group else {}),
                      **({"max_scheduled_tokens": args.max_scheduled_tokens}
                         if args.max_scheduled_tokens != 8192 else {}),
                      **({"l3": {"miss_rate": args.l3_miss_rate, "host_blocks": args.l3_host_blocks,
                                 "wait_plans": args.l3_wait_plans, "store": out.l3}} if args.l3 else {}),
                      **({"engine_error": out.engine_error} if out.engine_error else {}),
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
    inputs = [{"path": name, "sha256": sha, "events": out.plans}]
    # violations name lines of the run's cachetrace/1 record: the file --record wrote, or, unrecorded, the record
    # the same (deterministic) run would write -- never the workload, whose lines are requests
    trace = args.record or "(tokenspeed run)"
    report = recover(build(inputs, trace, out.contract, out.events, stats))  # one cause, one finding
    from kvsim.sim.cli.peer_engine import run_facts
    report["run"] = {**run_facts("tokenspeed", name, sha, len(reqs), None), "engine": f"tokenspeed-scheduler "
                                                                                     f"{ts.version()}"}
    if args.pages is not None:  # beside kvsim simulate at the same capacity: a soft signal, never a violation
        from kvsim.sim.cli.peer_engine import policy_gap
        report["stats"]["policy_gap"] = policy_gap(str(args.workload), len(reqs), (pages - 1) * p,
                                                   report["stats"]["scheduler"]["hit_ratio"])
    from kvsim.sim.peers.judges.path_coverage import coverage
    from kvsim.sim.peers.tokenspeed.paths import PATHS, REACH
    report["stats"]["coverage"] = coverage(PATHS, out.paths, report["rules"], REACH,
                                           stress=str(args.workload).startswith("synthetic:prefix-stress"))
    if out.interrupted:
        report[PARTIAL_KEY] = partial_mark(out.interrupted)
    verdict = stamp(report)  # an incomplete run (requests the scheduler stopped serving) is not a pass
    if args.json:
        write(args.json, dumps_report(report))
    console = Console()
    style = output_style(args, console)
    if not style.quiet:
        _print(report, console, style)
    print_verdict(verdict, console, style, "kvsim peer")
    if out.interrupted:
        raise Stopped(out.interrupted)
    if args.inject_fault and not out.fault_applied:
        sys.stderr.write(f"kvsim peer: --inject-fault {args.inject_fault}: its premise never occurred in this run, so "
                         f"nothing was injected ({faults.WHY[args.inject_fault]})\n")
    if report["violations"] and not args.record and not style.quiet:
        sys.stderr.write("kvsim peer: lines are those of this run's cachetrace/1 record; rerun with --record F to "
                         "keep it and judge it again with `kvsim replay F`\n")
    if args.events_log and not style.quiet:
        folded = args.swa_window is not None and not args.swa_replayable  # EV-3's entry: the fold's orphans
        sys.stderr.write(f"kvsim peer: check its KV-event log with: "
                         f"{events_command(args.events_log, p, pages, folded)}\n")
    return verdict.exit_code


def events_command(log: str, prefix_granularity: int, pages: int, folded: bool = False) -> str:
    """The exact `kvsim events` command a TokenSpeed events log of this run needs (its preset, its pool, and
    whether a sliding-window group's residency was folded into its events: EV-3's entry)."""
    block = "" if prefix_granularity == 64 else f" --block-size {prefix_granularity}"
    fold = " --folded-groups" if folded else ""
    return f"kvsim events {shlex.quote(str(log))} --engine tokenspeed{block} --capacity {pages - 1}{fold}"


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:,.3f} ms"


def _print(report: dict, console: Console, style: Style) -> None:
    """The run's figures (one line each), then every finding listed (at most 20) as `path:line: RULE message`."""
    s = report["stats"]
    sc, kv = s["scheduler"], s["kv_events"]
    console.print(f"plans {s['peer']['plans']:,}  requests {sc['requests']:,}  pages {s['peer']['num_device_pages']:,}"
                  f"  hit ratio {100 * sc['hit_ratio']:.2f} % (trace bound {100 * sc['trace_bound_ratio']:.2f} %)  "
                  f"KV events: {kv['stored']:,} stored, {kv['removed']:,} removed", markup=False, soft_wrap=True)
    g = s.get("policy_gap")
    if g and "gap_points" in g:
        console.print(f"hit ratio beside kvsim simulate at {g['capacity_tokens']:,} tokens: scheduler "
                      f"{100 * g['engine_hit_ratio']:.2f} %, simulate {100 * g['simulate_hit_ratio']:.2f} %, gap "
                      f"{g['gap_points']:+.2f} points ({g['note']})", markup=False, soft_wrap=True)
    if s.get("coverage"):
        from kvsim.sim.peers.judges.path_coverage import coverage_line
        console.print(coverage_line(s["coverage"]), markup=False, soft_wrap=True)
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
    print_hazards(report.get("hazards", []), console, style)


REPRODUCER = "sim/peers/samples/findings/config_gate.py"


def _probe_config(args: argparse.Namespace) -> int:
    """`kvsim peer tokenspeed --probe-config`: every probe of sim.peers.tokenspeed.config_probe, one finding line per
    disagreement (named `(config probe):N`, N the probe's place; its reproducer is REPRODUCER), exit 1 if any."""
    import json

    from kvsim.sim.peers import tokenspeed as ts
    from kvsim.sim.peers.tokenspeed import config_probe

    if not ts.available():
        raise InputError("kvsim peer: tokenspeed-scheduler is not installed (pip install 'kvsim[peers]')")
    outcomes = config_probe.run_probes()
    findings = []
    for n, o in enumerate(outcomes, 1):
        if not o.agrees:
            findings.append({"rule": o.rule, "line": n, "probe": o.probe, "expected": o.expected, "got": o.got,
                             "message": f"probe {o.probe}: {_disagreement(o)} (reproducer: python {REPRODUCER} "
                             f"{o.probe})"})
    if args.json:
        doc = {"format": "kvsim-config-probe/1", "scheduler": f"tokenspeed-scheduler {ts.version()}",
               "probes": [{"probe": o.probe, "rule": o.rule, "expected": o.expected, "got": o.got,
                           "agrees": o.agrees, "detail": o.detail, "clause": o.clause} for o in outcomes],
               "findings": findings}
        write(args.json, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if not args.quiet:
        for f in findings:
            print(f"(config probe):{f['line']}: {f['rule']} {f['message']}")
        print(f"{'FAIL' if findings else 'PASS'}: {len(findings)} of {len(outcomes)} configuration probes disagree "
              f"with the seed (tokenspeed-scheduler {ts.version()})")
    return 1 if findings else 0


def _disagreement(o) -> str:
    if o.got == "accepted":
        return f"the gate accepts it; seed 002 expects a refusal ({o.clause})"
    if o.got == "refused":
        return f"the gate refuses it ({o.detail}); seed 002 expects it accepted ({o.clause})"
    if o.got == "present":
        return f"the bindings name {o.detail} ({o.clause})"
    return f"{o.detail}; seed 002 expects it {o.expected} ({o.clause})"


class _Cut(Exception):
    """A signal stopped the TokenSpeed run: leaves the outputs' block (which removes their temporary files)."""

    def __init__(self, out: Any) -> None:
        super().__init__(out.interrupted)
        self.out = out
