"""CacheState: the observable facts of a cache, as the TS-* checkers read them.

Built by CacheCoordinator.state() from the model, or by hand from a real scheduler's observations (its
configuration, block tables, published keys, fresh blocks). Every field but `config` is optional; a rule
whose facts are absent is vacuous. The checkers only read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvsim.kvmodel.cache.block_pool import BlockPool
from kvsim.kvmodel.cache.cache_key import CacheKey
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.layer_binding import LayerBinding


@dataclass
class CacheState:
    config: CacheConfig
    pool: BlockPool | None = None
    # request id -> per-group block ids by slot (0 = null hole)
    tables: Mapping[str, Sequence[Sequence[int]]] = field(default_factory=dict)
    # per group: block -> (its cache key, the slot it covers); None when the cache's index is not observed
    published: Sequence[Mapping[int, tuple[CacheKey, int]]] | None = None
    # per group: the blocks currently allocated, when there is no pool to ask
    live_blocks: Sequence[frozenset[int]] | None = None
    layers: Sequence[LayerBinding] = ()
    # operation records (kvmodel.cache.journal) not yet checked
    journal: Sequence = ()

    def is_live(self, group: int, block: int) -> bool | None:
        if self.pool is not None:
            return self.pool.is_occupied(group, block)
        if self.live_blocks is not None:
            return block in self.live_blocks[group]
        return None
