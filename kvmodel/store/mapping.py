"""Growing an active address space: ensure_mapped_to_tokens, kv_lease_growth and explicit COW.

Store contract: "ensure_mapped_to_tokens() 的参数是本阶段所需覆盖范围的下界" (returns at once when
membership covers it, fails only when the pages needed exceed the entitlement, never advances the
frontier, never trims, never changes the entitlement; new pages turn this space's reservation into
allocation), "ContextCacheOptions::kv_lease_growth" (current frontier + a bounded window + a per-lane
cushion, extended only at decode-round boundaries; when the window cannot grow the request ends with
`length` at the covered frontier: bounded completion) and "需要写入 shared partial tail 时必须先 COW".

Decisions left open by the seed (ENT-3 / WR-2 entries): the contract fixes no growth step ("按需扩充"), so
an engine's accepted growth is judged only by whether it fits capacity (and adopted when the trace says the
new entitlement), a refusal only by its bounded completion; without the engine's word the model's own step
tries rungs of extra tokens (window, 128, 64) like NInfer and grows every pool of the bundle atomically; the covered
frontier of bounded
completion is min(ceiling, Main entitlement · P) and stays fixed once reached; `cow` replaces a shared
member with a private copy of the columns this space has committed in that block, taking one page from
global available (the shared member was billed once, to its owner, never to this reservation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import adopt
from kvsim.kvmodel.store.activation import backend_entitlements
from kvsim.kvmodel.store.config import ceil_div
from kvsim.kvmodel.store.effects import CopyColumns
from kvsim.kvmodel.store.errors import ContractViolation, Refusal, violation

if TYPE_CHECKING:
    from typing import Any

    from kvsim.kvmodel.store.address_space import KVAddressSpace, SequenceKVBundle
    from kvsim.kvmodel.store.store import KVStore


def lookup_active(st: KVStore, seq: str, pool: str, op: str) -> tuple[SequenceKVBundle, KVAddressSpace]:
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


def active_space(st: KVStore, seq: str, pool: str, op: str) -> tuple[SequenceKVBundle, KVAddressSpace]:
    """`lookup_active` for a transaction: counts TRACE-2 and AS-5 as checked."""
    st.cov.check("TRACE-2")
    st.cov.check("AS-5", exercised=pool != "main")
    return lookup_active(st, seq, pool, op)


def frozen_check(st: KVStore, space: KVAddressSpace, op: str) -> None:
    """`op` (map, grow, cow, truncate, finish) may not change a space that is a row of an in-flight unit, written
    or read-only: UNIT-1, one rule for seed 000 L248-L254 ("从 block-table publication 到 GPU unit 完成" ...
    "Mapping、frontier commit、truncate 和 row recycling 都发生在 GPU boundary")."""
    st.cov.check("UNIT-1", exercised=space.in_flight is not None)
    if space.in_flight is not None:
        raise violation("UNIT-1", f"{op} on {space.owner!r} ({space.pool}) while unit {space.unit!r} is in flight: "
                        "tables, memberships and frontiers are frozen until the unit completes",
                        seq=space.owner, pool=space.pool, unit=space.unit)


def speculative_round(st: KVStore, bundle: SequenceKVBundle, space: KVAddressSpace) -> bool:
    """Whether a mapping of `space` now is a speculative round's, so its reach is a provisional frontier (UNIT-4).

    Seed 000 L239 "NeededPages_s= ... \\max(CommittedFrontier_s,ProvisionalFrontier_s)" keeps what a
    provisional frontier needs, and L241 "不能为满足某个后续阶段更短的覆盖需求而提前裁剪 verify 的映射" forbids early
    trimming only for a verify's mappings; a prefill chunk mapped ahead (L195 "预先 materialize 一个 prefill
    chunk") is membership beyond the committed frontier, and its trailing mappings may go (L240 "Trailing
    mappings 可以解除"). Decision (UNIT-4's entry): a round is speculative when a speculative backend is selected
    and the space has committed its whole prompt (every later target step is a verify, the MTP step its draft
    lead, L79 "provisional lead"); Draft Full never is (L79 "Draft Full 没有这种 provisional lead"). Backend off,
    or a prefill, maps no provisional frontier."""
    return st.config.backend.kind != "off" and space.pool != "draft_full" and space.committed >= bundle.prompt


def ensure_mapped(st: KVStore, seq: str, pool: str, tokens: int, engine_pages: list | None = None
                  ) -> list[int] | Refusal:
    """ensure_mapped_to_tokens(tokens): list of newly mapped page ids, or Refusal("entitlement")."""
    bundle, space = active_space(st, seq, pool, "map")
    frozen_check(st, space, "map")
    speculative = speculative_round(st, bundle, space)
    P = st.P
    needed = ceil_div(tokens, P)
    have = len(space.pages)
    st.cov.check("ENT-2", exercised=needed > have)
    if needed <= have:
        if engine_pages:
            raise violation("ENT-2", f"membership already covers {tokens} tokens ({have} pages), yet the engine "
                            f"mapped {len(engine_pages)} new pages", seq=seq, pool=pool, tokens=tokens)
        if speculative and tokens > space.provisional and tokens > space.committed:
            space.provisional = tokens  # the coverage the coming stage needs (UNIT-4: never trimmed before it runs)
            st.t_spaces[space] = None
        return []
    if needed > space.entitlement:
        return Refusal("entitlement", f"{pool}: {needed} pages needed, entitlement {space.entitlement}")
    new = needed - have
    pp = st.pools[pool]
    short = st.pinned_short(pool, new)
    st.cov.check("REP-2", exercised=short)
    if short:
        return Refusal("busy", f"{pool}: {new} new pages, but the only free capacity left is still pinned by a copy")
    if engine_pages is not None:
        if len(engine_pages) != new:
            raise violation("ENT-2", f"ensure_mapped_to_tokens({tokens}) needs {new} new pages, the engine "
                            f"mapped {len(engine_pages)}", seq=seq, pool=pool, tokens=tokens)
        seen = set()
        for pid in engine_pages:
            st.cov.check("PAGE-1", exercised=True)
            if not adopt.free_for_engine(st, pool, pid) or pid in seen:
                why = ("chosen twice" if pid in seen else "outside the pool" if not 0 <= pid < pp.capacity
                       else f"already leased to logical page {pp.holder[pid].handle}")
                raise violation("PAGE-1", f"{pool} page {pid} is {why}", seq=seq, pool=pool, page=pid)
            seen.add(pid)
        adopt.make_room(st, pool, engine_pages)
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
    st.tables[pool].publish(space.row, have, out, pp.generation)
    if speculative and tokens > space.provisional:
        space.provisional = tokens
    st.touch_space(space)
    return out


def plan_grow(st: KVStore, seq: str) -> dict[str, int] | Refusal:
    """Pure: {pool: new entitlement} for the model's own growth step (the first rung that fits every pool), or
    a Refusal(bounded_at). The contract fixes no step ("按需扩充"): an engine's own step is judged by
    `check_engine_growth`, never against these rungs. Reads only and counts nothing: `grow` counts
    TRACE-2 and ENT-3 when it applies the plan."""
    bundle, full = _growth_frame(st, seq)
    if isinstance(full, Refusal):
        return full
    cfg, P = st.config, st.P
    main = bundle.spaces["main"]
    ceiling_pages = ceil_div(bundle.ceiling, P)
    for extra in (cfg.growth_window, 128, 64):
        want = ceil_div(min(bundle.ceiling, main.committed + extra), P) + cfg.growth_cushion
        target = backend_entitlements(st, min(ceiling_pages, max(main.entitlement, want)))
        target = {p: max(target[p], s.entitlement) for p, s in bundle.spaces.items()}
        if _fits(st, bundle, target):
            return target
    return Refusal("capacity", f"the window cannot grow; {seq!r} completes at frontier {covered(st, bundle)}",
                   bounded_at=covered(st, bundle))


def _growth_frame(st: KVStore, seq: str) -> tuple[SequenceKVBundle, dict[str, int] | Refusal]:
    """(bundle, the full-window target {pool: pages}) or (bundle, Refusal) when growth cannot apply.
    Reads only and counts nothing: `grow` counts TRACE-2 and ENT-3."""
    bundle = st.bundles.get(seq)
    if bundle is None:
        raise violation("TRACE-2", f"grow on sequence {seq!r}, which " +
                        ("has finished" if seq in st.ended_seqs else "is not active"), seq=seq)
    cfg = st.config
    if cfg.growth is None:
        return bundle, Refusal("growth-disabled", "kv_lease_growth is off in this configuration")
    busy = [s for s in bundle.spaces.values() if s.in_flight is not None]
    if busy:
        raise violation("ENT-3", f"grow for {seq!r} while unit {busy[0].unit!r} is in flight: the window grows "
                        "only at decode-round boundaries", seq=seq, unit=busy[0].unit)
    if bundle.bounded_at is not None:
        return bundle, Refusal("capacity", f"{seq!r} already completes at frontier {bundle.bounded_at}",
                               bounded_at=bundle.bounded_at)
    P, main = st.P, bundle.spaces["main"]
    want = ceil_div(min(bundle.ceiling, main.committed + cfg.growth_window), P) + cfg.growth_cushion
    full = backend_entitlements(st, min(ceil_div(bundle.ceiling, P), max(main.entitlement, want)))
    return bundle, {p: max(full[p], s.entitlement) for p, s in bundle.spaces.items()}


def _fits(st: KVStore, bundle: SequenceKVBundle, target: dict[str, int]) -> bool:
    return all(target[p] - s.entitlement <= st.pools[p].available for p, s in bundle.spaces.items())


def covered(st: KVStore, bundle: SequenceKVBundle) -> int:
    """The frontier of bounded completion: the window's ("request 在 window 覆盖的 frontier 上以 length 结束"),
    i.e. the Main entitlement without the cushion (the cushion is "reservation 中 cache 不得占用的一段" that
    covers the step about to launch and one forced control span), never below the committed frontier, capped
    by the request's ceiling."""
    main = bundle.spaces["main"]
    window = (main.entitlement - st.config.growth_cushion) * st.P
    return min(bundle.ceiling, max(main.committed, window))


