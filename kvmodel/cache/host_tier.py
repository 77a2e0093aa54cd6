"""The Host (L2) tier of the cache model: Host pages, the store queue and its policy, store tickets, ClearCache.

Cache concepts: "Device prefix publication can optionally stream to the Host tier ...; a pending_stores_
queue drives D2H transfers" (L187); "Indices are pool-scoped: one index serves both the Device and Host
tiers of its group" (L154) -- the Host entries live in each group's PrefixCacheIndex; "every store but a
retraction's snapshot pins its Device sources until the ACK" -- a started store holds one BlockRefs
reference on each source (a store ticket) until it is acknowledged; "a store skips keys already in
flight" (L112); "ClearCache rejects in-flight Host writebacks" (L189).

What is queued is the coordinator's policy (CacheCoordinator.publish / free); this module keeps the queue,
the Host pages (one FIFO free list shared by every group, ids 1..num_host_pages - 1; 0 is the null page)
and the tickets. Block quantities only: it never sees tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from kvsim.kvmodel.cache.block_refs import BlockRefs
from kvsim.kvmodel.cache.cache_key import CacheKey
from kvsim.kvmodel.cache.prefix_index import PrefixCacheIndex


@dataclass(frozen=True)
class Transfer:
    group: int
    device_block: int  # the source: the key's canonical Device block, pinned until the ACK
    host_page: int     # the destination
    key: CacheKey


@dataclass(frozen=True)
class StoreOp:
    op_id: int
    transfers: tuple[Transfer, ...]


class HostPool:
    """Host pages: all-or-nothing acquire from a FIFO of free ids, release to its back."""

    def __init__(self, num_pages: int) -> None:
        self.num_pages = num_pages
        self._free: deque[int] = deque(range(1, max(num_pages, 1)))

    @property
    def free(self) -> int:
        return len(self._free)

    def acquire(self, n: int) -> list[int] | None:
        if n > len(self._free):
            return None
        return [self._free.popleft() for _ in range(n)]

    def release(self, page: int) -> None:
        if not 0 < page < self.num_pages or page in self._free:
            raise RuntimeError(f"Host page {page} released while free or out of range")
        self._free.append(page)


class HostTier:
    """The store queue and the tickets of started stores, over the groups' indexes (both tiers)."""

    def __init__(self, num_pages: int, indexes: Sequence[PrefixCacheIndex], refs: BlockRefs) -> None:
        self.pool = HostPool(num_pages)
        self.indexes = indexes
        self.refs = refs
        self.pending: list[CacheKey] = []      # queued keys, in queue order (deduplicated)
        self.in_flight: dict[int, StoreOp] = {}
        self.next_op = 1

    def queue(self, key: CacheKey) -> None:
        if key not in self.pending:
            self.pending.append(key)

    def keys_in_flight(self) -> set[CacheKey]:
        return {t.key for op in self.in_flight.values() for t in op.transfers}

    def start_pending_stores(self) -> StoreOp | None:
        """Drain the queue into one batched store: skip keys already on Host or in flight and keys no longer
        cached on Device; take a Host page per key (evicting Host entries held by nobody, oldest first, when
        the pool is short; keys that still do not fit stay queued) and pin each Device source. None when
        nothing is started."""
        flying = self.keys_in_flight()
        todo: list[tuple[CacheKey, int]] = []
        for key in self.pending:
            idx = self.indexes[key.group]
            entry = idx.find(key)
            if key in flying or idx.host_contains(key) or entry is None:
                continue
            todo.append((key, entry.block))
        short = len(todo) - self.pool.free
        if short > 0:
            self._evict_host(short)
        n = min(len(todo), self.pool.free)
        keep = [k for k, _ in todo[n:]]
        todo = todo[:n]
        self.pending = keep
        if not todo:
            return None
        pages = self.pool.acquire(len(todo))
        if pages is None:  # todo was cut to the pool's free pages above
            raise RuntimeError(f"the Host pool refused {len(todo)} pages it reported free")
        transfers = []
        for (key, block), page in zip(todo, pages, strict=True):
            self.refs.retain(key.group, block)  # the store ticket: unevictable until the ACK
            transfers.append(Transfer(key.group, block, page, key))
        op = StoreOp(self.next_op, tuple(transfers))
        self.next_op += 1
        self.in_flight[op.op_id] = op
        return op

    def complete(self, op_id: int, epoch: int) -> None:
        """The ACK: the Host copies become entries of their groups' indexes; the tickets are dropped."""
        op = self.in_flight.pop(op_id)
        for t in op.transfers:
            self.indexes[t.group].host_register(t.key, t.host_page, epoch)
            self.refs.drop(t.group, t.device_block)

    def _evict_host(self, n: int) -> None:
        entries = sorted(((e.last_access_epoch, k.group, e.page, k) for idx in self.indexes
                          for k, e in idx.host_entries()), key=lambda x: x[:3])
        for _, g, page, key in entries[:n]:
            self.indexes[g].host_evict(key)
            self.pool.release(page)

    def can_clear(self) -> bool:
        """ClearCache is refused while any write-back is unacknowledged."""
        return not self.in_flight

    def clear(self) -> None:
        for idx in self.indexes:
            for key, e in idx.host_entries():
                idx.host_evict(key)
                self.pool.release(e.page)
        self.pending.clear()
