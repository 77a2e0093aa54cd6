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

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kvsim.sim.cli.common import EXIT_OK, write
from kvsim.sim.replay import replay_trace
from kvsim.sim.trace.generate import generate


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmarks (they print measured figures)")
    b.add_argument("what", choices=("replay", "lockstep", "attention", "simulate"))
    b.add_argument("--json", help="also write the result here")
    b.add_argument("--events", type=int, help="default: 1,000,000 (replay), 20,000 (lockstep)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--concurrency", type=int, default=4)
    b.add_argument("--contexts", type=int, nargs="+", default=[4096, 32768])
    b.add_argument("--workload", help="simulate: the workload (default: the whole Mooncake conversation trace)")
    b.add_argument("--requests", type=int, help="simulate: only the first N requests")
    b.set_defaults(fn=run)


def run(args) -> int:
    result: Any
    if args.what == "replay":
        result = bench_replay(args.events or 1_000_000, args.seed, args.concurrency)
    elif args.what == "lockstep":
        result = bench_lockstep(args.events or 20_000, args.seed, args.concurrency)
    elif args.what == "simulate":
        from kvsim.sim.simulate.bench import bench_simulate
        result = bench_simulate(args.workload, args.requests)
    else:
        from kvsim.gpu.bench import run_attention_bench
        result = run_attention_bench(contexts=tuple(args.contexts))
    text = json.dumps(result, indent=2) + "\n"
    if args.json:
        write(args.json, text)
    sys.stdout.write(text)
    return EXIT_OK


def bench_replay(events: int = 1_000_000, seed: int = 0, concurrency: int = 4) -> dict:
    with tempfile.TemporaryDirectory(prefix="kvsim-bench-") as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, events, seed=seed, concurrency=concurrency)
        t0 = time.perf_counter()
        result = replay_trace(path)
        seconds = time.perf_counter() - t0
    return {"events": result.events, "seconds": round(seconds, 3), "events_per_s": round(result.events / seconds),
            "violations": len(result.violations), "concurrency": concurrency,
            "decode_lanes": max(1, concurrency - 2), "seed": seed,
            "committed_rows": result.coverage.counts("UNIT-2")[0]}


def bench_lockstep(events: int = 20_000, seed: int = 0, concurrency: int = 4, profile: str = "bf16") -> dict:
    from kvsim.sim.lockstep import lockstep_factory
    made = []

    def factory(st):
        made.append(lockstep_factory(st))
        return made[-1]

    with tempfile.TemporaryDirectory(prefix="kvsim-bench-") as tmp:
        path = Path(tmp) / "bench.jsonl"
        generate(path, events, seed=seed, concurrency=concurrency, profile=profile)
        t0, c0 = time.perf_counter(), time.process_time()
        result = replay_trace(path, observer_factory=factory)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    prof = {k: round(v, 3) for k, v in sorted(getattr(made[0], "timing", {}).items())} if made else {}
    return {"events": result.events, "seconds": round(seconds, 3), "events_per_s": round(result.events / seconds),
            "profile": profile, "cpu_seconds": round(cpu, 3), "events_per_cpu_s": round(result.events / cpu),
            "violations": len(result.violations), "concurrency": concurrency, "seed": seed,
            "audit_units": made[0].audit_units if made else None, "timing": prof}
