"""`kvsim bench simulate`: the whole Mooncake conversation trace through the simulation, every rule checked.

Prints {"requests", "seconds", "peak_rss_bytes", "violations", "events"} plus the simulation's own figures;
`seconds` is wall-clock time here (a measured figure, never asserted), unlike the simulation report's
virtual `seconds`; `cpu_seconds` is the process's CPU time (the figure that matters on a shared machine).
Peak RSS is the process's high-water mark (resource.getrusage), taken after the run.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from kvsim.sim.simulate.engine import SimConfig, simulate
from kvsim.sim.workloads.open import excerpt_path, open_workload, shared_workloads


def default_workload() -> str:
    """The full conversation trace beside the repository when present, else the bundled excerpt."""
    folder = shared_workloads()
    full = None if folder is None else folder / "conversation_trace.jsonl"
    return str(full) if full is not None and full.exists() else str(excerpt_path("conversation"))


def bench_simulate(workload: str | None = None, requests: int | None = None, config: SimConfig | None = None) -> dict:
    workload = workload or default_workload()
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(open_workload(workload, requests), config or SimConfig(), source=Path(workload).name)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    s = res.stats
    return {"requests": s["requests"], "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
            "peak_rss_bytes": rss,
            "violations": s["violations"], "events": s["events"], "workload": Path(workload).name,
            "rejected": s["rejected"], "hit_ratio": s["hit_ratio"], "evictions": s["evictions"],
            "capacity_pages": s["capacity_pages"], "units": s["units"], "virtual_seconds": s["seconds"]}
