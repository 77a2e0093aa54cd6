"""BlockPool: physical placement of CacheBlocks in LCM parents — token-free, owner-free.

Cache concepts, "Virtual block placement" and "BlockPool owns the physical placement indexes": parents
1..N start in a FIFO of empty parents; a parent binds to a group (with that group's packing k) on first
use and unbinds, back to the FIFO's end, when its last child is released. A group with shard_count D sees
k·D virtual children per parent assigned cyclically to D buckets (owners): "a sharded group has 1 + N*K
local pages and 1 + N*D*K virtual blocks"; virtual block id = 1 + (parent − 1)·k·D + child, kernel
(local) page id = 1 + (parent − 1)·k + child // D, and id 0 is the null block, never handed out.
Placement: "the least-loaded request bucket (ties by bucket ID), then the most occupied parent (ties by
parent ID), then the lowest child ID"; a FIFO parent is opened only when bound-parent holes are exhausted.
An acquire is all-or-nothing: "Insufficient capacity returns before changing the indices, occupancy, or
FIFO."

The pool knows which child slots are occupied, never who holds them, and knows no token quantity.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from kvsim.kvmodel.cache.group_spec import CacheConfigError

NULL_BLOCK = 0


class BlockPool:
    def __init__(self, num_parents: int, packing: Iterable[int]) -> None:
        self.num_parents = num_parents
        self.packing = tuple(packing)  # cache_blocks_per_lcm_block per group
        n, g = num_parents + 1, len(self.packing)
        self._shards: list[int | None] = [None] * g
        self._bound: list[int | None] = [None] * n  # parent -> group (None: empty)
        self._occ: list[list[bool] | None] = [None] * n  # parent -> occupied children
        self._count = [0] * n  # parent -> occupied children count
        self._fifo: deque[int] = deque(range(1, n))  # empty parents, oldest first
        self._free = [0] * g  # group -> holes in its bound parents
        self._partial: list[list[set[int]] | None] = [None] * g  # group -> bucket -> parents with a hole there

    # -- geometry (fixed once) --------------------------------------------------------------------

    def register(self, group: int, shard_count: int) -> None:
        """Fix a group's shard count; a different value later is rejected, even after every release."""
        if shard_count < 1:
            raise CacheConfigError("shard_count must be >= 1")
        have = self._shards[group]
        if have is None:
            self._shards[group] = shard_count
            self._partial[group] = [set() for _ in range(shard_count)]
        elif have != shard_count:
            raise CacheConfigError(f"group {group}: geometry is fixed (shard_count {have}), cannot become "
                                   f"{shard_count}")

    def _bound_occ(self, parent: int) -> list[bool]:
        """The occupancy bitmap of a bound parent (an unbound one has none)."""
        occ = self._occ[parent]
        if occ is None:
            raise RuntimeError(f"parent {parent} is not bound to a group")
        return occ

    def _group_parts(self, group: int) -> list[set[int]]:
        """Per bucket, the partial parents of a registered group."""
        parts = self._partial[group]
        if parts is None:
            raise RuntimeError(f"group {group} is not registered")
        return parts

    def shard_count(self, group: int) -> int:
        """The registered shard count (1 until registration: a read never fixes the geometry)."""
        return self._shards[group] or 1

    def slots_per_parent(self, group: int) -> int:
        """Virtual children per parent: packing × shard_count."""
        return self.packing[group] * self.shard_count(group)

    def block_id(self, group: int, parent: int, child: int) -> int:
        return 1 + (parent - 1) * self.slots_per_parent(group) + child

    def locate(self, group: int, block: int) -> tuple[int, int]:
        """(parent, child) of a virtual block id (> 0)."""
        if block <= NULL_BLOCK:
            raise ValueError("the null block has no location")
        spp = self.slots_per_parent(group)
        return (block - 1) // spp + 1, (block - 1) % spp

    def bucket_of(self, group: int, block: int) -> int:
        return self.locate(group, block)[1] % self.shard_count(group)

    def to_local(self, group: int, block: int) -> tuple[int, int] | None:
        """(owner bucket, kernel page id) of a virtual block; None for the null block (no owner)."""
        if block == NULL_BLOCK:
            return None
        parent, child = self.locate(group, block)
        d = self.shard_count(group)
        return child % d, 1 + (parent - 1) * self.packing[group] + child // d

    def virtual_block_count(self, group: int) -> int:
        return 1 + self.num_parents * self.slots_per_parent(group)

    def local_page_count(self, group: int) -> int:
        return 1 + self.num_parents * self.packing[group]

    # -- indexes (read-only views) -----------------------------------------------------------------

    def free_slots(self, group: int) -> int:
        return self._free[group]

    @property
    def num_empty_parents(self) -> int:
        return len(self._fifo)

    def empty_parents(self) -> tuple[int, ...]:
        return tuple(self._fifo)

    def parent(self, parent: int) -> tuple[int | None, tuple[bool, ...]]:
        """(bound group, occupied children) of a parent; (None, ()) when empty."""
        occ = self._occ[parent]
        return self._bound[parent], (tuple(occ) if occ is not None else ())

    def occupied_count(self, parent: int) -> int:
        return self._count[parent]

    def partial_parents(self, group: int, bucket: int) -> frozenset[int]:
        parts = self._partial[group]
        return frozenset(parts[bucket]) if parts is not None else frozenset()

    def is_occupied(self, group: int, block: int) -> bool:
        if block <= NULL_BLOCK or block >= self.virtual_block_count(group):
            return False
        parent, child = self.locate(group, block)
        return self._bound[parent] == group and self._bound_occ(parent)[child]

    def capacity_for(self, group: int) -> int:
        """Blocks an acquire for this group could take now: holes + empty parents × slots per parent."""
        return self._free[group] + len(self._fifo) * self.slots_per_parent(group)

    def snapshot(self) -> tuple:
        """Every placement fact and index, frozen: (packing, shard counts, parent bindings, occupancy
        bitmaps, occupied counts, FIFO, free-slot counts, per-bucket partial-parent sets)."""
        return (self.packing, tuple(self._shards), tuple(self._bound),
                tuple(tuple(o) if o else None for o in self._occ),
                tuple(self._count), tuple(self._fifo), tuple(self._free),
                tuple(tuple(frozenset(s) for s in p) if p else None for p in self._partial))

    # -- execution ---------------------------------------------------------------------------------

    def acquire(self, group: int, num: int, table_ids: Iterable[int] = ()) -> tuple[int, ...] | None:
        """num blocks for group, or None with nothing changed when capacity is short.

        table_ids: the request's current table in this group; bucket loads count every nonnull ref in it
        (shared prefixes and reserved headroom included), derived afresh on every call.
        """
        if num < 0:
            raise ValueError("acquire count must be >= 0")
        if self._shards[group] is None:
            self.register(group, 1)  # "an ordinary standalone pool fixes a single bucket on first use"
        d = self.shard_count(group)
        if self.capacity_for(group) < num:
            return None
        loads = [0] * d
        for b in table_ids:
            if b != NULL_BLOCK:
                loads[self.bucket_of(group, b)] += 1
        out: list[int] = []
        parts = self._group_parts(group)
        while len(out) < num:
            buckets = [b for b in range(d) if parts[b]]
            if not buckets:
                self._bind(group, self._fifo.popleft())
                continue
            b = min(buckets, key=lambda x: (loads[x], x))
            parent = min(parts[b], key=lambda p: (-self._count[p], p))
            occ = self._bound_occ(parent)
            child = next(c for c in range(b, len(occ), d) if not occ[c])
            self._occupy(group, parent, child, b)
            loads[b] += 1
            out.append(self.block_id(group, parent, child))
        return tuple(out)

    def release(self, group: int, block: int) -> None:
        """Free one occupied child; the parent returns to the FIFO's back when its last child goes."""
        parent, child = self.locate(group, block)
        occ = self._occ[parent]
        if self._bound[parent] != group or occ is None or not occ[child]:
            raise RuntimeError(f"release of block {block} of group {group}, which is not occupied")
        occ[child] = False
        self._count[parent] -= 1
        self._free[group] += 1
        d = self.shard_count(group)
        parts = self._group_parts(group)
        parts[child % d].add(parent)
        if self._count[parent] == 0:
            self._free[group] -= len(occ)
            for s in parts:
                s.discard(parent)
            self._bound[parent] = None
            self._occ[parent] = None
            self._fifo.append(parent)

    def _bind(self, group: int, parent: int) -> None:
        spp = self.slots_per_parent(group)
        self._bound[parent] = group
        self._occ[parent] = [False] * spp
        self._free[group] += spp
        for s in self._group_parts(group):
            s.add(parent)

    def _occupy(self, group: int, parent: int, child: int, bucket: int) -> None:
        occ = self._bound_occ(parent)
        occ[child] = True
        self._count[parent] += 1
        self._free[group] -= 1
        d = self.shard_count(group)
        if all(occ[c] for c in range(bucket, len(occ), d)):
            self._group_parts(group)[bucket].discard(parent)
