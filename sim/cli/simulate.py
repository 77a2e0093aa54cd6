"""`kvsim simulate`: serve a request workload through the store model with every rule checked, or sweep
capacities and KV profiles (what-if).

One run prints its statistics and writes a kvreport/1 (`--json`, its `stats` carry the simulation's
figures: reuse, evictions, Host traffic, per-request latency percentiles in virtual time and throughput), an
HTML page with occupancy, hit-ratio, Host-traffic and latency plots (`--html`) and optionally the kvtrace/1
events (`--record`), which `kvsim replay` accepts unchanged. Latency follows the timing model
(`sim.simulate.timing`, replaced by `--timing FILE`). `--sweep KEY=V1,V2` (repeatable: the
product of the axes) runs one simulation per point through an executor instead and reports a table and
plots. Exit code 1 when any simulated event broke a rule.

`--fault NAME|all` (`sim.simulate.inject`) injects engine fault episodes while the workload runs; the report's
stats then count `faults_injected`, `faults_flagged` and list every miss, and the exit code says whether the
faults were accounted for (0: every requested fault injected and each flagged at its bad event with exactly
its rule, no other violation; 1 otherwise), as `kvsim check` does for declared scenarios; the recorded
events replay (`kvsim replay`) to the same violations. `--backend mtp` runs speculative decode rounds
(`sim.simulate.mtp`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from kvsim.kvmodel.store import PROFILES
from kvsim.sim.cli.common import InputError, add_output_options, output_style, write
from kvsim.sim.report.build import build_report
from kvsim.sim.report.console import Style, print_findings, print_table, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import stamp, sweep_verdict
from kvsim.sim.simulate.engine import ADMISSION, HOST_EXTENTS, SimConfig, Simulation, unbounded_config
from kvsim.sim.simulate.inject import DEFAULT_EVERY, plan_faults
from kvsim.sim.simulate.latency import METRICS
from kvsim.sim.simulate.sweep import UNBOUNDED, parse_axis, parse_bytes, run_sweep
from kvsim.sim.simulate.timing import Timing, TimingFileError, load_timing
from kvsim.sim.workloads import WorkloadInputError, open_workload
from kvsim.sim.workloads.open import resolve, workload_notes

SHOWN = ("requests", "rejected", "prompt_pages", "reused_pages", "workload_blocks", "reused_workload_blocks",
         "hit_ratio", "evictions", "checkpoints_evicted", "pages_freed", "host_evictions", "host_bytes_out",
         "host_bytes_in", "restored_pages", "restored_pages_past_match", "peak_pages", "capacity_pages", "seconds",
         "throughput_rps", "output_tokens_per_s", "tokens_per_s", "events")
SHOWN_HOST = ("offload_extents", "host_bytes_in_past_match", "host_fill_mean", "host_full_events",
              "host_fill_when_full", "host_fragmented_events", "host_fragmented_bytes")
SHOWN_MTP = ("output_tokens", "spec_rounds", "draft_tokens", "accepted_draft_tokens", "acceptance",
             "tokens_per_round", "peak_mtp_pages", "capacity_mtp_pages")
SHOWN_FAULTS = ("faults_injected", "faults_flagged", "fault_events", "violations_unexpected")
SWEEP_COLUMNS = ("capacity_pages", "hit_ratio", "evictions", "host_evictions", "host_bytes_out", "host_bytes_in",
                 "peak_pages", "ttft_p50", "ttft_p99", "tpot_p50", "e2e_p99", "throughput_rps", "violations")
SHORT = {"capacity_pages": "capacity", "hit_ratio": "hit", "evictions": "evict", "host_evictions": "host evict",
         "host_bytes_out": "to Host GiB", "host_bytes_in": "from Host GiB", "peak_pages": "peak",
         "ttft_p50": "TTFT p50 s", "ttft_p99": "TTFT p99 s", "tpot_p50": "TPOT p50 ms", "e2e_p99": "e2e p99 s",
         "throughput_rps": "req/s", "violations": "viol"}


def _bytes(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise InputError(f"simulate:0: {exc}") from None


def add_parser(sub) -> None:
    s = sub.add_parser("simulate", help="simulate a request workload through the store model (every rule checked)")
    s.add_argument("workload", help="a Mooncake .jsonl or Azure .csv file, excerpt:NAME, or synthetic[:SEED]")
    s.add_argument("--requests", type=int, help="only the first N requests")
    cap = s.add_mutually_exclusive_group()
    cap.add_argument("--pages", help="Main pool pages (explicit kv_capacity = pages·64 tokens; default 65536); "
                     "'max': M_max = C·L, the most the store allows at this concurrency C (L = "
                     "ceil(max_context/64); 524,288 pages at the defaults), not unbounded: a long trace's cached "
                     "prefixes can need more; 'unbounded': sized to the workload so that nothing is ever evicted "
                     "(the report gives the size and the peak)")
    cap.add_argument("--hbm-bytes", help="free Device bytes: the store model resolves the capacity (e.g. 40G)")
    s.add_argument("--profile", default="bf16", choices=PROFILES)
    s.add_argument("--host-bytes", default="0", help="Host arena bytes for offload (default 0: evictions release)")
    s.add_argument("--host-extents", default="run", choices=HOST_EXTENTS,
                   help="how an offload is cut into Host extents: run = runs of consecutive pages, each fitting a "
                   "free extent (default); checkpoint = one extent per checkpoint and pool")
    s.add_argument("--timing", metavar="FILE",
                   help="the timing model: a JSON (or, with PyYAML, YAML) mapping of base_s (default "
                   f"{Timing.base_s}), prefill_token_s ({Timing.prefill_token_s}), decode_lane_s "
                   f"({Timing.decode_lane_s}) and host_link_bytes_per_s ({Timing.host_link_bytes_per_s:.0f}), "
                   "each >= 0 (bandwidth > 0); keys left out keep their defaults")
    s.add_argument("--max-context", type=int, default=131072)
    s.add_argument("--concurrency", type=int, default=256, help="execution rows (max_concurrency)")
    s.add_argument("--layers", type=int, default=16, help="full-attention layers of the target model")
    s.add_argument("--kv-heads", type=int, default=4)
    s.add_argument("--prefill-chunk", type=int, default=8192, help="prompt tokens per iteration")
    s.add_argument("--admission", default="evict", choices=ADMISSION,
                   help="evict: least-recently-used checkpoints give way to an admission (default); wait: "
                   "they are evicted only for what running requests will not return")
    s.add_argument("--backend", default="off", choices=("off", "mtp"),
                   help="speculative backend: mtp = speculative decode rounds over the Main and MTP pools")
    s.add_argument("--draft-window", type=int, default=4, help="MTP draft window K (positions verified per round)")
    s.add_argument("--accept-rate", type=float, default=0.7,
                   help="MTP: probability that each draft token is accepted (seeded draws)")
    s.add_argument("--seed", type=int, default=0, help="seed of the MTP acceptance draws and the fault placement")
    s.add_argument("--fault", action="append", metavar="NAME",
                   help="inject this engine fault's episodes while the workload runs (repeatable; 'all': every "
                   "fault the configuration supports; see kvsim generate --list-faults)")
    s.add_argument("--fault-every", type=int, default=DEFAULT_EVERY,
                   help=f"about one fault episode per N engine iterations (default {DEFAULT_EVERY})")
    s.add_argument("--record", help="write the simulated kvtrace/1 events here")
    s.add_argument("--json", help="write the kvreport/1 (or, with --sweep, the points) here")
    s.add_argument("--html", help="write the HTML page here")
    s.add_argument("--sweep", action="append", metavar="KEY=V1,V2,...",
                   help="what-if axis (pages, hbm, profile, host); repeat for a grid")
    s.add_argument("--executor", default="process", help="sweep executor: process, thread, serial or dask://HOST:PORT")
    s.add_argument("--workers", type=int, default=2, help="sweep worker processes/threads")
    add_output_options(s, findings=False)
    s.set_defaults(fn=run)


def base_config(args) -> SimConfig:
    if args.concurrency < 2:
        raise InputError("--concurrency:0: the scheduler needs at least 2 execution rows (a prefill and a decode)")
    if args.requests is not None and args.requests < 0:
        raise InputError("--requests:0: expected a non-negative count")
    pages: int | None = 65536
    hbm = None
    if args.hbm_bytes is not None:
        pages, hbm = None, _bytes(args.hbm_bytes)
    elif args.pages is not None:
        if args.pages in ("max", UNBOUNDED):
            pages = None
        elif args.pages.isdigit():
            pages = int(args.pages)
        else:
            raise InputError(f"--pages:0: expected a page count, 'max' or 'unbounded', got {args.pages!r}")
    timing = Timing()
    if args.timing is not None:
        try:
            timing = load_timing(args.timing)
        except TimingFileError as exc:
            raise InputError(str(exc)) from None
    if args.draft_window < 1:
        raise InputError("--draft-window:0: the MTP draft window must be at least 1")
    if not 0.0 <= args.accept_rate <= 1.0:
        raise InputError("--accept-rate:0: expected a probability in [0, 1]")
    if args.seed < 0:
        raise InputError("--seed:0: expected a non-negative seed")
    return SimConfig(max_context=args.max_context, concurrency=args.concurrency, profile=args.profile, pages=pages,
                     hbm_bytes=hbm, host_bytes=_bytes(args.host_bytes), layers=args.layers, kv_heads=args.kv_heads,
                     prefill_chunk=args.prefill_chunk, admission=args.admission, backend=args.backend,
                     draft_window=args.draft_window, accept_rate=args.accept_rate, seed=args.seed, timing=timing,
                     host_extents=args.host_extents)


def run(args) -> int:
    try:
        resolve(args.workload)
        cfg = base_config(args)
        if args.sweep:
            if args.fault:
                raise InputError("--fault:0: fault injection runs in one simulation, not in a sweep")
            if args.pages == UNBOUNDED:
                raise InputError("--pages:0: in a sweep, give unbounded as a point: --sweep pages=...,unbounded")
            return _sweep(args, cfg)
        if args.pages == UNBOUNDED:
            cfg = unbounded_config(cfg, open_workload(args.workload, args.requests))
        return _one(args, cfg)
    except WorkloadInputError as exc:
        raise InputError(str(exc)) from None


def _progress(console: Console, total, what: str):
    """A rich progress bar on a terminal (None otherwise: CI logs get no bar)."""
    if not console.is_terminal:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    prog = Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                    transient=True)
    return prog


def _one(args, cfg: SimConfig) -> int:
    err = Console(stderr=True)
    prog = _progress(err, args.requests, f"simulating {args.workload}")
    plan = None
    if args.fault:
        try:
            plan = plan_faults(args.fault, cfg, args.fault_every, args.seed)
        except ValueError as exc:
            raise InputError(f"--fault:0: {exc}") from None
    sim = Simulation(cfg, source=args.workload, record=args.record, faults=plan)
    requests = open_workload(args.workload, args.requests)
    if prog is not None:
        with prog:
            task = prog.add_task("requests", total=args.requests)
            sim.progress = lambda n: prog.advance(task, n)
            result = sim.run(requests)
    else:
        result = sim.run(requests)
    report = build_report([result.trace])
    report["stats"].update(result.stats)
    report["stats"]["workload"] = args.workload
    notes = workload_notes(args.workload)
    if cfg.unbounded:
        notes.append(f"unbounded capacity: the store was sized to {result.stats['capacity_pages']:,} pages (an "
                     f"upper bound of what this workload can hold); it needed {result.stats['peak_pages']:,} at "
                     "its peak")
    report["stats"]["notes"] = notes
    if plan:  # a violation at an injected fault's bad event with its rule is expected; anything else is not
        injected = {(event, rule) for _, rule, event, _ in sim.injector.injected}
        for v in report["violations"]:
            v["expected"] = (v.get("event"), v.get("rule")) in injected
    verdict = stamp(report)  # with faults: every injected fault flagged at its event with its rule, nothing else
    if args.json:
        write(args.json, dumps_report(report))
    if args.html:
        from kvsim.sim.report.simulation_page import render_simulation_html
        write(args.html, render_simulation_html(report, result.series, args.workload))
    out = Console()
    style = output_style(args, out)
    if not style.quiet:
        print_findings([v for v in report["violations"] if not v.get("expected")], out, style, 50)
        t = Table(title=f"simulation of {args.workload}")
        t.add_column("statistic")
        t.add_column("value", justify="right")
        for k in SHOWN + (SHOWN_HOST if cfg.host_bytes else ()) + (SHOWN_MTP if cfg.backend == "mtp" else ()) \
                + (SHOWN_FAULTS if plan else ()):
            t.add_row(k, _stat(k, result.stats[k]))
        print_table(t, out, style.plain)
        _print_latency(out, result.stats, style)
        _print_rejections(out, result.stats)
        for note in notes:
            out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
        if plan:
            _print_faults(out, result.stats, style)
    print_verdict(verdict, out, style, "kvsim simulate")
    return verdict.exit_code


def _print_latency(out: Console, stats: dict, style: Style) -> None:
    """Per-request latency in virtual seconds: mean and percentiles of each metric (the timing model's)."""
    t = Table(title="per-request latency (virtual seconds, from the timing model)")
    t.add_column("metric")
    for c in ("mean", "p50", "p90", "p99"):
        t.add_column(c, justify="right")
    names = {"queue": "queueing delay", "ttft": "time to first token", "tpot": "time per output token",
             "e2e": "end-to-end"}
    for m in METRICS:
        t.add_row(names[m], *(f"{stats[f'{m}_{c}']:.4f}" for c in ("mean", "p50", "p90", "p99")))
    print_table(t, out, style.plain)


def _print_rejections(out: Console, stats: dict) -> None:
    """Why requests were rejected: a count per reason, and the first ones with their sizes."""
    if not stats["rejected"]:
        return
    reasons = "; ".join(f"{n:,} {why}" for why, n in stats["rejections"].items())
    out.print(f"rejected {stats['rejected']:,} request(s): {reasons}", markup=False, highlight=False, soft_wrap=True)
    for r in stats["rejected_requests"]:
        out.print(f"  request {r['request']} (prompt {r['prompt']:,}, output {r['output']:,} tokens): {r['reason']}",
                  markup=False, highlight=False, soft_wrap=True)


def _stat(key: str, v) -> str:
    """A statistic as a person reads it: hit ratio and acceptance in percent, counts with separators."""
    if key in ("hit_ratio", "acceptance"):
        return f"{100 * v:.2f} %"
    if key == "seconds":
        return f"{v:,.3f}"
    return f"{v:,}" if isinstance(v, int) else f"{v:,.4f}"


def _print_faults(out: Console, stats: dict, style: Style) -> None:
    """Per fault: how often injected; then every miss and every fault that could not be injected (the
    verdict line, printed after, says whether they were all accounted for)."""
    t = Table(title="injected engine faults")
    t.add_column("fault")
    t.add_column("injected", justify="right")
    for name, n in stats["faults_by_name"].items():
        t.add_row(name, f"{n:,}")
    print_table(t, out, style.plain)
    for m in stats["faults_missed"]:
        out.print(f"missed {m['fault']} at line {m['line']} (event {m['event']}): expected {m['rule']}, reported "
                  f"{', '.join(m['reported']) or 'nothing'}", markup=False, highlight=False, soft_wrap=True)
    for name in stats["faults_not_injected"]:
        out.print(f"not injected {name}: the store never had room for its episode", markup=False,
                  highlight=False, soft_wrap=True)
    for name, why in stats["faults_skipped"].items():
        out.print(f"skipped {name}: {why}", markup=False, highlight=False, soft_wrap=True)



def _sweep(args, cfg: SimConfig) -> int:
    try:
        axes = [parse_axis(a) for a in args.sweep]
    except ValueError as exc:
        raise InputError(f"--sweep:0: {exc}") from None
    if any(k == "profile" for k, _ in axes) and not any(k in ("hbm", "pages") for k, _ in axes) \
            and cfg.hbm_bytes is None:
        raise InputError("--sweep:0: sweeping profiles compares them at a fixed HBM budget: give --hbm-bytes "
                         "(or sweep hbm=...)")
    err = Console(stderr=True)
    n = 1
    for _, v in axes:
        n *= len(v)
    prog = _progress(err, n, "sweep points")
    try:
        if prog is not None:
            with prog:
                task = prog.add_task("points", total=n)
                rows = run_sweep(args.workload, args.requests, cfg, axes, args.executor, args.workers,
                                 lambda row: prog.advance(task, 1))
        else:  # no terminal: each point as one JSON line on stderr as it completes (long sweeps in CI logs)
            rows = run_sweep(args.workload, args.requests, cfg, axes, args.executor, args.workers,
                             lambda row: print(json.dumps(row), file=sys.stderr, flush=True))
    except ValueError as exc:
        raise InputError(f"simulate:0: {exc}") from None
    verdict = sweep_verdict(rows)
    notes = workload_notes(args.workload)
    doc = {"format": "kvsim-sweep/1", "workload": args.workload, "requests": args.requests,
           "axes": {k: v for k, v in axes}, "verdict": verdict.status, "headline": verdict.headline,
           "counts": dict(verdict.counts), "timing": asdict(cfg.timing), "notes": notes, "points": rows}
    if args.json:
        write(args.json, json.dumps(doc, indent=2) + "\n")
    if args.html:
        from kvsim.sim.report.simulation_page import render_sweep_html
        write(args.html, render_sweep_html(rows, args.workload, SWEEP_COLUMNS, notes))
    out = Console()
    style = output_style(args, out)
    if not style.quiet:
        t = Table(title=f"what-if sweep of {args.workload}")
        keys = [k for k, _ in axes]
        for c in keys + [SHORT[c] for c in SWEEP_COLUMNS]:
            t.add_column(c, justify="right", no_wrap=True)
        for r in rows:
            t.add_row(*[_axis_value(k, r["point"][k]) for k in keys], *[_cell(c, r[c]) for c in SWEEP_COLUMNS])
        print_table(t, out, style.plain)  # a log or pipe: one line per point
        for note in notes:
            out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    print_verdict(verdict, out, style, "kvsim simulate")
    return verdict.exit_code


def _axis_value(key: str, v) -> str:
    if key not in ("hbm", "host") or not isinstance(v, int):
        return str(v)
    for unit, name in ((1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if v >= unit and v % unit == 0:
            return f"{v // unit}{name}"
    return str(v)


def _cell(column: str, v) -> str:
    if column.startswith("host_bytes"):
        return f"{v / (1 << 30):.2f}"
    if column == "hit_ratio":
        return f"{100 * v:.2f} %"
    if column.startswith("tpot"):
        return f"{1000 * v:.2f}"
    if column.startswith(("ttft", "e2e", "queue")):
        return f"{v:.3f}"
    return f"{v:,}" if isinstance(v, int) else f"{v:.4f}"