def check_engine_growth(st: KVStore, seq: str, ok: bool, entitlement: dict | None
                        ) -> dict[str, int] | Refusal:
    """Judge an engine's growth answer by what the contract fixes, not by the model's rungs; returns the
    entitlements to apply ({pool: pages}) for an accepted growth, or the Refusal for a refused one.

    Refused: a divergence (TRACE-1) only when the whole window fits every pool (no step policy refuses that).
    Accepted with the new `entitlement` per pool (a kvtrace/1 extension): each at least the current one, at
    most L, and fitting global available (TRACE-1 otherwise). Accepted without it: a divergence only when the
    window holds no further step (it ends at the frontier) and no pool that needs a page has one; the model
    then applies its own largest fitting step (a guess; the engine's counters at `observe` are authoritative)."""
    bundle, full = _growth_frame(st, seq)
    if isinstance(full, Refusal):
        if ok:
            raise violation("TRACE-1", f"engine grew {seq!r}'s window, the contract requires a refusal "
                            f"({full.reason}: {full.detail})", seq=seq)
        return full
    spaces = bundle.spaces
    if not ok:
        if any(full[p] > s.entitlement for p, s in spaces.items()) and _fits(st, bundle, full):
            raise violation("TRACE-1", f"engine refused growing {seq!r}'s window, but every pool can cover the "
                            f"whole window ({full})", seq=seq)
        return Refusal("capacity", f"the window does not grow; {seq!r} completes at frontier "
                       f"{covered(st, bundle)}", bounded_at=covered(st, bundle))
    if entitlement is not None:
        bad = [p for p in entitlement if p not in spaces]
        if bad:
            raise violation("AS-5", f"growth names pool {bad[0]!r}, which {seq!r}'s bundle does not hold", seq=seq)
        target = {p: entitlement.get(p, s.entitlement) for p, s in spaces.items()}
        for p, s in spaces.items():
            if target[p] < s.entitlement or target[p] > st.L:
                raise violation("TRACE-1", f"accepted growth sets {seq!r} ({p}) entitlement {target[p]}: it must "
                                f"lie in [{s.entitlement}, L = {st.L}]", seq=seq, pool=p)
        if not _fits(st, bundle, target):
            raise violation("TRACE-1", f"accepted growth to {target} does not fit global available capacity",
                            seq=seq)
        _check_bounded(st, seq, full, target)
        return target
    need = [p for p, s in spaces.items() if full[p] > s.entitlement]
    main = spaces["main"]
    window_end = (main.entitlement - st.config.growth_cushion) * st.P
    if need and main.committed >= window_end and all(st.pools[p].available == 0 for p in need):
        raise violation("TRACE-1", f"engine grew {seq!r}'s window, but its window ends at the frontier "
                        f"{main.committed} and no pool that needs a page has one available", seq=seq)
    planned = plan_grow(st, seq)
    if isinstance(planned, Refusal):  # no rung fits: as much of the window as every pool can cover
        room = min(st.pools[p].available for p in need)
        planned = {p: min(full[p], s.entitlement + room) for p, s in spaces.items()}
    return planned


