"""KVStore: the state root of the store model and the internals its transactions share.

Holds the startup-fixed typed pools ("Program 在启动时一次性建立完整 typed capacity vector"), their
logical page stores and execution tables, the HostKVArena, active bundles, retained checkpoints,
in-flight GPU units and Host/Device transfers. The transactions (`activation`, `mapping`, `units`,
`settle`, `transfers`, `observe`) are plain functions over this object; every one first checks
(raising ContractViolation or returning a Refusal with no mutation) and then applies, recording the
entities it touched so that checkers can run incrementally.
This module knows nothing of traces, reports or the rule catalogue's text.
"""

from __future__ import annotations

from kvsim.kvmodel.store.address_space import KVAddressSpace, writer_token
from kvsim.kvmodel.store.capacity import resolve_capacity
from kvsim.kvmodel.store.config import PAGE_SIZE, StoreConfig
from kvsim.kvmodel.store.coverage import Coverage
from kvsim.kvmodel.store.ended import EndedHandles
from kvsim.kvmodel.store.errors import ContractViolation
from kvsim.kvmodel.store.host_arena import HostKVArena
from kvsim.kvmodel.store.pages import LogicalPageStore
from kvsim.kvmodel.store.pool import DevicePagePool
from kvsim.kvmodel.store.tables import ExecutionTablePool
from kvsim.kvmodel.store.units import COMMIT_RULES, LAUNCH_RULES


class Transfer:
    """A phase-by-phase Host/Device replacement copy ("reserve destination -> copy ... -> release source")."""

    __slots__ = ("xid", "direction", "ckpt", "pool", "pages", "blocks", "generations", "phase", "dest", "snap",
                 "pinned_source")

    def __init__(self, xid, direction, ckpt, pool, pages):
        self.xid, self.direction, self.ckpt, self.pool, self.pages = xid, direction, ckpt, pool, pages
        self.blocks = [p.block for p in pages]  # as reserved: a reclaimed descriptor may since serve another block
        self.generations = [p.generation for p in pages]  # a page reclaimed after publish is not ours
        self.phase = None  # last completed phase
        self.dest = []  # d2h: host offsets; h2d: device page ids
        self.snap = []  # (epoch, coverage) copied per page
        self.pinned_source = False


