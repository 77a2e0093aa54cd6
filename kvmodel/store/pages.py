"""LogicalKVPage descriptors and their per-pool store.

Store contract: "Program 为每个 pool 维护 generation-checked logical pages" (object generation, content
epoch, committed columns [0, P], protected columns, address-space references, active references and
writer state, optional Device page-group lease, optional Host extent membership, transaction pins);
"一个 logical page 的 canonical content 由 content epoch + committed columns 标识"; replica validity
"replica.epoch=page.epoch \\land replica.coverage\\ge n"; and "只有当 references、replicas 和
transaction pins 均为零时，descriptor 才能回收并推进 generation".

One owner per fact: references are the holder list (an address space per reference), active
references and protected columns are derived from the holders; the writer is explicit (WR-1 checks it
against the holders). Content keys are kept as segments [(start column, writer token)]: the key of a
column is a function of (token, position), so a forked prefix shares its source's keys.
This module knows nothing of pools' free lists, rows or traces.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.kvmodel.store.errors import InvariantError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    pass


class HostReplica:
    """A page's slice of a HostKVArena extent and the canonical content it holds."""

    __slots__ = ("offset", "size", "epoch", "coverage")

    def __init__(self, offset: int, size: int, epoch: int, coverage: int) -> None:
        self.offset, self.size, self.epoch, self.coverage = offset, size, epoch, coverage

    def key(self) -> tuple:
        return (self.offset, self.size, self.epoch, self.coverage)


class LogicalKVPage:
    __slots__ = ("pool", "index", "generation", "block", "epoch", "committed", "holders", "writer",
                 "device", "dev_epoch", "dev_cov", "host", "pins", "segments", "alive",
                 "drained")
    block: int
    epoch: int
    committed: int
    holders: list[KVAddressSpace]
    writer: KVAddressSpace | None
    device: int
    dev_epoch: int
    dev_cov: int
    host: HostReplica | None
    pins: int
    segments: list[list[int]]
    drained: bool

    def __init__(self, pool: str, index: int, generation: int) -> None:
        self.pool = pool
        self.index = index
        self.generation = generation
        self.alive = False

    def reset(self, block: int, epoch: int) -> None:
        self.alive = True
        self.block = block  # logical block b: the page covers positions [b·P, (b+1)·P)
        self.epoch = epoch  # content epoch; new on materialize, COW and destructive truncate
        self.committed = 0  # committed columns (canonical coverage), written by commit/truncate
        self.holders = []  # address spaces referencing the page (one entry per reference)
        self.writer = None  # the single active address space allowed to write (WR-1)
        self.device = -1  # leased physical page-group id, -1 when no Device replica
        self.dev_epoch = 0
        self.dev_cov = 0
        self.host = None  # HostReplica or None
        self.pins = 0  # transaction pins (REP-2)
        # its Device lease went back to a reservation while a copy still pins it (ENT-4, decision 26): the
        # page group stays the copy's until the pin goes, but no longer counts as allocated
        self.drained = False
        self.segments = []  # [[start_col, writer_token], ...] over committed columns

    # -- derived views --------------------------------------------------------------------------
    @property
    def refs(self) -> int:
        return len(self.holders)

    @property
    def active_refs(self) -> int:
        return sum(1 for s in self.holders if s.active)

    @property
    def protected(self) -> int:
        """Columns some holder's checkpoint-protected frontier requires (derived, never stored)."""
        base = self.block * PAGE_SIZE
        best = 0
        for s in self.holders:
            cols = s.protected - base
            if cols > best:
                best = cols
        return min(best, PAGE_SIZE)

    def device_valid(self, n: int) -> bool:
        """The Device replica is valid for the first n columns (PAGE-3)."""
        return self.device >= 0 and self.dev_epoch == self.epoch and self.dev_cov >= n

    def host_valid(self, n: int) -> bool:
        h = self.host
        return h is not None and h.epoch == self.epoch and h.coverage >= n

    @property
    def handle(self) -> tuple[str, int, int]:
        return (self.pool, self.index, self.generation)

    def key_token_at(self, col: int) -> int | None:
        """The writer token of committed column `col` (None beyond the committed columns)."""
        if col >= self.committed:
            return None
        token = None
        for start, tok in self.segments:
            if start > col:
                break
            token = tok
        return token

    def cut_segments(self, cols: int) -> None:
        """Keep content-key segments of the first `cols` columns only."""
        self.segments = [s for s in self.segments if s[0] < cols]

    def extend_segments(self, start: int, token: int) -> None:
        if self.segments and self.segments[-1][1] == token:
            return
        if self.segments and self.segments[-1][0] == start:
            self.segments[-1] = [start, token]
        else:
            self.segments.append([start, token])

    def snapshot(self) -> tuple:
        return (self.handle, self.alive, getattr(self, "block", None), getattr(self, "epoch", None),
                getattr(self, "committed", None),
                tuple(s.uid for s in getattr(self, "holders", ())),
                None if (w := getattr(self, "writer", None)) is None else w.uid,
                getattr(self, "device", None), getattr(self, "dev_epoch", None), getattr(self, "dev_cov", None),
                None if (h := getattr(self, "host", None)) is None else h.key(), getattr(self, "pins", None),
                tuple(tuple(s) for s in getattr(self, "segments", ())), getattr(self, "drained", None))


class LogicalPageStore:
    """Descriptors of one pool: allocation (lowest free index) and reclamation (generation advances)."""

    __slots__ = ("pool", "pages", "_free", "_next_epoch", "live")

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.pages: list[LogicalKVPage] = []
        self._free: list[int] = []
        self._next_epoch = 1
        self.live = 0

    def new_epoch(self) -> int:
        e = self._next_epoch
        self._next_epoch += 1
        return e

    def allocate(self, block: int) -> LogicalKVPage:
        if self._free:
            page = self.pages[heapq.heappop(self._free)]
        else:
            page = LogicalKVPage(self.pool, len(self.pages), 1)
            self.pages.append(page)
        page.reset(block, self.new_epoch())
        self.live += 1
        return page

    def reclaim(self, page: LogicalKVPage) -> None:
        """Reclaim a descriptor with no references, replicas or pins; its generation advances (PAGE-4)."""
        if not page.alive or page.holders or page.device >= 0 or page.host is not None or page.pins:
            raise InvariantError("reclaim at zero references, replicas and pins",
                                 f"{self.pool}: descriptor {page.handle} is still held (the caller is maybe_reclaim)")
        page.alive = False
        page.generation += 1
        heapq.heappush(self._free, page.index)
        self.live -= 1

    def live_pages(self) -> Iterator[LogicalKVPage]:
        return (p for p in self.pages if p.alive)

    def is_current(self, handle: tuple[str, int, int]) -> bool:
        pool, index, generation = handle
        return (pool == self.pool and 0 <= index < len(self.pages) and self.pages[index].alive
                and self.pages[index].generation == generation)

    def snapshot(self) -> tuple:
        return (self._next_epoch, self.live, tuple(sorted(self._free)), tuple(p.snapshot() for p in self.pages))
