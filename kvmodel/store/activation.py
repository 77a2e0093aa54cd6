"""Activation: atomically publish an Active bundle over every enabled pool, from root or a checkpoint.

Store contract: "从 root、private source 或 shared source 激活时" (create or claim destination address
spaces -> reserve every typed pool -> restore required Host-only pages -> Move or Fork memberships ->
create private partial tails -> lease execution rows -> publish complete table mappings -> publish
Active sequence; "任一失败都回到完整 inactive 终态"), "Activation 必须为全部 enabled pools 原子取得",
the Move/Fork rules ("Private source 在最终 post-state 中没有 surviving immutable reference 时，可以
Move"; "Shared source或仍需保留的 private source使用 Fork") and the worked example "checkpoint
frontier (F=1000)": 15 shared full pages and a private tail with 40 copied columns, frontier 1000.

Plan, then execute: `plan_activation` is pure (it reads the state and counts nothing; the rules it
evaluated go into the caller's `checks` list) and returns a refusal or an `ActivationPlan`; `activate`
counts those checks and applies a plan completely. A follower passes the engine's rows and page ids, which are adopted
after
checking they were free (AS-1, PAGE-1) and that shared/moved pages kept their identity (CKPT-3, WR-4).
Semantic decisions the seed leaves open (recorded in CKPT-3 / ENT-1 entries): `keep_source=False`
consumes the checkpoint (Move); pages another checkpoint still references stay shared and immutable,
and a shared partial tail is copied even under Move; entitlement defaults to the request's ceiling
ceil(min(S, prompt + budget)/P) pages (kv_lease_growth: the bounded window plus the cushion), MTP may
lead by ceil((K-1)/P) pages, Draft Full equals Main; COW tails and restores come from global available.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from kvsim.kvmodel.store import adopt
from kvsim.kvmodel.store.address_space import SequenceKVBundle
from kvsim.kvmodel.store.config import ceil_div
from kvsim.kvmodel.store.effects import CopyColumns, HostToDevice
from kvsim.kvmodel.store.errors import Refusal, violation

if TYPE_CHECKING:
    from typing import Any

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore


class CopyTail(NamedTuple):
    """A partial tail copied into a private page: its first `columns` committed columns (COW)."""

    page: LogicalKVPage
    columns: int


class PoolPlan(NamedTuple):
    """One pool's part of an activation; page counts are in pages, `row` is the execution row to lease."""

    pool: str
    source: KVAddressSpace | None
    move: bool
    members: tuple  # per block: the LogicalKVPage kept as is (moved or shared; restored first when it has no
    # Device replica), or a CopyTail (a plain page, not a wrapper: a fork of a long prompt keeps hundreds)
    restores: int  # kept pages without a Device replica
    cows: int  # CopyTail members
    reservation: int  # pages reserved beyond the members
    row: int  # -1 until rows are planned
    adopt: list[tuple[LogicalKVPage, int]]  # (page, engine id) for members on a guessed Device id
    fresh: list[int]  # engine ids of new pages: COW tails, restores

    @property
    def need(self) -> int:
        """Units taken from global available: restores + COW destinations + the reservation."""
        return self.restores + self.cows + self.reservation


class ActivationPlan(NamedTuple):
    ceiling: int  # the request's token ceiling min(S, prompt + budget)
    pools: list  # PoolPlan, in the config's pool order


def entitlements(st: KVStore, prompt: int, ceiling: int) -> dict[str, int]:
    """Pages guaranteed per pool at activation (ENT-1 / ENT-3 entries record these choices)."""
    P, cfg = st.P, st.config
    ceiling_pages = ceil_div(ceiling, P)
    if cfg.growth is None:
        main = ceiling_pages
    else:
        main = min(ceiling_pages, ceil_div(min(ceiling, prompt + cfg.growth_window), P) + cfg.growth_cushion)
    return backend_entitlements(st, main)


def backend_entitlements(st: KVStore, main: int) -> dict[str, int]:
    out = {"main": main}
    backend = st.config.backend.pool
    if backend == "mtp":
        out["mtp"] = min(st.L, main + ceil_div(st.config.backend.draft_window - 1, st.P))
    elif backend == "draft_full":
        out["draft_full"] = main
    return out


