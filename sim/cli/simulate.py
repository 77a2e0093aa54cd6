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

import argparse
import contextlib
import itertools
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from kvsim.kvmodel.store import PROFILES
from kvsim.sim.cli.argtypes import byte_size, integer, output_path, real
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
from kvsim.sim.files import STDIN, atomic_path, label
from kvsim.sim.replay import Interrupted
from kvsim.sim.report.build import build_report
from kvsim.sim.report.console import Style, print_findings, print_table, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import PARTIAL_KEY, stamp, sweep_verdict
from kvsim.sim.simulate.engine import ADMISSION, HOST_EXTENTS, SimConfig, Simulation, unbounded_config
from kvsim.sim.simulate.inject import DEFAULT_EVERY, plan_faults
from kvsim.sim.simulate.latency import METRICS
from kvsim.sim.simulate.sweep import UNBOUNDED, PointInputError, parse_axis, run_sweep
from kvsim.sim.simulate.timing import Timing, TimingFileError, load_timing
from kvsim.sim.trace.stream import TraceInputError
from kvsim.sim.workloads import Request, WorkloadInputError, open_workload
from kvsim.sim.workloads.open import FORMATS, WorkloadFormatError, default_requests, resolve, workload_notes

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


def pages_arg(text: str) -> int | str:
    """``max``, ``unbounded`` or a page count >= 1."""
    if text.strip() in ("max", UNBOUNDED):
        return text.strip()
    try:
        return integer(1)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a page count >= 1, 'max' or 'unbounded' (got {text!r})") from None


def executor_arg(text: str) -> str:
    """``process``, ``thread``, ``serial`` or ``dask://HOST:PORT``."""
    if text in ("process", "thread", "serial"):
        return text
    if text.startswith("dask://"):
        host, sep, port = text[len("dask://"):].rpartition(":")
        if sep and host and port.isdigit() and 0 < int(port) < 65536:
            return text
    raise argparse.ArgumentTypeError(f"must be process, thread, serial or dask://HOST:PORT (got {text!r})")


