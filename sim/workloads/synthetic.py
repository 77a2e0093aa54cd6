"""A seeded synthetic workload: shared system prompts and multi-turn sessions, in the Mooncake shape.

Sessions arrive as a Poisson process; each picks one of a few system prompts (shared by many sessions)
and runs several turns. Turn t's prompt is the previous turn's prompt, its answer and a new user message;
in block ids (Mooncake's convention) it keeps the previous prompt's whole 512-token blocks and gets fresh
ids from the first block the previous prompt did not fill (that block's content changed). The same seed
gives the same requests; requests come out in arrival order.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator

from kvsim.sim.workloads.request import BLOCK_TOKENS, Request, blocks_for

SYNTH_ID_BASE = 1 << 56
"""Synthetic block ids start here (disjoint from Mooncake's and the Azure loader's)."""


def iter_synthetic(requests: int = 1000, seed: int = 0, system_prompts: int = 4, session_rate: float = 0.5,
                   turns: tuple[int, int] = (1, 8), think_seconds: float = 20.0,
                   max_prompt: int = 60_000) -> Iterator[Request]:
    """`requests` requests of multi-turn sessions over `system_prompts` shared system prompts."""
    rng = random.Random(seed)
    next_id = SYNTH_ID_BASE

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    systems = []
    for _ in range(system_prompts):
        n = rng.randrange(2, 9) * BLOCK_TOKENS  # whole blocks: a session's first message starts a new block
        systems.append((n, fresh(n // BLOCK_TOKENS)))
    heap: list = []  # (arrival, order, session state)
    order = 0
    next_session = rng.expovariate(session_rate)
    emitted = 0
    while emitted < requests:
        if not heap or next_session <= heap[0][0]:
            n_sys, ids = systems[rng.randrange(system_prompts)]
            state = {"base": n_sys, "prev_prompt": n_sys, "ids": list(ids), "turns": rng.randint(*turns)}
            heapq.heappush(heap, (next_session, order, state))
            order += 1
            next_session += rng.expovariate(session_rate)
            continue
        arrival, _, state = heapq.heappop(heap)
        output = rng.randrange(16, 1024)
        prompt = state["base"] + rng.randrange(32, 2048)
        if prompt > max_prompt:
            continue  # the session ends: its context is full
        keep = state["prev_prompt"] // BLOCK_TOKENS  # the previous prompt's whole blocks are unchanged
        ids = state["ids"][:keep] + fresh(blocks_for(prompt) - keep)
        yield Request(emitted, round(arrival, 6), prompt, output, tuple(ids))
        emitted += 1
        state["turns"] -= 1
        if state["turns"] > 0:
            state.update(base=prompt + output, prev_prompt=prompt, ids=ids)
            heapq.heappush(heap, (arrival + rng.expovariate(1.0 / think_seconds) + output * 0.02, order, state))
            order += 1
