"""BlockRefs: how many holders (request tables, prefix-index entries) reference each CacheBlock.

Cache concepts: "Whether a child is pinned by a request table, published by a prefix-cache entry, or held
by an in-flight transfer is a CacheBlockRef ownership fact that lives with the holders; the pool does not
track it." This is the holders' side: a count per (group, block), and the pool's Release when the last
reference goes. It knows counts only, not which holder holds what.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvsim.kvmodel.cache.block_pool import BlockPool


class BlockRefs:
    __slots__ = ("pool", "_n")

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self._n: dict[tuple[int, int], int] = {}

    def count(self, group: int, block: int) -> int:
        return self._n.get((group, block), 0)

    def adopt(self, group: int, blocks: Iterable[int]) -> None:
        """The first reference to freshly acquired blocks."""
        for b in blocks:
            if (group, b) in self._n:
                raise RuntimeError(f"block {b} of group {group} acquired while referenced")
            self._n[(group, b)] = 1

    def retain(self, group: int, block: int) -> None:
        if (group, block) not in self._n:
            raise RuntimeError(f"retain of unreferenced block {block} of group {group}")
        self._n[(group, block)] += 1

    def drop(self, group: int, block: int) -> bool:
        """Drop one reference; release the block to the pool at zero. True when it was released."""
        key = (group, block)
        n = self._n[key] - 1
        if n:
            self._n[key] = n
            return False
        del self._n[key]
        self.pool.release(group, block)
        return True

    def live(self) -> dict[tuple[int, int], int]:
        return dict(self._n)