def plan_pool(st: KVStore, pool: str, source: KVAddressSpace | None, move: bool, entitlement: int,
              engine_pages: list | None) -> PoolPlan:
    """Decide per block: keep (Move/share), copy the partial tail (COW), restore missing Device replicas."""
    members: list[LogicalKVPage | CopyTail] = []
    restores = cows = 0
    if source is not None:
        F, P = source.committed, st.P
        tail_cols = F % P
        n = len(source.pages)
        for b, page in enumerate(source.pages):
            refs_after = page.refs if move else page.refs + 1
            is_tail = b == n - 1 and tail_cols
            if is_tail and refs_after > 1:
                members.append(CopyTail(page, tail_cols))
                cows += 1
            else:
                members.append(page)
                if page.device < 0:
                    restores += 1
    return PoolPlan(pool, source, move, tuple(members), restores, cows, max(0, entitlement - len(members)),
                    -1, [], [])


def plan_activation(st: KVStore, seq: str, prompt: int, budget: int, source: str | None,
                    keep_source: bool, rows: dict | None, pages: dict | None,
                    checks: list | None = None) -> ActivationPlan | Refusal:
    """Pure: a Refusal or an ActivationPlan; raises ContractViolation for stale handles / bad engine picks.

    Every rule evaluated is appended to `checks` as (rule, exercised), for the caller to count.
    """
    cfg = st.config
    cov = _Checks([] if checks is None else checks)
    cov.check("TRACE-2", exercised=source is not None)
    if seq in st.bundles:
        raise violation("TRACE-2", f"sequence {seq!r} is already active", seq=seq)
    ckpt = None
    if source is not None:
        ckpt = st.checkpoints.get(source)
        if ckpt is None:
            why = st.ended_ckpts.get(source)
            if why == "released":
                cov.check("CKPT-2", exercised=True)
                raise violation("CKPT-2", f"activation from checkpoint {source!r} after its release", seq=seq,
                                ckpt=source)
            raise violation("TRACE-2", f"activation from checkpoint {source!r}, which "
                            + ("was consumed by a Move" if why else "is unknown"), seq=seq, ckpt=source)
    # "默认 entitlement 预留 prompt 加整个 effective output 预算" (decision 18, AS-6 / ENT-1 entries): the effective
    # output budget is min(budget, S - prompt), so S only caps the request; an engine that logs the raw
    # max_tokens and clamps it is correct. Only a prompt beyond S cannot be admitted ("不会扩大单 sequence 的
    # logical ceiling (S)"); a write or commit beyond S is AS-6 at that write (kvmodel.store.units).
    cov.check("AS-6", exercised=True)
    if prompt > cfg.max_context:
        return Refusal("context", f"prompt {prompt} exceeds max_context S = {cfg.max_context}")
    ceiling = min(cfg.max_context, prompt + budget)
    if ckpt is not None:
        # a hit reuses only a complete continuation (evaluated here; `finish` never retains another)
        cov.check("CKPT-1", exercised=True)
        if not ckpt.state_image or tuple(ckpt.spaces) != st.pool_names:
            raise violation("CKPT-1", f"activation from checkpoint {source!r}, which is no complete continuation",
                            seq=seq, ckpt=source)
        if ckpt.frontier > prompt:
            return Refusal("frontier", f"checkpoint frontier {ckpt.frontier} is beyond the prompt {prompt}")
        # Copy pins forbid releasing the sole valid source and publishing the destination before the copy
        # completes ("Copy 完成前，destination 不进入 address space 或 execution table；唯一有效 source 也不能
        # 先释放"), not reading: Fork or Move from pages an in-flight copy pins is legal. Only a page with no
        # Device replica whose h2d restore is still in flight cannot be mapped yet (its destination is unpublished).
        if any(p.pins and p.device < 0 for s in ckpt.spaces.values() for p in s.pages):
            return Refusal("busy", f"checkpoint {source!r} has a page whose Host-to-Device restore is in flight")
    _check_engine_pools(st, seq, rows, pages, cov)
    ent = entitlements(st, prompt, ceiling)
    move = ckpt is not None and not keep_source
    plans = []
    for pool in st.pool_names:
        src = ckpt.spaces[pool] if ckpt is not None else None
        plans.append(plan_pool(st, pool, src, move, ent[pool], None if pages is None else pages.get(pool)))
    return _plan_rows_and_pages(st, seq, ceiling, plans, rows, pages, keep_source, cov)


