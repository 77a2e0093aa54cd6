"""Block-hash schemes of the engines' KV-event streams, written from their definitions.

A scheme turns one block (its parent's full digest, its token ids, its extra keys) into the block's full
digest, and says whether the value an event carries is that digest. Events often carry only part of it
(64 bits), so a checker keeps the full digest of every live block and chains the next block from it.

* ``fnv1a64`` -- TokenSpeed's KV-event hash: FNV-1a 64 over a has-parent byte, the parent u64 LE when
  present, the token count u64 LE and each token i32 LE. The event value is the whole hash.
* ``sha256`` -- TokenSpeed's prefix framing (``kvmodel.cache.prefix_hash``); the event value is the hex
  digest.
* ``vllm-sha256`` / ``vllm-sha256-cbor`` -- vLLM's prefix-caching hash: ``D_i = sha256(ser((D_{i-1} or
  NONE_HASH, tuple(tokens_i), extra_keys_i)))`` where ``ser`` is pickle (protocol 5, vLLM's
  HIGHEST_PROTOCOL) or canonical CBOR, and ``NONE_HASH = sha256(ser(seed))`` with seed ``"vllm-none-hash"``
  unless the engine ran with PYTHONHASHSEED set (then that string). Events carry the low 64 bits
  (``int.from_bytes(D, "big") & (2**64 - 1)``) or, with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0, the digest.
  A group whose block size is k times the hash block size hashes each block as k chained sub-blocks and
  publishes the last. Extra keys arrive untagged in events; they are re-tagged here the way vLLM built
  them (``(mm_id, offset)`` -> ``("mm", mm_id, offset)``, a first-block string -> ``("cache_salt", s)``,
  bytes -> ``("prompt_embeds", b)``); lookahead tokens make the key ``(E, *tokens)``. LoRA blocks hash the
  adapter's path, which events do not carry: they cannot be recomputed.
* ``sglang-sha256`` -- SGLang's radix-cache hash: ``D_i = sha256(D_{i-1} (32 raw bytes, absent under the
  root) || tokens as u32 LE)``; a page holding a token above 2**32 - 1 is hashed as ``0xff`` then every
  token as u64 LE. The event carries the first 8 bytes, big-endian, as a signed int64. Salted or LoRA
  namespaces are not recomputed.

The pickle bytes are produced by ``pickle.dumps`` of tuples built here from parsed integers, strings and
bytes; nothing read from a log is ever unpickled. This module knows bytes and tokens, not events.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import pickle
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.kvmodel.cache.prefix_hash import page_digest

__all__ = ["SCHEMES", "Unverifiable", "Scheme", "scheme", "fnv1a64", "fnv1a64_many", "cbor_canonical",
           "vllm_none_hash", "VLLM_NONE_HASH_SEED"]

SCHEMES = ("none", "sha256", "fnv1a64", "vllm-sha256", "vllm-sha256-cbor", "sglang-sha256")
VLLM_NONE_HASH_SEED = "vllm-none-hash"
_M64 = (1 << 64) - 1
_FNV_OFFSET, _FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
_PICKLE_PROTOCOL = 5  # pickle.HIGHEST_PROTOCOL of every Python vLLM supports (3.10 to 3.13)


class Unverifiable(Exception):
    """A block the scheme cannot recompute from what the event carries (the reason is the message)."""


# -- TokenSpeed ---------------------------------------------------------------------------------------------

def fnv1a64(parent: int | None, tokens: Sequence[int]) -> int:
    """TokenSpeed's KV-event block hash (FNV-1a 64): has-parent byte, parent u64, count u64, tokens i32."""
    data = bytearray(b"\x01" + (parent & _M64).to_bytes(8, "little") if parent is not None else b"\x00")
    data += len(tokens).to_bytes(8, "little")
    for t in tokens:
        data += (t & 0xFFFFFFFF).to_bytes(4, "little")
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _M64
    return h


def fnv1a64_many(parents: list, token_lists: list) -> list[int]:
    """fnv1a64 of many blocks at once (NumPy across blocks, byte by byte): the same values, ~30x faster."""
    out = [0] * len(parents)
    groups: dict[tuple[bool, int], list[int]] = {}
    for i, (par, toks) in enumerate(zip(parents, token_lists, strict=True)):
        groups.setdefault((par is not None, len(toks)), []).append(i)
    for (has_parent, n), idx in groups.items():
        cols = [np.full(len(idx), 1 if has_parent else 0, dtype=np.uint8)[:, None]]
        if has_parent:
            par = np.array([parents[i] & _M64 for i in idx], dtype=np.uint64)
            cols.append(par.astype("<u8").view(np.uint8).reshape(len(idx), 8))
        cols.append(np.full((len(idx), 1), n, dtype="<u8").view(np.uint8).reshape(len(idx), 8))
        if n:
            toks = np.array([token_lists[i] for i in idx], dtype=np.int64).astype("<i4")
            cols.append(toks.view(np.uint8).reshape(len(idx), 4 * n))
        data = np.concatenate(cols, axis=1).astype(np.uint64)
        h = np.full(len(idx), _FNV_OFFSET, dtype=np.uint64)
        prime = np.uint64(_FNV_PRIME)
        for j in range(data.shape[1]):
            h ^= data[:, j]
            h *= prime
        for k, i in enumerate(idx):
            out[i] = int(h[k])
    return out


