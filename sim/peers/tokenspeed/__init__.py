"""Driving the released TokenSpeed scheduler (PyPI ``tokenspeed-scheduler``, extra ``peers``) with a workload.

The loop (research on the 0.1.42 wheel): submit every request, then repeatedly take the next execution plan,
answer its forward batch with synthetic results (``[]`` for an intermediate prefill chunk, one token for
the final chunk and for each decode, ``Finish`` with the request's last token), acknowledge each cache op
with its done event, ``advance`` and drain the KV events -- until nothing waits, prefills, decodes or is
retracted. Every plan becomes cachetrace/1 records (``sim.trace.cachetrace``), judged as it happens by
``sim.peers.cachetrace.contract`` and ``sim.peers.judges.events``; optionally written to a file.

Three clocks are kept apart: time inside scheduler calls, time spent observing (reading the plan out of the
binding, building answers, recording) and time spent judging. The judge must cost no more than the scheduler.
This module is the only one that imports ``tokenspeed_scheduler`` (through ``_engine``). The wheel logs
through spdlog to the process's standard output (one info line per retraction and restore, with a wall-clock
stamp): it is imported at level ``warn`` unless ``SPDLOG_LEVEL`` says otherwise, and while it runs, file
descriptor 1 points at standard error, so kvsim's own output stays one finding per line and the same bytes
for the same run.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from kvsim.sim.peers.cachetrace.contract import Contract
from kvsim.sim.peers.cachetrace.judge import folds_groups
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.tokenspeed import faults
from kvsim.sim.peers.tokenspeed.object_store import ObjectStore
from kvsim.sim.peers.workload import VOCAB, Request
from kvsim.sim.trace import cachetrace as ct

__all__ = ["available", "version", "RunConfig", "RunOutcome", "unbounded_pages", "run"]

GROUP = "full"
SWA = "swa"
STATE = "state"


def _engine():
    """The wheel's module, imported with its logger at ``warn`` unless the user set ``SPDLOG_LEVEL`` (the
    extension reads it once, when it loads)."""
    os.environ.setdefault("SPDLOG_LEVEL", "warn")
    import tokenspeed_scheduler
    return tokenspeed_scheduler


def available() -> bool:
    try:
        _engine()
    except ImportError:
        return False
    return True


class EngineFailure(Exception):
    """A call into the scheduler raised ``RuntimeError`` (its own invariant check): a finding about the
    scheduler (PEER-10), never kvsim's own error."""

    def __init__(self, call: str, message: str) -> None:
        super().__init__(f"{call}: {message}")
        self.call, self.message = call, " ".join(message.split())


# what the wheel raises from its own code (C++ exceptions as pybind11 translates them, an assert of its Python
# layer); TypeError (a call kvsim made wrong) and ValueError (a request refused at submission) are not among them
ENGINE_EXCEPTIONS = (RuntimeError, IndexError, KeyError, OverflowError, ArithmeticError, AssertionError, SystemError,
                     MemoryError)


class _Guarded:
    """The scheduler object, each method call turning what the wheel raises from its own code
    (``ENGINE_EXCEPTIONS``) into ``EngineFailure`` (``ValueError`` -- a request the scheduler refuses at
    submission -- and ``TypeError`` -- kvsim's own wrong call -- pass through)."""

    def __init__(self, sched) -> None:
        self._sched = sched

    def __getattr__(self, name: str):
        fn = getattr(self._sched, name)

        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except ENGINE_EXCEPTIONS as exc:
                kind = "" if type(exc) is RuntimeError else f"{type(exc).__name__}: "
                raise EngineFailure(name, kind + str(exc)) from None
        return call


