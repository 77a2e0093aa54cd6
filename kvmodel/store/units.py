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

from kvsim.kvmodel.store.errors import ContractViolation, Finding, violation
from kvsim.kvmodel.store.mapping import active_space


# Rules a launch evaluates: per row TRACE-2, UNIT-1; per written row ENT-3, WR-1, CONS-1, UNIT-3 (their
# premise holds) and WR-2, WR-3 (premise: a shared / protected page, rare). Counted once per launch.
LAUNCH_RULES = ("TRACE-2", "UNIT-1", "ENT-3", "WR-1", "CONS-1", "UNIT-3", "WR-2", "WR-3")
COMMIT_RULES = ("UNIT-2",)


class Unit:
    """An in-flight GPU unit: rows are (space, a, b) tuples, [a, b) the written positions (None, None for a
    read-only row); each row's space points back to its tuple (`unit_row`) while the unit runs."""

    __slots__ = ("uid", "rows")

    def __init__(self, uid: str, rows: list[tuple]):
        self.uid, self.rows = uid, rows


def launch(st, unit: str, rows: list) -> None:
    """A unit starts: rows = [(seq, pool, (a, b) or None)]."""
    cov = st.cov
    if unit in st.units:
        cov.check("TRACE-2", exercised=True)
        raise violation("TRACE-2", f"unit {unit!r} is already in flight", unit=unit)
    planned = []
    bundles = st.bundles
    written = 0
    try:
        for seq, pool, write in rows:
            bundle = bundles.get(seq)
            space = None if bundle is None else bundle.spaces.get(pool)
            if space is None:
                active_space(st, seq, pool, "launch")  # raises the TRACE-2 / AS-5 violation
            if space.unit is not None:
                cov.check("UNIT-1", exercised=True)
                raise violation("UNIT-1", f"{seq!r} ({pool}) is already a row of in-flight unit "
                                f"{space.unit!r}", seq=seq, pool=pool, unit=unit)
            space.unit = unit  # provisional mark (a duplicate row then meets it); undone on violation
            if write is None:
                planned.append((space, None, None))
                continue
            a, b = write
            written += 1
            # the common case inline (see _plainly_legal): at the frontier, mapped, sole writer, nothing protected
            pages = space.pages
            plain = a == space.committed and b <= len(pages) << 6 and not space.protected and \
                (bundle.bounded_at is None or pool != "main")
            if plain:
                for blk in range(a >> 6, (b + 63) >> 6):
                    if pages[blk].writer is not space:
                        plain = False
                        break
            if not plain:
                findings, flags = _write_findings(st, space, a, b)
                cov.add("WR-2", 0, flags & 1)
                cov.add("WR-3", 0, flags >> 1)
                if findings:
                    for f in findings:
                        f.context.setdefault("unit", unit)
                    raise ContractViolation(findings)
            planned.append((space, a, b))
    except ContractViolation:
        for r in planned:
            r[0].unit = None
        if space is not None and (not planned or planned[-1][0] is not space) and space.unit == unit:
            space.unit = None
        raise
    n = len(rows)
    c = st.launch_cells
    c[0][0] += n
    c[1][0] += n
    if written:
        for cell in c[2:6]:
            cell[0] += written
            cell[1] += written
        c[6][0] += written
        c[7][0] += written
    st.units[unit] = Unit(unit, planned)
    t = st.t_spaces
    for r in planned:
        sp = r[0]
        sp.unit_row = r
        sp.frozen = (len(sp.pages), sp.committed, sp.row, sp.reservation)
        t[sp] = None


