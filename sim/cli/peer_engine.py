"""`kvsim peer vllm|sglang WORKLOAD --engine-python VENV/bin/python` and `kvsim peer compare WORKLOAD --blocks N`.

The first drives a real engine in its own venv and process (``sim.peers.engines``) and judges every step: the
KV-event stream (EV rules), capacity, whole-block prefix hits bounded by the trace and the stream, aliasing,
and the engine's own statistics (PEER-5 ... PEER-9). The report (kvreport/1) carries the verdict, every
violation, the hit ratio against the trace's own bound, and -- under ``stats.timing``, the only wall-clock
figures, left out with ``--no-timing`` -- per-step engine-call percentiles, events per second and the
judge/engine time ratio. ``--record F`` writes the engine's event batches as a subscriber log; the exact
``kvsim events`` command that judges it is printed at the end.

`compare` runs vLLM, SGLang (each where its python is given), TokenSpeed (where its wheel is installed) and
`kvsim simulate` on the same rows and the same capacity in tokens, and prints their hit ratios beside the
trace's bound in one table.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from kvsim.sim.cli.common import (
    EXIT_OK,
    EXIT_VIOLATION,
    WRITTEN,
    InputError,
    Stopped,
    open_input,
    output_style,
    partial_mark,
    plain_progress,
    progress_bar,
    write,
)
from kvsim.sim.files import atomic_path
from kvsim.sim.report.console import Style, print_consequences, print_findings, print_table, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import PARTIAL_KEY, stamp

if TYPE_CHECKING:
    from kvsim.sim.peers.engines import EngineConfig
    from kvsim.sim.peers.workload import Request

ENGINE_NAMES = ("vllm", "sglang")
TS_PAGE = 64  # TokenSpeed's prefix_granularity and `kvsim simulate`'s page (tokens)


def _requests(args: Any, stdin_ok: bool = True) -> tuple[list[Request], str, str]:
    """The workload's first ``--requests`` rows (token ids expanded as for TokenSpeed), its name and SHA-256."""
    from kvsim.sim.peers.workload import WorkloadError, is_requests_header, read_mooncake, read_requests
    stress = stress_requests(args)
    if stress is not None:
        return stress
    if not stdin_ok and str(args.workload) == "-":
        raise InputError("kvsim peer compare: WORKLOAD: standard input cannot feed several engines; give a file")
    src = open_input(args.workload)  # read once; its SHA-256 taken in the same pass
    try:
        if is_requests_header(src.first_line()):  # token ids as given (what --shrink writes)
            reqs = read_requests(src, args.requests, getattr(args, "max_output", None))
        else:
            reqs = read_mooncake(src.name, args.requests, getattr(args, "max_output", None), src)
    except WorkloadError as exc:
        raise InputError(str(exc)) from None
    if not reqs:
        raise InputError(f"{src.name}:1: no requests: nothing to drive the engine with")
    return reqs, src.name, src.sha256()


