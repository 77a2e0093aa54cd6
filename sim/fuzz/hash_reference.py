"""The engines' KV-event block hashes, written from each engine's own source (read as documentation, never imported):
the reference the `judge-hash` machine holds the block-hash recomputation (``sim.peers.judges.block_hash``) to.

* vLLM (vllm/v1/core/kv_cache_utils.py ``hash_block_tokens``, ``get_request_block_hasher``,
  ``generate_block_hash_extra_keys``; vllm/utils/hashing.py ``sha256`` / ``sha256_cbor``): a request's tokens are
  hashed in hash blocks of ``hash_block_size`` tokens, chained: ``D = H((parent or NONE_HASH, tuple(tokens),
  extra_keys))`` where H is SHA-256 over ``pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)`` or over
  ``cbor2.dumps(obj, canonical=True)``, and ``NONE_HASH = H(seed)``, the seed "vllm-none-hash" unless PYTHONHASHSEED
  is set (then its value). Extra keys, in order: ``("mm", identifier, offset from the block's start)`` per
  multimodal item the block overlaps, ``("cache_salt", salt)`` on the request's first block, ``("prompt_embeds",
  sha256 of the block's embeddings)``; none gives ``None``. With L lookahead tokens the extra keys become
  ``(extra_keys, *the L tokens after the block)``. A group whose block is k hash blocks publishes, per block, the
  hash of its last hash block. Events carry ``int.from_bytes(D, "big") & (2**64 - 1)`` (or D itself) and the
  extra keys untagged (``(identifier, offset)``, the salt, the digest).
* SGLang (sglang/srt/mem_cache/cpp_utils/hash_binding.cpp ``hash_page``; mem_cache/utils.py
  ``hash_str_to_int64``): ``D = SHA-256(parent's 32 raw bytes, absent under the root; the page's tokens as u32 LE)``
  -- a page holding a token above 2**32 - 1 is hashed as the byte 0xff then every token as u64 LE; events carry
  the digest's first 16 hex digits as a signed 64-bit integer.
* TokenSpeed (research/tokenspeed.md): the event hash is FNV-1a 64 (offset basis 0xcbf29ce484222325, prime
  0x100000001b3) over a byte 1/0 (has a parent), the parent u64 LE when there is one, the token count u64 LE and
  each token as 32 bits LE; the prefix key is SHA-256 over the prior digest's length (u32 LE) and bytes, the
  token count (u32 LE) and each token (u32 LE), shown as 64 hex digits.

Imports nothing of kvsim. The CBOR here is written from RFC 8949 §4.2.1 (the shortest head for every length and
integer) for the values a block key holds.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
from typing import Any

NONE_SEED = "vllm-none-hash"


# -- vLLM -------------------------------------------------------------------------------------------------------------
def _head(major: int, n: int) -> bytes:
    for limit, extra, fmt in ((24, None, ""), (1 << 8, 24, ">B"), (1 << 16, 25, ">H"), (1 << 32, 26, ">I"),
                              (1 << 64, 27, ">Q")):
        if n < limit:
            return bytes([major << 5 | (n if extra is None else extra)]) + (struct.pack(fmt, n) if fmt else b"")
    raise ValueError("an integer beyond 64 bits")


def cbor(obj: Any) -> bytes:
    """Canonical CBOR of None, bools, integers within 64 bits, bytes, text and arrays (tuples, lists)."""
    if obj is None:
        return b"\xf6"
    if isinstance(obj, bool):
        return b"\xf5" if obj else b"\xf4"
    if isinstance(obj, int):
        return _head(0, obj) if obj >= 0 else _head(1, -1 - obj)
    if isinstance(obj, bytes):
        return _head(2, len(obj)) + obj
    if isinstance(obj, str):
        raw = obj.encode("utf-8")
        return _head(3, len(raw)) + raw
    if isinstance(obj, (tuple, list)):
        return _head(4, len(obj)) + b"".join(cbor(x) for x in obj)
    raise TypeError(f"no CBOR here for {type(obj).__name__}")


def vllm_h(obj: Any, use_cbor: bool) -> bytes:
    return hashlib.sha256(cbor(obj) if use_cbor else pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def vllm_extra(mm: list[tuple[str, int, int]], start: int, end: int, salt: str | None, embeds: bytes | None) -> Any:
    """The tagged extra keys of the hash block [start, end): ``mm`` items as (identifier, offset, length), sorted by
    offset."""
    keys: list[tuple] = []
    for ident, off, n in mm:  # sorted by offset, walked as _gen_mm_extra_hash_keys walks them
        if end <= off:
            break  # the block has not reached this item
        if start >= off + n:
            continue  # the block has passed it
        keys.append(("mm", ident, off - start))
        if end < off + n:
            break  # the item goes on past the block: the block is done with multimodal items
    if salt and start == 0:
        keys.append(("cache_salt", salt))
    if embeds is not None:
        keys.append(("prompt_embeds", embeds))
    return tuple(keys) if keys else None


def vllm_chain(tokens: list[int], hash_block: int, use_cbor: bool, seed: str = NONE_SEED,
               mm: list[tuple[str, int, int]] = (), salt: str | None = None,  # type: ignore[assignment]
               embeds: dict[int, bytes] | None = None, lookahead: int = 0) -> list[bytes]:
    """Every full hash block's digest of a request's tokens (the last ``lookahead`` tokens only extend keys)."""
    none = vllm_h(seed, use_cbor)
    out: list[bytes] = []
    n = len(tokens) - lookahead
    for start in range(0, n - hash_block + 1, hash_block):
        end = start + hash_block
        extra = vllm_extra(list(mm), start, end + lookahead if lookahead else end, salt,
                           (embeds or {}).get(start))
        if lookahead:
            extra = (extra, *tokens[end:end + lookahead])
        out.append(vllm_h((out[-1] if out else none, tuple(tokens[start:end]), extra), use_cbor))
    return out


def vllm_value(digest: bytes, as_int: bool) -> Any:
    return int.from_bytes(digest, "big") & ((1 << 64) - 1) if as_int else digest


def vllm_event_extra(mm: list[tuple[str, int, int]], start: int, end: int, salt: str | None,
                     embeds: bytes | None) -> list | None:
    """The untagged extra keys a vLLM event carries for one block (to_event_extra_keys)."""
    keys = vllm_extra(mm, start, end, salt, embeds)
    if keys is None:
        return None
    return [list(k[1:]) if k[0] == "mm" else k[1] for k in keys]


# -- SGLang -----------------------------------------------------------------------------------------------------------
def sglang_digest(parent: bytes | None, tokens: list[int]) -> bytes:
    wide = any(t > 0xFFFFFFFF for t in tokens)
    body = (b"\xff" + b"".join(t.to_bytes(8, "little") for t in tokens)) if wide else \
        b"".join(t.to_bytes(4, "little") for t in tokens)
    return hashlib.sha256((parent or b"") + body).digest()


def sglang_value(digest: bytes) -> int:
    v = int(digest.hex()[:16], 16)
    return v - (1 << 64) if v >= 1 << 63 else v


# -- TokenSpeed -------------------------------------------------------------------------------------------------------
def fnv1a64(parent: int | None, tokens: list[int]) -> int:
    data = (b"\x01" + struct.pack("<Q", parent) if parent is not None else b"\x00") + struct.pack("<Q", len(tokens))
    data += b"".join(struct.pack("<I", t & 0xFFFFFFFF) for t in tokens)
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) % (1 << 64)
    return h


def prefix_digest(prior: bytes, tokens: list[int]) -> bytes:
    return hashlib.sha256(struct.pack("<I", len(prior)) + prior + struct.pack("<I", len(tokens))
                          + b"".join(struct.pack("<I", t) for t in tokens)).digest()
