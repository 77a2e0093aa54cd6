"""Host tier: D2H offload, dropping replicas, and phase-by-phase Host/Device replacement transfers.

Store contract: "一个 replacement replica 的 publication 顺序为: reserve destination -> copy page payload
-> verify epoch and committed coverage -> publish replica -> release source when no longer required",
"Copy 进行时 source 与 destination 都被 pin。Copy 完成前，destination 不进入 address space 或
execution table；唯一有效 source 也不能先释放", "Host capacity 按实际 packed bytes 和 allocator extent
geometry计费" and NInfer's "a Device replica may drop only when the Host one is current and nothing
refers to or pins it; a host-only page cannot lose its last replica".

`offload` is the whole publication order as one fact; `xfer` is the same protocol logged phase by phase.
Decisions (REP-* entries): one transfer allocates one Host extent of n page strides (first fit), a
later partial release frees single page slices; a page whose Host replica is already current is not
copied again; a stale Host replica is released after the new one is published; a checkpoint may be
released while a transfer pins its pages, and such pages are reclaimed when the last pin goes; a d2h
`release_source` keeps a Device source another open transfer pins (it is still required).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import adopt, host_place
from kvsim.kvmodel.store.effects import DeviceToHost, FreeLease, HostToDevice
from kvsim.kvmodel.store.errors import violation
from kvsim.kvmodel.store.pages import HostReplica

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore

PHASES = ("reserve", "copy", "verify", "publish", "release_source")


class Transfer:
    """A phase-by-phase Host/Device replacement copy ("reserve destination -> copy ... -> release source")."""

    __slots__ = ("xid", "direction", "ckpt", "pool", "pages", "blocks", "generations", "phase", "dest", "snap")

    def __init__(self, xid: str, direction: str, ckpt: str, pool: str, pages: list[LogicalKVPage]) -> None:
        self.xid, self.direction, self.ckpt, self.pool, self.pages = xid, direction, ckpt, pool, pages
        self.blocks = [p.block for p in pages]  # as reserved: a reclaimed descriptor may since serve another block
        self.generations = [p.generation for p in pages]  # a page reclaimed after publish is not ours
        self.phase: str | None = None  # last completed phase
        self.dest: list[int] = []  # d2h: host offsets; h2d: device page ids
        self.snap: list[tuple[int, int]] = []  # (epoch, coverage) copied per page


def _not_pinned(st: KVStore, pages: Sequence[LogicalKVPage], op: str, ckpt: str, pool: str) -> None:
    for page in pages:
        st.cov.check("REP-2", exercised=page.pins > 0)
        if page.pins:
            raise violation("REP-2", f"{op} of block {page.block} of {ckpt!r} ({pool}) while an in-flight transfer "
                            "pins it", ckpt=ckpt, pool=pool, block=page.block)


def _publish_host(st: KVStore, page: LogicalKVPage, offset: int, stride: int, epoch: int, coverage: int) -> None:
    if page.host is not None:
        st.free_host(page)  # release the superseded (stale) source after publication
    page.host = HostReplica(offset, stride, epoch, coverage)
    st.host_slices[offset] = page  # its bytes were placed (host_place) as this page's copy destination
    st.t_host[offset] = stride
    st.t_pages[page] = None


def offload(st: KVStore, ckpt: str, pool: str, blocks: Sequence[int], offsets: Sequence[int] | None = None) -> None:
    """D2H copies of those blocks, published in the contract's order (one fact); `offsets`: the engine's Host
    placement, one per listed block (a block whose Host replica is already current is not copied again and
    its offset is not used)."""
    pages = st.resolve_blocks(ckpt, pool, blocks)
    _not_pinned(st, pages, "offload", ckpt, pool)
    todo = []
    for page in pages:
        st.cov.check("PAGE-3", exercised=True)
        if not page.device_valid(page.committed):
            raise violation("PAGE-3", f"offload of block {page.block}: no current Device replica to copy from",
                            ckpt=ckpt, pool=pool, block=page.block)
        if not page.host_valid(page.committed):
            todo.append(page)
    if offsets is not None:
        if len(offsets) != len(pages):
            st.cov.check("REP-3", exercised=True)
            raise violation("REP-3", f"{len(offsets)} Host offsets for {len(pages)} offloaded blocks", ckpt=ckpt,
                            pool=pool)
        offsets = [o for o, page in zip(offsets, pages) if page in todo]
    if not todo:
        return
    dest = host_place.place(st, pool, len(todo), offsets, [p.block for p in todo], ckpt=ckpt)
    stride = st.pools[pool].page_bytes
    for page, off in zip(todo, dest):
        st.emit(DeviceToHost(pool, page.device, off))
        _publish_host(st, page, off, stride, page.epoch, page.committed)


def drop_device(st: KVStore, ckpt: str, pool: str, blocks: Sequence[int]) -> None:
    pages = st.resolve_blocks(ckpt, pool, blocks)
    _not_pinned(st, pages, "drop_device", ckpt, pool)
    for page in pages:
        st.cov.check("REP-4", exercised=True)
        if page.device < 0:
            raise violation("TRACE-2", f"drop_device of block {page.block}: it has no Device replica",
                            ckpt=ckpt, pool=pool, block=page.block)
        if page.active_refs:
            raise violation("REP-4", f"drop_device of block {page.block}: an active sequence references it",
                            ckpt=ckpt, pool=pool, block=page.block)
        if not page.host_valid(page.committed):
            raise violation("REP-4", f"drop_device of block {page.block}: its Host replica is not current "
                            "(the only valid replica would be lost)", ckpt=ckpt, pool=pool, block=page.block)
    for page in pages:
        st.free_device(page)
        st.t_pages[page] = None


def drop_host(st: KVStore, ckpt: str, pool: str, blocks: Sequence[int]) -> None:
    pages = st.resolve_blocks(ckpt, pool, blocks)
    _not_pinned(st, pages, "drop_host", ckpt, pool)
    for page in pages:
        st.cov.check("REP-4", exercised=True)
        if page.host is None:
            raise violation("TRACE-2", f"drop_host of block {page.block}: it has no Host replica",
                            ckpt=ckpt, pool=pool, block=page.block)
        if not page.device_valid(page.committed):
            raise violation("REP-4", f"drop_host of block {page.block}: a host-only page never loses its last "
                            "replica", ckpt=ckpt, pool=pool, block=page.block)
    for page in pages:
        st.free_host(page)
        st.t_pages[page] = None


def xfer(st: KVStore, xid: str, direction: str, ckpt: str, pool: str, blocks: Sequence[int], phase: str,
         pages: list | None = None, offsets: Sequence[int] | None = None) -> None:
    """One phase of a logged Host/Device transfer; phases must follow the publication order (REP-1). At
    `reserve`, an h2d transfer may name the destination Device `pages` and a d2h one the Host `offsets` the
    engine chose (adopted after PAGE-1 / REP-3 checks; otherwise the model guesses, kvmodel.store.adopt)."""
    cov = st.cov
    if phase == "reserve":
        cov.check("TRACE-2")
        if xid in st.xfers:
            raise violation("TRACE-2", f"transfer {xid!r} is already open", xfer=xid)
        resolved = st.resolve_blocks(ckpt, pool, blocks)
        _not_pinned(st, resolved, "transfer", ckpt, pool)
        _reserve(st, Transfer(xid, direction, ckpt, pool, resolved), pages, offsets)
        return
    cov.check("TRACE-2")
    x = st.xfers.get(xid)
    if x is None:
        why = "has ended" if xid in st.ended_xfers else "was never reserved"
        raise violation("TRACE-2", f"transfer {xid!r} phase {phase}: the transfer {why}", xfer=xid)
    want = PHASES[PHASES.index(x.phase) + 1] if x.phase != "release_source" else None
    cov.check("REP-1", exercised=True)
    if phase != want:
        raise violation("REP-1", f"transfer {xid!r}: phase {phase} after {x.phase} (the order is reserve -> copy "
                        "-> verify -> publish -> release_source)", xfer=xid, phase=phase, after=x.phase)
    if (direction, ckpt, pool, list(blocks)) != (x.direction, x.ckpt, x.pool, x.blocks):
        raise violation("TRACE-2", f"transfer {xid!r} phase {phase} names other pages than its reserve",
                        xfer=xid)
    {"copy": _copy, "verify": _verify, "publish": _publish, "release_source": _release_source}[phase](st, x)
    x.phase = phase
    _touch_extents(st, x)


def verify_failed(st: KVStore, xid: str, direction: str, ckpt: str, pool: str, blocks: Sequence[int]) -> None:
    """The engine reports that `verify` failed: the copy is abandoned, never published.

    Store contract: "reserve destination -> copy page payload -> verify epoch and committed coverage -> publish
    replica" (L173-176). Decision 27 (PAGE-3 entry): a page may change while a copy of it is in flight (a
    destructive truncate cuts it to a new epoch; pins forbid releasing or writing it, not cutting its frontier),
    and verify is where the copy is found stale. A `verify` with `result.ok == false` ends the transfer: its
    destination goes back (the Host extent of a D2H copy, the Device lease of an H2D restore), its pins drop,
    the source stays the page's replica. The engine may fail a verify the model would pass (it found what it
    found); a `verify` reported as passed over a stale copy is PAGE-3."""
    cov = st.cov
    cov.check("TRACE-2")
    x = st.xfers.get(xid)
    if x is None:
        raise violation("TRACE-2", f"transfer {xid!r} phase verify: the transfer "
                        + ("has ended" if xid in st.ended_xfers else "was never reserved"), xfer=xid)
    cov.check("REP-1", exercised=True)
    if x.phase != "copy":
        raise violation("REP-1", f"transfer {xid!r}: phase verify after {x.phase} (the order is reserve -> copy -> "
                        "verify -> publish -> release_source)", xfer=xid, phase="verify", after=x.phase)
    if (direction, ckpt, pool, list(blocks)) != (x.direction, x.ckpt, x.pool, x.blocks):
        raise violation("TRACE-2", f"transfer {xid!r} phase verify names other pages than its reserve", xfer=xid)
    _touch_extents(st, x)
    if x.direction == "d2h":
        stride = st.pools[x.pool].page_bytes
        for d in x.dest:
            st.host_dests.pop(d, None)
            host_place.release(st, d, stride)
    else:
        pp = st.pools[x.pool]
        for d in x.dest:
            st.emit(FreeLease(x.pool, d))
            st.guessed.discard((x.pool, d))
            pp.release(d)
        st.t_pools[x.pool] = None
    for page in x.pages:
        page.pins -= 2
        st.t_pages[page] = None
    for page in x.pages:
        st.maybe_reclaim(page)
    del st.xfers[xid]
    st.ended_xfers.add(xid)


def _reserve(st: KVStore, x: Transfer, engine_pages: list | None = None,
             engine_offsets: Sequence[int] | None = None) -> None:
    cov = st.cov
    for page in x.pages:
        cov.check("PAGE-3", exercised=True)
        ok = page.device_valid(page.committed) if x.direction == "d2h" else page.host_valid(page.committed)
        if not ok:
            raise violation("PAGE-3", f"transfer {x.xid!r}: block {page.block} has no current "
                            f"{'Device' if x.direction == 'd2h' else 'Host'} source replica", xfer=x.xid,
                            block=page.block)
        if x.direction == "h2d" and page.device >= 0:
            raise violation("REP-1", f"transfer {x.xid!r}: block {page.block} already has a Device replica",
                            xfer=x.xid, block=page.block)
    if x.direction == "d2h":
        x.dest = host_place.place(st, x.pool, len(x.pages), engine_offsets, x.blocks, xfer=x.xid)
    else:
        pool = st.pools[x.pool]
        cov.check("CAP-3", exercised=True)
        if pool.available < len(x.pages):
            raise violation("CAP-3", f"transfer {x.xid!r}: {len(x.pages)} Device pages reserved with "
                            f"{pool.available} available", xfer=x.xid, pool=x.pool)
        st.check_free_ids(x.pool, len(x.pages), xfer=x.xid)
        if engine_pages is not None:
            engine_pages = list(engine_pages)
            seen = set()
            for page, pid in zip(x.pages, engine_pages):
                cov.check("PAGE-1", exercised=True)
                if not adopt.free_for_engine(st, x.pool, pid) or pid in seen:
                    why = ("chosen twice" if pid in seen else "outside the pool" if not 0 <= pid < pool.capacity
                           else f"already leased to logical page {pool.holder[pid].handle}")
                    raise violation("PAGE-1", f"transfer {x.xid!r}: destination {x.pool} page {pid} (block "
                                    f"{page.block}) is {why}", xfer=x.xid, pool=x.pool, page=pid)
                seen.add(pid)
            if len(engine_pages) != len(x.pages):
                raise violation("TRACE-1", f"transfer {x.xid!r}: {len(engine_pages)} destination pages for "
                                f"{len(x.pages)} blocks", xfer=x.xid, pool=x.pool)
            adopt.make_room(st, x.pool, engine_pages)
            x.dest = [pool.lease(page, pid) for page, pid in zip(x.pages, engine_pages)]
        else:  # the restore destinations are the engine's: the model's lowest free ids are a guess
            x.dest = [pool.lease(page) for page in x.pages]
            st.guessed.update((x.pool, d) for d in x.dest)
        st.t_pools[x.pool] = None
    for page in x.pages:
        # Decision 24 (REP-2): the transaction pins the page from its first step, "reserve destination", until
        # publish: a source pin and a destination pin ("Copy 进行时 source 与 destination 都被 pin"; "Copy 完成前
        # ... 唯一有效 source 也不能先释放" covers the reserve -> copy window too)
        page.pins += 2
        st.t_pages[page] = None
    x.phase = "reserve"
    st.xfers[x.xid] = x
    if x.direction == "d2h":
        for d in x.dest:
            st.host_dests[d] = x  # pending until publish (REP-3 counts them as live extents)
    _touch_extents(st, x)


def _touch_extents(st: KVStore, x: Transfer) -> None:
    """A phase touches its transfer's Host extents: the d2h destinations, the h2d sources."""
    t = st.t_host
    if x.direction == "d2h":
        stride = st.pools[x.pool].page_bytes
        for d in x.dest:
            t[d] = stride
    else:
        for page in x.pages:
            if page.host is not None:
                t[page.host.offset] = page.host.size