# -- canonical CBOR of the few types a vLLM block key holds ------------------------------------------------

def _cbor_head(major: int, n: int, out: bytearray) -> None:
    if n < 24:
        out.append(major << 5 | n)
    elif n < 1 << 8:
        out += bytes((major << 5 | 24, n))
    elif n < 1 << 16:
        out.append(major << 5 | 25)
        out += n.to_bytes(2, "big")
    elif n < 1 << 32:
        out.append(major << 5 | 26)
        out += n.to_bytes(4, "big")
    else:
        out.append(major << 5 | 27)
        out += n.to_bytes(8, "big")


def _cbor(obj: Any, out: bytearray) -> None:
    if obj is None:
        out.append(0xF6)
    elif obj is True or obj is False:
        out.append(0xF5 if obj else 0xF4)
    elif isinstance(obj, int):
        major, n = (0, obj) if obj >= 0 else (1, -1 - obj)
        if n > _M64:  # a bignum: tag 2 / 3 over the magnitude's big-endian bytes
            out.append(0xC2 if major == 0 else 0xC3)
            raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
            _cbor_head(2, len(raw), out)
            out += raw
        else:
            _cbor_head(major, n, out)
    elif isinstance(obj, bytes):
        _cbor_head(2, len(obj), out)
        out += obj
    elif isinstance(obj, str):
        raw = obj.encode("utf-8")
        _cbor_head(3, len(raw), out)
        out += raw
    elif isinstance(obj, (tuple, list)):
        _cbor_head(4, len(obj), out)
        for item in obj:
            _cbor(item, out)
    else:
        raise Unverifiable(f"a {type(obj).__name__} in a block key has no CBOR encoding here")


def cbor_canonical(obj: Any) -> bytes:
    """Canonical CBOR (RFC 8949 §4.2.1: shortest heads) of None, bools, ints, bytes, str and arrays."""
    out = bytearray()
    _cbor(obj, out)
    return bytes(out)


def _pickle(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=_PICKLE_PROTOCOL)


def vllm_none_hash(cbor: bool = False, seed: str = VLLM_NONE_HASH_SEED) -> bytes:
    """vLLM's NONE_HASH: the parent digest of every first block."""
    return hashlib.sha256(cbor_canonical(seed) if cbor else _pickle(seed)).digest()


# -- schemes -------------------------------------------------------------------------------------------------

class Scheme:
    """One hash scheme: ``digest`` of a block from its parent's digest, ``carried`` checks an event value.

    ``chain_from_event``: the event's parent value is itself the parent digest (TokenSpeed), so no digest
    needs keeping; otherwise the checker keeps each live block's digest and passes it as ``parent``.
    """

    name = "none"
    chain_from_event = True

    def event_digest(self, value: Any) -> Any:
        """The parent digest an event's hash value stands for (schemes that chain from the event)."""
        return value

    def digest(self, parent: Any, tokens: Sequence[int], block: dict) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def carried(self, value: Any, digest: Any) -> bool:
        return value == digest

    def show(self, digest: Any) -> str:
        return str(digest)


class Fnv1a64(Scheme):
    name = "fnv1a64"

    def event_digest(self, value: Any) -> Any:
        if not isinstance(value, int):
            raise Unverifiable("fnv1a64 hashes are integers")
        return value & _M64

    def digest(self, parent: Any, tokens: Sequence[int], block: dict) -> int:
        return fnv1a64(parent, tokens)

    def carried(self, value: Any, digest: Any) -> bool:
        return isinstance(value, int) and (value & _M64) == digest


class TokenSpeedSha256(Scheme):
    name = "sha256"

    def event_digest(self, value: Any) -> bytes:
        try:
            return bytes.fromhex(value)
        except (TypeError, ValueError):
            raise Unverifiable("sha256 hashes are hex digests") from None

    def digest(self, parent: Any, tokens: Sequence[int], block: dict) -> bytes:
        try:
            return page_digest(parent or b"", tokens)
        except ValueError as exc:
            raise Unverifiable(str(exc)) from None

    def carried(self, value: Any, digest: Any) -> bool:
        return isinstance(value, str) and value.lower() == digest.hex()

    def show(self, digest: Any) -> str:
        return digest.hex()[:12] + "..." + digest.hex()[-8:]