def add_parser(sub: Any) -> None:
    s = sub.add_parser("simulate", help="simulate a request workload through the store model (every rule checked)",
                       description="Serve a request workload through the store model with every rule checked, "
                       "or sweep capacities and profiles (--sweep). The target model's geometry: --layers "
                       "full-attention layers of --kv-heads KV heads at head_dim 256.")
    s.add_argument("workload", metavar="WORKLOAD", help="a Mooncake .jsonl or Azure .csv file ('-': standard input, "
                   "with --format), excerpt:NAME, synthetic[:SEED] or synthetic:prefix-stress[:SEED]")
    s.add_argument("--format", choices=FORMATS, help="the workload file's format, for a file whose name does not "
                   "say it ('-', /dev/stdin, <(...)) (default: from the extension)")
    s.add_argument("--requests", type=integer(1), metavar="N",
                   help="only the first N requests (default: all; 1000 for synthetic, 200 for prefix-stress)")
    cap = s.add_mutually_exclusive_group()
    cap.add_argument("--pages", type=pages_arg, help="Main pool pages (explicit kv_capacity = pages·64 tokens; "
                     "default: 65536); 'max': M_max = C·L, the most the store allows at this concurrency C (L = "
                     "ceil(max_context/64); 524,288 pages at the defaults), not unbounded: a long trace's cached "
                     "prefixes can need more; 'unbounded': sized to the workload so that nothing is ever evicted "
                     "(the report gives the size and the peak)")
    cap.add_argument("--hbm-bytes", type=byte_size, metavar="B",
                     help="free Device bytes: the store model resolves the capacity (e.g. 40G)")
    s.add_argument("--profile", default="bf16", choices=PROFILES, help="KV plane profile")
    s.add_argument("--host-bytes", type=byte_size, default="0", metavar="B",
                   help="Host arena bytes for offload (0: evictions release)")
    s.add_argument("--host-extents", default="run", choices=HOST_EXTENTS,
                   help="how an offload is cut into Host extents: run = runs of consecutive pages, each fitting a "
                   "free extent (default); checkpoint = one extent per checkpoint and pool")
    s.add_argument("--timing", metavar="FILE",
                   help="the timing model: a JSON (or, with PyYAML, YAML) mapping of base_s (default "
                   f"{Timing.base_s}), prefill_token_s ({Timing.prefill_token_s}), decode_lane_s "
                   f"({Timing.decode_lane_s}) and host_link_bytes_per_s ({Timing.host_link_bytes_per_s:.0f}), "
                   "each >= 0 (bandwidth > 0); keys left out keep their defaults")
    s.add_argument("--max-context", type=integer(1), default=131072, help="S, the longest sequence in tokens")
    s.add_argument("--concurrency", type=integer(2), default=256,
                   help="execution rows (max_concurrency; at least a prefill and a decode)")
    s.add_argument("--layers", type=integer(1), default=16, help="full-attention layers of the target model")
    s.add_argument("--kv-heads", type=integer(1), default=4, help="KV heads per layer (head_dim is 256)")
    s.add_argument("--prefill-chunk", type=integer(1), default=8192, help="prompt tokens per iteration")
    s.add_argument("--admission", default="evict", choices=ADMISSION,
                   help="evict: least-recently-used checkpoints give way to an admission; wait: "
                   "they are evicted only for what running requests will not return")
    s.add_argument("--backend", default="off", choices=("off", "mtp"),
                   help="speculative backend: mtp = speculative decode rounds over the Main and MTP pools")
    s.add_argument("--draft-window", type=integer(1), default=4, help="MTP draft window K (positions verified per "
                   "round)")
    s.add_argument("--accept-rate", type=real(0.0, 1.0, what="a probability"), default=0.7,
                   help="MTP: probability that each draft token is accepted (seeded draws)")
    s.add_argument("--seed", type=integer(0), default=0, help="seed of the MTP acceptance draws and the fault "
                   "placement")
    s.add_argument("--fault", action="append", metavar="NAME",
                   help="inject this engine fault's episodes while the workload runs (repeatable; 'all': every "
                   "fault the configuration supports; see kvsim generate --list-faults) (default: none)")
    s.add_argument("--fault-every", type=integer(1), default=DEFAULT_EVERY,
                   help="about one fault episode per N engine iterations")
    s.add_argument("--record", type=output_path, metavar="F", help="write the simulated kvtrace/1 events here "
                   "(renamed into place when complete)")
    s.add_argument("--json", type=output_path, metavar="F",
                   help="write the kvreport/1 (or, with --sweep, the points) here")
    s.add_argument("--html", type=output_path, metavar="F", help="write the HTML page here")
    s.add_argument("--sweep", action="append", metavar="KEY=V1,V2,...",
                   help="what-if axis (pages, hbm, profile, host); repeat for a grid (default: one simulation)")
    s.add_argument("--executor", type=executor_arg, default="process",
                   help="sweep executor: process, thread, serial or dask://HOST:PORT")
    s.add_argument("--workers", type=integer(1), default=2, help="sweep worker processes/threads")
    add_output_options(s, findings=False)
    s.set_defaults(fn=run)


def base_config(args: argparse.Namespace) -> SimConfig:
    """The simulation's configuration (every value was range-checked while parsing; the timing file is read
    here)."""
    pages: int | None = 65536
    hbm = None
    if args.hbm_bytes is not None:
        pages, hbm = None, args.hbm_bytes
    elif args.pages is not None:
        pages = None if args.pages in ("max", UNBOUNDED) else args.pages
    timing = Timing()
    if args.timing is not None:
        try:
            timing = load_timing(args.timing)
        except TimingFileError as exc:
            raise InputError(str(exc)) from None
    return SimConfig(max_context=args.max_context, concurrency=args.concurrency, profile=args.profile, pages=pages,
                     hbm_bytes=hbm, host_bytes=args.host_bytes, layers=args.layers, kv_heads=args.kv_heads,
                     prefill_chunk=args.prefill_chunk, admission=args.admission, backend=args.backend,
                     draft_window=args.draft_window, accept_rate=args.accept_rate, seed=args.seed, timing=timing,
                     host_extents=args.host_extents)


def run(args: argparse.Namespace) -> int:
    try:
        kind, _ = resolve(args.workload, args.format)
        cfg = base_config(args)
        if args.sweep:
            if args.fault:
                raise InputError("kvsim simulate: --fault: fault injection runs in one simulation, not in a sweep")
            if kind != "synthetic" and args.workload == STDIN and args.executor.startswith("dask://"):
                raise InputError("kvsim simulate: a sweep on a Dask cluster reads its workload once per point on the "
                                 "workers: give a file they can read, not standard input")
            if args.pages == UNBOUNDED:
                raise InputError("kvsim simulate: --pages: in a sweep, give unbounded as a point: "
                                 "--sweep pages=...,unbounded")
            return _sweep(args, cfg)
        if args.pages == UNBOUNDED:
            if args.workload == STDIN:
                raise InputError("kvsim simulate: --pages unbounded reads the workload twice: give a file, not "
                                 "standard input")
            cfg = unbounded_config(cfg, open_workload(args.workload, args.requests, args.format))
        return _one(args, cfg, kind)
    except WorkloadFormatError as exc:
        where = "" if args.workload == STDIN else f"{args.workload}: "
        raise InputError(f"kvsim simulate: {where}{exc.reason}") from None
    except WorkloadInputError as exc:
        raise InputError(str(exc)) from None


