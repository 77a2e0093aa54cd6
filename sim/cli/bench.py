"""`kvsim bench replay|lockstep|attention`: measured figures, printed (and written with --json).

`bench replay`: events per second of replay with every rule checked, measured in one run.

Generates a legal trace (sim.trace.generate) of at least the requested number of events into a temporary
folder, then times a full replay of it (decode, model transactions with their transition checks,
incremental state checks after every event, periodic full audits). The workload decodes
`concurrency - 2` lanes per unit (the other rows' capacity holds retained prefixes): the cost of an
event grows with the rows it carries. The figure is machine-dependent: it is printed, never asserted.
`bench lockstep`: the same kind of generated decode workload replayed with the physical implementation
beside the model (`kvsim replay --lockstep`): events per second, and a profile of where lockstep time goes
(following the model's copies and appends, the per-unit checks of what a unit touched, the periodic
whole-content audit, attention against the oracle). On a shared machine the CPU-time figure
(`events_per_cpu_s`) is the steadier one; both are printed, and `timing` gives CPU seconds per phase.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kvsim.sim.cli.argtypes import STDIN, integer, output_path
from kvsim.sim.cli.common import EXIT_OK, InputError, progress_bar, write
from kvsim.sim.replay import replay_trace
from kvsim.sim.trace.generate import generate


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmarks (they print measured figures)")
    b.add_argument("what", choices=("replay", "lockstep", "attention", "simulate"), help="what to measure")
    b.add_argument("--json", type=output_path, metavar="F", help="also write the result here")
    b.add_argument("--events", type=integer(1), help="events of the generated trace (default: 1,000,000 for "
                   "replay, 20,000 for lockstep)")
    b.add_argument("--seed", type=integer(0), default=0, help="seed of the generated trace")
    b.add_argument("--concurrency", type=integer(2), default=4,
                   help="replay, lockstep: execution rows of the generated trace (concurrency - 2 lanes decode)")
    b.add_argument("--contexts", type=integer(1), nargs="+", default=[4096, 32768], metavar="TOKENS",
                   help="attention: context lengths")
    b.add_argument("--workload", help="simulate: the workload: a file, excerpt:NAME or synthetic[:SEED] (default: "
                   "the whole Mooncake conversation trace beside the repository, else excerpt:conversation)")
    b.add_argument("--requests", type=integer(1), metavar="N",
                   help="simulate: only the first N requests (default: all)")
    b.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from kvsim.sim.workloads import WorkloadInputError
    result: Any
    try:
        if args.what in ("replay", "lockstep"):
            events = args.events or (1_000_000 if args.what == "replay" else 20_000)
            bench = bench_replay if args.what == "replay" else bench_lockstep
            prog = progress_bar(Console(stderr=True), f"bench {args.what}", "events")
            if prog is None:
                result = bench(events, args.seed, args.concurrency)
            else:
                with prog:
                    task = prog.add_task("events", total=events)
                    result = bench(events, args.seed, args.concurrency, progress=lambda n: prog.advance(task, n))
        elif args.what == "simulate":
            from kvsim.sim.simulate.bench import bench_simulate
            from kvsim.sim.workloads.open import resolve
            if args.workload is not None:
                resolve(args.workload)  # a bad name fails here, before anything runs
                if args.workload == STDIN:
                    raise InputError("kvsim bench: --workload: a benchmark reads a file, not standard input")
            result = bench_simulate(args.workload, args.requests)
        else:
            from kvsim.gpu.bench import run_attention_bench
            result = run_attention_bench(contexts=tuple(args.contexts))
    except WorkloadInputError as exc:
        raise InputError(str(exc)) from None
    text = json.dumps(result, indent=2) + "\n"
    if args.json:
        write(args.json, text)
    sys.stdout.write(text)
    return EXIT_OK


def bench_replay(events: int = 1_000_000, seed: int = 0, concurrency: int = 4, progress=None) -> dict:
    """``progress(n)`` hears of the events replayed (a terminal's progress bar; the timing includes it)."""
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-") as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, events, seed=seed, concurrency=concurrency)
        t0 = time.perf_counter()
        result = replay_trace(path, progress=progress)
        seconds = time.perf_counter() - t0
    return {"events": result.events, "seconds": round(seconds, 3), "events_per_s": round(result.events / seconds),
            "violations": len(result.violations), "concurrency": concurrency,
            "decode_lanes": max(1, concurrency - 2), "seed": seed,
            "committed_rows": result.coverage.counts("UNIT-2")[0]}


def bench_lockstep(events: int = 20_000, seed: int = 0, concurrency: int = 4, profile: str = "bf16",
                   progress=None) -> dict:
    from kvsim.sim.lockstep import lockstep_factory
    made = []

    def factory(st):
        made.append(lockstep_factory(st))
        return made[-1]

    with tempfile.TemporaryDirectory(prefix="kvsim-bench-") as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, events, seed=seed, concurrency=concurrency, profile=profile)
        t0, c0 = time.perf_counter(), time.process_time()
        result = replay_trace(path, observer_factory=factory, progress=progress)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    prof = {k: round(v, 3) for k, v in sorted(getattr(made[0], "timing", {}).items())} if made else {}
    return {"events": result.events, "seconds": round(seconds, 3), "events_per_s": round(result.events / seconds),
            "profile": profile, "cpu_seconds": round(cpu, 3), "events_per_cpu_s": round(result.events / cpu),
            "violations": len(result.violations), "concurrency": concurrency, "seed": seed,
            "audit_units": made[0].audit_units if made else None, "timing": prof}
