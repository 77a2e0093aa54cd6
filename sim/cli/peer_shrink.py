"""`kvsim peer vllm|sglang|tokenspeed WORKLOAD ... --shrink`: a failing engine run reduced to a minimal reproducer.

The workload runs once as given; the rule of its first root finding is the target. ``sim.peers.shrink`` then
tries smaller cases -- fewer requests, arrivals at once, shorter outputs and prompts, a smaller pool -- each one
trial: for vLLM and SGLang on a scheduler (or radix cache) rebuilt inside the same engine process
(``sim.peers.engines.Session``: the engine imported once), for TokenSpeed on a fresh in-process scheduler -- and
keeps every case whose roots still hold the target rule. The smallest is written as ``NAME.min.jsonl``
(kvsim-requests/1: token ids, output lengths, arrival steps, the original request ids), run once more exactly as
written, and the one command that reproduces it is printed (the original command line less the workload, its
cuts, the outputs and the shrink, plus the minimal workload and pool). Progress lines show the trials while it
shrinks (on a terminal a status line); the shrink's wall-clock time goes to stderr and, unless ``--no-timing``,
under ``stats.timing`` -- everything else is deterministic.
"""

from __future__ import annotations

import dataclasses
import hashlib
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

__all__ = ["run_shrink", "run_ts_shrink", "min_name", "repro_command"]

# options a reproducer's command drops: the shrink itself, the workload's cuts, what the run writes, the pool
_DROP = {"--shrink": 0, "--shrink-out": 1, "--shrink-trials": 1, "--requests": 1, "--max-output": 1, "--json": 1,
         "--html": 1, "--record": 1, "--events-log": 1, "--blocks": 1, "--pages": 1}


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


def repro_command(argv: list[str], workload: str, path: str, pool: tuple[str, int]) -> str:
    """The command that reproduces the minimal case: ``argv`` (after ``kvsim``) less the workload and the
    options in ``_DROP``, with ``path`` as the workload and ``pool`` (``("--blocks", N)``) as the pool."""
    out: list[str] = []
    skip = 0
    dropped_workload = False
    for i, w in enumerate(argv):
        if skip:
            skip -= 1
            continue
        name = w.split("=", 1)[0]
        if name in _DROP:
            skip = 0 if "=" in w else _DROP[name]
            continue
        if not dropped_workload and w == workload and i >= 2:
            dropped_workload = True
            out.append(path)
            continue
        out.append(w)
    if not dropped_workload:
        out.insert(2, path)
    return shlex.join(["kvsim", *out, pool[0], str(pool[1])])


class _Driven:
    """vLLM or SGLang: every trial in one driver process (a fresh one only if the process itself died)."""

    def __init__(self, engine: str, python: str, base: Any) -> None:
        from kvsim.sim.peers.engines import Session
        self.engine, self.python, self.bs, self.base = engine, python, base.block_size, base
        self.session = Session(engine, python)
        self.restarts = 0
        self.last: Any = None

    def trial(self, requests: list, blocks: int, log: Any = None, run: dict | None = None) -> list:
        from kvsim.sim.cli.peer_engine import engine_config
        from kvsim.sim.peers.engines import EngineError, Session, checker_for
        cfg = engine_config(self.engine, requests, blocks, self.bs, self.base.kv_groups)
        cfg.offload = self.base.offload
        events = checker_for(self.engine, cfg)
        try:
            out = self.session.trial(requests, cfg, events, log, run)
        except EngineError:
            if self.restarts >= 3:
                raise
            self.restarts += 1  # the process itself died (not an exception the engine raised): a fresh one
            self.session.close()
            self.session = Session(self.engine, self.python)
            out = self.session.trial(requests, cfg, events, log, run)
        self.last = (out, cfg)
        return list(out.judge.act.recovery.roots)

    def need(self, case: Any) -> int:
        from kvsim.sim.cli.peer_engine import pool_need
        return pool_need(list(case.requests), self.bs, self.base.kv_groups)

    def close(self) -> None:
        self.session.close()


