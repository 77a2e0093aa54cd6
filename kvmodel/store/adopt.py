"""Adopting the engine's physical page ids at first sighting.

Store contract: "Physical IDs 可以任意排列。Allocator 可以优先返回连续 IDs 改善 locality，但 correctness、
admission 和 kernel launch topology 不依赖连续性" and DESIGN §6 ("Where a trace leaves an engine choice out
(page ids, Host placement), the model adopts the engine's choice at first sighting and never judges the
engine by its own allocator's choice"). When a trace does not say which Device id a new page (a mapped page,
a COW destination, an h2d restore destination) got, the model leases its own lowest free id and records the
lease as a *guess*. The first time the engine names the page's id (an `observe` table, an activation result,
a transfer result) a different id is adopted, after checking it is in the pool and carries no page the
model knows for certain (PAGE-1); another guessed lease standing on that id moves to the model's next
free id (still a guess). A sighting that agrees confirms the guess.
This module knows pools, pages and tables; it knows nothing of traces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store.effects import Relabel
from kvsim.kvmodel.store.errors import violation

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore


def confirm(st: KVStore, pool: str, pid: int) -> None:
    st.guessed.discard((pool, pid))


def is_guess(st: KVStore, pool: str, pid: int) -> bool:
    return (pool, pid) in st.guessed


def check_adoption(st: KVStore, pool: str, moves: list, **ctx: object) -> None:
    """Raise PAGE-1 unless every (page, engine id) can be adopted: in the pool, chosen once, and free or
    standing on a guessed lease (never on a lease the engine itself named). Reads only; the caller counts."""
    pp = st.pools[pool]
    moving = {id(page) for page, _ in moves}
    seen = set()
    for page, pid in moves:
        if not 0 <= pid < pp.capacity or pid in seen:
            why = "chosen twice" if pid in seen else "outside the pool"
            raise violation("PAGE-1", f"{pool} page {pid} (block {page.block}) is {why}", pool=pool, page=pid,
                            block=page.block, **ctx)
        seen.add(pid)
        if pp.is_free(pid):
            continue
        holder = pp.holder[pid]
        if id(holder) in moving or (pool, pid) in st.guessed:
            continue
        raise violation("PAGE-1", f"{pool} page {pid} (block {page.block}) already carries logical page "
                        f"{holder.handle}", pool=pool, page=pid, block=page.block, **ctx)


def adopt(st: KVStore, pool: str, moves: list) -> None:
    """Apply checked adoptions: each page moves to the engine's id (confirmed); displaced guesses re-guess."""
    if not moves:
        return
    pp = st.pools[pool]
    targets = {pid for _, pid in moves}
    displaced = []  # (holder page, old id) guessed leases standing on a target and not moving themselves
    moving = {id(page) for page, _ in moves}
    for pid in sorted(targets):
        if not pp.is_free(pid) and id(pp.holder[pid]) not in moving:
            displaced.append((pp.holder[pid], pid))
    relabel = []
    for page, _ in moves:
        relabel.append((page, _current_id(st, page)))
    for _, old in relabel + displaced:
        pp.vacate(old)
        st.guessed.discard((pool, old))
    new_ids = []
    for (page, old), (_, pid) in zip(relabel, moves):
        pp.occupy(pid, page)
        new_ids.append((page, old, pid))
    for page, old in displaced:
        pid = pp.next_free()
        pp.occupy(pid, page)
        st.guessed.add((pool, pid))
        new_ids.append((page, old, pid))
    pairs = []
    for page, old, pid in new_ids:
        _set_id(st, page, old, pid)
        pairs.append((old, pid))
    st.emit(Relabel(pool, tuple(pairs)))
    st.t_pools[pool] = None


def _current_id(st: KVStore, page: LogicalKVPage) -> int:
    return page.device


def _set_id(st: KVStore, page: LogicalKVPage, old: int, pid: int) -> None:
    """Point everything that named `old` for this page at `pid`: the page, rows mapping it, transfers."""
    if page.device == old:
        page.device = pid
        for h in page.holders:
            if h.active and h.row >= 0 and page.block < len(h.pages) and h.pages[page.block] is page:
                st.tables[page.pool].publish(h.row, page.block, [pid], st.pools[page.pool].generation)
                st.t_rows[(page.pool, h.row)] = None
    for x in st.xfers.values():  # a pending h2d destination
        if x.direction == "h2d" and x.pool == page.pool:
            x.dest = [pid if d == old else d for d in x.dest]
    st.t_pages[page] = None


def free_for_engine(st: KVStore, pool: str, pid: int) -> bool:
    """An id the engine may lease to a new page: free, or standing on a guessed lease (which then moves)."""
    pp = st.pools[pool]
    return pp.is_free(pid) or (0 <= pid < pp.capacity and (pool, pid) in st.guessed)


def make_room(st: KVStore, pool: str, pids: Sequence[int]) -> None:
    """Move the guessed leases standing on `pids` to the lowest free ids outside `pids` (still guesses), so
    the engine's new pages can take them."""
    pp = st.pools[pool]
    want = set(pids)
    displaced = [(pp.holder[pid], pid) for pid in sorted(want) if not pp.is_free(pid)]
    if not displaced:
        return
    for _, old in displaced:
        pp.vacate(old)
        st.guessed.discard((pool, old))
    free = (i for i in range(pp.capacity) if pp.is_free(i) and i not in want)
    pairs = []
    for page, old in displaced:
        pid = next(free)
        pp.occupy(pid, page)
        st.guessed.add((pool, pid))
        _set_id(st, page, old, pid)
        pairs.append((old, pid))
    st.emit(Relabel(pool, tuple(pairs)))
    st.t_pools[pool] = None