@contextlib.contextmanager
def engine_stdout_to_stderr() -> Iterator[None]:
    """While the wheel runs, what it writes to file descriptor 1 goes to standard error."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no standard output at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v
    try:
        return v("tokenspeed-scheduler")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class RunConfig:
    pages: int                       # num_device_pages, the null page 0 included
    prefix_granularity: int = 64
    max_batch_size: int = 256
    max_scheduled_tokens: int = 8192
    max_idle_plans: int = 64         # consecutive plans with nothing scheduled before the run counts as stalled
    host_pages: int = 0              # Host (L2) pages; 0 disables the L2 tier and its write-back / load-back ops
    swa_window: int | None = None    # add a sliding-window group "swa" (window in tokens) beside "full"
    stagger: int = 0                 # submit request i before plan i*stagger (0: each before the plan its
                                     # arrival_step names, at once on an idle scheduler -- all before the first
                                     # plan for a Mooncake file;
                                     # -1: one at a time, each once the scheduler is idle)
    swa_replayable: bool = False     # the sliding-window group is replayable (re-fed, never cached)
    ack_delay: int = 0               # hold each cache op's acknowledgement for 0..ack_delay plans (seeded)
    seed: int = 0                    # the ack-delay draws
    snapshot_pages: int = 1          # num_snapshot_pages (1: no snapshot pool, retraction off)
    max_retracted: int = 0           # max_retracted_requests (> 0 needs snapshot_pages > 1)
    force_retraction: int = 0        # debug_force_retraction_interval: retract a decode every N plans (0: off)
    clear_every: int = 0             # request ClearCache after every N-th answer (0: never)
    fault: str | None = None         # inject one named fault into the recorded plans (sim.peers.tokenspeed.faults)
    block_granularity: int | None = None  # tokens per block of every group (None: prefix_granularity)
    l3: bool = False                 # L3 storage below the Host tier, answered by an in-process object store
    l3_miss_rate: float = 0.0        # each L3 get key fails with this probability (seeded by `seed`)
    l3_host_blocks: int = 0          # Host pages L3 gets may hold at once (0: half the usable Host pages)
    l3_wait_plans: int = 0           # plans an L3 op may stay unanswered before the scheduler cancels it (0: never)
    state_group: bool = False        # add the wheel's State group "state" (AttnKind.State, block_granularity 0)
    state_checkpoints: bool = True   # state_checkpoint_in_forward: an extend may materialize an internal checkpoint


@dataclass
class RunOutcome:
    contract: Contract
    events: EventChecker
    plans: int = 0
    stalled: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # refused at submission (over capacity)
    sched_s: float = 0.0
    observe_s: float = 0.0
    judge_s: float = 0.0
    plan_costs_ms: list[float] = field(default_factory=list)
    clears: int = 0
    clears_accepted: int = 0
    l3: dict = field(default_factory=dict)  # the object store's counts (puts, queries, gets, misses)
    fault_applied: bool | None = None  # whether the injected fault found its premise (None: no fault asked)
    engine_error: str | None = None    # the call the scheduler failed, and how (PEER-10); the run stopped there
    paths: dict[str, int] = field(default_factory=dict)  # engine paths taken (sim.peers.tokenspeed.paths)


def unbounded_pages(requests: list[Request], p: int, groups: int = 1) -> int:
    """A pool that never evicts: every request's prompt and output pages and a tail copy, in every group (the
    groups share one pool of parents), and the null page. ``p`` is the tokens per block."""
    return 1 + groups * sum(-(-(len(r.tokens) + r.max_new_tokens) // p) + 2 for r in requests)


PLAN_US = 1000  # the simulated clock an L3 tick carries: one plan is 1 ms (never the wall clock)


def _bg(cfg: RunConfig) -> int:
    return cfg.block_granularity or cfg.prefix_granularity


def _l3_host_blocks(cfg: RunConfig) -> int:
    return cfg.l3_host_blocks or max(1, (cfg.host_pages - 1) // 2)


def _storage_config(cfg: RunConfig):
    import tokenspeed_scheduler as ts
    wait = (cfg.l3_wait_plans or 1 << 30) * PLAN_US
    high = ts.StoragePressure(1 << 20, 1 << 50, 1 << 50)  # the driver's store never pushes back
    low = ts.StoragePressure(0, 0, 0)
    return ts.StorageConfig(max_operations=64, max_keys_per_operation=4096, max_host_blocks=_l3_host_blocks(cfg),
                            metadata_entries=max(4096, 4 * cfg.host_pages),
                            max_prefetch_tokens=cfg.max_scheduled_tokens, min_prefetch_tokens=cfg.prefix_granularity,
                            wait_timeout_us=wait, ready_timeout_us=wait,
                            pressure_high=high, pressure_low=low)


def _config(cfg: RunConfig):
    ts = _engine()
    c = ts.SchedulerConfig()
    c.prefix_granularity = cfg.prefix_granularity
    bg = _bg(cfg)
    c.cache_groups = [ts.CacheGroupConfig(GROUP, bg, cfg.pages, ts.AttnKind.Full)]
    if cfg.swa_window is not None:
        swa = ts.CacheGroupConfig(SWA, bg, cfg.pages, ts.AttnKind.SlidingWindow, cfg.swa_window)
        swa.replayable = cfg.swa_replayable
        c.cache_groups = c.cache_groups + [swa]
        if cfg.swa_replayable:  # "the window the scheduler re-feeds is the retention window itself"
            c.prefix_replay_tokens = cfg.swa_window
    if cfg.state_group:  # the wheel's snapshot-state group: it declares block_granularity 0 (a compact row)
        c.cache_groups = c.cache_groups + [ts.CacheGroupConfig(STATE, 0, cfg.pages, ts.AttnKind.State)]
        c.state_checkpoint_in_forward = cfg.state_checkpoints
    c.num_device_pages = cfg.pages
    c.num_host_pages = cfg.host_pages
    c.disable_l2_cache = cfg.host_pages == 0
    c.max_batch_size = cfg.max_batch_size
    c.max_scheduled_tokens = cfg.max_scheduled_tokens
    c.enable_mixed_prefill_decode = True
    c.enable_kv_cache_events = True
    c.num_snapshot_pages = cfg.snapshot_pages  # 0 is refused; 1 (the null page alone) disables retraction
    c.max_retracted_requests = cfg.max_retracted
    c.debug_force_retraction_interval = cfg.force_retraction
    if cfg.l3:
        c.enable_l3_storage = True
        c.storage_config = _storage_config(cfg)
    return c


def header(cfg: RunConfig, meta: dict | None = None) -> ct.Header:
    return ct.Header(format=ct.FORMAT, config=ct.Config(
        scheduler=f"tokenspeed-scheduler {version()}", prefix_granularity=cfg.prefix_granularity,
        groups=[ct.Group(GROUP, _bg(cfg), cfg.pages, "full")] + (
            [ct.Group(SWA, _bg(cfg), cfg.pages, "sliding", cfg.swa_window,
                      replayable=cfg.swa_replayable)]
            if cfg.swa_window is not None else []) + (
            [ct.Group(STATE, 0, cfg.pages, "mamba")] if cfg.state_group else []), num_device_pages=cfg.pages,
        num_host_pages=cfg.host_pages, num_snapshot_pages=cfg.snapshot_pages,
        max_retracted_requests=cfg.max_retracted,
        max_batch_size=cfg.max_batch_size, max_scheduled_tokens=cfg.max_scheduled_tokens,
        enable_l3_storage=cfg.l3), meta={**(meta or {}), **(
            {"state_checkpoint_in_forward": cfg.state_checkpoints} if cfg.state_group else {})})


def _token(rid: str, pos: int) -> int:
    """A synthetic output token, deterministic in (request, position)."""
    return zlib.crc32(f"{rid}:{pos}".encode()) % VOCAB


def _kv_event(e) -> ct.KvEvent:
    kind = e.kind
    if kind == "BlockStored":
        return ct.BlockStored(list(e.block_hashes), e.parent_block_hash, list(e.token_ids), e.block_size)
    if kind == "BlockRemoved":
        return ct.BlockRemoved(list(e.block_hashes))
    return ct.AllBlocksCleared()


_TIERS: dict[int, Literal["L2", "snapshot"]] = {0: "L2", 1: "snapshot"}


def _per_id(op, name: str, n: int) -> list:
    v = getattr(op, name, None)
    return list(v) if v is not None and len(v) else [None] * n


def _cache_ops(op) -> list[ct.CacheOp]:
    """One record per op id with every field the wheel's op carries: a batched op holds, per id, its lists
    of source and destination pages, their groups, content hashes and page offsets, and (write-back) whether
    its Device sources are pinned, (snapshot / restore) the request, its pool index, the snapshot slot and
    each source's tier, (L3) the Host blocks and object keys."""
    kind = type(op).__name__
    if kind == "StorageCancelOp":  # its id is the op it cancels, which is still answered once
        return [ct.CacheOp(kind, [], cancels=int(op.op_id))]
    if kind.startswith("Storage"):
        keys = [tuple(k) for k in op.keys]  # CacheKey: (group index, content hash, page offset)
        return [ct.CacheOp(kind, [int(op.op_id)], groups=[int(k[0]) for k in keys], keys=[str(k[1]) for k in keys],
                           offsets=[int(k[2]) for k in keys],
                           host_blocks=[int(x) for x in getattr(op, "host_blocks", [])])]
    ids = [int(x) for x in op.op_ids]
    n = len(ids)
    src, dst = _per_id(op, "src_pages", n), _per_id(op, "dst_pages", n)
    grp, keys, offs = _per_id(op, "group_ids", n), _per_id(op, "content_hashes", n), _per_id(op, "page_offsets", n)
    pinned, reqs = _per_id(op, "source_pinned", n), _per_id(op, "request_ids", n)
    pool, slots, tiers = _per_id(op, "request_pool_indices", n), _per_id(op, "snapshot_slots", n), \
        _per_id(op, "source_tiers", n)
    out = []
    for k, oid in enumerate(ids):
        s, d = list(src[k] or []), list(dst[k] or [])
        out.append(ct.CacheOp(
            kind, [oid], [(int(a), int(b)) for a, b in zip(s, d, strict=False)],
            groups=[int(x) for x in grp[k]] if grp[k] is not None else [],
            keys=[str(x) for x in keys[k]] if keys[k] is not None else [],
            offsets=[int(x) for x in offs[k]] if offs[k] is not None else [],
            pinned=bool(pinned[k]) if pinned[k] is not None else None,
            request=str(reqs[k]) if reqs[k] is not None else None,
            pool_index=int(pool[k]) if pool[k] is not None else None,
            slot=int(slots[k]) if slots[k] is not None else None,
            tiers=[_TIERS.get(int(x), "L2") for x in tiers[k]] if tiers[k] is not None else []))
    return out


