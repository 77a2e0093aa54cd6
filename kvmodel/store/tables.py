"""Execution rows and the block-table mirror of one pool.

Store contract: "每个 pool 在启动时建立固定地址的 Device block-table matrix" (block_tables[N_logical, C])
(one row leased per active address space, I32 pool-local physical page ids), "Inactive address space
没有 row" and "Execution row 不拥有 logical page、 reservation 或 frontier". Holes are -1 (NInfer's
negative kPagedKVPageHole). The table is an execution mirror: the membership is the authority and AS-3
checks the mirror against it.
This module knows nothing of logical pages or reservations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store.errors import InvariantError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvsim.kvmodel.store.address_space import KVAddressSpace

HOLE = -1


class ExecutionTablePool:
    __slots__ = ("pool", "rows", "logical_pages", "owner", "table", "last")

    def __init__(self, pool: str, rows: int, logical_pages: int) -> None:
        self.pool = pool
        self.rows = rows  # C = max_concurrency
        self.logical_pages = logical_pages  # N_logical = L
        self.owner: list = [None] * rows  # the active address space leasing each row
        self.table = [[HOLE] * logical_pages for _ in range(rows)]
        # per (row, block): the last (page id, lease generation) published there, kept after unmapping and
        # row recycling, so a stale entry is told by generation (PAGE-2) however the id was reused since
        self.last: list = [[None] * logical_pages for _ in range(rows)]

    def free_row(self) -> int:
        """Lowest free row, -1 when none."""
        for r, o in enumerate(self.owner):
            if o is None:
                return r
        return -1

    def is_free(self, row: int) -> bool:
        return 0 <= row < self.rows and self.owner[row] is None

    def lease(self, space: KVAddressSpace, row: int) -> None:
        if self.owner[row] is not None:
            raise InvariantError("one active space per row", f"{self.pool} row {row} is leased already "
                                 "(the caller must check is_free)")
        self.owner[row] = space

    def release(self, row: int) -> None:
        """Recycle a row at a GPU boundary: it keeps no mapping."""
        self.owner[row] = None
        self.unmap(row, 0)

    def publish(self, row: int, begin: int, page_ids: Sequence[int], generations: Sequence[int]) -> None:
        """Publish one contiguous table slice starting at logical block `begin` (ids and their lease generations)."""
        end = begin + len(page_ids)
        if end > self.logical_pages:  # a slice assignment would silently grow the row
            raise InvariantError("a row holds L blocks", f"{self.pool} row {row}: publish of blocks [{begin}, {end}) "
                                 f"beyond {self.logical_pages}")
        self.table[row][begin:end] = page_ids
        self.last[row][begin:end] = [(pid, generations[pid]) for pid in page_ids]

    def unmap(self, row: int, begin: int) -> None:
        """Holes from logical block `begin` on (slice assignment: a row has L = ceil(S/P) entries)."""
        t = self.table[row]
        if begin < len(t):
            t[begin:] = [HOLE] * (len(t) - begin)

    def snapshot(self) -> tuple:
        return (tuple(None if o is None else o.uid for o in self.owner), tuple(tuple(t) for t in self.table))
