"""KVStore: the state root of the store model and the internals its transactions share.

Holds the startup-fixed typed pools ("Program 在启动时一次性建立完整 typed capacity vector"), their
logical page stores and execution tables, the HostKVArena, active bundles, retained checkpoints,
in-flight GPU units and Host/Device transfers. The transactions (`activation`, `mapping`, `units`,
`settle`, `transfers`, `observe`) are plain functions over this object, offered here as methods; every
one first checks (raising ContractViolation or returning a Refusal with no mutation) and then applies,
recording the entities it touched so that checkers can run incrementally.
This module knows nothing of traces, reports or the rule catalogue's text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import activation, host_place, mapping, observe, settle, transfers, units
from kvsim.kvmodel.store.address_space import KVAddressSpace, writer_token
from kvsim.kvmodel.store.capacity import resolve_capacity
from kvsim.kvmodel.store.config import PAGE_SIZE, StoreConfig
from kvsim.kvmodel.store.coverage import Coverage
from kvsim.kvmodel.store.effects import FreeLease
from kvsim.kvmodel.store.ended import EndedHandles
from kvsim.kvmodel.store.errors import ContractViolation, InvariantError, violation
from kvsim.kvmodel.store.host_arena import HostKVArena
from kvsim.kvmodel.store.pages import LogicalPageStore
from kvsim.kvmodel.store.pool import DevicePagePool
from kvsim.kvmodel.store.tables import ExecutionTablePool
from kvsim.kvmodel.store.units import COMMIT_RULES, LAUNCH_RULES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any

    from kvsim.kvmodel.store.address_space import Checkpoint, SequenceKVBundle
    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.transfers import Transfer


class KVStore:
    """The model's state root, with the transactions as methods (each records what it touched).

    Touched entities accumulate until `spec.checking.Checker.incremental` consumes them (or
    `reset_touched` is called): a caller that checks after every operation sees exactly that operation's.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.resolution = resolve_capacity(config)
        self.P = PAGE_SIZE
        self.L = config.logical_pages
        self.S = config.max_context  # the per-sequence ceiling (AS-6)
        self.geometry = {g.name: g for g in self.resolution.layout.pools}
        self.pool_names = config.pool_names
        self.pools = {n: DevicePagePool(n, g.pages, g.page_bytes) for n, g in self.geometry.items()}
        self.page_stores = {n: LogicalPageStore(n) for n in self.pool_names}
        self.tables = {n: ExecutionTablePool(n, config.max_concurrency, self.L) for n in self.pool_names}
        self.arena = HostKVArena(config.host_arena_bytes)
        self.host_slices: dict[int, LogicalKVPage] = {}  # host offset -> page holding that slice (REP-3)
        self.host_guessed: set[int] = set()  # offsets the model placed itself (kvmodel.store.host_place)
        self.host_virtual = 0  # bytes of guessed placeholders beyond the arena's end
        self.host_virtual_end = 0
        # REP-3's incremental form reads these; its audit recounts them (kvmodel.store.host_place keeps them)
        self.host_order: list[int] = []  # sorted offsets of live extents inside the arena (slices, d2h dests)
        self.host_live_bytes = 0  # bytes of those extents: with the arena's free bytes, its capacity
        self.host_dests: dict[int, Transfer] = {}  # host offset -> open d2h transfer whose destination it is (pending)
        self.bundles: dict[str, SequenceKVBundle] = {}  # seq -> SequenceKVBundle
        self.checkpoints: dict[str, Checkpoint] = {}  # ckpt -> Checkpoint
        self.ended_seqs = EndedHandles()
        self.ended_ckpts = EndedHandles()  # ckpt -> "released" | "moved"
        # unit id -> Unit: the one source of truth for "in flight" (KVAddressSpace.in_flight caches it)
        self.units: dict[str, units.Unit] = {}
        self.xfers: dict[str, Transfer] = {}  # xfer id -> Transfer (open)
        self.ended_xfers = EndedHandles()
        self.activations = 0
        self._next_uid = 1
        # (pool, page id): leases whose id the model chose itself (kvmodel.store.adopt)
        self.guessed: set[tuple[str, int]] = set()
        self.cov = Coverage()
        # rules whose check a replay's error recovery waives while it adopts an engine's claim (sim.replay
        # `_adopt`): only the few claim-shaped checks consult it, never the hot paths
        self.waived: frozenset = frozenset()
        # Page-payload effects (kvmodel.store.effects) not yet taken, in order; None until a consumer asks
        # for them (record_effects). Writers: the transactions, through `emit`; reader: `take_effects`.
        self.effects: list | None = None
        self.launch_cells = self.cov.cells(LAUNCH_RULES)  # the hot paths' coverage cells, fetched once
        self.commit_cells = self.cov.cells(COMMIT_RULES)
        self.reset_touched()

    # -- touched entities (for incremental checking) --------------------------------------------
    def reset_touched(self) -> None:
        """Forget what the previous operation touched (dicts keyed by entity: ordered, no duplicates)."""
        self.t_pages: dict[LogicalKVPage, None]
        self.t_spaces: dict[KVAddressSpace, None]
        self.t_pools: dict[str, None]
        self.t_rows: dict[tuple[str, int], None]
        self.t_host: dict[int, int]
        try:
            if self.t_pages:
                self.t_pages.clear()
            if self.t_spaces:
                self.t_spaces.clear()
            if self.t_pools:
                self.t_pools.clear()
            if self.t_rows:
                self.t_rows.clear()
            if self.t_host:
                self.t_host = {}  # rebound, not cleared: a caller may keep the last operation's
        except AttributeError:
            self.t_pages, self.t_spaces, self.t_pools, self.t_rows = {}, {}, {}, {}
            self.t_host = {}  # host offset -> size of each Host extent placed, released or moved (REP-3)

    # -- effects (for a physical implementation following the model) ------------------------------------
    def record_effects(self) -> None:
        """From now on keep the effects transactions emit, until `take_effects` drains them."""
        if self.effects is None:
            self.effects = []

    def emit(self, effect: object) -> None:
        if self.effects is not None:
            self.effects.append(effect)

    def take_effects(self) -> list:
        """The effects emitted since the last call, in order (empty unless `record_effects` was called)."""
        out = self.effects
        if not out:
            return []
        self.effects = []
        return out

    def touch_space(self, s: KVAddressSpace) -> None:
        self.t_spaces[s] = None
        self.t_pools[s.pool] = None
        if s.row >= 0:
            self.t_rows[(s.pool, s.row)] = None

    # -- shared internals -----------------------------------------------------------------------
    def new_space(self, pool: str, owner: str) -> KVAddressSpace:
        s = KVAddressSpace(self._next_uid, pool, owner)
        self._next_uid += 1
        return s

    def set_token(self, space: KVAddressSpace, seq: str) -> None:
        """A fresh content-key lineage for an activation (new incarnation of `seq`)."""
        space.owner = seq
        space.rewrites = 0
        space.forced_used = False
        space.token = writer_token(seq, space.pool, self.activations)

    def pinned_short(self, pool: str, n: int) -> bool:
        """Whether n new leases find fewer free page groups than the counters grant: the rest of the counted
        capacity is a page group an in-flight copy still pins (its lease went back to a reservation, decision
        26). A request then waits (refusal `busy`); only possible while a pinned lease is draining. Reads only
        and counts nothing (planners call it)."""
        pp = self.pools[pool]
        return bool(pp.draining) and pp.free_ids < n

    def check_free_ids(self, pool: str, n: int, **ctx: object) -> None:
        """REP-2 when a fact (an h2d restore's reserve) takes n page groups and fewer are free: it takes one an
        in-flight copy still pins ("pinned pages are not evicted or reused")."""
        pp = self.pools[pool]
        if pp.draining and pp.free_ids < n:
            self.cov.check("REP-2", exercised=True)
            raise violation("REP-2", f"{pool}: {n} new pages, but {pp.free_ids} page groups are free: the rest of "
                            "the counted capacity is still pinned by an in-flight copy", pool=pool, **ctx)

    def lease_device(self, page: LogicalKVPage, page_id: int | None = None, from_reservation: bool = False) -> int:
        pid = self.pools[page.pool].lease(page, page_id, from_reservation)
        if page_id is None:  # the trace did not say which id: the model's guess, adopted at first sighting
            self.guessed.add((page.pool, pid))
        page.device = pid
        self.t_pools[page.pool] = None
        return pid

    def free_device(self, page: LogicalKVPage, to_reservation: bool = False) -> None:
        self.emit(FreeLease(page.pool, page.device))
        self.guessed.discard((page.pool, page.device))
        self.pools[page.pool].release(page.device, to_reservation, page.drained)
        page.drained = False
        page.device = -1
        page.dev_epoch = page.dev_cov = 0
        self.t_pools[page.pool] = None

    def free_host(self, page: LogicalKVPage) -> None:
        h = page.host
        if h is None:
            raise InvariantError("free_host frees a Host replica", f"{page.handle} has none (the caller is at fault)")
        host_place.release(self, h.offset, h.size)
        del self.host_slices[h.offset]
        page.host = None

    def drop_ref(self, page: LogicalKVPage, space: KVAddressSpace, to_reservation: bool = False) -> None:
        """Remove one address-space reference; a page left with none drops its replicas and is reclaimed.

        "Release 逐个解除 logical references，并只在最后引用消失时释放 physical replicas"
        With `to_reservation` (an active space unmapping a block), the entitlement unit goes back to the
        same reservation ("解除的 Device leases 回到同一 active reservation"): a freed lease is
        dematerialized into it, and so is the lease of a private page a copy still pins (decision 26: the
        unit is reserved at once, the page group stays the copy's until publish, `DevicePagePool.drain`).
        For a page others still hold (a forked, shared member: kvtrace/1's destructive truncate into a
        forked prefix) no lease is freed; the decision recorded in ENT-4's entry is that the entitlement
        then shrinks by that page, always:
        nothing moves between the reservation and global available, so other requests' global capacity
        never changes ("两者不改变其他 requests 可用的 global capacity"), and the outcome never depends on
        how much the pool has left. A page left with a single active holder becomes its private page.
        """
        holders = page.holders
        holders.remove(space)
        if len(holders) > 1 and page.writer is None:
            # still shared and writerless: only the holder set shrank. Every page-scope state rule is a
            # condition on the page's own fields and on each holder, so none can start failing; the page is
            # not marked touched (decode lanes and evicted checkpoints leave long shared prefixes this way).
            # spec/checking.py states the argument; tests/test_model_properties.py checks it on fuzzed stores.
            return
        if page.writer is space:
            page.writer = None
        self.t_pages[page] = None
        if not holders:
            if page.device >= 0 and page.pins == 0:
                self.free_device(page, to_reservation)
                if to_reservation:
                    space.reservation += 1
            elif to_reservation and page.device >= 0 and not page.drained:  # pinned by a copy (decision 26)
                self.pools[page.pool].drain(page.device)
                page.drained = True
                space.reservation += 1
                self.t_pools[page.pool] = None
            self.maybe_reclaim(page)
            return
        if len(holders) == 1 and holders[0].active:
            self.make_private(page, holders[0])

    def make_private(self, page: LogicalKVPage, holder: KVAddressSpace) -> None:
        """The sole (active) holder becomes the writer; columns beyond its frontier stop being canonical."""
        page.writer = holder
        cols = holder.committed - page.block * self.P
        self.cut_page(page, 0 if cols < 0 else self.P if cols > self.P else cols)
        self.t_spaces[holder] = None

    def cut_page(self, page: LogicalKVPage, cols: int) -> None:
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

    def maybe_reclaim(self, page: LogicalKVPage) -> None:
        """PAGE-4: reclaim the descriptor at zero references, replicas and pins (its generation advances)."""
        if page.holders or page.pins:
            return
        if page.device >= 0:
            self.free_device(page)
        if page.host is not None:
            self.free_host(page)
        self.page_stores[page.pool].reclaim(page)
        self.t_pages[page] = None

    def resolve_blocks(self, ckpt_id: str, pool: str, blocks: Sequence[int]) -> list:
        """Pages of a retained checkpoint's blocks, or a TRACE-2 violation for a stale reference."""
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

    # -- transactions (kvmodel.store.activation, mapping, units, settle, transfers, observe) -------------
    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except ContractViolation as exc:
            for f in exc.findings:
                self.cov.violate(f.rule)
            raise

    def activate(self, seq: str, prompt: int, budget: int, source: str | None = None, keep_source: bool = True,
                 rows: dict | None = None, pages: dict | None = None) -> Any:
        return self._run(activation.activate, seq, prompt, budget, source, keep_source, rows, pages)

    def map(self, seq: str, pool: str, tokens: int, pages: list | None = None) -> Any:
        return self._run(mapping.ensure_mapped, seq, pool, tokens, pages)

    ensure_mapped_to_tokens = map

    def grow(self, seq: str, bounded_at: int | None = None, engine: tuple | None = None) -> Any:
        return self._run(mapping.grow, seq, bounded_at, engine)

    def cow(self, seq: str, pool: str, block: int, page: int | None = None) -> Any:
        return self._run(mapping.cow, seq, pool, block, page)

    def _count_planned(self, exc: ContractViolation) -> None:
        """A planner counts nothing: the rules of its violation count as checked, exercised and violated."""
        cov = self.cov
        for f in exc.findings:
            cov.check(f.rule, exercised=True)
            cov.violate(f.rule)

    def launch(self, unit: str, rows: Sequence[Any]) -> None:
        """rows: LaunchRow-shaped records (seq, pool, write); plain (seq, pool, write) tuples are accepted."""
        if rows and type(rows[0]) is tuple:
            rows = [units.LaunchRow(*r) for r in rows]
        try:
            units.apply_launch(self, units.plan_launch(self, unit, rows))
        except ContractViolation as exc:
            self._count_planned(exc)
            raise

    def complete(self, unit: str, commits: Sequence[Any]) -> None:
        """commits: CommitRow-shaped records (seq, pool, frontier); plain tuples are accepted."""
        if commits and type(commits[0]) is tuple:
            commits = [units.CommitRow(*c) for c in commits]
        try:
            units.apply_complete(self, units.plan_complete(self, unit, commits))
        except ContractViolation as exc:
            self._count_planned(exc)
            raise

    def fail(self, unit: str) -> None:
        return self._run(units.fail, unit)

    def truncate(self, seq: str, pool: str, frontier: int) -> None:
        return self._run(settle.truncate, seq, pool, frontier)

    def finish(self, seq: str, retain: str | None = None, state_image: bool = True) -> None:
        return self._run(settle.finish, seq, retain, state_image)

    def release(self, ckpt: str) -> None:
        return self._run(settle.release, ckpt)

    def offload(self, ckpt: str, pool: str, blocks: Sequence[int], offsets: Sequence[int] | None = None) -> None:
        return self._run(transfers.offload, ckpt, pool, blocks, offsets)

    def drop_device(self, ckpt: str, pool: str, blocks: Sequence[int]) -> None:
        return self._run(transfers.drop_device, ckpt, pool, blocks)

    def drop_host(self, ckpt: str, pool: str, blocks: Sequence[int]) -> None:
        return self._run(transfers.drop_host, ckpt, pool, blocks)

    def xfer(self, xid: str, direction: str, ckpt: str, pool: str, blocks: Sequence[int], phase: str,
             pages: list | None = None, offsets: Sequence[int] | None = None) -> None:
        return self._run(transfers.xfer, xid, direction, ckpt, pool, blocks, phase, pages, offsets)

    def xfer_verify_failed(self, xid: str, direction: str, ckpt: str, pool: str, blocks: Sequence[int]) -> None:
        return self._run(transfers.verify_failed, xid, direction, ckpt, pool, blocks)

    def observe_pool(self, pool: str, allocated: int | None = None, reserved: int | None = None,
                     available: int | None = None) -> None:
        return self._run(observe.observe_pool, pool, allocated, reserved, available)

    def observe_row(self, seq: str, pool: str, table: list | None = None, frontier: int | None = None,
                    content: list | None = None) -> None:
        return self._run(observe.observe_row, seq, pool, table, frontier, content)

    def observe_checkpoint(self, ckpt: str, pool: str, table: list | None = None, frontier: int | None = None,
                           replicas: dict | None = None, content: list | None = None) -> None:
        return self._run(observe.observe_checkpoint, ckpt, pool, table, frontier, replicas, content)

    # -- queries ------------------------------------------------------------------------------------
    def space_of(self, seq: str, pool: str) -> KVAddressSpace | None:
        b = self.bundles.get(seq)
        return None if b is None else b.spaces.get(pool)

    def table_row(self, seq: str, pool: str) -> list[int]:
        s = self.space_of(seq, pool)
        return list(self.tables[pool].table[s.row]) if s is not None and s.row >= 0 else []

    def pool_counters(self, pool: str) -> dict[str, int]:
        p = self.pools[pool]
        return {"capacity": p.capacity, "allocated": p.allocated, "reserved": p.reserved, "available": p.available}

    def all_spaces(self) -> Iterator[KVAddressSpace]:
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
                self.arena.snapshot(), tuple(sorted(self.host_slices)), tuple(sorted(self.host_guessed)),
                self.host_virtual, tuple(self.host_order), self.host_live_bytes, tuple(sorted(self.host_dests)),
                self.arena.free_bytes,
                tuple(b.snapshot() for b in self.bundles.values()),
                tuple(c.snapshot() for c in self.checkpoints.values()),
                tuple(s.snapshot() for s in self.all_spaces()),
                self.ended_seqs.snapshot(), self.ended_ckpts.snapshot(),
                tuple((u.uid, tuple((r.space.uid, r.a, r.b) for r in u.rows)) for u in self.units.values()),
                tuple((x.xid, x.phase, tuple(x.dest), tuple(x.snap)) for x in self.xfers.values()),
                self.ended_xfers.snapshot(), self.activations, self._next_uid, tuple(sorted(self.guessed)))