def _write_findings(st, space, a: int, b: int) -> tuple[list[Finding], int]:
    """ENT-3, UNIT-3, WR-1/2/3 and CONS-1 for one written row [a, b): (findings, flags 1=shared 2=protected)."""
    P = st.P
    need = -(-b // P)
    if need > len(space.pages) + space.reservation:
        return [Finding("ENT-3", f"write up to position {b} needs {need} pages, beyond the entitlement of "
                        f"{space.entitlement} pages at this round boundary",
                        {"seq": space.owner, "pool": space.pool, "write": [a, b]})], 0
    if space.pool == "main":
        bounded = st.bundles[space.owner].bounded_at
        if bounded is not None and b > bounded:
            return [Finding("ENT-3", f"write up to position {b} after bounded completion at frontier "
                            f"{bounded}", {"seq": space.owner, "pool": space.pool, "write": [a, b]})], 0
    pages = space.pages
    if b > len(pages) * P:
        return [Finding("UNIT-3", f"write [{a}, {b}) reaches beyond the mapped extent {space.mapped_tokens}",
                        {"seq": space.owner, "pool": space.pool, "write": [a, b]})], 0
    findings = []
    committed = space.committed
    flags = 0
    if a < committed:
        findings.append(Finding("UNIT-3", f"write [{a}, {b}) starts below the committed frontier {committed}",
                                {"seq": space.owner, "pool": space.pool, "write": [a, b]}))
    for blk in range(a // P, need):
        page = pages[blk]
        holders = page.holders
        if page.writer is not space:
            refs = len(holders)
            if refs > 1:
                flags |= 1
            why = (f"is shared by {refs} address spaces (immutable; copy it first)" if refs > 1
                   else "has another writer" if page.writer is not None else "is not writable by this space")
            findings.append(Finding("WR-2" if refs > 1 else "WR-1", f"write into block {blk}: page {page.device} {why}",
                                    {"seq": space.owner, "pool": space.pool, "block": blk, "page": page.device}))
        if len(holders) > 1 or space.protected:
            prot = page.protected
            if prot > 0:
                flags |= 2
            lo = a - blk * P
            if lo < prot:
                findings.append(Finding("WR-3", f"write into block {blk} columns from {max(lo, 0)} overwrites "
                                        f"{prot} checkpoint-protected columns",
                                        {"seq": space.owner, "pool": space.pool, "block": blk, "protected": prot}))
    if a > committed:
        findings.append(Finding("CONS-1", f"the unit reads [0, {b}) but positions [{committed}, {a}) hold no "
                                "valid content (the write starts beyond the committed frontier)",
                                {"seq": space.owner, "pool": space.pool, "write": [a, b], "frontier": committed}))
    return findings, flags


def _live_unit(st, unit: str, op: str):
    st.cov.check("TRACE-2")
    u = st.units.get(unit)
    if u is None:
        raise violation("TRACE-2", f"{op} of unit {unit!r}, which is not in flight (it ended, or was never "
                        "launched)", unit=unit)
    return u


def complete(st, unit: str, commits: list) -> None:
    """The unit succeeded: commits = [(seq, pool, frontier)] are published, then the rows unfreeze."""
    u = st.units.get(unit)
    if u is None:
        u = _live_unit(st, unit, "complete")  # raises the TRACE-2 violation
    bundles = st.bundles
    plan = []
    try:
        for seq, pool, frontier in commits:
            bundle = bundles.get(seq)
            sp = None if bundle is None else bundle.spaces.get(pool)
            r = sp.unit_row if sp is not None and sp.unit == unit else None
            if r is None:
                st.cov.check("UNIT-2", exercised=True)
                why = "twice" if any(p[0] is sp for p in plan) else "although it is not a row of the unit"
                raise violation("UNIT-2", f"unit {unit!r} commits {seq!r} ({pool}) {why}", unit=unit, seq=seq,
                                pool=pool)
            sp.unit_row = None  # taken: a second commit of the same row meets None (restored below)
            plan.append((sp, frontier, r))
            if frontier < sp.committed:
                st.cov.check("UNIT-2", exercised=True)
                raise violation("UNIT-2", f"commit moves {seq!r} ({pool}) back from {sp.committed} to {frontier}; "
                                "only an explicit truncate shortens a frontier", unit=unit, seq=seq, pool=pool)
            limit = sp.committed if r[2] is None else r[2]
            if frontier > limit:
                st.cov.check("UNIT-2", exercised=True)
                raise violation("UNIT-2", f"commit of {seq!r} ({pool}) to {frontier} beyond the unit's written "
                                f"extent {limit}", unit=unit, seq=seq, pool=pool, frontier=frontier, written=limit)
    except ContractViolation:
        for sp, _, r in plan:
            sp.unit_row = r
        raise
    c = st.commit_cells[0]
    c[0] += len(commits)
    c[1] += len(commits)
    tp = st.t_pages
    for sp, frontier, _ in plan:
        lo = sp.committed
        if frontier > lo:  # commit columns [lo, frontier): their content keys carry the writer's token
            token, pages = sp.token, sp.pages
            for blk in range(lo >> 6, (frontier + 63) >> 6):
                page = pages[blk]
                hi = frontier - (blk << 6)
                if hi > 64:
                    hi = 64
                segs = page.segments
                if not segs or segs[-1][1] != token:
                    page.extend_segments(max(0, lo - (blk << 6)), token)
                if hi > page.committed:
                    page.committed = hi
                page.dev_epoch = page.epoch
                page.dev_cov = page.committed
                tp[page] = None
            sp.committed = frontier
    del st.units[u.uid]
    ts = st.t_spaces
    for sp, _, _ in u.rows:  # the rows unfreeze (as in _end, inlined on this hot path)
        sp.unit = sp.frozen = sp.unit_row = None
        ts[sp] = None


def fail(st, unit: str) -> None:
    """The unit formed no legal commit: nothing becomes visible, rows unfreeze."""
    _end(st, _live_unit(st, unit, "fail"))


def _end(st, u) -> None:
    del st.units[u.uid]
    t = st.t_spaces
    for r in u.rows:
        sp = r[0]
        sp.unit = sp.frozen = sp.unit_row = None
        t[sp] = None
