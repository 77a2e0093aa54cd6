"""DevicePagePool: one typed growing pool's physical page-group ids, leases and reservations.

Store contract: "Growing KV 使用一组启动时固定的 homogeneous pools" (own id namespace and free capacity,
fixed at startup, never lent to another pool), "allocated+reserved+available=capacity" ("Materialize 把
reservation 转成 lease；dematerialize 把 lease 还回同一 reservation。两者不改变其他 requests 可用的
global capacity") and "DeviceKVPageLease 独占一个 pool-local physical page group；generation 防止
release/reuse 后的 stale handle".

The pool is physical placement only: it knows page ids, lease generations, which logical page (opaque
object) a lease carries, and the *aggregate* of reservations. Per-address-space reservations are owned
by the address spaces; the pool's `reserved` is their sum. It knows nothing of tokens or frontiers.
Ordering contract: the free list hands out the lowest free id first (deterministic); a follower may
instead adopt any specific free id the engine chose.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvsim.kvmodel.store.errors import InvariantError

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True, slots=True)
class DeviceKVPageLease:
    """A generation-checked handle on one physical page group of one pool."""

    pool: str
    page_id: int
    generation: int


class DevicePagePool:
    __slots__ = ("name", "capacity", "page_bytes", "allocated", "reserved", "_free_heap", "_is_free",
                 "generation", "holder", "draining")

    def __init__(self, name: str, capacity: int, page_bytes: int) -> None:
        self.name = name
        self.capacity = capacity  # N_physical, fixed for the Engine lifetime (CAP-4)
        self.page_bytes = page_bytes
        self.allocated = 0  # leases outstanding; written only by lease()/release()
        self.reserved = 0  # Σ active reservations; written only by reserve()/unreserve()/lease()/release()
        self._free_heap = list(range(capacity))
        self._is_free = bytearray(b"\x01") * capacity
        self.generation = [1] * capacity  # advances on every release (PAGE-2)
        self.holder: list = [None] * capacity  # logical page carried by each leased id (PAGE-1)
        # leased ids whose units already went back to a reservation while a copy pins them (`drain`): not
        # allocated, not yet free; leased ids = allocated + draining
        self.draining = 0

    @property
    def available(self) -> int:
        return self.capacity - self.allocated - self.reserved

    def is_free(self, page_id: int) -> bool:
        return 0 <= page_id < self.capacity and bool(self._is_free[page_id])

    # -- reservations (no page ids) -------------------------------------------------------------
    def reserve(self, n: int) -> None:
        """Move n units from global available into reservations; caller checked `available`."""
        if not 0 <= n <= self.available:
            raise InvariantError("reserve <= available", f"{self.name}: reserve {n} with {self.available} "
                                 "available (the caller must check available first)")
        self.reserved += n

    def unreserve(self, n: int) -> None:
        if not 0 <= n <= self.reserved:
            raise InvariantError("unreserve <= reserved", f"{self.name}: unreserve {n} with {self.reserved} reserved")
        self.reserved -= n

    # -- leases ---------------------------------------------------------------------------------
    def next_free(self) -> int:
        """The id `lease` would pick without a choice (lowest free id); -1 when none."""
        heap, free = self._free_heap, self._is_free
        while heap and not free[heap[0]]:
            heapq.heappop(heap)
        return heap[0] if heap else -1

    def lease(self, holder: object, page_id: int | None = None, from_reservation: bool = False) -> int:
        """Lease one id (lowest free, or the adopted `page_id`) to `holder`; from a reservation or available."""
        if page_id is None:
            page_id = self.next_free()
        if page_id < 0 or not self._is_free[page_id]:
            raise InvariantError("a lease takes a free page", f"{self.name}: page {page_id} is not free (the caller "
                                 "must check an adopted id with is_free)")
        self._is_free[page_id] = 0
        self.holder[page_id] = holder
        self.allocated += 1
        if from_reservation:
            self.reserved -= 1
        return page_id

    def release(self, page_id: int, to_reservation: bool = False, drained: bool = False) -> None:
        """End a lease: back to global available, or dematerialized into the same reservation. A `drained`
        lease's unit went back already (`drain`): only the id becomes free."""
        if self._is_free[page_id]:
            raise InvariantError("a page is released once", f"{self.name}: double release of page {page_id}")
        self._is_free[page_id] = 1
        self.holder[page_id] = None
        self.generation[page_id] += 1
        heapq.heappush(self._free_heap, page_id)
        if drained:
            self.draining -= 1
            return
        self.allocated -= 1
        if to_reservation:
            self.reserved += 1

    def drain(self, page_id: int) -> None:
        """Dematerialize a lease into the same reservation while a copy still pins its page group: the unit
        counts as reserved at once ("dematerialize 把 lease 还回同一 reservation"), the id stays taken until
        the pin goes (`release(drained=True)`)."""
        if self._is_free[page_id]:
            raise InvariantError("drain takes a leased page", f"{self.name}: page {page_id} is not leased")
        self.allocated -= 1
        self.reserved += 1
        self.draining += 1

    @property
    def free_ids(self) -> int:
        """Ids a lease can take now: capacity minus every leased id (allocated and draining)."""
        return self.capacity - self.allocated - self.draining

    def vacate(self, page_id: int) -> None:
        """Take a *guessed* lease off its id without ending it (allocated unchanged): the model chose the id
        itself and the engine named another; `occupy` puts it back on the engine's id."""
        self._is_free[page_id] = 1
        self.holder[page_id] = None
        heapq.heappush(self._free_heap, page_id)

    def occupy(self, page_id: int, holder: object) -> None:
        if not self._is_free[page_id]:
            raise InvariantError("a lease takes a free page", f"{self.name}: page {page_id} is not free (adoption "
                                 "vacates it first)")
        self._is_free[page_id] = 0
        self.holder[page_id] = holder

    def handle(self, page_id: int) -> DeviceKVPageLease:
        return DeviceKVPageLease(self.name, page_id, self.generation[page_id])

    def is_current(self, lease: DeviceKVPageLease) -> bool:
        """A handle is current iff its id is leased and its generation matches (PAGE-2)."""
        return (lease.pool == self.name and 0 <= lease.page_id < self.capacity
                and not self._is_free[lease.page_id] and self.generation[lease.page_id] == lease.generation)

    def leased_ids(self) -> Iterator[int]:
        return (i for i in range(self.capacity) if not self._is_free[i])

    def snapshot(self) -> tuple:
        return (self.name, self.capacity, self.allocated, self.reserved, self.draining, bytes(self._is_free),
                tuple(self.generation), tuple(h.handle if h is not None else None for h in self.holder))
