"""PrefixCacheIndex: one group's CacheKey → canonical CacheBlock index, with access epochs and kinds.

Cache concepts: "A cache entry is metadata plus an owning CacheBlockRef that publishes an existing block
for reuse; registration neither allocates nor copies physical storage." Registering a key that exists
keeps the canonical block (the caller swaps its slot to it) and bumps the entry's epoch; a boundary kind
is only ever raised. "Anything that needs 'held only by the cache' asks PrefixCacheIndex
(ParentIsFullyEvictable), which is a scan". The index never sees a BlockTable and never allocates; it
holds its references through BlockRefs. "Indices are pool-scoped: one index serves both the Device and Host
tiers of its group": Host entries (key -> Host page) sit beside the Device ones; the Host pages themselves
belong to kvmodel.cache.host_tier.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvsim.kvmodel.cache.block_refs import BlockRefs
from kvsim.kvmodel.cache.cache_key import BoundaryKind, CacheKey


@dataclass
class CacheEntry:
    block: int
    last_access_epoch: int
    logical_index: int  # block-table slot the block covers
    kind: BoundaryKind = BoundaryKind.CHUNK
    was_acquired: bool = False


@dataclass
class HostEntry:
    page: int  # the Host page holding the key's copy
    last_access_epoch: int


class PrefixCacheIndex:
    def __init__(self, group: int, refs: BlockRefs) -> None:
        self.group = group
        self.refs = refs
        self._by_key: dict[CacheKey, CacheEntry] = {}
        self._by_block: dict[int, CacheKey] = {}
        self._host: dict[CacheKey, HostEntry] = {}

    # -- the Host tier of the same index --------------------------------------------------------------
    def host_contains(self, key: CacheKey) -> bool:
        return key in self._host

    def host_find(self, key: CacheKey) -> HostEntry | None:
        return self._host.get(key)

    def host_register(self, key: CacheKey, page: int, epoch: int) -> None:
        if key.group != self.group:
            raise ValueError(f"key of group {key.group} registered in group {self.group}'s index")
        if key in self._host:
            raise RuntimeError(f"{key} is already on Host (a store must skip it)")
        self._host[key] = HostEntry(page, epoch)

    def host_evict(self, key: CacheKey) -> HostEntry:
        return self._host.pop(key)

    def host_entries(self) -> list[tuple[CacheKey, HostEntry]]:
        """Host entries in insertion order (deterministic)."""
        return list(self._host.items())

    def __len__(self) -> int:
        return len(self._by_key)

    def contains(self, key: CacheKey) -> bool:
        return key in self._by_key

    def find(self, key: CacheKey) -> CacheEntry | None:
        return self._by_key.get(key)

    def key_of(self, block: int) -> CacheKey | None:
        return self._by_block.get(block)

    def entries(self) -> list[tuple[CacheKey, CacheEntry]]:
        """Entries in insertion order (deterministic)."""
        return list(self._by_key.items())

    def register(self, key: CacheKey, block: int, epoch: int, logical_index: int,
                 kind: BoundaryKind = BoundaryKind.CHUNK) -> int:
        """Publish block under key; returns the canonical block (the existing one if key is cached)."""
        if key.group != self.group:
            raise ValueError(f"key of group {key.group} registered in group {self.group}'s index")
        e = self._by_key.get(key)
        if e is not None:
            e.last_access_epoch = max(e.last_access_epoch, epoch)
            e.kind = max(e.kind, kind)
            return e.block
        if block in self._by_block:
            raise RuntimeError(f"block {block} already published under another key")
        self.refs.retain(self.group, block)
        self._by_key[key] = CacheEntry(block, epoch, logical_index, kind)
        self._by_block[block] = key
        return block

    def acquire_matched(self, keys: Iterable[CacheKey], epoch: int) -> None:
        """Mark hits as accessed at epoch (the caller's tables take their pins)."""
        for k in keys:
            e = self._by_key[k]
            e.last_access_epoch = max(e.last_access_epoch, epoch)
            e.was_acquired = True

    def evict(self, key: CacheKey) -> bool:
        """Drop an evictable entry (held only by the cache) and release its block to the pool."""
        if not self.is_evictable(key):
            raise RuntimeError(f"{key} is pinned beyond the cache (or not cached): not evictable")
        e = self._by_key.pop(key)
        del self._by_block[e.block]
        return self.refs.drop(self.group, e.block)

    def is_evictable(self, key: CacheKey) -> bool:
        """Held only by the cache: evicting it frees storage."""
        e = self._by_key.get(key)
        return e is not None and self.refs.count(self.group, e.block) == 1

    def evictable(self) -> list[tuple[CacheKey, CacheEntry]]:
        return [(k, e) for k, e in self._by_key.items() if self.refs.count(self.group, e.block) == 1]

    def parent_is_fully_evictable(self, parent: int) -> bool:
        """Every occupied child of parent is held only by this index (a scan: eviction policy and leak
        checks only)."""
        pool = self.refs.pool
        bound, occ = pool.parent(parent)
        if bound != self.group:
            return False
        for child, used in enumerate(occ):
            if used:
                key = self._by_block.get(pool.block_id(self.group, parent, child))
                if key is None or not self.is_evictable(key):
                    return False
        return True