def stress_requests(args: Any) -> tuple[list[Request], str, str] | None:
    """A workload named rather than given as a Mooncake file -- ``synthetic:prefix-stress[:SEED]`` or
    ``synthetic:hybrid-stress[:SEED]`` (its rows, each submitted at its step) or any other name `kvsim simulate`
    reads (``excerpt:NAME``, ``synthetic[:SEED]``, an Azure ``.csv``) -- with ``--requests`` and ``--max-output``
    applied, its name and a SHA-256: of the file a bundled excerpt or a CSV is, else of the requests made (token
    ids, output lengths, submission steps). None for a Mooncake file or ``-`` (the caller reads it as a stream,
    hashed in the same pass). Generation is linear in the requests asked for and shows progress (a bar on a
    terminal, plain lines in a log)."""
    import hashlib

    from kvsim.sim.peers.workload import WorkloadError, read_mooncake, read_stress, read_workload
    from kvsim.sim.workloads.open import (
        WorkloadFormatError,
        default_requests,
        open_workload,
        resolve,
        stress_spec,
    )
    from kvsim.sim.workloads.request import WorkloadInputError
    spec = str(args.workload)
    max_output = getattr(args, "max_output", None)
    kind, path = "prefix-stress", ""
    try:
        stress = stress_spec(spec)
        if stress is None:
            if spec == "-" or not (spec.startswith(("excerpt:", "synthetic")) or spec.endswith(".csv")):
                return None
            kind, arg = resolve(spec)
            path = str(arg) if kind in ("mooncake", "azure") else ""
    except WorkloadFormatError:
        return None
    except WorkloadInputError as exc:
        raise InputError(str(exc)) from None
    if kind == "mooncake":  # a bundled Mooncake excerpt: read as its file is
        src = open_input(path)
        try:
            reqs = read_mooncake(src.name, args.requests, max_output, src)
        except WorkloadError as exc:
            raise InputError(str(exc)) from None
        return reqs, spec, src.sha256()
    prog = progress_bar(Console(stderr=True), "generating the workload", "requests")
    with prog if prog is not None else contextlib.nullcontext():
        task = prog.add_task("requests", total=args.requests or default_requests(spec)) if prog is not None else 0
        tick = (lambda n: prog.advance(task, n)) if prog is not None else None
        try:
            if stress is not None:
                reqs = read_stress(stress[0], stress[1], args.requests, max_output, progress=tick)
            else:
                reqs = read_workload(open_workload(spec, args.requests), args.requests, max_output, progress=tick)
        except WorkloadInputError as exc:
            raise InputError(str(exc)) from None
    if not reqs:
        raise InputError(f"{spec}:1: no requests: nothing to drive the engine with")
    if path:  # an Azure CSV (a file or a bundled excerpt)
        with open(path, "rb") as f:
            return reqs, spec, hashlib.file_digest(f, "sha256").hexdigest()
    h = hashlib.sha256()
    for r in reqs:
        h.update(f"{r.id}:{r.max_new_tokens}:{r.arrival_step}:".encode())
        h.update(r.tokens.astype("<i8").tobytes())
    return reqs, spec, h.hexdigest()


