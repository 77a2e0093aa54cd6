"""Growing an active address space: ensure_mapped_to_tokens, kv_lease_growth and explicit COW.

Store contract: "ensure_mapped_to_tokens() 的参数是本阶段所需覆盖范围的下界" (returns at once when
membership covers it, fails only when the pages needed exceed the entitlement, never advances the
frontier, never trims, never changes the entitlement; new pages turn this space's reservation into
allocation), "ContextCacheOptions::kv_lease_growth" (current frontier + a bounded window + a per-lane
cushion, extended only at decode-round boundaries; when the window cannot grow the request ends with
`length` at the covered frontier: bounded completion) and "需要写入 shared partial tail 时必须先 COW".

Decisions left open by the seed (ENT-3 / WR-2 entries): growth tries rungs of extra tokens (window,
128, 64) like NInfer and grows every pool of the bundle atomically; the covered frontier of bounded
completion is min(ceiling, Main entitlement · P) and stays fixed once reached; `cow` replaces a shared
member with a private copy of the columns this space has committed in that block, taking one page from
global available (the shared member was billed once, to its owner, never to this reservation).
"""

from __future__ import annotations

from kvsim.kvmodel.store.activation import backend_entitlements
from kvsim.kvmodel.store.config import ceil_div
from kvsim.kvmodel.store.effects import CopyColumns
from kvsim.kvmodel.store.errors import ContractViolation, Refusal, violation


def lookup_active(st, seq: str, pool: str, op: str):
    """The active (bundle, space) of (seq, pool), or the TRACE-2 / AS-5 violation; reads only, counts nothing."""
    bundle = st.bundles.get(seq)
    if bundle is None:
        ended = seq in st.ended_seqs
        raise violation("TRACE-2", f"{op} on sequence {seq!r}, which " + ("has finished" if ended else "is not active"),
                        seq=seq, pool=pool)
    space = bundle.spaces.get(pool)
    if space is None:
        raise violation("AS-5", f"{op} names pool {pool!r}, which sequence {seq!r}'s bundle does not hold "
                        f"(bundle: {', '.join(bundle.spaces)})", seq=seq, pool=pool)
    return bundle, space


def active_space(st, seq: str, pool: str, op: str):
    """`lookup_active` for a transaction: counts TRACE-2 and AS-5 as checked."""
    st.cov.check("TRACE-2")
    st.cov.check("AS-5", exercised=pool != "main")
    return lookup_active(st, seq, pool, op)


def frozen_check(st, space, op: str, rule: str = "UNIT-1") -> None:
    """`op` may not change a space that is a row of an in-flight unit (its tables, membership, frontier)."""
    st.cov.check(rule, exercised=space.in_flight is not None)
    if space.in_flight is not None:
        raise violation(rule, f"{op} on {space.owner!r} ({space.pool}) while unit {space.unit!r} is in flight: "
                        "tables, memberships and frontiers are frozen until the unit completes",
                        seq=space.owner, pool=space.pool, unit=space.unit)


def ensure_mapped(st, seq: str, pool: str, tokens: int, engine_pages: list | None = None):
    """ensure_mapped_to_tokens(tokens): list of newly mapped page ids, or Refusal("entitlement")."""
    _, space = active_space(st, seq, pool, "map")
    frozen_check(st, space, "map")
    P = st.P
    needed = ceil_div(tokens, P)
    have = len(space.pages)
    st.cov.check("ENT-2", exercised=needed > have)
    if needed <= have:
        if engine_pages:
            raise violation("ENT-2", f"membership already covers {tokens} tokens ({have} pages), yet the engine "
                            f"mapped {len(engine_pages)} new pages", seq=seq, pool=pool, tokens=tokens)
        return []
    if needed > space.entitlement:
        return Refusal("entitlement", f"{pool}: {needed} pages needed, entitlement {space.entitlement}")
    new = needed - have
    pp = st.pools[pool]
    if engine_pages is not None:
        if len(engine_pages) != new:
            raise violation("ENT-2", f"ensure_mapped_to_tokens({tokens}) needs {new} new pages, the engine "
                            f"mapped {len(engine_pages)}", seq=seq, pool=pool, tokens=tokens)
        seen = set()
        for pid in engine_pages:
            st.cov.check("PAGE-1", exercised=True)
            if not pp.is_free(pid) or pid in seen:
                why = ("chosen twice" if pid in seen else "outside the pool" if not 0 <= pid < pp.capacity
                       else f"already carries logical page {pp.holder[pid].handle}")
                raise violation("PAGE-1", f"{pool} page {pid} is {why}", seq=seq, pool=pool, page=pid)
            seen.add(pid)
    store = st.page_stores[pool]
    out = []
    for i in range(new):
        page = store.allocate(have + i)
        page.holders.append(space)
        page.writer = space
        space.reservation -= 1
        out.append(st.lease_device(page, None if engine_pages is None else engine_pages[i], from_reservation=True))
        page.dev_epoch = page.epoch
        space.pages.append(page)
        st.t_pages[page] = None
    st.tables[pool].publish(space.row, have, out)
    st.touch_space(space)
    return out