def _requests(args: argparse.Namespace, kind: str, err: Console) -> tuple[Iterator[Request], Any, int | None, Any]:
    """(requests, progress bar or None, its total, advance): the workload opened once; the first request read
    before anything runs (a workload with none is an input error, never a pass)."""
    src = None
    if kind in ("mooncake", "azure"):
        path = resolve(args.workload, args.format)[1]
        src = open_input(args.workload if args.workload == STDIN else str(path))
    requests = open_workload(args.workload, args.requests, args.format, src)
    first = next(requests, None)
    if first is None:
        name = label(args.workload) if kind != "synthetic" else args.workload
        raise InputError(f"{name}:1: no requests: nothing to simulate")
    requests = itertools.chain((first,), requests)
    # the bar counts requests when their number is known, else the bytes read of the workload file
    total = args.requests if args.requests is not None else (default_requests(args.workload) if kind == "synthetic"
                                                             else None)
    if total is None and src is not None and src.size is not None:
        prog = progress_bar(err, f"simulating {args.workload}", "bytes")
        return requests, prog, src.size, (lambda task: lambda n: prog.update(task, completed=src.consumed))
    prog = progress_bar(err, f"simulating {args.workload}", "requests")
    return requests, prog, total, (lambda task: lambda n: prog.advance(task, n))


def _one(args: argparse.Namespace, cfg: SimConfig, kind: str) -> int:
    err = Console(stderr=True)
    plan = None
    if args.fault:
        try:
            plan = plan_faults(args.fault, cfg, args.fault_every, args.seed)
        except ValueError as exc:
            raise InputError(f"kvsim simulate: --fault: {exc}") from None
    requests, prog, total, advance = _requests(args, kind, err)
    stopped = None
    try:
        with contextlib.ExitStack() as stack:
            # the recording is written under a temporary name and renamed into place only when complete
            record = stack.enter_context(atomic_path(args.record)) if args.record else None
            try:
                sim = Simulation(cfg, source=label(args.workload), record=record, faults=plan)
            except TraceInputError as exc:  # the configuration the options describe is not a store
                raise InputError(f"kvsim simulate: {exc.reason}") from None
            try:
                if prog is not None:
                    with prog:
                        task = prog.add_task("requests", total=total)
                        sim.progress = advance(task)
                        result = sim.run(requests)
                else:
                    result = sim.run(requests)
            except KeyboardInterrupt:  # the figures so far (before the recording's temporary file goes)
                try:
                    cut = sim._finish()
                except Exception:  # noqa: BLE001 - cut inside an event: no consistent figures to report
                    raise Interrupted(f"{sim.events:,} events", sim.events) from None
                raise _Cut(cut, f"{sim.events:,} events") from None
            except OSError as exc:
                raise InputError(f"{args.record}:0: cannot write: {exc.strerror or exc}") from None
    except _Cut as cut:  # the recording is dropped (never a truncated trace under its name); the report stays
        result, stopped = cut.result, cut.done
        if record is not None:
            _rename_trace(result.trace, record, f"{args.record} (not written: interrupted)")
            record = None
    if record is not None:  # violations and the input name the recording by its final name
        _rename_trace(result.trace, record, args.record)
        WRITTEN.append(args.record)
    report = build_report([result.trace])
    report["stats"].update(result.stats)
    report["stats"]["workload"] = label(args.workload)
    notes = workload_notes(args.workload, args.format)
    if cfg.unbounded:
        notes.append(f"unbounded capacity: the store was sized to {result.stats['capacity_pages']:,} pages (an "
                     f"upper bound of what this workload can hold); it needed {result.stats['peak_pages']:,} at "
                     "its peak")
    report["stats"]["notes"] = notes
    if stopped:
        report[PARTIAL_KEY] = partial_mark(stopped)
    if plan:  # a violation at an injected fault's bad event with its rule is expected; anything else is not
        injected = {(event, rule) for _, rule, event, _ in (sim.injector.injected if sim.injector else ())}
        for v in report["violations"]:
            v["expected"] = (v.get("event"), v.get("rule")) in injected
    verdict = stamp(report)  # with faults: every injected fault flagged at its event with its rule, nothing else
    if args.json:
        write(args.json, dumps_report(report))
    if args.html:
        from kvsim.sim.report.simulation_page import render_simulation_html
        write(args.html, render_simulation_html(report, result.series, label(args.workload)))
    out = Console()
    style = output_style(args, out)
    if not style.quiet:
        print_findings([v for v in report["violations"] if not v.get("expected")], out, style, 50)
        t = Table(title=f"simulation of {label(args.workload)}")
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
    if stopped:
        raise Stopped(stopped)
    return verdict.exit_code