def growth_bound(st: KVStore, seq: str) -> dict[str, int]:
    """{pool: the most pages kv_lease_growth may lease now}: ceil((frontier + window)/P) + cushion, capped by the
    request's ceiling, never below the current entitlement (pure; for `observe` to judge a growth read from
    counters)."""
    bundle, full = _growth_frame(st, seq)
    return {p: s.entitlement for p, s in bundle.spaces.items()} if isinstance(full, Refusal) else full


def _check_bounded(st: KVStore, seq: str, bound: dict[str, int], target: dict[str, int]) -> None:
    """ENT-5: a growth leases at most the current frontier + the bounded window + the per-lane cushion.

    Store contract: "Generation 只租用「当前 frontier 加一个 bounded window（约 4096 tokens）加一个 per-lane
    cushion」的 page count，并在每个 decode-round 边界按需扩充该 window；window 之外、尚未取得的 output budget 不计入
    active entitlement" (L196-199) and "启用 kv_lease_growth 时它只在 decode-round边界按需增大" (L342)."""
    st.cov.check("ENT-5", exercised=True)
    over = [p for p in target if target[p] > bound[p]]
    if over:
        p = over[0]
        raise violation("ENT-5", f"growth leases {target[p]} {p} pages for {seq!r}; kv_lease_growth leases at most "
                        f"the frontier + the bounded window + the cushion = {bound[p]} pages", seq=seq, pool=p,
                        entitlement=target[p], bound=bound[p])