def _plan_rows_and_pages(st: KVStore, seq: str, ceiling: int, plans: list[PoolPlan], rows: dict | None,
                         pages: dict | None, keep_source: bool, cov: _Checks) -> ActivationPlan | Refusal:
    """Capacity, then one execution row per pool, then the engine's page ids (when it chose them)."""
    for plan in plans:
        pool = st.pools[plan.pool]
        if plan.need > pool.available:
            return Refusal("capacity", f"{plan.pool}: needs {plan.need} pages, {pool.available} available")
        short = st.pinned_short(plan.pool, plan.restores + plan.cows)
        cov.check("REP-2", exercised=short)
        if short:
            return Refusal("busy", f"{plan.pool}: the only free capacity left is still pinned by a copy")
    for i, plan in enumerate(plans):
        table = st.tables[plan.pool]
        cov.check("AS-1", exercised=rows is not None)
        if rows is not None:
            r = rows[plan.pool]
            if not table.is_free(r):
                holder = table.owner[r].owner if 0 <= r < table.rows else None
                raise violation("AS-1", f"{plan.pool} row {r} is " + (f"leased to active sequence {holder!r}"
                                if holder else f"outside the table's {table.rows} rows"), seq=seq, pool=plan.pool,
                                row=r)
        else:
            r = table.free_row()
            if r < 0:
                return Refusal("rows", f"{plan.pool}: every execution row is leased")
        plans[i] = plan._replace(row=r)
    if pages is not None:
        for plan in plans:
            _check_engine_pages(st, seq, plan, pages[plan.pool], keep_source, cov)
    return ActivationPlan(ceiling, plans)


class _Checks:
    """What a planner evaluated: (rule, exercised) pairs appended to the caller's list (never the Coverage)."""

    __slots__ = ("out",)

    def __init__(self, out: list) -> None:
        self.out = out

    def check(self, rule: str, exercised: bool = False) -> None:
        self.out.append((rule, exercised))


def note_refused(st: KVStore, source: str | None) -> None:
    """A refused activation from `source` leaves it the complete inactive end state ("任一失败都回到完整
    inactive 终态"); later reports of it are judged under AS-4."""
    ck = None if source is None else st.checkpoints.get(source)
    if ck is not None:
        ck.refused_from = True


def _check_engine_pools(st: KVStore, seq: str, rows: dict | None, pages: dict | None, cov: _Checks) -> None:
    """AS-4: the engine's activation result must cover every enabled pool (no partial bundle)."""
    for what, d in (("rows", rows), ("pages", pages)):
        if d is None:
            continue
        cov.check("AS-4", exercised=True)
        missing = [p for p in st.pool_names if p not in d]
        extra = [p for p in d if p not in st.pool_names]
        if missing or extra:
            raise violation("AS-4", f"activation result {what} cover pools {sorted(d)}, the bundle needs "
                            f"{list(st.pool_names)}", seq=seq, missing=missing, extra=extra)


def _check_engine_pages(st: KVStore, seq: str, plan: PoolPlan, engine: list, keep_source: bool, cov: _Checks) -> None:
    """Adopt the engine's page ids only where the plan creates a page; elsewhere identity must hold."""
    P = st.P
    n = len(plan.members)
    src = plan.source
    cov.check("WR-4", exercised=src is not None and src.committed % P != 0)
    if len(engine) != n:
        if src is not None and src.committed % P and len(engine) == src.committed // P:
            raise violation("WR-4", f"fork at frontier {src.committed} mapped {len(engine)} pages: the partial "
                            f"tail ({src.committed % P} columns) was dropped, as if the frontier were rounded to "
                            f"{len(engine) * P}", seq=seq, pool=plan.pool, frontier=src.committed)
        raise violation("TRACE-1", f"activation result maps {len(engine)} {plan.pool} pages, the contract "
                        f"requires {n}", seq=seq, pool=plan.pool)
    pool = st.pools[plan.pool]
    seen = set()
    for b, (m, pid) in enumerate(zip(plan.members, engine)):
        copied = isinstance(m, CopyTail)
        page = m.page if copied else m
        fresh = copied or page.device < 0
        if (copied and src is not None) or (plan.move and not fresh):  # the engine's Move/Fork choice, judged
            cov.check("CKPT-3", exercised=True)
        if not fresh:
            if pid != page.device:
                if adopt.is_guess(st, plan.pool, page.device):
                    plan.adopt.append((page, pid))  # the model guessed the member's id: the engine names it
                    continue
                if plan.move:  # "Move 不复制 KV payload，也不改变 logical page identity" (decision: CKPT-3)
                    raise violation("CKPT-3", f"block {b}: a Move maps page {pid}, but the moved {plan.pool} "
                                    f"member is on Device page {page.device}: Move copies no payload",
                                    seq=seq, pool=plan.pool, block=b, page=pid)
                raise violation("TRACE-1", f"block {b}: the engine maps page {pid}, but the {plan.pool} member "
                                f"page is on Device page {page.device} (Fork never copies a full page)",
                                seq=seq, pool=plan.pool, block=b)
            continue
        cov.check("PAGE-1", exercised=True)
        if copied and src is not None and pid == page.device:
            raise violation("CKPT-3", f"block {b}: the partial tail (page {pid}) was moved, not copied, "
                            "although the source survives with an immutable reference", seq=seq, pool=plan.pool,
                            block=b, page=pid)
        if not adopt.free_for_engine(st, plan.pool, pid) or pid in seen:
            why = ("chosen twice" if pid in seen else "outside the pool" if not 0 <= pid < pool.capacity
                   else f"already leased to logical page {pool.holder[pid].handle}")
            raise violation("PAGE-1", f"block {b}: {plan.pool} page {pid} is {why}", seq=seq, pool=plan.pool,
                            block=b, page=pid)
        seen.add(pid)
        plan.fresh.append(pid)
    if plan.adopt:
        cov.check("PAGE-1", exercised=True)
        adopt.check_adoption(st, plan.pool, plan.adopt, seq=seq)
        taken = {pid for _, pid in plan.adopt} & seen
        if taken:  # a fresh page and an adopted member cannot get the same id
            raise violation("PAGE-1", f"{plan.pool} page {min(taken)} is chosen twice", seq=seq, pool=plan.pool,
                            page=min(taken))