def _copy(st: KVStore, x: Transfer) -> None:
    for page, dest in zip(x.pages, x.dest):
        st.emit(DeviceToHost(x.pool, page.device, dest) if x.direction == "d2h"
                else HostToDevice(x.pool, page.host.offset, dest))  # type: ignore[union-attr]  # h2d: _reserve checked the replica
    x.snap = [(page.epoch, page.committed) for page in x.pages]


def _verify(st: KVStore, x: Transfer) -> None:
    for page, (epoch, cov_) in zip(x.pages, x.snap):
        st.cov.check("PAGE-3", exercised=True)
        if epoch != page.epoch or cov_ < page.committed:
            raise violation("PAGE-3", f"transfer {x.xid!r}: block {page.block} copy has epoch {epoch} / coverage "
                            f"{cov_}, the page has {page.epoch} / {page.committed}", xfer=x.xid, block=page.block)


def _publish(st: KVStore, x: Transfer) -> None:
    stride = st.pools[x.pool].page_bytes
    for page, dest, (epoch, cov_) in zip(x.pages, x.dest, x.snap):
        if x.direction == "d2h":
            st.host_dests.pop(dest, None)  # the destination becomes the page's slice, in place
            _publish_host(st, page, dest, stride, epoch, cov_)
        else:
            page.device, page.dev_epoch, page.dev_cov = dest, epoch, cov_
        page.pins -= 2
        st.t_pages[page] = None
    for page in x.pages:
        st.maybe_reclaim(page)


