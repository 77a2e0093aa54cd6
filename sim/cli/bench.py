"""`kvsim bench replay`: events per second of replay with every rule checked, measured in one run.

Generates a legal trace (sim.trace.generate) of at least the requested number of events into a temporary
folder, then times a full replay of it (decode, model transactions with their transition checks,
incremental state checks after every event, periodic full audits). The workload decodes
`concurrency - 2` lanes per unit (the other rows' capacity holds retained prefixes): the cost of an
event grows with the rows it carries. The figure is machine-dependent: it is printed, never asserted.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from kvsim.sim.cli.common import EXIT_OK, write
from kvsim.sim.replay import replay_trace
from kvsim.sim.trace.generate import generate


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmarks (they print measured figures)")
    b.add_argument("what", choices=("replay", "attention", "simulate"))
    b.add_argument("--json", help="also write the result here")
    b.add_argument("--events", type=int, default=1_000_000)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--concurrency", type=int, default=4)
    b.add_argument("--contexts", type=int, nargs="+", default=[4096, 32768])
    b.add_argument("--workload", help="simulate: the workload (default: the whole Mooncake conversation trace)")
    b.add_argument("--requests", type=int, help="simulate: only the first N requests")
    b.set_defaults(fn=run)


def run(args) -> int:
    if args.what == "replay":
        result = bench_replay(args.events, args.seed, args.concurrency)
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