def activate(st: KVStore, seq: str, prompt: int, budget: int, source: str | None = None, keep_source: bool = True,
             rows: dict | None = None, pages: dict | None = None) -> dict[str, Any] | Refusal:
    """Activate `seq`; returns {"rows": {pool: row}, "pages": {pool: [ids]}, "mode": {...}} or a Refusal."""
    checks: list = []
    try:
        planned = plan_activation(st, seq, prompt, budget, source, keep_source, rows, pages, checks)
    finally:
        st.cov.count(checks)
    if isinstance(planned, Refusal):
        note_refused(st, source)
        return planned
    ceiling, plans = planned
    st.activations += 1
    spaces = {}
    modes = {}
    for plan in plans:
        spaces[plan.pool] = _apply_pool(st, seq, plan, None if pages is None else pages[plan.pool])
        modes[plan.pool] = "root" if plan.source is None else ("move" if plan.move else "fork")
    bundle = SequenceKVBundle(seq, spaces, prompt, budget, ceiling)
    st.bundles[seq] = bundle
    st.ended_seqs.discard(seq)
    if source is not None and not keep_source:
        del st.checkpoints[source]
        st.ended_ckpts.add(source, "moved")
    return {"rows": {p: s.row for p, s in spaces.items()},
            "pages": {p: [pg.device for pg in s.pages] for p, s in spaces.items()}, "mode": modes}


def _apply_pool(st: KVStore, seq: str, plan: PoolPlan, engine: list | None) -> KVAddressSpace:
    adopt.adopt(st, plan.pool, plan.adopt)
    adopt.make_room(st, plan.pool, plan.fresh)
    pool = st.pools[plan.pool]
    store = st.page_stores[plan.pool]
    src = plan.source
    if src is not None and plan.move:
        space = src  # Move: the inactive space itself becomes active (no copy, same identity)
        for page in space.pages:
            st.t_pages[page] = None
        space.pages = []
    else:
        space = st.new_space(plan.pool, seq)
    st.set_token(space, seq)
    members = []
    for b, m in enumerate(plan.members):
        chosen = None if engine is None else engine[b]
        if isinstance(m, CopyTail):
            old, cols = m.page, m.columns
            page = store.allocate(b)
            page.committed = cols
            page.segments = [list(s) for s in old.segments if s[0] < cols]
            pid = st.lease_device(page, chosen)
            st.emit(CopyColumns(plan.pool, old.device, pid, cols) if old.device >= 0
                    else HostToDevice(plan.pool, old.host.offset, pid))  # type: ignore[union-attr]  # no Device copy: Host
            page.dev_epoch, page.dev_cov = page.epoch, cols
            page.holders.append(space)
            if plan.move:
                st.drop_ref(old, space)
        else:
            page = m
            if page.device < 0:  # restore from the Host replica (identity and epoch kept, PAGE-5)
                pid = st.lease_device(page, chosen)
                st.emit(HostToDevice(plan.pool, page.host.offset, pid))
                page.dev_epoch, page.dev_cov = page.host.epoch, page.host.coverage
            if not plan.move:
                page.holders.append(space)
        st.t_pages[page] = None
        members.append(page)
    space.pages = members
    if src is not None:
        space.committed = src.committed
    space.protected = 0
    space.active = True
    space.reservation = plan.reservation
    pool.reserve(plan.reservation)
    for page in members:
        page.writer = space if len(page.holders) == 1 else None
    space.row = plan.row
    table = st.tables[plan.pool]
    table.lease(space, plan.row)
    table.publish(plan.row, 0, [p.device for p in members], pool.generation)
    st.touch_space(space)
    return space
