"""Prompt token content derived from block ids by a well-mixed per-id generator.

Mooncake rows give one id per 512-token block, not tokens. Block i of a prompt is 512 tokens derived from
hash_ids[i] alone (truncated to the prompt length), so equal ids give equal blocks and different ids give
unrelated blocks. The generator is splitmix64 over (id, position): a weak formula such as
``(id * 7919 + j) % 50000`` aliases ids and inflates prefix-hit ratios (research note: 38.34 % instead of
37.36 % on the conversation trace). Vectorised with NumPy (uint64 arithmetic wraps modulo 2^64).
"""

from __future__ import annotations

import numpy as np

from kvsim.sim.workloads.request import BLOCK_TOKENS, Request

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
VOCAB = 151_936
"""Token ids are drawn from [0, VOCAB)."""


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser over a uint64 array (a bijection on 64-bit values)."""
    with np.errstate(over="ignore"):
        z = x + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def block_tokens(block_id: int, n: int = BLOCK_TOKENS) -> np.ndarray:
    """The first n tokens of the block with this id (int64 array)."""
    with np.errstate(over="ignore"):
        seed = splitmix64(np.array([block_id & (2**64 - 1)], dtype=np.uint64))[0]
        x = seed * np.uint64(BLOCK_TOKENS) + np.arange(n, dtype=np.uint64)
    return (splitmix64(x) % np.uint64(VOCAB)).astype(np.int64)


def prompt_tokens(request: Request) -> np.ndarray:
    """The whole prompt of a request: its blocks' tokens, truncated to request.prompt."""
    if not request.hash_ids:
        return np.zeros(0, dtype=np.int64)
    parts = [block_tokens(h) for h in request.hash_ids]
    return np.concatenate(parts)[: request.prompt]
