"""``synthetic:prefix-stress[:SEED]``: a seeded workload that reaches the paths a prefix cache's bugs hide in.

The conversation rows share little (about 3 %), arrive at once and never repeat a prompt, so many code paths
of a block manager never run on them. Each request here is one of these shapes, drawn from a seeded
``random.Random`` (same seed, same rows, same bytes):

* ``shared``: one of a few system prompts (whole 64-token pages) and a fresh user message of any length;
* ``repeat``: an exact repeat of an earlier prompt whose length is a whole number of 64-token pages (a
  whole-prompt hit, which must still leave the last token to compute);
* ``split-block``: an earlier prompt cut inside a 16-token block (an offset that is no multiple of 16), then
  fresh tokens: the two prompts diverge inside a block;
* ``split-node``: an earlier prompt cut on a page boundary inside its own user message, then fresh tokens:
  the radix node holding that message is split;
* ``moved``: a user message copied after a different system prompt, starting on a page boundary: every block
  of it repeats the same tokens after a different prefix, so a block hash that ignores its parent gives a hit
  a user would see as a wrong answer;
* ``long``: a shared prompt whose output (hundreds of tokens) makes running requests outgrow a small pool
  (preemption in vLLM).

Arrivals are staggered: ``arrival`` grows in small seeded steps (seconds, for ``kvsim simulate``) and
``step`` is the engine step at which a peer driver submits the request.

A prompt is a list of segments ``(content id, start, length)``: ``length`` tokens of content block ``id`` (512
tokens, as in a Mooncake row) from ``start``. `Request.hash_ids` (one id per 512 prompt tokens, the form
`kvsim simulate` reads) names a window made of one whole-block segment by its id and any other window by a
digest of its segments, so equal windows get equal ids and nothing else does. The peers expand the segments
into token ids themselves (``sim.peers.workload``). This module knows request shapes only.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from kvsim.sim.workloads.request import BLOCK_TOKENS, Request

NAME = "prefix-stress"
DEFAULT_REQUESTS = 200
STRESS_ID_BASE = 1 << 40
"""Content ids of fresh segments start here (below 2**54, so a peer's (id << 10) | position key never wraps)."""
WINDOW_ID_BASE = 1 << 48
"""Ids of 512-token windows spliced from several segments: this base plus a 40-bit digest of the segments."""
PAGE = 64
BLOCK = 16
KINDS = ("shared", "repeat", "split-block", "split-node", "moved", "long")

Segment = tuple[int, int, int]  # (content id, start, length), start + length <= BLOCK_TOKENS


@dataclass(frozen=True, slots=True)
class StressRow:
    """One generated request: its shape, its prompt as segments, its output length and its arrival."""

    rid: int
    kind: str
    arrival: float
    step: int
    segments: tuple[Segment, ...]
    output: int

    @property
    def prompt(self) -> int:
        return sum(s[2] for s in self.segments)

    def request(self) -> Request:
        """The `kvsim simulate` form: one id per 512 prompt tokens."""
        return Request(self.rid, self.arrival, self.prompt, self.output, window_ids(self.segments))


def window_ids(segments: tuple[Segment, ...]) -> tuple[int, ...]:
    """One id per 512-token window of the prompt: a window that is one segment starting at its block's token 0
    keeps that block's id (a truncated last window too, as in a Mooncake row); any other window gets a digest
    of its clipped segments."""
    ids: list[int] = []
    window: list[Segment] = []
    room = BLOCK_TOKENS
    for cid, start, length in segments:
        while length:
            take = min(length, room)
            window.append((cid, start, take))
            start, length, room = start + take, length - take, room - take
            if room == 0:
                ids.append(_window_id(window))
                window, room = [], BLOCK_TOKENS
    if window:
        ids.append(_window_id(window))
    return tuple(ids)


def _window_id(window: list[Segment]) -> int:
    if len(window) == 1 and window[0][1] == 0:
        return window[0][0]
    digest = hashlib.blake2b(repr(window).encode(), digest_size=5).digest()
    return WINDOW_ID_BASE + int.from_bytes(digest, "big")


def _cut(segments: tuple[Segment, ...], n: int) -> list[Segment]:
    """The first n tokens of a prompt, as segments."""
    out: list[Segment] = []
    for cid, start, length in segments:
        if n <= 0:
            break
        take = min(length, n)
        out.append((cid, start, take))
        n -= take
    return out


RECENT = 24
"""Repeats, splits and moves draw their source among the 24 latest candidates."""


def rows(requests: int = DEFAULT_REQUESTS, seed: int = 0) -> list[StressRow]:
    """``requests`` rows of the workload, in arrival order: linear in ``requests`` (each draw looks at the
    `RECENT` latest candidates only, kept as they come)."""
    rng = random.Random(f"{NAME}:{seed}")
    next_id = STRESS_ID_BASE

    def fresh(n: int) -> list[Segment]:
        nonlocal next_id
        out = []
        while n > 0:
            take = min(n, BLOCK_TOKENS)
            out.append((next_id, 0, take))
            next_id += 1
            n -= take
        return out

    systems = [tuple(fresh(rng.choice((4, 6, 8, 10)) * PAGE)) for _ in range(4)]
    made: list[StressRow] = []
    users: deque[tuple[int, tuple[Segment, ...]]] = deque(maxlen=RECENT)  # (system, user message) of shared prompts
    aligned: deque[StressRow] = deque(maxlen=RECENT)  # the latest rows whose prompt is whole 64-token pages
    arrival, step = 0.0, 0
    while len(made) < requests:
        kind = KINDS[0] if len(made) < 4 else rng.choices(KINDS, weights=(4, 2, 2, 2, 2, 1))[0]
        out = rng.randrange(4, 48)
        sys_i = rng.randrange(len(systems))
        segs: list[Segment]
        if kind == "repeat":
            if not aligned:
                kind = "shared"
            else:
                segs = list(rng.choice(aligned).segments)
        elif kind in ("split-block", "split-node"):
            src = rng.choice(made[-RECENT:]) if made else None
            if src is None or src.prompt < 2 * PAGE:
                kind = "shared"
            else:  # a cut past the first page: inside a system prompt or inside the source's own message
                if kind == "split-block":
                    cut = rng.randrange(PAGE, src.prompt)
                    cut += 1 if cut % BLOCK == 0 else 0
                else:
                    cut = rng.randrange(1, max(2, src.prompt // PAGE)) * PAGE
                segs = _cut(src.segments, min(cut, src.prompt - 1)) + fresh(rng.randrange(24, 200))
        elif kind == "moved":
            if not users:
                kind = "shared"
            else:
                was, msg = rng.choice(users)
                other = (was + 1 + rng.randrange(len(systems) - 1)) % len(systems)
                segs = list(systems[other]) + list(msg)
        if kind in ("shared", "long"):
            msg = tuple(fresh(rng.choice((rng.randrange(16, 400), rng.randrange(1, 6) * PAGE))))
            users.append((sys_i, msg))
            segs = list(systems[sys_i]) + list(msg)
            if kind == "long":
                out = rng.randrange(160, 480)
        gap = rng.choice((0, 0, 1, 2, 5))
        arrival = round(arrival + gap * 0.05, 6)
        step += gap
        made.append(StressRow(len(made), kind, arrival, step, tuple(segs), out))
        if made[-1].prompt % PAGE == 0:
            aligned.append(made[-1])
    return made


def iter_prefix_stress(requests: int | None = None, seed: int = 0) -> Iterator[Request]:
    """The workload as `kvsim simulate` reads it."""
    for row in rows(DEFAULT_REQUESTS if requests is None else requests, seed):
        yield row.request()
