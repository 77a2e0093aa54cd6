"""Between the wheel's objects and cachetrace/1 records: a plan's cache ops (``cache_ops``: one record per op id,
with every field the wheel's op carries) and the KV events it drains (``kv_event``) become records; an
acknowledgement becomes the wheel's done event (``done_event``); each answer's output token is synthetic,
deterministic in (request, position) (``output_token``).
"""

from __future__ import annotations

import zlib
from typing import Literal

from kvsim.sim.peers.tokenspeed.wheel import engine
from kvsim.sim.peers.workload import VOCAB
from kvsim.sim.trace import cachetrace as ct

__all__ = ["output_token", "kv_event", "cache_ops", "done_event"]


def output_token(rid: str, pos: int) -> int:
    """A synthetic output token, deterministic in (request, position)."""
    return zlib.crc32(f"{rid}:{pos}".encode()) % VOCAB


def kv_event(e) -> ct.KvEvent:
    kind = e.kind
    if kind == "BlockStored":
        return ct.BlockStored(list(e.block_hashes), e.parent_block_hash, list(e.token_ids), e.block_size)
    if kind == "BlockRemoved":
        return ct.BlockRemoved(list(e.block_hashes))
    return ct.AllBlocksCleared()


_TIERS: dict[int, Literal["L2", "snapshot"]] = {0: "L2", 1: "snapshot"}


def _per_id(op, name: str, n: int) -> list:
    v = getattr(op, name, None)
    return list(v) if v is not None and len(v) else [None] * n


def cache_ops(op) -> list[ct.CacheOp]:
    """One record per op id with every field the wheel's op carries: a batched op holds, per id, its lists
    of source and destination pages, their groups, content hashes and page offsets, and (write-back) whether
    its Device sources are pinned, (snapshot / restore) the request, its pool index, the snapshot slot and
    each source's tier, (L3) the Host blocks and object keys."""
    kind = type(op).__name__
    if kind == "StorageCancelOp":  # its id is the op it cancels, which is still answered once
        return [ct.CacheOp(kind, [], cancels=int(op.op_id))]
    if kind.startswith("Storage"):
        keys = [tuple(k) for k in op.keys]  # CacheKey: (group index, content hash, page offset)
        return [ct.CacheOp(kind, [int(op.op_id)], groups=[int(k[0]) for k in keys], keys=[str(k[1]) for k in keys],
                           offsets=[int(k[2]) for k in keys],
                           host_blocks=[int(x) for x in getattr(op, "host_blocks", [])])]
    ids = [int(x) for x in op.op_ids]
    n = len(ids)
    src, dst = _per_id(op, "src_pages", n), _per_id(op, "dst_pages", n)
    grp, keys, offs = _per_id(op, "group_ids", n), _per_id(op, "content_hashes", n), _per_id(op, "page_offsets", n)
    pinned, reqs = _per_id(op, "source_pinned", n), _per_id(op, "request_ids", n)
    pool, slots, tiers = _per_id(op, "request_pool_indices", n), _per_id(op, "snapshot_slots", n), \
        _per_id(op, "source_tiers", n)
    out = []
    for k, oid in enumerate(ids):
        s, d = list(src[k] or []), list(dst[k] or [])
        out.append(ct.CacheOp(
            kind, [oid], [(int(a), int(b)) for a, b in zip(s, d, strict=False)],
            groups=[int(x) for x in grp[k]] if grp[k] is not None else [],
            keys=[str(x) for x in keys[k]] if keys[k] is not None else [],
            offsets=[int(x) for x in offs[k]] if offs[k] is not None else [],
            pinned=bool(pinned[k]) if pinned[k] is not None else None,
            request=str(reqs[k]) if reqs[k] is not None else None,
            pool_index=int(pool[k]) if pool[k] is not None else None,
            slot=int(slots[k]) if slots[k] is not None else None,
            tiers=[_TIERS.get(int(x), "L2") for x in tiers[k]] if tiers[k] is not None else []))
    return out


def done_event(kind: str, oid: int):
    ts = engine()
    name = kind.removesuffix("Op") + "DoneEvent"
    cls = getattr(ts.Cache, name)
    if name == "LoadBackDoneEvent":
        return cls(oid)
    ev = cls()
    ev.op_id = oid
    if hasattr(ev, "success"):
        ev.success = True
    return ev
