"""A small prefix index over block hashes: which retained checkpoint holds the longest prefix of a prompt.

The cache-concepts model will carry the full PrefixCacheIndex (SHA-256 chained hashes, epochs, matchers);
this index is the simulation's own, deliberately small one. Page granularity is the store's P = 64 tokens:
page j of a prompt is full when the prompt has at least 64·(j+1) tokens, and its key chains the previous
page's key with the block id and the page's place in its 512-token block (content is a function of the
block id, so this is a hash of the page's content and of everything before it). Only full pages are
indexed: a partial tail never matches.

Per key the index keeps how many live checkpoints hold it and two of them: the latest to register or use
it, and the shortest. Under least-recently-used eviction the latest holder is the last to go (any other
holder was touched after an evicted one, so it registered the key later), so a key with holders keeps a
known holder; release of a checkpoint superseded by a longer one is safe too (the longer one registers
every key after it). This module knows keys and holders, nothing of the store model.
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
    """key -> [live checkpoints holding it, latest holder, shortest holder, the shortest's key count].

    A holder is any object with a `keys` list (the scheduler's checkpoint record). The latest holder is
    the one that most recently registered or used the key; the shortest is the one with the fewest keys
    (the closest frontier: least to cut or copy when forking there)."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[int, list] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def lookup(self, keys: Sequence[int]) -> tuple[Any, int]:  # the holder: whatever the caller indexed
        """(holder, pages): the longest indexed prefix of `keys` that has a known holder, and a holder of it
        (the shortest when known); (None, 0) when the first page is not indexed."""
        index = self._keys
        depth = found = 0
        rep = None
        for k in keys:
            e = index.get(k)
            if e is None:
                break
            depth += 1
            h = e[2] or e[1]
            if h is not None:
                rep, found = h, depth
        return rep, found

    def register(self, ckpt, keys=None) -> None:
        """A new holder of `keys` (default: its own keys)."""
        index = self._keys
        n = len(ckpt.keys)
        for k in ckpt.keys if keys is None else keys:
            e = index.get(k)
            if e is None:
                index[k] = [1, ckpt, ckpt, n]
            else:
                e[0] += 1
                e[1] = ckpt
                if n <= e[3] or e[2] is None:
                    e[2], e[3] = ckpt, n

    def touch(self, ckpt) -> None:
        """A holder was used: it becomes the latest holder of its keys (counts unchanged)."""
        index = self._keys
        n = len(ckpt.keys)
        for k in ckpt.keys:
            e = index[k]
            e[1] = ckpt
            if n <= e[3] or e[2] is None:
                e[2], e[3] = ckpt, n

    def remove(self, ckpt) -> None:
        """A holder is gone (released or moved): its keys lose one holder. Where it was the latest or the
        shortest holder the other one takes its place; when both were it, the key keeps its count but no
        known holder, and lookups stop before it (they may under-report a match, never over-report)."""
        index = self._keys
        for k in ckpt.keys:
            e = index[k]
            if e[0] == 1:
                del index[k]
                continue
            e[0] -= 1
            if e[1] is ckpt:
                e[1] = None if e[2] is ckpt else e[2]
            if e[2] is ckpt:
                e[2] = e[1]
                e[3] = 0 if e[1] is None else len(e[1].keys)
