"""A deterministic legal workload generator: kvtrace/1 traces of any length for benchmarks and tests.

One seeded PRNG drives a small engine loop over C lanes: activate (sometimes from a retained
checkpoint, Fork or Move), map and prefill the prompt in chunks, then decode rounds where one unit
carries every decoding lane, mapping a page only when a lane crosses a page boundary; lanes finish,
sometimes retaining a checkpoint, and old checkpoints are released. Every event it writes is legal under
the store contract, so replaying the trace must report no violation.
This module knows the trace format and the contract's arithmetic, not the model's internals.
"""

from __future__ import annotations

import random

from kvsim.kvmodel.store.config import PAGE_SIZE as P
from kvsim.sim.trace import records as kt
from kvsim.sim.trace.stream import TraceWriter


def default_header(max_context=4096, concurrency=8, profile="bf16", source="kvsim workload") -> kt.Header:
    return kt.Header(format="kvtrace/1", config=kt.Config(
        max_context=max_context, max_concurrency=concurrency, page_size=P, kv_profile=profile,
        backend=kt.BackendOff(), model=kt.Model(full_attention_layers=1, kv_heads=2, head_dim=256)),
        meta={"source": source})


def _pages(tokens: int) -> int:
    return -(-tokens // P)


class _Lane:
    __slots__ = ("seq", "frontier", "target", "mapped", "prompt")

    def __init__(self, seq, frontier, prompt, target):
        self.seq, self.frontier, self.prompt, self.target = seq, frontier, prompt, target
        self.mapped = 0


def generate(target, events: int, seed: int = 0, max_context: int = 4096, concurrency: int = 8,
             profile: str = "bf16") -> int:
    """Write a legal trace of at least `events` events to `target`; returns the number written."""
    rng = random.Random(seed)
    header = default_header(max_context, concurrency, profile, f"kvsim workload seed={seed}")
    # Capacity is M_max = C·L: with at most C - 2 lanes (each entitled to <= L pages) and at most two
    # retained checkpoints (each <= L pages), every activation fits, so nothing is ever refused.
    lanes_max = max(1, concurrency - 2)
    ckpt_max = concurrency - lanes_max
    lanes: dict[str, _Lane] = {}
    ckpts: list[tuple[str, int]] = []
    n_seq = n_unit = n_ckpt = 0
    with TraceWriter(target, header, validate=False) as w:
        def put(ev):
            w.write(ev)
        while w.events < events:
            while len(lanes) < lanes_max:
                seq = f"s{n_seq}"
                n_seq += 1
                prompt = rng.randrange(1, max_context // 2)
                budget = rng.randrange(1, max_context - prompt + 1)
                src, keep = None, True
                frontier = 0
                if ckpts and rng.random() < 0.3:
                    cid, cf = ckpts[rng.randrange(len(ckpts))]
                    if cf <= prompt:
                        src, frontier = cid, cf
                        keep = rng.random() < 0.7
                        if not keep:
                            ckpts.remove((cid, cf))
                put(kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=src, keep_source=keep))
                lane = _Lane(seq, frontier, prompt, min(max_context, prompt + budget))
                lane.mapped = _pages(frontier) * P
                lanes[seq] = lane
                # prefill the rest of the prompt in one chunk
                if lane.frontier < prompt:
                    if _pages(prompt) * P > lane.mapped:
                        put(kt.Map(seq=seq, pool="main", tokens=prompt))
                        lane.mapped = _pages(prompt) * P
                    unit = f"u{n_unit}"
                    n_unit += 1
                    put(kt.Launch(unit=unit, rows=(kt.LaunchRow(seq=seq, pool="main", write=(lane.frontier, prompt)),)))
                    put(kt.Complete(unit=unit, commit=(kt.CommitRow(seq=seq, pool="main", frontier=prompt),)))
                    lane.frontier = prompt
            # one decode round over every lane
            rows, commits = [], []
            for lane in lanes.values():
                if lane.frontier + 1 > lane.mapped:
                    put(kt.Map(seq=lane.seq, pool="main", tokens=lane.frontier + 1))
                    lane.mapped += P
                rows.append(kt.LaunchRow(seq=lane.seq, pool="main", write=(lane.frontier, lane.frontier + 1)))
                commits.append(kt.CommitRow(seq=lane.seq, pool="main", frontier=lane.frontier + 1))
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
        return w.events
