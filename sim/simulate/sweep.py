"""What-if sweeps: the same workload simulated at several capacities and KV profiles, points in parallel.

A sweep is the product of its axes (``pages`` — a count or ``unbounded`` —, ``hbm`` bytes, ``profile``,
``host`` bytes); every point is
one independent simulation (`run_point`, a module-level function so that any executor can ship it). Points
run through a `concurrent.futures.Executor`: a local process pool by default, threads or in-process on
request, or a Dask cluster (``dask://HOST:PORT``, the ``cluster`` extra) through its Executor interface: one
code path. Profiles at a fixed HBM budget get their capacity from the store model's own capacity
resolution (automatic kv_capacity). Results come back in the axes' order whatever the completion order.
Every point carries the decision metrics (latency percentiles in virtual time, throughput) beside hit ratio,
evictions and Host traffic, so a sweep over HBM shows what capacity buys in TTFT.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import asdict, replace

from kvsim.kvmodel.store import PROFILES
from kvsim.sim.simulate.engine import SimConfig, simulate, unbounded_config
from kvsim.sim.simulate.latency import LATENCY_KEYS, THROUGHPUT_KEYS
from kvsim.sim.simulate.timing import Timing
from kvsim.sim.workloads.open import open_workload
from kvsim.sim.workloads.request import WorkloadInputError

AXES = ("pages", "hbm", "profile", "host")
UNBOUNDED = "unbounded"
STAT_KEYS = ("requests", "rejected", "hit_ratio", "reused_pages", "prompt_pages", "evictions", "checkpoints_evicted",
             "pages_freed", "host_evictions", "host_bytes_out", "host_bytes_in", "peak_pages", "capacity_pages",
             "page_bytes", "seconds", "events", "violations", "refusals", *LATENCY_KEYS, *THROUGHPUT_KEYS)

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """``123``, ``64G``, ``1.5T`` or ``512MiB`` (binary multiples) -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    num = t[: len(t) - len(unit)]
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"not a byte count: {text!r}") from None
    if value < 0:
        raise ValueError(f"negative byte count: {text!r}")
    return int(value * _UNITS[unit])


def parse_axis(text: str) -> tuple[str, list]:
    """``KEY=V1,V2,...`` -> (key, typed values)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in AXES or not values.strip():
        raise ValueError(f"a sweep axis is KEY=V1,V2,... with KEY one of {', '.join(AXES)}: {text!r}")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if key == "profile":
        bad = [v for v in items if v not in PROFILES]
        if bad:
            raise ValueError(f"unknown profile {bad[0]!r}; expected one of {', '.join(PROFILES)}")
        return key, items
    if key == "pages":
        if not all(v == UNBOUNDED or v.isdigit() for v in items):
            raise ValueError(f"pages values are page counts or {UNBOUNDED!r}: {text!r}")
        return key, [v if v == UNBOUNDED else int(v) for v in items]
    return key, [parse_bytes(v) for v in items]


def point_config(base: SimConfig, point: dict) -> SimConfig:
    """The configuration of one point: the base with the point's axes applied."""
    cfg = base
    if "pages" in point:  # an unbounded point is sized to its workload by run_point
        cfg = replace(cfg, pages=None if point["pages"] == UNBOUNDED else point["pages"], hbm_bytes=None)
    if "hbm" in point:
        cfg = replace(cfg, pages=None, hbm_bytes=point["hbm"])
    if "profile" in point:
        cfg = replace(cfg, profile=point["profile"])
    if "host" in point:
        cfg = replace(cfg, host_bytes=point["host"])
    return cfg


def point_text(point: dict) -> str:
    """A sweep point as the command line spells it: `profile=bf16 hbm=12884901888`."""
    return " ".join(f"{k}={v}" for k, v in point.items())


class PointError(Exception):
    """A sweep point failed (its message names the point); plain args, so it crosses process boundaries."""


class PointInputError(Exception):
    """A sweep point met a malformed workload: the message is the one ``path:line: reason`` line (exit 2);
    plain args, so it crosses process boundaries."""


def check_points(base: SimConfig, points: list[dict]) -> None:
    """Resolve every point's capacity before running any (ValueError naming the first bad point)."""
    from kvsim.kvmodel.store import ConfigError, resolve_capacity
    from kvsim.sim.trace.config import store_config
    for p in points:
        if p.get("pages") == UNBOUNDED:
            continue  # sized to the workload, within the store's range by construction
        try:
            resolve_capacity(store_config(point_config(base, p).header("sweep").config))
        except ConfigError as exc:
            raise ValueError(f"sweep point {point_text(p)}: unsupported config: {exc}") from None


def run_point(workload: str, requests: int | None, config: dict, point: dict) -> dict:
    """One sweep point, self-contained (picklable arguments, plain-dict result)."""
    cfg = point_config(SimConfig(**{**config, "timing": Timing(**config["timing"])}), point)
    try:
        if point.get("pages") == UNBOUNDED:
            cfg = unbounded_config(cfg, open_workload(workload, requests))
        res = simulate(open_workload(workload, requests), cfg, source=workload)
    except WorkloadInputError as exc:
        raise PointInputError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - re-raised with plain, picklable args
        raise PointError(f"sweep point {point_text(point)}: {type(exc).__name__}: {exc}") from None
    return {"point": point, **{k: res.stats[k] for k in STAT_KEYS}}


def sweep_points(axes: list[tuple[str, list]]) -> list[dict]:
    """The product of the axes, first axis outermost."""
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


class _Serial(Executor):
    """Runs each call at submit (no workers)."""

    def submit(self, fn, /, *args, **kwargs):
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            f.set_exception(exc)
        return f


def quiet_worker() -> None:
    """A worker process leaves interruptions to its parent: Ctrl-C (which reaches the whole process group)
    and SIGTERM end it at once, without a traceback; the parent says what was interrupted."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def make_executor(spec: str, workers: int) -> tuple[Executor, Callable[[], object] | None]:
    """(executor, close): ``process`` | ``thread`` | ``serial`` | ``dask://HOST:PORT`` (a client of a
    running cluster; closing it leaves the cluster running)."""
    if spec == "process":
        procs = ProcessPoolExecutor(max_workers=workers, initializer=quiet_worker)
        return procs, procs.shutdown
    if spec == "thread":
        threads = ThreadPoolExecutor(max_workers=workers)
        return threads, threads.shutdown
    if spec == "serial":
        return _Serial(), None
    if spec.startswith("dask://"):
        try:
            from distributed import Client
        except ImportError:
            raise ValueError("--executor dask://... needs dask.distributed (pip install 'kvsim[cluster]')") from None
        client = Client("tcp://" + spec[len("dask://"):], timeout="10s")
        return client.get_executor(pure=False), client.close
    raise ValueError(f"unknown executor {spec!r}: process, thread, serial or dask://HOST:PORT")


def run_sweep(workload: str, requests: int | None, base: SimConfig, axes: list[tuple[str, list]],
              executor: str = "process", workers: int = 2, progress=None) -> list[dict]:
    """Every point's statistics, in the order of `sweep_points(axes)`; `progress(row)` sees each point as it
    completes."""
    points = sweep_points(axes)
    check_points(base, points)
    config = asdict(base)
    ex, close = make_executor(executor, workers)
    try:
        futures = {ex.submit(run_point, workload, requests, config, p): i for i, p in enumerate(points)}
        rows: list = [None] * len(points)
        for f in as_completed(futures):
            rows[futures[f]] = row = f.result()
            if progress is not None:
                progress(row)
        return rows
    finally:
        if close is not None:
            close()
