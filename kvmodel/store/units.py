"""GPU execution units: launch (publication freezes the rows), complete (commit) and fail.

Store contract: "从 block-table publication 到 GPU unit 完成" (selected rows' tables, payload,
memberships and readable frontiers frozen; rows not recycled), "Unit 成功后，Program 才推进
corresponding committed frontiers" (a failed unit commits nothing), "各阶段只保障自己会写入的 pool",
"每个 launch 在 round boundary 上要求 entitlement 覆盖该步所需 pages", "任一 logical page 同时至多一个
writer。存在多个 address-space references 的 full page immutable；需要写入 shared partial tail 时必须
先 COW", "Published checkpoint所需coverage不可被writer覆盖" and the consumer's "read domain 不超过该
sequence 的 frozen valid frontier".

A launch row writes positions [a, b) and reads [0, b) (a read-only row reads [0, committed)). Decisions
(UNIT-1 / CONS-1 entries): an address space belongs to at most one in-flight unit (a second unit would
see the first one's commit mid-flight); a write starting beyond the committed frontier leaves stale
columns inside the read domain, which the consumer rule forbids.
"""

from __future__ import annotations

from .config import ceil_div
from .errors import ContractViolation, Finding, violation
from .mapping import active_space
from .store import Unit, UnitRow


def launch(st, unit: str, rows: list) -> None:
    """A unit starts: rows = [(seq, pool, (a, b) or None)]."""
    cov = st.cov
    cov.check("TRACE-2")
    if unit in st.units:
        raise violation("TRACE-2", f"unit {unit!r} is already in flight", unit=unit)
    planned = []
    seen = set()
    for seq, pool, write in rows:
        _, space = active_space(st, seq, pool, "launch")
        cov.check("UNIT-1", exercised=space.unit is not None or (seq, pool) in seen)
        if space.unit is not None or (seq, pool) in seen:
            other = space.unit if space.unit is not None else unit
            raise violation("UNIT-1", f"{seq!r} ({pool}) is already a row of in-flight unit {other!r}",
                            seq=seq, pool=pool, unit=unit)
        seen.add((seq, pool))
        findings = _write_findings(st, space, write) if write is not None else []
        if findings:
            for f in findings:
                f.context.setdefault("unit", unit)
            raise ContractViolation(findings)
        planned.append(UnitRow(space, *(write if write is not None else (None, None))))
    u = Unit(unit, planned)
    st.units[unit] = u
    st.ended_units.discard(unit)
    for r in planned:
        r.space.unit = unit
        st.touch_space(r.space)


