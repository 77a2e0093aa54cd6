"""Shortening and ending: destructive truncate, terminal finish (retain or release), checkpoint release.

Store contract: "NeededPages_s= \\left\\lceil \\frac{\\max(CommittedFrontier_s,ProvisionalFrontier_s)}{P}"
(trailing mappings may go, the last partial page stays, an active space's unmapped leases return to the
same reservation), "投机终止先...发布 committed frontier，再裁掉未提交的尾页" (never trim a verify's
mappings before its settle), "Active finish 后" (release the row, drop writer/active references, return
unmaterialized entitlement, then retain an immutable inactive checkpoint or release every membership),
"Retain 只有在 Main、backend 与 StateImage 构成同一完整 continuation 时才能发布" and "Release 逐个解除
logical references，并只在最后引用消失时释放 physical replicas".

Decisions (ENT-4 / CKPT-1 / CKPT-2 entries): truncate never advances a frontier (that is UNIT-2) and
never goes below the space's checkpoint-protected frontier (WR-3); a private page whose committed
columns are cut gets a new content epoch and later writes a new content-key lineage; a shared page is
never cut (it stays an immutable member) and unmapping it returns no lease, so the entitlement unit it
filled goes with it (always, whatever the pool has left: ENT-4's entry); a retained checkpoint keeps ceil(frontier/P)
pages, protects its committed
frontier and drops uncommitted tail pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store.address_space import Checkpoint
from kvsim.kvmodel.store.config import ceil_div
from kvsim.kvmodel.store.errors import violation
from kvsim.kvmodel.store.mapping import active_space, frozen_check

if TYPE_CHECKING:

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.store import KVStore


def truncate(st: KVStore, seq: str, pool: str, frontier: int) -> None:
    _, space = active_space(st, seq, pool, "truncate")
    frozen_check(st, space, "truncate")  # seed 000 L254: truncate happens at a GPU boundary (UNIT-1)
    cov = st.cov
    cov.check("UNIT-2", exercised=frontier > space.committed)
    if frontier > space.committed:
        raise violation("UNIT-2", f"truncate to {frontier} would advance {seq!r} ({pool}) beyond its committed "
                        f"frontier {space.committed}", seq=seq, pool=pool, frontier=frontier)
    # Seed 000 L236 "每个 pool 根据自己的 canonical/provisional frontier计算保留 membership" and L241 "不能为满足某个
    # 后续阶段更短的覆盖需求而提前裁剪 verify 的映射": mappings a provisional frontier (a speculative round mapped,
    # not yet launched: a verify, the MTP lead; mapping.speculative_round) still needs are not trailing; trimming
    # them is UNIT-4. A prefill chunk mapped ahead has no provisional frontier: it may be trimmed (L195, L240).
    keep = ceil_div(frontier, st.P)
    prov = space.provisional
    cov.check("UNIT-4", exercised=prov > 0 and keep < len(space.pages))
    if prov > 0 and keep < min(len(space.pages), ceil_div(prov, st.P)) and "UNIT-4" not in st.waived:
        raise violation("UNIT-4", f"truncate to {frontier} unmaps block {keep} of {seq!r} ({pool}), which the "
                        f"provisional frontier {prov} (mapped for a stage not yet launched) still needs",
                        seq=seq, pool=pool, frontier=frontier, provisional=prov)
    # No WR-3 check here: only active spaces truncate and they protect nothing (a checkpoint's protected
    # columns are shared pages, never cut: WR-3's entry records that WR-2 / UNIT-3 subsume it).
    cut_to(st, space, frontier)


def cut_to(st: KVStore, space: KVAddressSpace, frontier: int) -> None:
    """Unmap blocks >= ceil(frontier/P) (leases back to the reservation) and cut a private partial tail."""
    P = st.P
    keep = ceil_div(frontier, P)
    cov = st.cov
    cov.check("ENT-4", exercised=keep < len(space.pages))
    while len(space.pages) > keep:
        page = space.pages.pop()
        st.drop_ref(page, space, to_reservation=space.active)
    if frontier % P and keep:
        page = space.pages[keep - 1]
        if page.refs == 1:  # a shared page is never cut
            st.cut_page(page, frontier % P)
    if frontier < space.committed:
        space.new_token()
    space.committed = frontier
    if space.row >= 0:
        st.tables[space.pool].unmap(space.row, keep)
    st.touch_space(space)


def finish(st: KVStore, seq: str, retain: str | None, state_image: bool = True) -> None:
    cov = st.cov
    cov.check("TRACE-2")
    bundle = st.bundles.get(seq)
    if bundle is None:
        raise violation("TRACE-2", f"finish of sequence {seq!r}, which " +
                        ("has already finished" if seq in st.ended_seqs else "is not active"), seq=seq)
    for space in bundle.spaces.values():
        frozen_check(st, space, "finish")
    if retain is not None:
        cov.check("CKPT-1", exercised=True)
        if retain in st.checkpoints:
            raise violation("TRACE-2", f"finish retains checkpoint {retain!r}, an id already live", seq=seq,
                            ckpt=retain)
        if not state_image:
            raise violation("CKPT-1", f"checkpoint {retain!r} retained without its StateImage: Main, backend and "
                            "StateImage must form one complete continuation", seq=seq, ckpt=retain)
    for space in bundle.spaces.values():
        _exit_execution(st, space)
    del st.bundles[seq]
    st.ended_seqs.add(seq)
    if retain is None:
        for space in bundle.spaces.values():
            release_space(st, space)
        return
    for space in bundle.spaces.values():
        space.owner = retain
        cut_to(st, space, space.committed)
        space.protected = space.committed
        for page in space.pages:
            st.t_pages[page] = None
    st.checkpoints[retain] = Checkpoint(retain, dict(bundle.spaces), state_image)
    st.ended_ckpts.discard(retain)


def _exit_execution(st: KVStore, space: KVAddressSpace) -> None:
    """Release the row, drop writer/active state and return the unmaterialized entitlement (ENT-1)."""
    table = st.tables[space.pool]
    table.release(space.row)
    st.t_rows[(space.pool, space.row)] = None
    space.row = -1
    st.pools[space.pool].unreserve(space.reservation)  # the terminal release ENT-1 waits for
    space.reservation = 0
    space.active = False
    for page in space.pages:
        if page.writer is space:
            page.writer = None
        st.t_pages[page] = None
    st.touch_space(space)


def release_space(st: KVStore, space: KVAddressSpace) -> None:
    """Drop the space's references one at a time, last block first."""
    while space.pages:
        st.drop_ref(space.pages.pop(), space)
    st.touch_space(space)


def release(st: KVStore, ckpt: str) -> None:
    cov = st.cov
    cov.check("CKPT-2")
    ck = st.checkpoints.get(ckpt)
    if ck is None:
        why = st.ended_ckpts.get(ckpt)
        if why == "released":
            cov.check("CKPT-2", exercised=True)
            raise violation("CKPT-2", f"double release of checkpoint {ckpt!r}", ckpt=ckpt)
        raise violation("TRACE-2", f"release of checkpoint {ckpt!r}, which " +
                        ("was consumed by a Move activation" if why else "is unknown"), ckpt=ckpt)
    for space in ck.spaces.values():
        release_space(st, space)
    del st.checkpoints[ckpt]
    st.ended_ckpts.add(ckpt, "released")
