"""`kvsim peer vllm|sglang WORKLOAD ... --shrink`: a failing engine run reduced to a minimal reproducer.

The workload runs once as given; the rule of its first root finding is the target. ``sim.peers.shrink`` then
tries smaller cases -- fewer requests, arrivals at once, shorter outputs and prompts, a smaller pool -- each one
trial on a scheduler (or radix cache) rebuilt inside the same engine process (``sim.peers.engines.Session``: the
engine imported once), keeping every case whose roots still hold the target rule. The smallest is written as
``NAME.min.jsonl`` (kvsim-requests/1: token ids, output lengths, arrival steps, the request ids of the original),
run once more exactly as written, and the one command that reproduces it is printed. Progress lines show the
trials while it shrinks (on a terminal a status line); the shrink's wall-clock time goes to stderr and, unless
``--no-timing``, under ``stats.timing`` -- everything else is deterministic.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kvsim.sim.cli.common import InputError, output_style, plain_progress, write
from kvsim.sim.report.console import print_findings, print_verdict
from kvsim.sim.report.kvreport import dumps_report
from kvsim.sim.report.verdict import stamp

__all__ = ["run_shrink", "min_name"]


def min_name(workload: str) -> str:
    """``NAME.min.jsonl`` for a workload: its file's stem, or the synthetic workload's name (``:`` → ``-``)."""
    w = str(workload)
    if w == "-":
        stem = "stdin"
    elif w.startswith("synthetic:"):
        stem = w[len("synthetic:"):].replace(":", "-")
    else:
        stem = Path(w).name
        for ext in (".jsonl", ".json", ".min"):
            stem = stem.removesuffix(ext)
    return f"{stem}.min.jsonl"


def _command(engine: str, path: str, python: str, blocks: int, bs: int, default_bs: int) -> str:
    words = ["kvsim", "peer", engine, path, "--engine-python", python, "--blocks", str(blocks)]
    if bs != default_bs:
        words += ["--block-size", str(bs)]
    return shlex.join(words)


def run_shrink(args: Any, reqs: list, name: str, sha: str, cfg: Any) -> int:
    """Shrink the failing run of ``reqs`` at ``cfg``; write the minimal workload and its report; the minimal
    run's exit status (1 when it fails with the target rule, as it should)."""
    from kvsim.sim.cli.peer_engine import _blocks_needed, engine_config, engine_report, run_facts
    from kvsim.sim.peers.engines import ENGINES, EngineError, Session, event_checker
    from kvsim.sim.peers.shrink import Case, Shrinker, size
    from kvsim.sim.peers.workload import read_requests, requests_jsonl

    engine, python = args.peer, args.engine_python
    spec = ENGINES[engine]
    bs = cfg.block_size
    usable = cfg.num_blocks - spec.reserved_blocks
    out_path = args.shrink_out or min_name(str(args.workload))
    err = sys.stderr
    quiet = getattr(args, "quiet", False)
    t_start = time.monotonic()
    sessions = [Session(engine, python)]
    restarts = [0]

    def trial(requests: list, blocks: int) -> Any:
        c = engine_config(engine, requests, blocks, bs)
        events = event_checker(engine, bs, c.num_blocks - spec.reserved_blocks)
        try:
            return sessions[0].trial(requests, c, events)
        except EngineError:
            if restarts[0] >= 3:
                raise
            restarts[0] += 1  # the driver process died (not an exception vLLM raised): a fresh one, once more
            sessions[0].close()
            sessions[0] = Session(engine, python)
            return sessions[0].trial(requests, c, events)

    def roots(out: Any) -> list:
        return list(out.judge.act.recovery.roots)

    try:
        first = trial(reqs, usable)
        found = roots(first)
        if not found:
            Console().print(f"kvsim peer {engine} --shrink: the run fails no rule: nothing to shrink (PASS)",
                            markup=False, soft_wrap=True, highlight=False)
            return 0
        target = found[0].rule
        cur = [Case(tuple(reqs), usable)]
        plain = None if quiet else plain_progress("shrinking")
        shown = [""]

        def progress(trials: int, best: Any) -> None:
            n, p, o, b = size(best)
            shown[0] = (f"trial {trials} of at most {args.shrink_trials}: {n} requests, {p:,} prompt and {o:,} "
                        f"output tokens, {b} blocks still fail {target}")
            cur[0] = best
            if plain is not None:
                plain.phase(shown[0])
            elif not quiet and err.isatty():
                err.write("\r\x1b[2K" + shown[0][:150])
                err.flush()

        def fails(case: Any) -> bool:
            out = trial(list(case.requests), case.blocks)
            return any(r.rule == target for r in roots(out))

        def need(case: Any) -> int:
            return _blocks_needed(list(case.requests), bs)[0]

        if not quiet:
            err.write(f"kvsim peer: shrinking {len(reqs)} requests at {usable} blocks; target: {target} "
                      f"({found[0].message[:120]})\n")
        with plain if plain is not None else contextlib.nullcontext():
            best = Shrinker(fails, args.shrink_trials, need, progress).run(Case(tuple(reqs), usable))
        if not quiet and err.isatty():
            err.write("\r\x1b[2K")
        meta = {"source": name, "source_sha256": sha, "target_rule": target, "engine": engine,
                "blocks": best.blocks, "block_size": bs}
        data = requests_jsonl(list(best.requests), meta)
        write(out_path, data)
        # the minimal workload, read back as the printed command reads it, run once more
        from kvsim.sim.files import open_source
        with open_source(out_path) as src:
            again = read_requests(src)
        final_cfg = engine_config(engine, again, best.blocks, bs)
        events = event_checker(engine, bs, best.blocks)
        from kvsim.sim.peers.peer_log import Writer
        out = sessions[0].trial(again, final_cfg, events, Writer(None),
                                run_facts(engine, out_path, "", len(again), python))
    finally:
        for s in sessions:
            s.close()
    elapsed = time.monotonic() - t_start
    import hashlib
    digest = hashlib.sha256(data).hexdigest()
    command = _command(engine, out_path, python, best.blocks, bs, spec.default_block_size)
    run = {**run_facts(engine, out_path, digest, len(again), python), "command": command}
    inputs = [{"path": out_path, "sha256": digest, "events": out.steps}]
    report = engine_report(engine, out, f"({engine} run)", inputs, final_cfg, out_path, len(again), True,
                           not args.no_timing, run, gap=False)
    n, p, o, b = size(best)
    report["stats"]["shrink"] = {"target_rule": target, "from": {"requests": len(reqs), "prompt_tokens": sum(
        len(r.tokens) for r in reqs), "output_tokens": sum(r.max_new_tokens for r in reqs), "blocks": usable},
        "to": {"requests": n, "prompt_tokens": p, "output_tokens": o, "blocks": b},
        "same_rule": any(r.rule == target for r in roots(out)), "written": out_path}
    if not args.no_timing:
        report["stats"].setdefault("timing", {})["shrink_s"] = round(elapsed, 3)
    verdict = stamp(report)
    if args.json:
        write(args.json, dumps_report(report))
    if args.html:
        from kvsim.sim.report.html_page import render_html
        write(args.html, render_html(report, {}))
    console = Console()
    style = output_style(args, console)
    if not style.quiet:
        console.print(f"shrunk {len(reqs)} requests / {usable} blocks to {n} requests ({p:,} prompt tokens, {o:,} "
                      f"output tokens) / {b} blocks, still failing {target}; written to {out_path}",
                      markup=False, soft_wrap=True, highlight=False)
        print_findings(report["violations"], console, style)
    print_verdict(verdict, console, style, f"kvsim peer {engine} --shrink")
    if not style.quiet:
        err.write(f"kvsim peer: shrank in {elapsed:.1f} s; reproduce it with: {command}\n")
    if not report["stats"]["shrink"]["same_rule"]:
        raise InputError(f"{out_path}: the minimal workload as written no longer fails {target} (the engine's run "
                         "depends on something the workload does not carry)")
    return verdict.exit_code