def blocks_needed(reqs: list[Request], bs: int) -> tuple[int, str]:
    """The most blocks one request needs (prompt and output) and which request that is."""
    need, who = max(((-(-(len(r.tokens) + r.max_new_tokens) // bs), r.id) for r in reqs), key=lambda x: x[0])
    return need, who


def engine_config(engine: str, reqs: list[Request], blocks: int | None, bs: int,
                  groups: list | None = None) -> EngineConfig:
    """The pool: ``blocks`` usable blocks (plus the engine's reserved ones); unbounded (never evicts) if None.
    With ``groups`` (``--kv-groups``) every group draws on the one pool: a request needs blocks in each."""
    from kvsim.sim.peers.engines import ENGINES, EngineConfig
    spec = ENGINES[engine]
    if groups:
        from kvsim.sim.peers.kv_groups import identity_grain
        # SGLang keeps one pool per component: --blocks counts the full pool's pages (the SWA pool is sized from it,
        # the Mamba pool from the running requests)
        pooled = [g for g in groups if g.kind == "full"] if engine == "sglang" else groups
        need, who = max(((_group_blocks(len(r.tokens) + r.max_new_tokens, pooled), r.id) for r in reqs),
                        key=lambda x: x[0])
        if blocks is None:
            blocks = sum(_group_blocks(len(r.tokens) + r.max_new_tokens, pooled) for r in reqs)
        grain = identity_grain(groups)
    else:
        need, who = blocks_needed(reqs, bs)
        if blocks is None:
            blocks = sum(-(-(len(r.tokens) + r.max_new_tokens) // bs) for r in reqs)
        grain = bs
    if blocks < need:
        raise InputError(f"--blocks: {blocks} blocks of {bs} tokens cannot hold request {who} ({need} blocks)")
    longest = max(len(r.tokens) + r.max_new_tokens for r in reqs)
    return EngineConfig(block_size=bs, num_blocks=blocks + spec.reserved_blocks,
                        max_model_len=-(-(longest + grain) // grain) * grain, kv_groups=groups)


def pool_need(reqs: list[Request], bs: int, groups: list | None = None) -> int:
    """The most blocks one request of ``reqs`` holds at once (over every group of a hybrid model)."""
    if groups:
        return max(_group_blocks(len(r.tokens) + r.max_new_tokens, groups) for r in reqs)
    return blocks_needed(reqs, bs)[0]


def _group_blocks(tokens: int, groups: list) -> int:
    """Blocks one request of ``tokens`` tokens may hold at once over every group (a state group: its running
    state, the state it started from and one checkpoint)."""
    return sum(3 if g.kind == "mamba" else -(-tokens // g.block_size) for g in groups)


def events_command(engine: str, record: str, bs: int, capacity: int | None) -> str:
    """The `kvsim events` command line that judges a KV-event log (``--events-log``) as this run's event checker
    did: the engine's preset where ``sim.peers.judges.events`` has one (``--engine``), else its block size."""
    from kvsim.sim.peers.judges import events as pe
    words = ["kvsim", "events", record]
    if engine in getattr(pe, "PRESETS", {}):
        words += ["--engine", engine]
        if pe.PRESETS[engine].reuse_reports:  # as the peer run judged it (sim.peers.engines.event_checker)
            words += ["--no-reuse-reports"]
    else:
        words += ["--block-size", str(bs)]
    if capacity is not None:
        words += ["--capacity", str(capacity)]
    return " ".join(shlex.quote(w) for w in words)


def run_facts(engine: str, name: str, sha: str, n: int, python: str | None) -> dict:
    """What a report and a kvsim-peer/1 header say about how the run was made: the exact command line, kvsim's
    version, the engine's python and the workload's name, SHA-256 and size (the engine's version is added from
    its driver's hello)."""
    from kvsim.sim.cli.outputs import command_line
    from kvsim.sim.cli.parser import kvsim_version
    return {"command": command_line(), "kvsim": kvsim_version(), "engine_python": python,
            "workload": {"name": name, "sha256": sha, "requests": n}}


def engine_report(engine: str, out: Any, trace: str, inputs: list[dict], cfg: EngineConfig, workload: str,
                  n_requests: int, bounded: bool, timing: bool, run: dict, gap: bool = True) -> dict:
    """The kvreport/1 report of one judged engine run, live or re-judged from its log (the same roots); ``gap``:
    put the hit ratio beside `kvsim simulate`'s (a bounded pool, the workload at hand)."""
    from kvsim.sim.peers.engines import ENGINES, engine_paths
    from kvsim.sim.peers.judges.path_coverage import coverage
    from kvsim.sim.peers.report import add_engine_judge, build, percentiles

    events = out.events
    bs = cfg.block_size
    usable = cfg.num_blocks - ENGINES[engine].reserved_blocks
    ev = events.summary()
    stats: dict = {"peer": {"engine": out.hello.get("engine", engine), "requests": n_requests, "block_size": bs,
                            "num_blocks": cfg.num_blocks, "usable_blocks": usable,
                            "capacity_tokens": usable * bs, "pool": "bounded" if bounded else "unbounded",
                            "hash_algo": out.hello.get("hash_algo"), "event_hash_check": events.scheme,
                            "steps": out.steps, "stalled_requests": len(out.stalled)}}
    if cfg.kv_groups:
        from kvsim.sim.peers.kv_groups import describe
        stats["peer"]["kv_groups"] = describe(cfg.kv_groups)
    if cfg.offload:
        stats["peer"]["host_tier"] = {**cfg.offload, "chunks_reported": out.hello.get("host_chunks"),
                                      **out.judge.tier.summary()}
    if timing:
        n_events = ev["stored"] + ev["removed"] + ev["cleared"]
        stats["timing"] = {
            "engine_s": round(out.engine_s, 3), "judge_s": round(out.judge_s, 3), "probe_s": round(out.probe_s, 3),
            "observe_s": round(out.observe_s, 3), "wall_s": round(out.wall_s, 3),
            "engine_import_s": out.hello.get("import_s"),
            "judge_to_engine": round((out.judge_s + out.probe_s) / out.engine_s, 4) if out.engine_s else None,
            "step_cost_ms": percentiles(out.step_costs_ms),
            "step_cost_mean_ms": round(sum(out.step_costs_ms) / len(out.step_costs_ms), 3) if out.step_costs_ms
            else None,
            "events_per_s_engine": round(n_events / out.engine_s) if out.engine_s else None,
            "events_per_s_judge": round(n_events / out.judge_s) if out.judge_s else None}
    report = add_engine_judge(build(inputs, trace, None, events, stats), out.judge, trace)
    report["run"] = {**run, "engine": out.hello.get("engine", engine)}
    if bounded and gap:
        report["stats"]["policy_gap"] = policy_gap(workload, n_requests, usable * bs,
                                                   report["stats"]["scheduler"]["hit_ratio"])
    report["stats"]["coverage"] = coverage(engine_paths(engine, cfg.kv_groups, bool(cfg.offload)), out.judge.paths,
                                           report["rules"], stress=workload.startswith("synthetic:"))
    if out.crash is not None:
        report["stats"]["engine_crash"] = out.crash
    return report


def prepare(args: Any) -> tuple[list[Request], str, str, EngineConfig]:
    """The run's requests, the workload's name and SHA-256, and the engine's config (a hybrid model's cache groups
    and Host tier included); the engine venv checked."""
    from kvsim.sim.peers.engines import ENGINES, probe

    engine = args.peer
    if not args.engine_python:
        raise InputError(f"--engine-python: required for {engine} (build a venv with scripts/install-engine "
                         f"{engine} VENV, then pass VENV/bin/python)")
    groups = _kv_groups(args)
    if groups and engine == "sglang":
        _sglang_groups(groups)
    bs = args.block_size if args.block_size is not None else ENGINES[engine].default_block_size
    if groups:
        from kvsim.sim.peers.kv_groups import primary_group
        bs = groups[primary_group(groups)].block_size  # the block size of the table PEER-5 ... PEER-8 read
    reqs, name, sha = _requests(args)
    cfg = engine_config(engine, reqs, args.blocks, bs, groups)
    cfg.offload = _offload(args, engine, groups)
    why = probe(args.engine_python, engine)
    if why:
        raise InputError(f"--engine-python: {why}")
    return reqs, name, sha, cfg


def run_engine_peer(args: Any) -> int:
    from kvsim.sim.peers.engines import ENGINES, EngineError, checker_for, run_engine

    engine = args.peer
    reqs, name, sha, cfg = prepare(args)
    bs = cfg.block_size
    usable = cfg.num_blocks - ENGINES[engine].reserved_blocks
    events = checker_for(engine, cfg)
    for target in (args.record, args.json, args.html, args.events_log):
        if target and not Path(target).parent.exists():
            Path(target).parent.mkdir(parents=True, exist_ok=True)
    err = Console(stderr=True)
    run = run_facts(engine, name, sha, len(reqs), args.engine_python)
    try:
        # the run's log is written under a temporary name, renamed into place when complete (sim.files)
        with atomic_path(args.record) if args.record else contextlib.nullcontext() as record, \
                atomic_path(args.events_log) if args.events_log else contextlib.nullcontext() as wire:
            go: dict[str, Any] = dict(record=record, run=run, wire=wire)
            if err.is_terminal and not getattr(args, "quiet", False):
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
                with Progress(TextColumn(f"{engine} {{task.description}}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), console=err, transient=True) as prog:
                    task = prog.add_task("requests finished", total=len(reqs))
                    out = run_engine(engine, args.engine_python, reqs, cfg, events,
                                     progress=lambda done, total: prog.update(task, completed=done), **go)
            else:
                plain = plain_progress(f"{engine} requests finished", "requests")
                with plain if plain is not None else contextlib.nullcontext():
                    key = plain.add_task("requests", total=len(reqs)) if plain is not None else 0
                    out = run_engine(engine, args.engine_python, reqs, cfg, events,
                                     progress=(lambda done, total: plain.update(key, completed=done))
                                     if plain is not None else None, **go)
            if out.interrupted:  # leave the block: the logs are not renamed into place, half written
                raise _Cut(out)
    except _Cut as cut:
        out = cut.out
        for target in (args.record, args.events_log):
            if target:
                err.print(f"{target}: not written (interrupted)", markup=False, highlight=False, soft_wrap=True)
    except EngineError as exc:
        raise InputError(f"--engine-python: {exc}") from None
    except OSError as exc:
        temporary = exc.filename is None or str(exc.filename).endswith(".part")
        target = args.record or args.events_log
        raise InputError(f"{target if target and temporary else exc.filename}:0: cannot write: "
                         f"{exc.strerror or exc}") from None
    if not out.interrupted:
        WRITTEN.extend(t for t in (args.record, args.events_log) if t)
    trace = args.record or f"({engine} run)"  # findings name lines of the run's kvsim-peer/1 log
    inputs = [{"path": name, "sha256": sha, "events": out.steps}]
    report = engine_report(engine, out, trace, inputs, cfg, str(args.workload), len(reqs), args.blocks is not None,
                           not args.no_timing, run)
    if out.interrupted:
        report[PARTIAL_KEY] = partial_mark(out.interrupted)
    verdict = stamp(report)  # stalled requests make an incomplete run, never a pass
    if args.json:
        write(args.json, dumps_report(report))
    if args.html:
        from kvsim.sim.report.html_page import render_html
        write(args.html, render_html(report, {}))
    console = Console()
    style = output_style(args, console)
    if not style.quiet:
        _print(report, console, style)
    print_verdict(verdict, console, style, f"kvsim peer {engine}")
    if out.interrupted:
        raise Stopped(out.interrupted)
    if not style.quiet:
        if args.record:
            sys.stderr.write(f"kvsim peer: re-judge the recorded run without the engine: "
                             f"{shlex.join(['kvsim', 'replay', args.record])}\n")
        if args.events_log:
            sys.stderr.write(f"kvsim peer: judge the KV-event log with: "
                             f"{events_command(engine, args.events_log, bs, None if cfg.offload else usable)}\n")
        if not verdict.passed and not out.interrupted:
            sys.stderr.write(f"kvsim peer: shrink it to a minimal reproducer: {shlex.join(['kvsim', *_argv()])} "
                             "--shrink\n")
    return verdict.exit_code


def _argv() -> list[str]:
    from kvsim.sim.cli.outputs import ARGV
    return list(ARGV)


GAP_NOTE = ("a soft signal, never a violation: kvsim simulate's scheduler and 64-token pages are not the engine's; "
            "a gap that grows after a change to the engine's eviction path is worth a look")


def policy_gap(workload: str, n: int, tokens: int, engine_ratio: float) -> dict:
    """The engine's hit ratio beside `kvsim simulate`'s on the same rows at the same capacity in tokens (whole
    64-token pages), and the gap in points (engine minus simulate). A soft signal of an eviction policy that
    throws away what it should keep; PEER-12/13 judge each eviction itself."""
    out: dict = {"capacity_tokens": tokens, "engine_hit_ratio": engine_ratio, "note": GAP_NOTE}
    pages = tokens // TS_PAGE
    if workload == "-" or pages < 2:
        out["simulate"] = "skipped: " + ("the workload was read from standard input" if workload == "-" else
                                         f"{tokens} tokens is under two {TS_PAGE}-token pages")
        return out
    try:
        row = _simulate_row(workload, n, pages)
    except InputError as exc:
        out["simulate"] = f"skipped: {exc}"
        return out
    out["simulate_hit_ratio"] = row["hit_ratio"]
    out["gap_points"] = round(100 * (engine_ratio - row["hit_ratio"]), 2)
    return out


def _print(report: dict, console: Console, style: Style) -> None:
    """The run's figures (one line each), then every finding listed (at most 20) as `path:line: RULE message`."""
    s = report["stats"]
    sc, kv, p = s["scheduler"], s["kv_events"], s["peer"]
    console.print(f"{p['engine']}: steps {p['steps']:,}  requests {sc['requests']:,}  blocks {p['usable_blocks']:,} "
                  f"of {p['block_size']} tokens  hit ratio {100 * sc['hit_ratio']:.2f} % (trace bound "
                  f"{100 * sc['trace_bound_ratio']:.2f} %)  KV events: {kv['stored']:,} stored, {kv['removed']:,} "
                  f"removed, peak live {kv['peak_live']:,}", markup=False, soft_wrap=True)
    if s.get("coverage"):
        from kvsim.sim.peers.judges.path_coverage import coverage_line
        console.print(coverage_line(s["coverage"]), markup=False, soft_wrap=True)
    if p["stalled_requests"]:
        console.print(f"stalled requests {p['stalled_requests']}", markup=False, soft_wrap=True)
    g = s.get("policy_gap")
    if g and "gap_points" in g:
        console.print(f"hit ratio beside kvsim simulate at {g['capacity_tokens']:,} tokens: engine "
                      f"{100 * g['engine_hit_ratio']:.2f} %, simulate {100 * g['simulate_hit_ratio']:.2f} %, gap "
                      f"{g['gap_points']:+.2f} points ({GAP_NOTE})", markup=False, soft_wrap=True)
    t = s.get("timing")
    if t:
        ratio = "n/a" if t["judge_to_engine"] is None else f"{t['judge_to_engine']:.2f}"
        cost = ", ".join(f"{q} {v:,.3f} ms" for q, v in (t.get("step_cost_ms") or {}).items()) or "n/a"
        start = "n/a" if t.get("engine_import_s") is None else f"{t['engine_import_s']:,.3f} s"
        console.print(f"engine start-up {start} (apart from the steps); "
                      f"engine {t['engine_s']:,.3f} s, judge {t['judge_s']:,.3f} s + counters {t['probe_s']:,.3f} s "
                      f"(judge / engine {ratio}); "
                      f"{t['events_per_s_engine'] or 0:,} block events/s (engine), {t['events_per_s_judge'] or 0:,} "
                      f"(judge); step cost {cost}", markup=False, soft_wrap=True)
    print_findings(report["violations"], console, style, 20)
    crash = s.get("engine_crash")
    if crash:
        after = next((c for c in report.get("consequences", ()) if c.get("rule") == "PEER-11"), None)
        console.print(f"the engine raised {crash.get('type')} at {crash.get('frame')} in step {crash.get('step')}"
                      + (f": a consequence of finding #{after['of']}" if after else ""), markup=False,
                      soft_wrap=True, highlight=False)
    if report.get("consequences"):
        print_consequences(report, console, style, 3)


# -- compare ----------------------------------------------------------------------------------------------------

def run_compare(args: Any) -> int:
    """One table: each engine's hit ratio on the same rows and capacity (in tokens), and the trace's bound."""
    from kvsim.sim.peers import tokenspeed as ts
    from kvsim.sim.peers.engines import EngineError, event_checker, probe, run_engine

    if args.blocks is None:
        raise InputError("--blocks: compare needs the capacity in blocks")
    bs = args.block_size if args.block_size is not None else 16
    reqs, _name, _sha = _requests(args, stdin_ok=False)
    tokens = args.blocks * bs
    rows: list[dict] = []
    notes: list[str] = []
    for engine, python in (("vllm", args.vllm_python), ("sglang", args.sglang_python)):
        if not python:
            notes.append(f"{engine}: skipped (no --{engine}-python)")
            continue
        why = probe(python, engine)
        if why:
            raise InputError(f"--{engine}-python: {why}")
        cfg = engine_config(engine, reqs, args.blocks, bs)
        events = event_checker(engine, bs, args.blocks)
        try:
            out = run_engine(engine, python, reqs, cfg, events)
        except EngineError as exc:
            raise InputError(f"--{engine}-python: {exc}") from None
        sm = out.judge.summary()
        bad = sum(out.judge.counts.values()) + sum(events.counts.values())
        rows.append({"engine": out.hello.get("engine", engine), "block_size": bs, "blocks": args.blocks,
                     "capacity_tokens": tokens, "hit_ratio": sm["hit_ratio"], "trace_bound": sm["trace_bound_ratio"],
                     "violations": bad, "stalled": len(out.stalled)})
    pages = tokens // TS_PAGE
    if ts.available():
        if pages < 2:
            notes.append(f"tokenspeed: skipped ({tokens} tokens is under two {TS_PAGE}-token pages)")
        else:
            o = ts.run(reqs, ts.RunConfig(pages=pages + 1, prefix_granularity=TS_PAGE))
            sm = o.contract.summary()
            rows.append({"engine": f"tokenspeed-scheduler {ts.version()}", "block_size": TS_PAGE, "blocks": pages,
                         "capacity_tokens": pages * TS_PAGE, "hit_ratio": sm["hit_ratio"],
                         "trace_bound": sm["trace_bound_ratio"],
                         "violations": sum(o.contract.counts.values()) + sum(o.events.counts.values()),
                         "stalled": len(o.stalled)})
    else:
        notes.append("tokenspeed: skipped (tokenspeed-scheduler not installed: pip install 'kvsim[peers]')")
    if pages < 2:
        notes.append(f"kvsim simulate: skipped ({tokens} tokens is under two {TS_PAGE}-token pages)")
    else:
        rows.append(_simulate_row(args.workload, len(reqs), pages))
    sim_ratio = next((r["hit_ratio"] for r in rows if r["engine"] == "kvsim simulate"), None)
    for r in rows:
        if sim_ratio is not None and r["engine"] != "kvsim simulate":
            r["gap_to_simulate_points"] = round(100 * (r["hit_ratio"] - sim_ratio), 2)
    if pages * TS_PAGE != tokens:
        notes.append(f"{tokens} tokens is not a whole number of {TS_PAGE}-token pages: tokenspeed and simulate get "
                     f"{pages * TS_PAGE} tokens")
    result = {"format": "kvsim-peer-compare/1", "workload": Path(args.workload).name, "requests": len(reqs),
              "capacity_tokens": tokens, "rows": rows, "notes": notes}
    if args.json:
        import json
        write(args.json, json.dumps(result, indent=1, sort_keys=True) + "\n")
    console = Console()
    style = output_style(args, console)
    if not style.quiet:
        _print_compare(result, console, style)
    return EXIT_OK if all(r["violations"] == 0 and not r["stalled"] for r in rows) else EXIT_VIOLATION


def _simulate_row(workload: str, n: int, pages: int) -> dict:
    from kvsim.sim.simulate.engine import SimConfig, Simulation
    from kvsim.sim.trace.stream import TraceInputError
    from kvsim.sim.workloads import WorkloadInputError, open_workload

    # the store model's capacity resolution asks M >= concurrency rows and max_context within the capacity
    cfg = SimConfig(pages=pages, max_context=min(131072, pages * TS_PAGE), concurrency=max(2, min(256, pages)))
    try:
        sim = Simulation(cfg, source=workload)
        res = sim.run(open_workload(workload, n))
    except (WorkloadInputError, TraceInputError) as exc:
        raise InputError(str(exc)) from None
    st = res.stats
    return {"engine": "kvsim simulate", "block_size": TS_PAGE, "blocks": pages, "capacity_tokens": pages * TS_PAGE,
            "hit_ratio": st["hit_ratio"], "trace_bound": None, "violations": st.get("violations", 0),
            "stalled": st.get("rejected", 0)}


def _print_compare(result: dict, console: Console, style: Style) -> None:
    t = Table(title=f"prefix-hit ratio on {result['requests']} rows of {result['workload']}, "
                    f"{result['capacity_tokens']:,} tokens of cache", title_justify="left")
    for c in ("engine", "block size", "blocks", "tokens", "hit ratio", "vs simulate", "trace bound", "violations",
              "stalled/rejected"):
        t.add_column(c, justify="left" if c == "engine" else "right")
    for r in result["rows"]:
        gap = r.get("gap_to_simulate_points")
        t.add_row(r["engine"], str(r["block_size"]), f"{r['blocks']:,}", f"{r['capacity_tokens']:,}",
                  f"{r['hit_ratio']:.4%}", "-" if gap is None else f"{gap:+.2f} pt",
                  "-" if r["trace_bound"] is None else f"{r['trace_bound']:.4%}", str(r["violations"]),
                  str(r["stalled"]))
    print_table(t, console, style.plain)
    for note in result["notes"]:
        console.print(note, markup=False, soft_wrap=True)


def _offload(args: Any, engine: str, groups: list | None) -> dict | None:
    """``--offload-blocks N`` (with ``--ack-delay``, ``--seed``, ``--offload-policy``, ``--fail-loads``) as the
    driver's ``offload`` config; None without it."""
    blocks = getattr(args, "offload_blocks", None)
    if blocks is None:
        if getattr(args, "fail_loads", 0.0):
            raise InputError("--fail-loads: only with --offload-blocks")
        if getattr(args, "ack_delay", 0):
            raise InputError(f"--ack-delay: no Host jobs to delay in a {engine} run without --offload-blocks")
        return None
    if engine != "vllm":
        raise InputError(f"--offload-blocks: {engine}'s Host tier is not driven by kvsim yet (vllm only)")
    if groups:
        raise InputError("--offload-blocks: with one full-attention group only (leave --kv-groups out)")
    if not 0.0 <= args.fail_loads <= 1.0:
        raise InputError(f"--fail-loads: {args.fail_loads} is not a probability in [0, 1]")
    return {"blocks": blocks, "ack_delay": args.ack_delay, "seed": args.seed, "policy": args.offload_policy,
            "fail_loads": args.fail_loads}


def _sglang_groups(groups: list) -> None:
    """What SGLang's unified cache can be built with (one FULL component, at most one SWA and one Mamba one, the
    SWA pool paged with the full one); anything else is an input error."""
    kinds = [g.kind for g in groups]
    if kinds.count("full") != 1 or kinds.count("sliding") > 1 or kinds.count("mamba") > 1:
        raise InputError("--kv-groups: SGLang's unified cache has one full group and at most one sliding and one mamba "
                         "group")
    ps = next(g.block_size for g in groups if g.kind == "full")
    for g in groups:
        if g.kind == "sliding" and g.block_size != ps:
            raise InputError(f"--kv-groups: SGLang pages its SWA pool with the full one: {g.label()} needs block {ps}")
        if g.kind == "mamba" and max(g.block_size, ps) % min(g.block_size, ps):
            raise InputError(f"--kv-groups: {g.label()}: SGLang's Mamba chunk and its page ({ps}) must divide one "
                             "another")


def _kv_groups(args: Any) -> list | None:
    """``--kv-groups SPEC`` parsed (None without it); a bad SPEC is an input error."""
    spec = getattr(args, "kv_groups", None)
    if spec is None:
        return None
    from kvsim.sim.peers.kv_groups import KvGroupsError, parse_kv_groups
    if args.block_size is not None:
        raise InputError("--kv-groups: each group states its block size; leave --block-size out")
    try:
        return parse_kv_groups(spec)
    except KvGroupsError as exc:
        raise InputError(f"--kv-groups: {exc}") from None


class _Cut(Exception):
    """A signal stopped the engine run: leaves the event log's block (which removes its temporary file)."""

    def __init__(self, out: Any) -> None:
        super().__init__(out.interrupted)
        self.out = out