def _release_source(st: KVStore, x: Transfer) -> None:
    # a page whose last reference went while it was pinned is reclaimed at publication (and its descriptor
    # may since carry another page): only the pages still ours (same generation) have a source to release
    # "release source when no longer required": a Device source an active sequence still reads (a Fork or
    # Move made while the copy ran) is still required and stays, and so is one another open transfer pins (a
    # copy reserved from it reads it: decision 24, "Copy 进行时 source 与 destination 都被 pin ... 唯一有效
    # source 也不能先释放", seed 000 L178); the phase releases the others
    live = [p for p, g in zip(x.pages, x.generations) if p.alive and p.generation == g]
    if x.direction == "h2d":  # the Host source goes only where the restored Device copy still stands in for it
        for page in live:
            if page.host is not None:
                st.cov.check("REP-4", exercised=True)
                if not page.device_valid(page.committed):
                    raise violation("REP-4", f"transfer {x.xid!r}: release_source would free the Host replica of "
                                    f"block {page.block}, its only valid replica (the restored Device copy is "
                                    "gone or stale): \"唯一有效 source 也不能先释放\"", xfer=x.xid, block=page.block)
    for page in live:
        if x.direction == "d2h" and page.device >= 0:
            st.cov.check("REP-4", exercised=True)
            if page.active_refs or page.pins:
                continue
            st.free_device(page)
        elif x.direction == "h2d" and page.host is not None:
            st.free_host(page)
        st.t_pages[page] = None
    del st.xfers[x.xid]
    st.ended_xfers.add(x.xid)