class _Cut(Exception):
    """A signal stopped the simulation: leaves the recording's block (which removes the temporary file)."""

    def __init__(self, result: Any, done: str) -> None:
        self.result, self.done = result, done


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


def _rename_trace(trace: Any, temporary: str, final: str) -> None:
    """The recording was written as `temporary`: name it by `final` in the result (a `TraceResult`)."""
    if trace.path == temporary:
        trace.path = final
    for v in trace.violations:
        if v.get("trace") == temporary:
            v["trace"] = final
    for r in trace.refusals:
        if r.get("trace") == temporary:
            r["trace"] = final


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



def _reachable(spec: str) -> None:
    """A Dask scheduler that does not answer within 5 s is an input error (not a 10 s hang, not exit 3)."""
    host, _, port = spec[len("dask://"):].rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        why = "no answer within 5 s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise InputError(f"kvsim simulate: --executor: cannot reach the Dask scheduler at {host}:{port} ({why})") \
            from None


def _spool(spec: str, kind: str, folder: str) -> str:
    """Copy a workload that can be read only once (standard input, a pipe) into ``folder``, under a name that
    tells its format, so every sweep point can read it."""
    path = os.path.join(folder, "workload" + (".jsonl" if kind == "mooncake" else ".csv"))
    with open_input(spec) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return path


def _sweep(args: argparse.Namespace, cfg: SimConfig) -> int:
    with tempfile.TemporaryDirectory(prefix="kvsim-sweep-") as folder:
        return _sweep_in(args, cfg, folder)


def _sweep_in(args: argparse.Namespace, cfg: SimConfig, folder: str) -> int:
    try:
        axes = [parse_axis(a) for a in args.sweep]
    except ValueError as exc:
        raise InputError(f"kvsim simulate: --sweep: {exc}") from None
    if any(k == "profile" for k, _ in axes) and not any(k in ("hbm", "pages") for k, _ in axes) \
            and cfg.hbm_bytes is None:
        raise InputError("kvsim simulate: --sweep: sweeping profiles compares them at a fixed HBM budget: give "
                         "--hbm-bytes (or sweep hbm=...)")
    kind, path = resolve(args.workload, args.format)
    spooled = None
    if kind != "synthetic" and not os.path.isfile(str(path)):
        if args.executor.startswith("dask://"):
            raise InputError(f"kvsim simulate: a sweep on a Dask cluster reads its workload once per point on the "
                             f"workers: {label(args.workload)} must be a regular file they can read (not standard "
                             "input or a pipe)")
        path = spooled = _spool(args.workload, kind, folder)  # read once, then once per point
    if args.executor.startswith("dask://"):
        _reachable(args.executor)
    err = Console(stderr=True)
    n = 1
    for _, v in axes:
        n *= len(v)
    prog = progress_bar(err, "sweep points", "points")
    done = [0]

    def point(row: dict) -> None:
        done[0] += 1
        if prog is not None:
            prog.advance(task, 1)
        if not err.is_terminal and not args.quiet:  # each point as one JSON line on stderr as it completes (logs)
            print(json.dumps(row), file=sys.stderr, flush=True)

    try:
        with prog if prog is not None else contextlib.nullcontext():
            task = prog.add_task("points", total=n) if prog is not None else None
            rows = run_sweep(str(path) if kind != "synthetic" else args.workload, args.requests, cfg, axes,
                             args.executor, args.workers, point)
    except KeyboardInterrupt:
        raise Interrupted(f"{done[0]} of {n} sweep points") from None
    except PointInputError as exc:  # the workload itself: its own file:line message
        raise InputError(str(exc).replace(spooled, label(args.workload)) if spooled else str(exc)) from None
    except ValueError as exc:
        raise InputError(f"kvsim simulate: {exc}") from None
    verdict = sweep_verdict(rows)
    notes = workload_notes(args.workload, args.format)
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
