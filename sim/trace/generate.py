"""A deterministic workload generator: kvtrace/1 traces of any length, legal or with one engine fault.

One seed drives everything (research/style.md §4: seed -> one PRNG -> sub-seeds; the fault model is data):
`options_for` turns (events, seed, fault) into a `GenOptions` record — the configuration the fault needs
(Host arena, MTP backend, kv_lease_growth) and, drawn from the seed, where the fault lands — and the header's
`meta` logs every option. The workload is a small engine loop over C lanes: activate (sometimes from a
retained checkpoint, Fork or Move), map and prefill the prompt in one chunk, then decode rounds where one
unit carries every decoding lane (both pools under MTP), mapping a page only when a lane crosses a page
boundary; lanes finish, sometimes retaining a checkpoint, and old checkpoints are released. Every event of
the workload is legal under the store contract, so replaying it reports no violation. With a fault
(`sim.trace.faults`), one episode holding exactly one bad event is written at the first round boundary
after `fault_after` events; `generate` returns where it landed.
This module knows the trace format and the contract's arithmetic, not the model's internals.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from kvsim.kvmodel.store.config import PAGE_SIZE as P
from kvsim.kvmodel.store.errors import InvariantError
from kvsim.sim.trace import records as kt
from kvsim.sim.trace.faults import FAULTS, MTP_DRAFT_WINDOW, Episode
from kvsim.sim.trace.stream import TraceWriter

HOST_PAGE_BYTES = 131072  # the largest closed profile's page (bf16, 2 KV heads at D = 256, one layer)

@dataclass(frozen=True)
class GenOptions:
    """Everything a generated trace depends on; logged in the header's meta."""

    events: int  # at least this many events are written
    seed: int = 0  # the background workload's PRNG
    max_context: int = 4096
    concurrency: int = 8
    profile: str = "bf16"
    backend: str = "off"  # "off" | "mtp" (draft window MTP_DRAFT_WINDOW; every unit writes both pools)
    growth: bool = False  # kv_lease_growth on (window 4096, cushion 2: no rung is ever needed at S <= 4096)
    host_pages: int = 0  # Host arena size in pages of HOST_PAGE_BYTES
    fault: str | None = None  # a name in sim.trace.faults.FAULTS
    fault_after: int = 0  # the episode starts at the first round boundary after this many events


@dataclass(frozen=True)
class Generated:
    """What `generate` wrote: the event count and, with a fault, its rule and the bad event's index."""

    events: int
    fault: str | None = None
    rule: str | None = None
    event: int | None = None

    @property
    def line(self) -> int | None:
        return None if self.event is None else self.event + 2