def _write_findings(st, space, write) -> list[Finding]:
    """ENT-3, UNIT-3, WR-2, WR-3 and CONS-1 for one written row; empty when the write is legal."""
    cov, P = st.cov, st.P
    a, b = write
    ctx = {"seq": space.owner, "pool": space.pool}
    cov.check("ENT-3", exercised=True)
    need = ceil_div(b, P)
    if need > space.entitlement:
        return [Finding("ENT-3", f"write up to position {b} needs {need} pages, beyond the entitlement of "
                        f"{space.entitlement} pages at this round boundary", {**ctx, "write": [a, b]})]
    bundle = st.bundles[space.owner]
    if bundle.bounded_at is not None and space.pool == "main" and b > bundle.bounded_at:
        return [Finding("ENT-3", f"write up to position {b} after bounded completion at frontier "
                        f"{bundle.bounded_at}", {**ctx, "write": [a, b]})]
    cov.check("UNIT-3", exercised=b > a)
    if b > space.mapped_tokens:
        return [Finding("UNIT-3", f"write [{a}, {b}) reaches beyond the mapped extent {space.mapped_tokens}",
                        {**ctx, "write": [a, b]})]
    findings = []
    if a < space.committed:
        findings.append(Finding("UNIT-3", f"write [{a}, {b}) starts below the committed frontier {space.committed}",
                                {**ctx, "write": [a, b]}))
    for blk in range(a // P, ceil_div(b, P)):
        page = space.pages[blk]
        lo = max(0, a - blk * P)
        shared = page.refs > 1
        cov.check("WR-2", exercised=shared)
        cov.check("WR-1", exercised=page.writer is not None)
        if page.writer is not space:
            rule = "WR-2" if shared else "WR-1"
            why = (f"is shared by {page.refs} address spaces (immutable; copy it first)" if shared
                   else "has another writer" if page.writer is not None else "is not writable by this space")
            findings.append(Finding(rule, f"write into block {blk}: page {page.device} {why}",
                                    {**ctx, "block": blk, "page": page.device}))
        prot = page.protected
        cov.check("WR-3", exercised=prot > 0)
        if lo < prot:
            findings.append(Finding("WR-3", f"write into block {blk} columns from {lo} overwrites {prot} "
                                    "checkpoint-protected columns", {**ctx, "block": blk, "protected": prot}))
    cov.check("CONS-1", exercised=True)
    if a > space.committed:
        findings.append(Finding("CONS-1", f"the unit reads [0, {b}) but positions [{space.committed}, {a}) hold no "
                                "valid content (the write starts beyond the committed frontier)",
                                {**ctx, "write": [a, b], "frontier": space.committed}))
    return findings


def _live_unit(st, unit: str, op: str):
    st.cov.check("TRACE-2")
    u = st.units.get(unit)
    if u is None:
        why = "has already ended" if unit in st.ended_units else "was never launched"
        raise violation("TRACE-2", f"{op} of unit {unit!r}, which {why}", unit=unit)
    return u


def complete(st, unit: str, commits: list) -> None:
    """The unit succeeded: commits = [(seq, pool, frontier)] are published, then the rows unfreeze."""
    cov = st.cov
    u = _live_unit(st, unit, "complete")
    by_key = {(r.space.owner, r.space.pool): r for r in u.rows}
    done = set()
    plan = []
    for seq, pool, frontier in commits:
        r = by_key.get((seq, pool))
        cov.check("UNIT-2", exercised=True)
        if r is None or (seq, pool) in done:
            why = "twice" if (seq, pool) in done else "although it is not a row of the unit"
            raise violation("UNIT-2", f"unit {unit!r} commits {seq!r} ({pool}) {why}", unit=unit, seq=seq, pool=pool)
        done.add((seq, pool))
        s = r.space
        if frontier < s.committed:
            raise violation("UNIT-2", f"commit moves {seq!r} ({pool}) back from {s.committed} to {frontier}; only "
                            "an explicit truncate shortens a frontier", unit=unit, seq=seq, pool=pool)
        limit = s.committed if r.b is None else r.b
        if frontier > limit:
            raise violation("UNIT-2", f"commit of {seq!r} ({pool}) to {frontier} beyond the unit's written extent "
                            f"{limit}", unit=unit, seq=seq, pool=pool, frontier=frontier, written=limit)
        plan.append((s, frontier))
    for s, frontier in plan:
        commit_columns(st, s, frontier)
    _end(st, u)


def commit_columns(st, space, frontier: int) -> None:
    """Advance the committed frontier; the columns' content keys carry this space's writer token."""
    P = st.P
    lo = space.committed
    if frontier > lo:
        for blk in range(lo // P, ceil_div(frontier, P)):
            page = space.pages[blk]
            hi = min(P, frontier - blk * P)
            page.extend_segments(max(0, lo - blk * P), space.token)
            if hi > page.committed:
                page.committed = hi
            page.dev_epoch, page.dev_cov = page.epoch, page.committed
            st.t_pages[page] = None
        space.committed = frontier
    st.touch_space(space)


def fail(st, unit: str) -> None:
    """The unit formed no legal commit: nothing becomes visible, rows unfreeze."""
    _end(st, _live_unit(st, unit, "fail"))


def _end(st, u) -> None:
    del st.units[u.uid]
    st.ended_units.add(u.uid)
    for r in u.rows:
        r.space.unit = None
        st.touch_space(r.space)