def _done_event(kind: str, oid: int):
    ts = _engine()
    name = kind.removesuffix("Op") + "DoneEvent"
    cls = getattr(ts.Cache, name)
    if name == "LoadBackDoneEvent":
        return cls(oid)
    ev = cls()
    ev.op_id = oid
    if hasattr(ev, "success"):
        ev.success = True
    return ev


def run(requests: list[Request], cfg: RunConfig, record: str | None = None, meta: dict | None = None,
        max_plans: int | None = None, events_log: str | None = None, progress=None) -> RunOutcome:
    """Drive the scheduler through ``requests``; judge every plan; optionally record cachetrace/1 and write
    the KV events as a subscriber log (object-form batches ``{"ts": plan, "events": [...]}``).
    ``progress(n)`` hears of the n requests each plan finished."""
    with engine_stdout_to_stderr():
        return _run(requests, cfg, record, meta, max_plans, events_log, progress)


def _run(requests: list[Request], cfg: RunConfig, record: str | None, meta: dict | None, max_plans: int | None,
         events_log: str | None, progress) -> RunOutcome:
    import msgspec
    ts = _engine()

    clock = time.perf_counter
    hdr = header(cfg, meta)
    conf = _config(cfg)
    # the CapacityModel the recipes size pools with (cache concepts L250): the bound the scheduler must refuse by
    hdr.config.max_single_request_tokens = int(ts.CapacityModel(conf).max_single_request_tokens(cfg.pages - 1))
    contract = Contract(hdr.config)
    # the wheel's events carry its own FNV-1a 64 chain (seed 002 L309 "a second, independent block-hash
    # implementation for external KV events"): EV-7 recomputes every one
    events = EventChecker(block_size=cfg.prefix_granularity, hash_scheme="fnv1a64", capacity=cfg.pages - 1,
                          partial_tails=True, folded_groups=folds_groups(hdr.config))
    out = RunOutcome(contract, events)
    writer = ct.CacheTraceWriter(record, hdr) if record else None
    elog = open(events_log, "wb") if events_log else None
    enc = msgspec.json.Encoder()
    line = 1

    t0 = clock()
    sched = _Guarded(ts.Scheduler(conf))
    out.sched_s += clock() - t0
    budget = {r.id: r.max_new_tokens for r in requests}
    produced: dict[str, int] = {}
    queue = list(requests)
    queue.reverse()

    fault = faults.get(cfg.fault, hdr.config) if cfg.fault else None
    from kvsim.sim.peers.tokenspeed import counters, paths
    out.paths = dict.fromkeys(paths.PATHS, 0)
    prompt = {r.id: len(r.tokens) for r in requests}
    first: set[str] = set()
    usable, snapshot_usable = cfg.pages - 1, (cfg.snapshot_pages - 1 if cfg.snapshot_pages > 1 else 0)

    def submit_due(plan_no: int) -> None:
        nonlocal line
        due = []
        if cfg.stagger < 0:
            if queue and not (sched.waiting_size() + sched.prefilling_size() + sched.decoding_size()
                              + sched.retracted_size()):
                due.append(queue.pop())
        while queue and (cfg.stagger == 0 and queue[-1].arrival_step <= plan_no
                         or cfg.stagger > 0 and (len(requests) - len(queue)) * cfg.stagger <= plan_no):
            due.append(queue.pop())
        if queue and not due and cfg.stagger == 0 and not (sched.waiting_size() + sched.prefilling_size()
                                                           + sched.decoding_size() + sched.retracted_size()):
            due.append(queue.pop())  # a workload's submission step (arrival_step) on an idle scheduler: now
        if not due:
            return
        t0 = clock()
        specs = []
        for r in due:
            spec = ts.RequestSpec()
            spec.request_id = r.id
            spec.tokens = r.tokens
            spec.max_new_tokens = r.max_new_tokens
            specs.append(spec)
        t1 = clock()
        refused: dict[str, str] = {}
        try:
            sched.submit_requests(specs)
        except ValueError:  # one request over the scheduler's capacity refuses the batch: submit one by one
            for r, spec in zip(due, specs, strict=True):
                try:
                    sched.submit_requests([spec])
                except ValueError as exc:
                    out.rejected.append((r.id, str(exc)))
                    refused[r.id] = " ".join(str(exc).split())
        t2 = clock()
        out.observe_s += t1 - t0
        out.sched_s += t2 - t1
        for r in due:
            # unrecorded, the judge reads the token array as it is (no list copy per request)
            rec = ct.Submit(r.id, r.tokens.tolist() if writer else r.tokens, r.max_new_tokens,  # type: ignore[arg-type]
                            refused.get(r.id))
            if fault is not None:  # it may perturb the record (before it is written and judged)
                fault.submit(rec)
            line += 1
            if writer:
                writer.write(rec)
            t3 = clock()
            contract.submit(rec, line)
            out.judge_s += clock() - t3

    last_rows: dict[str, bytes] = {}
    store = ObjectStore(cfg.l3_miss_rate, cfg.seed) if cfg.l3 else None
    l3_ops: dict[int, tuple[str, list, int]] = {}  # unanswered L3 op id -> (kind, object keys, plan issued)
    rng = random.Random(cfg.seed)
    held: dict[int, list[tuple[str, int]]] = {}  # plan whose answer acknowledges -> (op kind, op id)
    idle = 0
    plan_no = 0
    draining, last_ops = 0, False  # plans planned with nothing left to schedule; whether the last issued ops
    try:
        while True:
            submit_due(plan_no)
            t0 = clock()
            busy = sched.waiting_size() + sched.prefilling_size() + sched.decoding_size() + sched.retracted_size()
            if store is not None and not busy and not held:
                busy = sched.storage_pending()
            # nothing left to schedule: the scheduler may still hold stores it queued (seed 002 L187, "the queue is
            # drained by StartPendingStores"); plan on (at least once, at most max_idle_plans times) until a plan
            # schedules nothing and issues no cache op, so the trace ends drained
            drain = not busy and not queue and not held
            draining = draining + 1 if drain else 0
            if (drain and ((draining > 1 and not last_ops) or draining > cfg.max_idle_plans)) or \
                    (max_plans is not None and plan_no >= max_plans):
                out.sched_s += clock() - t0
                break
            plan = sched.next_execution_plan()
            t1 = clock()
            out.sched_s += t1 - t0
            cost = t1 - t0
            # -- observe ------------------------------------------------------------------------------------------
            ids: list[str] = []
            ext, inl, pfx, pre, replay, ckpt = 0, [], [], [], [], []
            tables: dict[str, dict[str, list[int]]] = {}
            for b in plan.forward:
                bids = list(b.request_ids)
                if not bids:
                    continue
                if ids:
                    raise RuntimeError("more than one non-empty forward batch in a plan")
                ids, ext = bids, b.num_extends()
                inl, pfx, pre = list(b.input_lengths), list(b.extend_prefix_lens), list(b.prefill_lengths)
                replay = list(getattr(b, "extend_replay_lens", []) or [])
                ckpt = [int(x) for x in getattr(b, "extend_state_checkpoint_lens", []) or []][:ext]
                arrays = b.block_tables_arrays()
                for g, arr in arrays.items():
                    rows = {}
                    for k, rid in enumerate(ids):
                        row = arr[k]
                        key = rid if g == GROUP else f"{g}\0{rid}"
                        raw = row.tobytes()
                        if last_rows.get(key) != raw:
                            last_rows[key] = raw
                            nz = np.flatnonzero(row != -1)
                            rows[rid] = row[: nz[-1] + 1].tolist() if len(nz) else []
                    if rows:
                        tables[g] = rows
            zero = {g: [int(x) for x in v] for g, v in plan.pages_to_zero_arrays().items() if len(v)}
            copy = {g: [(int(a), int(b)) for a, b in np.asarray(v).reshape(-1, 2)]
                    for g, v in plan.pages_to_copy_arrays().items() if len(v)}
            ops = list(plan.cache)
            l3_keys = {int(o.op_id): [tuple(k) for k in o.keys] for o in ops
                       if type(o).__name__ in ("StorageGetOp", "StoragePutOp", "StorageQueryOp")}
            cache = [c for op in ops for c in _cache_ops(op)]
            for c in cache:
                if c.kind == "SnapshotOp" and c.request is not None:  # retracted: its next row is a new one
                    for key in [k for k in last_rows if k == c.request or k.endswith("\0" + c.request)]:
                        del last_rows[key]
            aborts = [ct.Abort(a.request_id, str(a.reason)) for a in plan.aborts]
            gauge = [int(sched.empty_lcm_blocks()), int(sched.active_lcm_blocks())]  # L42's per-step page gauge
            batch = ct.Batch(ids, ext, inl, pfx, pre, [int(x) for x in replay[:ext]] if any(replay[:ext]) else [],
                             ckpt if any(ckpt) else [])
            rec = ct.Plan(plan_no, batch, tables, zero, copy, cache, aborts, gauge)
            if fault is not None:
                rec = fault.plan(rec)
            line += 1
            if writer:
                writer.write(rec)
            t2 = clock()
            contract.plan(rec, line)
            paths.count(out.paths, rec, prompt, first, cfg.prefix_granularity)
            t3 = clock()
            out.judge_s += t3 - t2
            # -- answer -------------------------------------------------------------------------------------------
            event = ts.ExecutionEvent()
            toks: list[list[int]] = []
            finish: list[str] = []
            for k, rid in enumerate(ids):
                er = ts.ForwardEvent.ExtendResult()
                er.request_id = rid
                if k < ext and pfx[k] + inl[k] < pre[k]:
                    er.tokens = []
                    toks.append([])
                else:
                    n = produced.get(rid, 0)
                    tok = _token(rid, n)
                    er.tokens = [tok]
                    toks.append([tok])
                    produced[rid] = n + 1
                event.add_event(er)
                if produced.get(rid, 0) >= budget[rid] and toks[-1]:
                    fin = ts.ForwardEvent.Finish()
                    fin.request_id = rid
                    event.add_event(fin)
                    finish.append(rid)
            for c in cache:
                if not c.op_ids:  # a cancel: the op it names is answered when its own answer is due
                    continue
                if c.kind.startswith("Storage"):
                    l3_ops[c.op_ids[0]] = (c.kind, l3_keys[c.op_ids[0]], plan_no)
                # each acknowledgement is held 0..ack_delay plans (seeded draws, op order)
                d = rng.randint(0, cfg.ack_delay) if cfg.ack_delay > 0 else 0
                held.setdefault(plan_no + d, []).append((c.kind, c.op_ids[0]))
            done = []
            outcomes = []
            for kind, oid in held.pop(plan_no, []):
                if kind.startswith("Storage"):  # the object store answers each key when the op completes
                    _, keys, _ = l3_ops.pop(oid)
                    ok = store.answer(kind, keys)  # type: ignore[union-attr]
                    event.add_event(ts.Cache.StorageDone(oid, [int(x) for x in ok], True, [0] * len(ok)))
                    outcomes.append(ct.StorageDone(oid, ok))
                else:
                    event.add_event(_done_event(kind, oid))
                    done.append(oid)
            if store is not None:  # the runtime's clock and queue, once per answer
                oldest = min((p for _, _, p in l3_ops.values()), default=plan_no + 1)
                event.add_event(ts.Cache.StorageTick((plan_no + 1) * PLAN_US, True, True, ts.StoragePressure(
                    len(l3_ops), 0, (plan_no + 1 - oldest) * PLAN_US)))
            for a in plan.aborts:
                last_rows.pop(a.request_id, None)
            for rid in finish:
                last_rows.pop(rid, None)
            if progress is not None:
                progress(len(finish))
            res = ct.Result(plan_no, toks, finish, done, storage=outcomes)
            if fault is not None:
                res = fault.result(res)
            line += 1
            if writer:
                writer.write(res)
            t4 = clock()
            contract.result(res, line)
            t5 = clock()
            out.judge_s += t5 - t4
            out.observe_s += (t2 - t1) + (t4 - t3)
            sched.advance(event)
            drained = sched.drain_kv_events()
            t6 = clock()
            out.sched_s += t6 - t5
            cost += t6 - t5
            out.plan_costs_ms.append(cost * 1e3)
            contract.counters(counters.check(counters.read(sched), usable, snapshot_usable, cfg.host_pages > 0), line)
            t6b = clock()
            out.judge_s += t6b - t6
            t6 = t6b
            if drained:
                kv = ct.KvEvents(plan_no, [_kv_event(e) for e in drained])
                if fault is not None:
                    kv = fault.kv(kv)
                line += 1
                if writer:
                    writer.write(kv)
                if elog:
                    elog.write(enc.encode({"ts": plan_no, "events": kv.events}) + b"\n")
                t7 = clock()
                events.batch(kv.events, line)
                paths.count_events(out.paths, kv.events)
                t8 = clock()
                out.judge_s += t8 - t7
                out.observe_s += t7 - t6
            else:
                out.observe_s += clock() - t6
            if cfg.clear_every and (plan_no + 1) % cfg.clear_every == 0:
                t6 = clock()
                accepted = bool(sched.clear_cache())
                out.sched_s += clock() - t6
                clr = ct.Clear(plan_no, accepted)
                if fault is not None:
                    clr = fault.clear(clr)
                line += 1
                if writer:
                    writer.write(clr)
                t7 = clock()
                contract.clear(clr, line)
                out.judge_s += clock() - t7
                out.clears += 1
                out.clears_accepted += accepted
                out.paths["clear_cache"] += accepted
            plan_no += 1
            last_ops = bool(ops)
            idle = 0 if ids or ops else idle + 1
            if idle >= cfg.max_idle_plans:
                refused = {rid for rid, _ in out.rejected}
                short = {r for r in produced if produced[r] < budget[r]}
                out.stalled = sorted((set(budget) - set(produced) - refused) | short)
                break
    except EngineFailure as exc:  # PEER-10: the run stops where the scheduler failed
        err = ct.EngineError(plan_no, exc.call, exc.message)
        line += 1
        if writer:
            writer.write(err)
        contract.engine_error(err, line)
        out.engine_error = f"{exc.call} after plan {plan_no}: {exc.message}"

    if fault is not None:
        out.fault_applied = fault.fired
    t0 = clock()
    contract.finish(line)
    out.judge_s += clock() - t0
    out.plans = plan_no
    if store is not None:  # the object store's counts, and the scheduler's own (backup keys it dropped, ...)
        st = sched.storage_stats()
        out.l3 = {**store.stats, "scheduler": {k: getattr(st, k) for k in sorted(dir(st)) if not k.startswith("_")}}
    if writer:
        writer.close()
    if elog:
        elog.close()
    return out