def _as_digest(value: Any) -> bytes | None:
    """A full digest carried as bytes (msgpack bin) or base64 text (JSON of bytes); None when it is not."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return raw if len(raw) == 32 else None
    return None


class VllmSha256(Scheme):
    """vLLM's ``sha256`` (pickle) or ``sha256_cbor`` scheme."""

    chain_from_event = False

    def __init__(self, cbor: bool, seed: str = VLLM_NONE_HASH_SEED, hash_block_size: int | None = None):
        self.cbor, self.hash_block_size = cbor, hash_block_size
        self.name = "vllm-sha256-cbor" if cbor else "vllm-sha256"
        self.none_hash = vllm_none_hash(cbor, seed)

    def _key(self, block: dict) -> Any:
        extra = block.get("extra_keys")
        lookahead = block.get("lookahead")
        if block.get("lora_name") is not None:
            raise Unverifiable("a LoRA block's hash covers the adapter path, which events do not carry")
        tagged: tuple | None = None
        if extra is not None:
            if not isinstance(extra, (list, tuple)):
                raise Unverifiable("extra_keys entry is not an array")
            keys: list[tuple] = []
            for i, key in enumerate(extra):
                if isinstance(key, (list, tuple)) and len(key) == 2 and isinstance(key[1], int):
                    keys.append(("mm", key[0], key[1]))
                elif isinstance(key, str) and block.get("first") and i == len(keys) and not any(
                        k[0] == "cache_salt" for k in keys):
                    keys.append(("cache_salt", key))
                elif isinstance(key, bytes):
                    keys.append(("prompt_embeds", key))
                else:
                    raise Unverifiable(f"extra key {str(key)[:40]} has no known tagged form")
            tagged = tuple(keys) if keys else None
        if lookahead is not None:
            return (tagged, *[int(t) for t in lookahead])
        return tagged

    def _one(self, parent: bytes | None, tokens: Sequence[int], key: Any) -> bytes:
        obj = (parent or self.none_hash, tuple(tokens), key)
        return hashlib.sha256(cbor_canonical(obj) if self.cbor else _pickle(obj)).digest()

    def digest(self, parent: Any, tokens: Sequence[int], block: dict) -> bytes:
        key = self._key(block)
        step = self.hash_block_size or len(tokens)
        if step <= 0 or len(tokens) % step:
            raise Unverifiable(f"{len(tokens)} tokens are not whole hash blocks of {step}")
        first_only = False
        if step != len(tokens) and key is not None:
            # a salt belongs to the request's first hash block only; other keys are not published per hash block
            if not (block.get("first") and all(k[0] == "cache_salt" for k in key if isinstance(k, tuple))
                    and block.get("lookahead") is None):
                raise Unverifiable("extra keys of a block wider than the hash block size are not published per "
                                   "hash block")
            first_only = True
        d = parent
        for i in range(0, len(tokens), step):
            d = self._one(d, tokens[i:i + step], key if not first_only or i == 0 else None)
        return d

    def carried(self, value: Any, digest: Any) -> bool:
        if isinstance(value, int) and not isinstance(value, bool):
            return value == int.from_bytes(digest, "big") & _M64
        full = _as_digest(value)
        return full is not None and full == digest

    def show(self, digest: Any) -> str:
        return str(int.from_bytes(digest, "big") & _M64)


_U32_MAX = (1 << 32) - 1


class SglangSha256(Scheme):
    name = "sglang-sha256"
    chain_from_event = False

    def digest(self, parent: Any, tokens: Sequence[int], block: dict) -> bytes:
        if block.get("lora_name") is not None or block.get("cache_salt") is not None:
            raise Unverifiable("salted or LoRA blocks are hashed in a namespace events do not spell out")
        h = hashlib.sha256()
        if parent is not None:
            h.update(parent)
        try:
            if any(t > _U32_MAX for t in tokens):
                h.update(b"\xff")
                h.update(struct.pack(f"<{len(tokens)}Q", *tokens))
            else:
                h.update(struct.pack(f"<{len(tokens)}I", *tokens))
        except struct.error as exc:
            raise Unverifiable(f"token ids must be non-negative int64: {exc}") from None
        return h.digest()

    def carried(self, value: Any, digest: Any) -> bool:
        return isinstance(value, int) and value == int.from_bytes(digest[:8], "big", signed=True)

    def show(self, digest: Any) -> str:
        return str(int.from_bytes(digest[:8], "big", signed=True))


def scheme(name: str, *, seed: str = VLLM_NONE_HASH_SEED, hash_block_size: int | None = None) -> Scheme | None:
    """The scheme named ``name`` (None for ``none``)."""
    if name == "none":
        return None
    if name == "fnv1a64":
        return Fnv1a64()
    if name == "sha256":
        return TokenSpeedSha256()
    if name in ("vllm-sha256", "vllm-sha256-cbor"):
        return VllmSha256(name.endswith("cbor"), seed, hash_block_size)
    if name == "sglang-sha256":
        return SglangSha256()
    raise ValueError(f"hash scheme must be one of {', '.join(SCHEMES)}")
