"""A small prefix index over block hashes: which retained checkpoint holds the longest prefix of a prompt.

The cache-concepts model will carry the full PrefixCacheIndex (SHA-256 chained hashes, epochs, matchers);
this index is the simulation's own, deliberately small one. Page granularity is the store's P = 64 tokens:
page j of a prompt is full when the prompt has at least 64·(j+1) tokens, and its key chains the previous
page's key with the block id and the page's place in its 512-token block (content is a function of the
block id, so this is a hash of the page's content and of everything before it). Only full pages are
indexed: a partial tail never matches.

Per key the index keeps every live checkpoint holding it (with the stamp of its latest registration or use)
and the best of them: the shortest holder (the closest frontier: least to cut or copy when forking there),
the most recently used among equals. A lookup therefore finds the longest prefix some retained checkpoint
holds, and always knows who holds it; when the best holder goes, the next best is found among the others.
This module knows keys and holders, nothing of the store model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.sim.workloads.request import BLOCK_TOKENS
from kvsim.sim.workloads.tokens import splitmix64

P = 64
PAGES_PER_BLOCK = BLOCK_TOKENS // P
_MASK = (1 << 64) - 1
_PAGE_SALT = np.arange(1, PAGES_PER_BLOCK + 1, dtype=np.uint64) << np.uint64(56)


def _mix(x: int) -> int:
    """splitmix64 finaliser on a Python int: a well-mixed 64-bit value."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def page_keys(hash_ids, prompt: int) -> list[int]:
    """Chained keys of the prompt's full pages (floor(prompt / 64) of them).

    Block keys chain the block ids (key_i = mix(key_{i-1} ^ mix(id_i))); page j's key mixes its block's key
    with j's place in the block. Vectorised over pages with NumPy."""
    full = prompt // P
    if full == 0:
        return []
    blocks = -(-full // PAGES_PER_BLOCK)
    key = 0
    chain = []
    for h in hash_ids[:blocks]:
        key = _mix(key ^ _mix(h & _MASK))
        chain.append(key)
    pages = splitmix64(np.array(chain, dtype=np.uint64)[:, None] ^ _PAGE_SALT[None, :])
    return pages.ravel()[:full].tolist()


class PrefixIndex:
    """key -> [{holder: stamp}, best holder].

    A holder is any object with a `keys` list (the scheduler's checkpoint record); its stamp is the index's
    clock at its latest registration or use. The best holder of a key is the one with the fewest keys, the
    latest stamp among equals (README "Simulating workloads": the longest prefix a retained prompt holds)."""

    __slots__ = ("_keys", "_clock")

    def __init__(self) -> None:
        self._keys: dict[int, list] = {}
        self._clock = 0

    def __len__(self) -> int:
        return len(self._keys)

    def lookup(self, keys: Sequence[int]) -> tuple[Any, int]:  # the holder: whatever the caller indexed
        """(holder, pages): the longest indexed prefix of `keys` and its best holder; (None, 0) when the first
        page is not indexed."""
        index = self._keys
        depth = 0
        rep = None
        for k in keys:
            e = index.get(k)
            if e is None:
                break
            depth += 1
            rep = e[1]
        return rep, depth

    def _stamp(self, ckpt, keys) -> None:
        """`ckpt` holds `keys` as of now: newest among its equals, so best where it is no longer than the best."""
        self._clock += 1
        clock = self._clock
        index = self._keys
        n = len(ckpt.keys)
        for k in keys:
            e = index.get(k)
            if e is None:
                index[k] = [{ckpt: clock}, ckpt]
                continue
            e[0][ckpt] = clock
            if n <= len(e[1].keys):
                e[1] = ckpt

    def register(self, ckpt, keys=None) -> None:
        """A new holder of `keys` (default: its own keys)."""
        self._stamp(ckpt, ckpt.keys if keys is None else keys)

    def touch(self, ckpt) -> None:
        """A holder was used: it becomes the newest holder of its keys."""
        self._stamp(ckpt, ckpt.keys)

    def remove(self, ckpt) -> None:
        """A holder is gone (released or moved): where it was the best holder, the next best takes its place."""
        index = self._keys
        for k in ckpt.keys:
            e = index[k]
            holders = e[0]
            del holders[ckpt]
            if not holders:
                del index[k]
            elif e[1] is ckpt:
                e[1] = min(holders, key=lambda h: (len(h.keys), -holders[h]))
