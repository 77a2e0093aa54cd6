"""SHA-256 chained prefix hasher: the identity of a cached prefix page.

Cache concepts: prefix_granularity "defines the identity boundary of cached prefixes: two requests share
cache only at multiples of this many tokens", and the scheduler's prefix_hasher.h does "SHA-256
prefix-page hashing". Each page of P tokens is hashed together with the digest of the page before it, so
a page's hash names the whole prefix that ends with it.

Byte framing (TokenSpeed's prefix_hasher.h, every integer unsigned 32-bit little-endian):

1. the prior page's digest length (0 for the first page, then 32), then its raw digest bytes;
2. the page's token count, then each token id;
3. optionally extra keys: their count, then each key's length and bytes (the scheduler passes none).

A page hash is the hex spelling (64 characters) of that SHA-256 digest. Only full pages are hashed, and
a scheduler hashes at most ``(prefill - 1) // P`` of a prompt's pages (``hashed_pages``): the last token is
always computed, so a prompt that ends on a page boundary never hits its own last page.
This module knows tokens and bytes only: no blocks, groups, pools or tables.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["DIGEST_BYTES", "page_digest", "token_bytes", "chain_digests", "prefix_digests", "prefix_hashes",
           "hashable_pages", "hashed_pages"]

DIGEST_BYTES = 32
_U32 = struct.Struct("<I")
_U32_MAX = 2**32 - 1


def _u32(value: int) -> bytes:
    if not 0 <= value <= _U32_MAX:
        raise ValueError(f"{value} does not fit the hasher's u32 framing")
    return _U32.pack(value)


def _token_bytes(tokens: Sequence[int]) -> bytes:
    """Token ids as consecutive u32 little-endian (lists, or NumPy integer arrays without a copy loop)."""
    if hasattr(tokens, "dtype"):
        arr: Any = tokens  # a NumPy integer array (duck-typed: this module does not import NumPy)
        if len(arr) and (int(arr.min()) < 0 or int(arr.max()) > _U32_MAX):
            raise ValueError("token ids must be u32")
        return arr.astype("<u4", copy=False).tobytes()
    try:
        return struct.pack(f"<{len(tokens)}I", *tokens)
    except struct.error as exc:
        raise ValueError(f"token ids must be u32: {exc}") from None


def page_digest(prior: bytes, tokens: Sequence[int], extra_keys: Iterable[bytes] = ()) -> bytes:
    """Raw SHA-256 digest of one page chained onto ``prior`` (b"" for the first page)."""
    if len(prior) not in (0, DIGEST_BYTES):
        raise ValueError(f"prior digest must be empty or {DIGEST_BYTES} bytes, not {len(prior)}")
    h = hashlib.sha256()
    h.update(_u32(len(prior)))
    h.update(prior)
    h.update(_u32(len(tokens)))
    h.update(_token_bytes(tokens))
    keys = list(extra_keys)
    if keys:
        h.update(_u32(len(keys)))
        for key in keys:
            h.update(_u32(len(key)))
            h.update(key)
    return h.digest()


def token_bytes(tokens: Sequence[int]) -> bytes:
    """A token list in the hasher's framing (u32 LE each), for ``chain_digests``."""
    return _token_bytes(tokens)


_FRAME_FIRST = _U32.pack(0)
_FRAME_NEXT = _U32.pack(DIGEST_BYTES)


def chain_digests(prior: bytes, framed: bytes | memoryview, granularity: int, pages: int) -> list[bytes]:
    """Digests of ``pages`` whole pages of already-framed tokens (``token_bytes``), chained onto ``prior``:
    the same values as ``page_digest`` page by page, without re-framing each page's tokens."""
    step = 4 * granularity
    if pages * step > len(framed):
        raise ValueError(f"{len(framed) // 4} tokens hold fewer than {pages} pages of {granularity}")
    count = _u32(granularity)
    sha = hashlib.sha256
    out = []
    for i in range(pages):
        h = sha(_FRAME_NEXT + prior if prior else _FRAME_FIRST)
        h.update(count)
        h.update(framed[i * step:(i + 1) * step])
        prior = h.digest()
        out.append(prior)
    return out


def hashable_pages(num_tokens: int, granularity: int) -> int:
    """Number of whole pages of ``granularity`` tokens in ``num_tokens`` tokens."""
    if granularity <= 0:
        raise ValueError("prefix_granularity must be positive")
    return max(num_tokens, 0) // granularity


def hashed_pages(prefill: int, granularity: int) -> int:
    """Pages of a ``prefill``-token prompt that a scheduler hashes: ``(prefill - 1) // P``, never negative."""
    return hashable_pages(prefill - 1, granularity)


def prefix_digests(tokens: Sequence[int], granularity: int, pages: int | None = None) -> list[bytes]:
    """Raw chained digests of the first ``pages`` whole pages (default: every whole page)."""
    whole = hashable_pages(len(tokens), granularity)
    count = whole if pages is None else min(pages, whole)
    out: list[bytes] = []
    prior = b""
    for i in range(count):
        prior = page_digest(prior, tokens[i * granularity:(i + 1) * granularity])
        out.append(prior)
    return out


def prefix_hashes(tokens: Sequence[int], granularity: int, pages: int | None = None) -> list[str]:
    """Hex page hashes (64 characters each), the spelling the scheduler's CacheKey carries."""
    return [d.hex() for d in prefix_digests(tokens, granularity, pages)]