def options_for(events: int, seed: int = 0, fault: str | None = None, **overrides) -> GenOptions:
    """The options one seed chooses: the fault's configuration needs and the fault's position."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(sorted(FAULTS))}")
    needs = FAULTS[fault].needs if fault else frozenset()
    rng = random.Random(seed ^ 0x5EED_FA17)  # the fault's sub-seed; the workload keeps `seed` itself
    fields: dict[str, Any] = dict(events=events, seed=seed, fault=fault,
                  backend="mtp" if "mtp" in needs else "off", growth="growth" in needs,
                  host_pages=16 if "host" in needs else 0,
                  fault_after=rng.randrange(events // 4, events // 2 + 1) if fault else 0)
    fields.update(overrides)
    opts = GenOptions(**fields)
    if fault is not None and (opts.max_context < 2048 or opts.concurrency < 4):
        raise ValueError("a fault episode needs max_context >= 2048 and concurrency >= 4")
    return opts


def default_header(max_context: int = 4096, concurrency: int = 8, profile: str = "bf16",
                   source: str = "kvsim workload", backend: str = "off", growth: bool = False, host_pages: int = 0,
                   meta: dict | None = None) -> kt.Header:
    return kt.Header(format="kvtrace/1", config=kt.Config(
        max_context=max_context, max_concurrency=concurrency, page_size=P, kv_profile=profile,  # type: ignore[arg-type]  # a PROFILES name
        backend=kt.BackendMTP(draft_window=MTP_DRAFT_WINDOW) if backend == "mtp" else kt.BackendOff(),
        model=kt.Model(full_attention_layers=1, kv_heads=2, head_dim=256),
        host_arena_bytes=host_pages * HOST_PAGE_BYTES,
        kv_lease_growth=kt.KVLeaseGrowth() if growth else None),
        meta={"source": source, **(meta or {})})


def _pages(tokens: int) -> int:
    return -(-tokens // P)


class _Lane:
    __slots__ = ("seq", "frontier", "target", "mapped", "prompt")

    def __init__(self, seq, frontier, prompt, target) -> None:
        self.seq, self.frontier, self.prompt, self.target = seq, frontier, prompt, target
        self.mapped = 0


def generate(target, events: int, seed: int = 0, max_context: int = 4096, concurrency: int = 8,
             profile: str = "bf16", fault: str | None = None) -> int:
    """Write a trace of at least `events` events to `target`; returns the number written."""
    opts = options_for(events, seed, fault, max_context=max_context, concurrency=concurrency, profile=profile)
    return generate_with(target, opts).events


def generate_with(target, opts: GenOptions) -> Generated:
    """Write the trace `opts` describes to `target` (a path or a binary stream)."""
    fault = FAULTS[opts.fault] if opts.fault else None
    S, C = opts.max_context, opts.concurrency
    if fault is not None and (S < 2048 or C < 4):
        raise InvariantError("a fault episode needs max_context >= 2048 and concurrency >= 4",
                             f"{fault.name} at S = {S}, C = {C} (options_for refuses it)")
    rng = random.Random(opts.seed)
    source = f"kvsim workload seed={opts.seed}" + (f" fault={opts.fault}" if fault else "")
    header = default_header(S, C, opts.profile, source, opts.backend, opts.growth, opts.host_pages,
                            meta={"options": asdict(opts)})
    pools: tuple[kt.Pool, ...] = ("main", "mtp") if opts.backend == "mtp" else ("main",)
    # Capacity is M_max = C·L. Legal: at most C - 2 lanes (each entitled to <= L pages) and two retained
    # checkpoints (<= L pages each), so nothing is ever refused. With a fault one lane and one checkpoint
    # fewer leave 2·L pages and three rows for the episode (see sim.trace.faults on its page ids).
    lanes_max = max(1, C - (3 if fault else 2))
    ckpt_max = 1 if fault else C - lanes_max
    lanes: dict[str, _Lane] = {}
    ckpts: list[tuple[str, int]] = []
    n_seq = n_unit = n_ckpt = 0
    injected: Episode | None = None
    with TraceWriter(target, header, validate=False) as w:
        def put(ev) -> int:
            w.write(ev)
            return w.events - 1

        def inject() -> Episode:
            if fault is None:
                raise InvariantError("inject runs with a fault", "generate_with called it without one")
            ep = Episode(put, pools, C * _pages(S), S)
            fault.episode(ep)
            if ep.bad_event is None:
                raise InvariantError("a fault episode writes its bad event", f"fault {fault.name} wrote none")
            return ep

        while w.events < opts.events:
            while len(lanes) < lanes_max:
                seq = f"s{n_seq}"
                n_seq += 1
                prompt = rng.randrange(1, S // 2)
                budget = rng.randrange(1, S - prompt + 1)
                src: str | None = None
                keep = True
                frontier = 0
                if ckpts and rng.random() < 0.3:
                    cid, cf = ckpts[rng.randrange(len(ckpts))]
                    if cf <= prompt:
                        src, frontier = cid, cf
                        keep = rng.random() < 0.7
                        if not keep:
                            ckpts.remove((cid, cf))
                put(kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=src, keep_source=keep))
                lane = _Lane(seq, frontier, prompt, min(S, prompt + budget))
                lane.mapped = _pages(frontier) * P
                lanes[seq] = lane
                # prefill the rest of the prompt in one chunk
                if lane.frontier < prompt:
                    if _pages(prompt) * P > lane.mapped:
                        for pool in pools:
                            put(kt.Map(seq=seq, pool=pool, tokens=prompt))
                        lane.mapped = _pages(prompt) * P
                    unit = f"u{n_unit}"
                    n_unit += 1
                    put(kt.Launch(unit=unit, rows=tuple(kt.LaunchRow(seq=seq, pool=pool, write=(lane.frontier, prompt))
                                                        for pool in pools)))
                    put(kt.Complete(unit=unit, commit=tuple(kt.CommitRow(seq=seq, pool=pool, frontier=prompt)
                                                            for pool in pools)))
                    lane.frontier = prompt
            # one decode round over every lane
            rows, commits = [], []
            for lane in lanes.values():
                if lane.frontier + 1 > lane.mapped:
                    for pool in pools:
                        put(kt.Map(seq=lane.seq, pool=pool, tokens=lane.frontier + 1))
                    lane.mapped += P
                for pool in pools:
                    rows.append(kt.LaunchRow(seq=lane.seq, pool=pool, write=(lane.frontier, lane.frontier + 1)))
                    commits.append(kt.CommitRow(seq=lane.seq, pool=pool, frontier=lane.frontier + 1))
            unit = f"u{n_unit}"
            n_unit += 1
            put(kt.Launch(unit=unit, rows=tuple(rows)))
            put(kt.Complete(unit=unit, commit=tuple(commits)))
            for lane in list(lanes.values()):
                lane.frontier += 1
                if lane.frontier >= lane.target or rng.random() < 0.002:
                    retain = None
                    if rng.random() < 0.5:
                        retain = f"c{n_ckpt}"
                        n_ckpt += 1
                        ckpts.append((retain, lane.frontier))
                    put(kt.Finish(seq=lane.seq, retain=retain))
                    del lanes[lane.seq]
            while len(ckpts) > ckpt_max or (ckpts and rng.random() < 0.01):
                cid, _ = ckpts.pop(0)
                put(kt.Release(ckpt=cid))
            if fault is not None and injected is None and w.events >= opts.fault_after:
                injected = inject()
        if fault is not None and injected is None:
            injected = inject()
        total = w.events
    if fault is None:
        return Generated(total)
    if injected is None or injected.bad_event is None:
        raise InvariantError("a fault episode writes its bad event", f"fault {fault.name} wrote none")
    return Generated(total, fault.name, fault.rule, injected.bad_event)