class _TokenSpeed:
    """TokenSpeed's wheel, in this process: every trial a fresh scheduler (``blocks`` usable pages + the null)."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.last: Any = None

    def trial(self, requests: list, blocks: int, log: Any = None, run: dict | None = None) -> list:
        from kvsim.sim.peers import tokenspeed as ts
        from kvsim.sim.peers.report import build, recover
        out = ts.run(requests, dataclasses.replace(self.cfg, pages=blocks + 1))
        stats = {"peer": {"scheduler": "tokenspeed-scheduler", "requests": len(requests), "plans": out.plans,
                          "stalled_requests": len(out.stalled)}}
        report = recover(build([{"path": "", "sha256": "", "events": out.plans}], "(tokenspeed run)", out.contract,
                               out.events, stats))
        self.last = (out, report)
        return [_Root(v) for v in report["violations"]]

    def need(self, case: Any) -> int:
        p = self.cfg.prefix_granularity
        return max(-(-(len(r.tokens) + r.max_new_tokens) // p) for r in case.requests)

    def close(self) -> None:
        pass


@dataclasses.dataclass
class _Root:
    v: dict

    @property
    def rule(self) -> str:
        return self.v["rule"]

    @property
    def message(self) -> str:
        return self.v["message"]


def _search(args: Any, engine: Any, reqs: list, usable: int, quiet: bool) -> tuple[Any, str, list] | None:
    """Run the workload, then shrink it: (the smallest failing case, the target rule, the first run's roots), or
    None when the run fails no rule."""
    from kvsim.sim.peers.shrink import Case, Shrinker, size

    err = sys.stderr
    found = engine.trial(reqs, usable)
    if not found:
        return None
    target = found[0].rule
    plain = None if quiet else plain_progress("shrinking")
    said: list[Any] = [size(Case(tuple(reqs), usable)), time.monotonic()]

    def progress(trials: int, best: Any) -> None:
        now = size(best)
        text = (f"trial {trials} of at most {args.shrink_trials}: {now[0]} requests, {now[1]:,} prompt and "
                f"{now[2]:,} output tokens, {now[3]} blocks still fail {target}")
        if plain is not None:  # a log: the periodic line, and one line when the case shrank (at most 1/s)
            plain.phase(text)
            if now != said[0] and time.monotonic() - said[1] >= 1.0:
                err.write(f"kvsim peer: shrinking: {text}\n")
                err.flush()
                said[:] = [now, time.monotonic()]
        elif not quiet and err.isatty():
            err.write("\r\x1b[2K" + text[:150])
            err.flush()

    def fails(case: Any) -> bool:
        return any(r.rule == target for r in engine.trial(list(case.requests), case.blocks))

    if not quiet:
        err.write(f"kvsim peer: shrinking {len(reqs)} requests at {usable} blocks; target: {target} "
                  f"({found[0].message[:120]})\n")
    if plain is not None:
        with plain:
            best = Shrinker(fails, args.shrink_trials, engine.need, progress).run(Case(tuple(reqs), usable))
    else:
        best = Shrinker(fails, args.shrink_trials, engine.need, progress).run(Case(tuple(reqs), usable))
    if not quiet and err.isatty():
        err.write("\r\x1b[2K")
    return best, target, found


def _write_min(args: Any, best: Any, target: str, name: str, sha: str, engine: str, bs: int) -> tuple[str, bytes,
                                                                                                      list]:
    """Write the minimal workload; read it back as the printed command will."""
    from kvsim.sim.files import open_source
    from kvsim.sim.peers.workload import read_requests, requests_jsonl
    out_path = args.shrink_out or min_name(str(args.workload))
    data = requests_jsonl(list(best.requests), {"source": name, "source_sha256": sha, "target_rule": target,
                                                "engine": engine, "blocks": best.blocks, "block_size": bs})
    write(out_path, data)
    with open_source(out_path) as src:
        again = read_requests(src)
    return out_path, data, again


def _finish(args: Any, report: dict, reqs: list, usable: int, best: Any, target: str, out_path: str,
            command: str, elapsed: float, title: str) -> int:
    from kvsim.sim.peers.shrink import size
    n, p, o, b = size(best)
    same = any(v["rule"] == target for v in report["violations"])
    report["stats"]["shrink"] = {"target_rule": target, "from": {
        "requests": len(reqs), "prompt_tokens": sum(len(r.tokens) for r in reqs),
        "output_tokens": sum(r.max_new_tokens for r in reqs), "blocks": usable},
        "to": {"requests": n, "prompt_tokens": p, "output_tokens": o, "blocks": b}, "same_rule": same,
        "written": out_path, "command": command}
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
    print_verdict(verdict, console, style, title)
    if not style.quiet:
        sys.stderr.write(f"kvsim peer: shrank in {elapsed:.1f} s; reproduce it with: {command}\n")
    if not same:
        raise InputError(f"{out_path}: the minimal workload as written no longer fails {target} (the engine's run "
                         "depends on something the workload does not carry)")
    return verdict.exit_code


def _argv() -> list[str]:
    from kvsim.sim.cli.outputs import ARGV
    return list(ARGV)


def run_shrink(args: Any, reqs: list, name: str, sha: str, cfg: Any) -> int:
    """vLLM / SGLang: shrink the failing run of ``reqs`` at ``cfg``; write the minimal workload and its report;
    the minimal run's exit status (1: it fails, as it should)."""
    from kvsim.sim.cli.peer_engine import engine_report, run_facts
    from kvsim.sim.peers.engines import ENGINES

    engine, python = args.peer, args.engine_python
    usable = cfg.num_blocks - ENGINES[engine].reserved_blocks
    quiet = bool(getattr(args, "quiet", False))
    t_start = time.monotonic()
    driven = _Driven(engine, python, cfg)
    try:
        got = _search(args, driven, reqs, usable, quiet)
        if got is None:
            Console().print(f"kvsim peer {engine} --shrink: the run fails no rule: nothing to shrink (PASS)",
                            markup=False, soft_wrap=True, highlight=False)
            return 0
        best, target, _found = got
        out_path, data, again = _write_min(args, best, target, name, sha, engine, cfg.block_size)
        command = repro_command(_argv(), str(args.workload), out_path, ("--blocks", best.blocks))
        digest = hashlib.sha256(data).hexdigest()
        run = {**run_facts(engine, out_path, digest, len(again), python), "command": command}
        driven.trial(again, best.blocks, None, run)
        out, final_cfg = driven.last
    finally:
        driven.close()
    elapsed = time.monotonic() - t_start
    inputs = [{"path": out_path, "sha256": digest, "events": out.steps}]
    report = engine_report(engine, out, f"({engine} run)", inputs, final_cfg, out_path, len(again), True,
                           not args.no_timing, run, gap=False)
    return _finish(args, report, reqs, usable, best, target, out_path, command, elapsed,
                   f"kvsim peer {engine} --shrink")


def run_ts_shrink(args: Any, reqs: list, name: str, sha: str, cfg: Any) -> int:
    """TokenSpeed: the same search, every trial a fresh scheduler of the wheel in this process."""
    from kvsim.sim.cli.peer_engine import run_facts
    from kvsim.sim.peers import tokenspeed as ts

    usable = cfg.pages - 1
    quiet = bool(getattr(args, "quiet", False))
    t_start = time.monotonic()
    eng = _TokenSpeed(cfg)
    got = _search(args, eng, reqs, usable, quiet)
    if got is None:
        Console().print("kvsim peer tokenspeed --shrink: the run fails no rule: nothing to shrink (PASS)",
                        markup=False, soft_wrap=True, highlight=False)
        return 0
    best, target, _found = got
    out_path, data, again = _write_min(args, best, target, name, sha, "tokenspeed", cfg.prefix_granularity)
    command = repro_command(_argv(), str(args.workload), out_path, ("--pages", best.blocks + 1))
    eng.trial(again, best.blocks)
    _out, report = eng.last
    digest = hashlib.sha256(data).hexdigest()
    report["inputs"] = [{"path": out_path, "sha256": digest, "events": _out.plans}]
    report["run"] = {**run_facts("tokenspeed", out_path, digest, len(again), None), "command": command,
                     "engine": f"tokenspeed-scheduler {ts.version()}"}
    elapsed = time.monotonic() - t_start
    return _finish(args, report, reqs, usable, best, target, out_path, command, elapsed,
                   "kvsim peer tokenspeed --shrink")