def grow(st: KVStore, seq: str, engine_bounded_at: int | None = None, engine: tuple | None = None) -> Any:
    """kv_lease_growth at a round boundary: new entitlements {pool: pages} or Refusal with bounded_at.
    `engine` = (ok, entitlement) is the engine's answer, judged by `check_engine_growth`."""
    st.cov.check("TRACE-2")
    try:
        plan = plan_grow(st, seq) if engine is None else check_engine_growth(st, seq, *engine)
    except ContractViolation as exc:  # the planner counts nothing: its violation is an exercised check
        st.cov.count([(f.rule, True) for f in exc.findings])
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
    if engine is not None and engine[0] and engine[1] is None:  # the engine's step is unknown: a guess
        bound = growth_bound(st, seq)  # what the engine may hold at most (ENT-5), judged at `observe`
        before = {p: (s.entitlement, bound[p]) for p, s in bundle.spaces.items()}
        bundle.growth_guess = before if bundle.growth_guess is None else bundle.growth_guess
    elif engine is not None:
        bundle.growth_guess = None  # the engine said what it holds
    for p, target in plan.items():
        s = bundle.spaces[p]
        d = target - s.entitlement
        s.reservation += d
        st.pools[p].reserve(d)
        st.touch_space(s)
    return plan


def would_map(st: KVStore, seq: str, pool: str, tokens: int) -> Refusal | None:
    """Pure: the Refusal ensure_mapped_to_tokens would give, or None when it would succeed (counts nothing)."""
    _, space = lookup_active(st, seq, pool, "map")
    needed = ceil_div(tokens, st.P)
    if needed > len(space.pages) and needed > space.entitlement:
        return Refusal("entitlement", f"{pool}: {needed} pages needed, entitlement {space.entitlement}")
    if needed > len(space.pages) and st.pinned_short(pool, needed - len(space.pages)):
        return Refusal("busy", f"{pool}: the only free capacity left is still pinned by a copy")
    return None


def would_cow(st: KVStore, seq: str, pool: str, block: int) -> int | Refusal | None:
    """Pure: the Refusal `cow` would give, None when it copies, or the page id when the block is already private
    (nothing to copy); raises the TRACE-2 / AS-5 / UNIT-1 violation of a stale or frozen request."""
    _, space = active_space(st, seq, pool, "cow")
    frozen_check(st, space, "cow")
    st.cov.check("TRACE-2")
    if block >= len(space.pages):
        raise violation("TRACE-2", f"cow of block {block}, beyond {seq!r}'s {len(space.pages)} {pool} pages",
                        seq=seq, pool=pool, block=block)
    old = space.pages[block]
    if old.refs <= 1:
        return old.device
    if st.pools[pool].available < 1:
        return Refusal("capacity", f"{pool}: no page available for the COW destination")
    if st.pinned_short(pool, 1):
        return Refusal("busy", f"{pool}: the only free capacity left is still pinned by a copy")
    return None


def cow(st: KVStore, seq: str, pool: str, block: int, engine_page: int | None = None) -> int | Refusal | None:
    """Replace the shared member at `block` with a private copy; returns the new page id or a Refusal.

    A `cow` answer is judged like every other request: an engine page for a block that is already private
    is a divergence (there is nothing to copy), and an accepted destination id is adopted after the usual
    PAGE-1 check."""
    outcome = would_cow(st, seq, pool, block)
    space = st.bundles[seq].spaces[pool]
    old = space.pages[block]
    st.cov.check("WR-2", exercised=old.refs > 1)
    if isinstance(outcome, int):
        if engine_page is not None and engine_page != outcome:
            raise violation("TRACE-1", f"cow of block {block}: the page ({outcome}) is already private to {seq!r}, "
                            f"yet the engine copied it into page {engine_page}", seq=seq, pool=pool, block=block)
        return outcome  # already private: nothing to copy
    if outcome is not None:
        return outcome
    pp = st.pools[pool]
    if engine_page is not None:
        st.cov.check("PAGE-1", exercised=True)
        if not adopt.free_for_engine(st, pool, engine_page):
            raise violation("PAGE-1", f"{pool} page {engine_page} is not free for the COW destination",
                            seq=seq, pool=pool, page=engine_page)
        adopt.make_room(st, pool, [engine_page])
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
    st.tables[pool].publish(space.row, block, [pid], pp.generation)
    st.t_pages[page] = None
    st.touch_space(space)
    return pid
