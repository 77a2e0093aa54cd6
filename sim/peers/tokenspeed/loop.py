"""The run loop: driving the released TokenSpeed scheduler with a workload, every plan judged as it happens.

The loop (research on the 0.1.42 wheel): submit every request, then repeatedly take the next execution plan,
answer its forward batch with synthetic results (``[]`` for an intermediate prefill chunk, one token for
the final chunk and for each decode, ``Finish`` with the request's last token), acknowledge each cache op
with its done event, ``advance`` and drain the KV events -- until nothing waits, prefills, decodes or is
retracted. Every plan becomes cachetrace/1 records (``sim.trace.cachetrace``, through ``translate``), judged as
it happens by ``sim.peers.cachetrace.contract`` and ``sim.peers.judges.events``; optionally written to a file.

Three clocks are kept apart: time inside scheduler calls, time spent observing (reading the plan out of the
binding, building answers, recording) and time spent judging. The judge must cost no more than the scheduler.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import numpy as np

from kvsim.sim.peers.cachetrace.contract import Contract
from kvsim.sim.peers.cachetrace.judge import folds_groups
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.tokenspeed import faults
from kvsim.sim.peers.tokenspeed.config import GROUP, PLAN_US, RunConfig, header, scheduler_config
from kvsim.sim.peers.tokenspeed.object_store import ObjectStore
from kvsim.sim.peers.tokenspeed.translate import cache_ops, done_event, kv_event, output_token
from kvsim.sim.peers.tokenspeed.wheel import EngineFailure, Guarded, engine, engine_stdout_to_stderr
from kvsim.sim.peers.workload import Request
from kvsim.sim.trace import cachetrace as ct

__all__ = ["RunOutcome", "run"]


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
    interrupted: str | None = None  # a signal stopped the run: what was judged ("N plans, M of K requests finished")


def run(requests: list[Request], cfg: RunConfig, record: str | None = None, meta: dict | None = None,
        max_plans: int | None = None, events_log: str | None = None, progress=None) -> RunOutcome:
    """Drive the scheduler through ``requests``; judge every plan; optionally record cachetrace/1 and write
    the KV events as a subscriber log (object-form batches ``{"ts": plan, "events": [...]}``).
    ``progress(n)`` hears of the n requests each plan finished. A signal (KeyboardInterrupt) stops the run
    between two calls: the plans judged so far are kept, ``interrupted`` says how far it got, and the end-of-run
    checks (what is owed after the last plan) are not made -- the run did not end."""
    with engine_stdout_to_stderr():
        return _run(requests, cfg, record, meta, max_plans, events_log, progress)


def _run(requests: list[Request], cfg: RunConfig, record: str | None, meta: dict | None, max_plans: int | None,
         events_log: str | None, progress) -> RunOutcome:
    import msgspec
    ts = engine()

    clock = time.perf_counter
    hdr = header(cfg, meta)
    conf = scheduler_config(cfg)
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
    sched = Guarded(ts.Scheduler(conf))
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
    pinned = [0, 0]  # internal state checkpoints the previous plan and this one materialized (PEER-9)
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
                if drain and not last_ops:  # ended drained: the pool's counters must account for every parent
                    t0 = clock()
                    contract.counters(counters.check(counters.read(sched), usable, snapshot_usable, drained=True),
                                      line)
                    out.judge_s += clock() - t0
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
            cache = [c for op in ops for c in cache_ops(op)]
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
                    tok = output_token(rid, n)
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
                    event.add_event(done_event(kind, oid))
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
            pinned = [pinned[1], sum(1 for x in ckpt if x)]
            contract.counters(counters.check(counters.read(sched), usable, snapshot_usable, cfg.host_pages > 0,
                                             sum(pinned)), line)
            t6b = clock()
            out.judge_s += t6b - t6
            t6 = t6b
            if drained:
                kv = ct.KvEvents(plan_no, [kv_event(e) for e in drained])
                if fault is not None:
                    kv = fault.kv(kv)
                line += 1
                if writer:
                    writer.write(kv)
                if elog:
                    elog.write(enc.encode({"ts": plan_no, "events": kv.events}) + b"\n")
                t7 = clock()
                events.batch(kv.events, line)
                contract.kv(kv, line)
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
    except KeyboardInterrupt:  # a signal: what was judged is kept (the caller writes it, marked partial)
        finished = sum(1 for r in budget if produced.get(r, 0) >= budget[r])
        out.interrupted = f"{plan_no:,} plans, {finished} of {len(requests)} requests finished"
    except EngineFailure as exc:  # PEER-10: the run stops where the scheduler failed
        err = ct.EngineError(plan_no, exc.call, exc.message)
        line += 1
        if writer:
            writer.write(err)
        contract.engine_error(err, line)
        out.engine_error = f"{exc.call} after plan {plan_no}: {exc.message}"

    if fault is not None:
        out.fault_applied = fault.fired
    if out.interrupted is None:  # no end-of-run checks when a signal cut the run short
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