class KVStore:
    def __init__(self, config: StoreConfig):
        self.config = config
        self.resolution = resolve_capacity(config)
        self.P = PAGE_SIZE
        self.L = config.logical_pages
        self.geometry = {g.name: g for g in self.resolution.layout.pools}
        self.pool_names = config.pool_names
        self.pools = {n: DevicePagePool(n, g.pages, g.page_bytes) for n, g in self.geometry.items()}
        self.page_stores = {n: LogicalPageStore(n) for n in self.pool_names}
        self.tables = {n: ExecutionTablePool(n, config.max_concurrency, self.L) for n in self.pool_names}
        self.arena = HostKVArena(config.host_arena_bytes)
        self.host_slices: dict[int, object] = {}  # host offset -> page holding that slice (REP-3)
        self.bundles: dict = {}  # seq -> SequenceKVBundle
        self.checkpoints: dict = {}  # ckpt -> Checkpoint
        self.ended_seqs = EndedHandles()
        self.ended_ckpts = EndedHandles()  # ckpt -> "released" | "moved"
        self.units: dict = {}  # unit id -> Unit (in flight)
        self.xfers: dict = {}  # xfer id -> Transfer (open)
        self.ended_xfers = EndedHandles()
        self.activations = 0
        self._next_uid = 1
        self.cov = Coverage()
        # Page-payload copies the last operation requires of the physical side, in order:
        # ("copy", pool, src_page, dst_page, columns) | ("h2d", pool, host_offset, dst_page)
        # | ("d2h", pool, src_page, host_offset) | ("free", pool, page): a lease ended, its payload is dead.
        # A lockstep driver replays them on real planes.
        self.effects: list = []
        self.launch_cells = self.cov.cells(LAUNCH_RULES)  # the hot paths' coverage cells, fetched once
        self.commit_cells = self.cov.cells(COMMIT_RULES)
        self.reset_touched()

    # -- touched entities (for incremental checking) --------------------------------------------
    def reset_touched(self) -> None:
        """Forget what the previous operation touched (dicts keyed by entity: ordered, no duplicates)."""
        if self.effects:
            self.effects.clear()
        try:
            if self.t_pages:
                self.t_pages.clear()
            if self.t_spaces:
                self.t_spaces.clear()
            if self.t_pools:
                self.t_pools.clear()
            if self.t_rows:
                self.t_rows.clear()
        except AttributeError:
            self.t_pages, self.t_spaces, self.t_pools, self.t_rows = {}, {}, {}, {}
        self.t_host = False

    def touch_space(self, s) -> None:
        self.t_spaces[s] = None
        self.t_pools[s.pool] = None
        if s.row >= 0:
            self.t_rows[(s.pool, s.row)] = None

    # -- shared internals -----------------------------------------------------------------------
    def new_space(self, pool: str, owner: str) -> KVAddressSpace:
        s = KVAddressSpace(self._next_uid, pool, owner)
        self._next_uid += 1
        return s

    def set_token(self, space, seq: str) -> None:
        """A fresh content-key lineage for an activation (new incarnation of `seq`)."""
        space.owner = seq
        space.rewrites = 0
        space.token = writer_token(seq, space.pool, self.activations)

    def lease_device(self, page, page_id=None, from_reservation=False) -> int:
        pid = self.pools[page.pool].lease(page, page_id, from_reservation)
        page.device = pid
        self.t_pools[page.pool] = None
        return pid

    def free_device(self, page, to_reservation=False) -> None:
        self.effects.append(("free", page.pool, page.device))
        self.pools[page.pool].release(page.device, to_reservation)
        page.device = -1
        page.dev_epoch = page.dev_cov = 0
        self.t_pools[page.pool] = None

    def free_host(self, page) -> None:
        h = page.host
        self.arena.release(h.offset, h.size)
        del self.host_slices[h.offset]
        page.host = None
        self.t_host = True

    def drop_ref(self, page, space, to_reservation=False) -> None:
        """Remove one address-space reference; a page left with none drops its replicas and is reclaimed.

        "Release 逐个解除 logical references，并只在最后引用消失时释放 physical replicas"
        With `to_reservation` (an active space unmapping a block), the entitlement unit goes back to the
        same reservation ("解除的 Device leases 回到同一 active reservation"): a freed lease is
        dematerialized into it; for a page others still hold, no lease is freed, so the unit is
        reserved again from global available — when the pool has none left, the entitlement shrinks
        (recorded in ENT-4's entry). A page left with a single active holder becomes its private page.
        """
        page.holders.remove(space)
        if page.writer is space:
            page.writer = None
        self.t_pages[page] = None
        if not page.holders:
            if page.device >= 0 and page.pins == 0:
                self.free_device(page, to_reservation)
                if to_reservation:
                    space.reservation += 1
            elif to_reservation:
                self.rereserve(space)
            self.maybe_reclaim(page)
            return
        if to_reservation:
            self.rereserve(space)
        if len(page.holders) == 1 and page.holders[0].active:
            self.make_private(page, page.holders[0])

    def rereserve(self, space) -> None:
        pool = self.pools[space.pool]
        if pool.available > 0:
            pool.reserve(1)
            space.reservation += 1
            self.t_pools[space.pool] = None
            self.t_spaces[space] = None

    def make_private(self, page, holder) -> None:
        """The sole (active) holder becomes the writer; columns beyond its frontier stop being canonical."""
        page.writer = holder
        cols = holder.committed - page.block * self.P
        self.cut_page(page, 0 if cols < 0 else self.P if cols > self.P else cols)
        self.t_spaces[holder] = None

    def cut_page(self, page, cols: int) -> None:
        """Destructively keep the first `cols` committed columns: a new content epoch, content keys cut.

        "a private page whose committed columns are cut gets a new content epoch" (DESIGN §6); its Device
        replica is rewritten in place, so it stays current; a Host replica keeps the old epoch (stale).
        """
        if page.committed > cols:
            page.committed = cols
            page.epoch = self.page_stores[page.pool].new_epoch()
            page.cut_segments(cols)
            if page.device >= 0:
                page.dev_epoch, page.dev_cov = page.epoch, cols
        self.t_pages[page] = None

    def maybe_reclaim(self, page) -> None:
        """PAGE-4: reclaim the descriptor at zero references, replicas and pins (its generation advances)."""
        if page.holders or page.pins:
            return
        if page.device >= 0:
            self.free_device(page)
        if page.host is not None:
            self.free_host(page)
        self.page_stores[page.pool].reclaim(page)
        self.t_pages[page] = None

    def resolve_blocks(self, ckpt_id: str, pool: str, blocks) -> list:
        """Pages of a retained checkpoint's blocks, or a TRACE-2 violation for a stale reference."""
        from kvsim.kvmodel.store.errors import violation
        self.cov.check("TRACE-2")
        ck = self.checkpoints.get(ckpt_id)
        if ck is None:
            why = self.ended_ckpts.get(ckpt_id)
            raise violation("TRACE-2", f"checkpoint {ckpt_id!r} " + (f"was {why}" if why else "is unknown"),
                            ckpt=ckpt_id, pool=pool)
        space = ck.spaces.get(pool)
        if space is None:
            raise violation("TRACE-2", f"checkpoint {ckpt_id!r} has no {pool} address space", ckpt=ckpt_id, pool=pool)
        pages, seen = [], set()
        for b in blocks:
            if b >= len(space.pages) or b in seen:
                what = "listed twice" if b in seen else f"beyond its {len(space.pages)} member pages"
                raise violation("TRACE-2", f"block {b} of checkpoint {ckpt_id!r} ({pool}) is {what}",
                                ckpt=ckpt_id, pool=pool, block=b)
            seen.add(b)
            pages.append(space.pages[b])
        return pages

    # -- queries ------------------------------------------------------------------------------------
    def space_of(self, seq: str, pool: str):
        b = self.bundles.get(seq)
        return None if b is None else b.spaces.get(pool)

    def table_row(self, seq: str, pool: str) -> list[int]:
        s = self.space_of(seq, pool)
        return list(self.tables[pool].table[s.row]) if s is not None and s.row >= 0 else []

    def pool_counters(self, pool: str) -> dict[str, int]:
        p = self.pools[pool]
        return {"capacity": p.capacity, "allocated": p.allocated, "reserved": p.reserved, "available": p.available}

    def all_spaces(self):
        """Every live address space: active bundles first, then retained checkpoints (insertion order)."""
        for b in self.bundles.values():
            yield from b.spaces.values()
        for c in self.checkpoints.values():
            yield from c.spaces.values()

    def snapshot(self) -> tuple:
        """The whole model state as comparable data (refused requests must leave it unchanged)."""
        return (tuple(p.snapshot() for p in self.pools.values()),
                tuple(s.snapshot() for s in self.page_stores.values()),
                tuple(t.snapshot() for t in self.tables.values()),
                self.arena.snapshot(), tuple(sorted(self.host_slices)),
                tuple(b.snapshot() for b in self.bundles.values()),
                tuple(c.snapshot() for c in self.checkpoints.values()),
                tuple(s.snapshot() for s in self.all_spaces()),
                self.ended_seqs.snapshot(), self.ended_ckpts.snapshot(),
                tuple((u.uid, tuple((r[0].uid, r[1], r[2]) for r in u.rows)) for u in self.units.values()),
                tuple((x.xid, x.phase, tuple(x.dest), tuple(x.snap)) for x in self.xfers.values()),
                self.ended_xfers.snapshot(), self.activations, self._next_uid)


def raise_findings(store: KVStore, findings: list) -> None:
    if findings:
        raise ContractViolation(findings)