def plan_grow(st, seq: str):
    """Pure: {pool: new entitlement} for the first rung that fits every pool, or a Refusal(bounded_at).

    Reads only and counts nothing: `grow` counts TRACE-2 and ENT-3 when it applies the plan.
    """
    bundle = st.bundles.get(seq)
    if bundle is None:
        raise violation("TRACE-2", f"grow on sequence {seq!r}, which " +
                        ("has finished" if seq in st.ended_seqs else "is not active"), seq=seq)
    cfg = st.config
    if cfg.growth is None:
        return Refusal("growth-disabled", "kv_lease_growth is off in this configuration")
    busy = [s for s in bundle.spaces.values() if s.in_flight is not None]
    if busy:
        raise violation("ENT-3", f"grow for {seq!r} while unit {busy[0].unit!r} is in flight: the window grows "
                        "only at decode-round boundaries", seq=seq, unit=busy[0].unit)
    main = bundle.spaces["main"]
    P = st.P
    if bundle.bounded_at is not None:
        return Refusal("capacity", f"{seq!r} already completes at frontier {bundle.bounded_at}",
                       bounded_at=bundle.bounded_at)
    ceiling_pages = ceil_div(bundle.ceiling, P)
    for extra in (cfg.growth_window, 128, 64):
        want = ceil_div(min(bundle.ceiling, main.committed + extra), P) + cfg.growth.cushion_pages
        target = backend_entitlements(st, min(ceiling_pages, max(main.entitlement, want)))
        target = {p: max(target[p], s.entitlement) for p, s in bundle.spaces.items()}
        if all(target[p] - s.entitlement <= st.pools[p].available for p, s in bundle.spaces.items()):
            return target
    covered = min(bundle.ceiling, main.entitlement * P)
    return Refusal("capacity", f"the window cannot grow; {seq!r} completes at frontier {covered}", bounded_at=covered)


def grow(st, seq: str, engine_bounded_at: int | None = None):
    """kv_lease_growth at a round boundary: new entitlements {pool: pages} or Refusal with bounded_at."""
    st.cov.check("TRACE-2")
    try:
        plan = plan_grow(st, seq)
    except ContractViolation as exc:  # the planner counts nothing: its violation is an exercised check
        st.cov.count((f.rule, True) for f in exc.findings)
        raise
    st.cov.check("ENT-3", exercised=not (isinstance(plan, Refusal) and plan.reason == "growth-disabled"))
    bundle = st.bundles[seq]
    if isinstance(plan, Refusal):
        if plan.bounded_at is not None:
            if engine_bounded_at is not None and engine_bounded_at != plan.bounded_at:
                raise violation("ENT-3", f"bounded completion at {engine_bounded_at}, but the entitlement covers "
                                f"frontier {plan.bounded_at}", seq=seq, bounded_at=engine_bounded_at,
                                covered=plan.bounded_at)
            bundle.bounded_at = plan.bounded_at
        return plan
    for p, target in plan.items():
        s = bundle.spaces[p]
        d = target - s.entitlement
        s.reservation += d
        st.pools[p].reserve(d)
        st.touch_space(s)
    return plan


def would_map(st, seq: str, pool: str, tokens: int):
    """Pure: the Refusal ensure_mapped_to_tokens would give, or None when it would succeed (counts nothing)."""
    _, space = lookup_active(st, seq, pool, "map")
    needed = ceil_div(tokens, st.P)
    if needed > len(space.pages) and needed > space.entitlement:
        return Refusal("entitlement", f"{pool}: {needed} pages needed, entitlement {space.entitlement}")
    return None


def cow(st, seq: str, pool: str, block: int, engine_page: int | None = None):
    """Replace the shared member at `block` with a private copy; returns the new page id or a Refusal."""
    _, space = active_space(st, seq, pool, "cow")
    frozen_check(st, space, "cow")
    st.cov.check("TRACE-2")
    if block >= len(space.pages):
        raise violation("TRACE-2", f"cow of block {block}, beyond {seq!r}'s {len(space.pages)} {pool} pages",
                        seq=seq, pool=pool, block=block)
    old = space.pages[block]
    st.cov.check("WR-2", exercised=old.refs > 1)
    if old.refs <= 1:
        return old.device  # already private: nothing to copy
    pp = st.pools[pool]
    if pp.available < 1:
        return Refusal("capacity", f"{pool}: no page available for the COW destination")
    if engine_page is not None:
        st.cov.check("PAGE-1", exercised=True)
        if not pp.is_free(engine_page):
            raise violation("PAGE-1", f"{pool} page {engine_page} is not free for the COW destination",
                            seq=seq, pool=pool, page=engine_page)
    cols = max(0, min(st.P, space.committed - block * st.P))
    page = st.page_stores[pool].allocate(block)
    page.committed = cols
    page.segments = [list(s) for s in old.segments if s[0] < cols]
    pid = st.lease_device(page, engine_page)
    st.emit(CopyColumns(pool, old.device, pid, cols))
    page.dev_epoch, page.dev_cov = page.epoch, cols
    page.holders.append(space)
    page.writer = space
    space.pages[block] = page
    st.drop_ref(old, space)
    st.tables[pool].publish(space.row, block, [pid])
    st.t_pages[page] = None
    st.touch_space(space)
    return pid
