"""``synthetic:hybrid-stress[:SEED]``: a seeded workload that reaches a hybrid cache's group and tier paths.

The prefix-stress shapes (``sim.workloads.prefix_stress``) reach a single full-attention group's paths; a hybrid
model's bugs hide where the groups disagree and where a Host tier serves a prefix back. Each request here is one
of these shapes, drawn from a seeded ``random.Random`` (same seed, same rows, same bytes):

* ``shared``: one of a few system prompts whose length is a multiple of 16 tokens but not of 64 (a state group's
  checkpoint never lands at its end) and a fresh user message;
* ``extend``: an earlier prompt, whole, then fresh tokens: a hit at the checkpoint the earlier request kept at its
  prompt's end, which lies inside the shared part (a state group serves it, fine-grained where it is no multiple
  of the state block);
* ``cut``: an earlier prompt cut at a multiple of 16 that is no multiple of 64, then fresh tokens: the shared
  part holds no checkpoint of the earlier request's (vLLM issue 45238's shape: the state group lowers the hit);
* ``long``: a system prompt and a long message (800 to 2,000 tokens), far beyond a sliding window, with a longer
  output;
* ``repeat``: an exact repeat of a recent prompt (a whole-prompt hit);
* ``return``: an exact repeat of a prompt at least ``RETURN_AFTER`` rows old: evicted from a small pool by then,
  and served back from a Host tier where there is one.

Arrivals are staggered as in prefix-stress (``arrival`` seconds, ``step`` the engine step a peer driver submits
at). Prompts are segments ``(content id, start, length)`` expanded by the peers (``sim.peers.workload``); generation
keeps only the latest candidates (``RECENT``, and a ring of ``RETURN_AFTER`` rows for returns), so it is linear in
the requests asked for. This module knows request shapes only.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator

from kvsim.sim.workloads.prefix_stress import STRESS_ID_BASE, Segment, StressRow
from kvsim.sim.workloads.request import BLOCK_TOKENS, Request

NAME = "hybrid-stress"
DEFAULT_REQUESTS = 120
UNIT = 16    # a hash block
BLOCK = 64   # a state block
KINDS = ("shared", "extend", "cut", "long", "repeat", "return")
RECENT = 24
"""Extensions, cuts and repeats draw their source among the 24 latest prompts."""
RETURN_AFTER = 32
"""A return repeats a prompt at least this many rows old."""


def _cut(segments: tuple[Segment, ...] | list[Segment], n: int) -> list[Segment]:
    out: list[Segment] = []
    for cid, start, length in segments:
        if n <= 0:
            break
        take = min(length, n)
        out.append((cid, start, take))
        n -= take
    return out


def rows(requests: int = DEFAULT_REQUESTS, seed: int = 0) -> list[StressRow]:
    """``requests`` rows in arrival order; a shorter run is a prefix of a longer one."""
    rng = random.Random(f"{NAME}:{seed}")
    next_id = STRESS_ID_BASE + (1 << 39)  # apart from prefix-stress's content ids

    def fresh(n: int) -> list[Segment]:
        nonlocal next_id
        out = []
        while n > 0:
            take = min(n, BLOCK_TOKENS)
            out.append((next_id, 0, take))
            next_id += 1
            n -= take
        return out

    systems = [tuple(fresh(rng.choice((208, 336, 464, 592)))) for _ in range(3)]
    made: list[StressRow] = []
    recent: deque[StressRow] = deque(maxlen=RECENT)
    old: deque[StressRow] = deque(maxlen=RETURN_AFTER)  # the rows just before the return window
    arrival, step = 0.0, 0
    while len(made) < requests:
        kind = KINDS[0] if len(made) < 3 else rng.choices(KINDS, weights=(4, 3, 2, 1, 2, 1))[0]
        out = rng.randrange(4, 40)
        segs: list[Segment] = []
        if kind in ("extend", "cut", "repeat") and not recent:
            kind = "shared"
        if kind == "return" and (len(made) < 2 * RETURN_AFTER or not old):
            kind = "repeat" if recent else "shared"
        if kind == "extend":
            src = rng.choice(recent)
            segs = list(src.segments) + fresh(rng.randrange(24, 200))
        elif kind == "cut":
            src = rng.choice(recent)
            cuts = [c for c in range(UNIT, src.prompt, UNIT) if c % BLOCK]
            if not cuts:
                kind = "shared"
            else:
                segs = _cut(src.segments, rng.choice(cuts)) + fresh(rng.randrange(24, 200))
        elif kind == "repeat":
            segs = list(rng.choice(recent).segments)
        elif kind == "return":
            segs = list(old[0].segments)
        if kind in ("shared", "long"):
            n = rng.randrange(800, 2000) if kind == "long" else rng.choice((rng.randrange(16, 400),
                                                                             rng.randrange(1, 6) * BLOCK))
            segs = list(systems[rng.randrange(len(systems))]) + fresh(n)
            if kind == "long":
                out = rng.randrange(100, 300)
        gap = rng.choice((0, 0, 1, 2, 5))
        arrival = round(arrival + gap * 0.05, 6)
        step += gap
        row = StressRow(len(made), kind, arrival, step, tuple(segs), out)
        made.append(row)
        if len(made) > RETURN_AFTER:
            old.append(made[-1 - RETURN_AFTER])
        recent.append(row)
    return made


def iter_hybrid_stress(requests: int | None = None, seed: int = 0) -> Iterator[Request]:
    """The workload as `kvsim simulate` reads it."""
    for row in rows(DEFAULT_REQUESTS if requests is None else requests, seed):
        yield row.request()
