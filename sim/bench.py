"""`kvsim bench replay`: events per second of replay with every rule checked, measured in one run.

Generates a legal trace (sim.workload) of at least the requested number of events into a temporary
folder, then times a full replay of it (decode, model transactions with their transition checks,
incremental state checks after every event, periodic full audits). The workload decodes
`concurrency - 2` lanes per unit (the other rows' capacity holds retained prefixes): the cost of an
event grows with the rows it carries. The figure is machine-dependent: it is printed, never asserted.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .replay import replay_trace
from .workload import generate


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
