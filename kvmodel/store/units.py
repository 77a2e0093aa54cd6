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


_ROW_RULES = ("TRACE-2", "UNIT-1")  # evaluated per launch row
_WRITE_RULES = ("ENT-3", "WR-1", "CONS-1", "UNIT-3")  # evaluated, premise held, per written row
_WRITE_PREMISE_RULES = ("WR-2", "WR-3")  # evaluated per written row; premise (shared/protected) rarely holds


def launch(st, unit: str, rows: list) -> None:
    """A unit starts: rows = [(seq, pool, (a, b) or None)]."""
    cov = st.cov
    if unit in st.units:
        cov.check("TRACE-2", exercised=True)
        raise violation("TRACE-2", f"unit {unit!r} is already in flight", unit=unit)
    planned = []
    seen = set()
    bundles = st.bundles
    written = 0
    for seq, pool, write in rows:
        bundle = bundles.get(seq)
        space = None if bundle is None else bundle.spaces.get(pool)
        if space is None:
            active_space(st, seq, pool, "launch")  # raises the TRACE-2 / AS-5 violation
        if space.unit is not None or space in seen:
            cov.check("UNIT-1", exercised=True)
            other = space.unit if space.unit is not None else unit
            raise violation("UNIT-1", f"{seq!r} ({pool}) is already a row of in-flight unit {other!r}",
                            seq=seq, pool=pool, unit=unit)
        seen.add(space)
        if write is None:
            planned.append(UnitRow(space, None, None))
            continue
        a, b = write
        written += 1
        if not _plainly_legal(space, a, b, bundle.bounded_at):
            findings, flags = _write_findings(st, space, a, b)
            cov.add("WR-2", 0, flags & 1)
            cov.add("WR-3", 0, flags >> 1)
            if findings:
                for f in findings:
                    f.context.setdefault("unit", unit)
                raise ContractViolation(findings)
        planned.append(UnitRow(space, a, b))
    n = len(rows)
    for c in cov.cells(_ROW_RULES):
        c[0] += n
    if written:
        for c in cov.cells(_WRITE_RULES):
            c[0] += written
            c[1] += written
        for c in cov.cells(_WRITE_PREMISE_RULES):
            c[0] += written
    u = Unit(unit, planned)
    st.units[unit] = u
    st.ended_units.discard(unit)
    t = st.t_spaces
    for r in planned:
        sp = r.space
        sp.unit = unit
        sp.unit_row = r
        sp.frozen = (len(sp.pages), sp.committed, sp.row, sp.reservation)
        t[sp] = None


def _plainly_legal(space, a: int, b: int, bounded) -> bool:
    """The common case, decided fast: a write at the committed frontier, within the mapped extent and
    the entitlement, into pages this space alone holds and writes, with nothing protected. Anything else
    goes through `_write_findings`, which names every rule broken."""
    pages = space.pages
    n = len(pages)
    if a != space.committed or b > n << 6 or space.protected or (bounded is not None and space.pool == "main"):
        return False
    for blk in range(a >> 6, (b + 63) >> 6):
        if pages[blk].writer is not space:
            return False
    return True


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
        why = "has already ended" if unit in st.ended_units else "was never launched"
        raise violation("TRACE-2", f"{op} of unit {unit!r}, which {why}", unit=unit)
    return u


_COMMIT_RULES = ("UNIT-2",)


def complete(st, unit: str, commits: list) -> None:
    """The unit succeeded: commits = [(seq, pool, frontier)] are published, then the rows unfreeze."""
    u = _live_unit(st, unit, "complete")
    bundles = st.bundles
    done = set()
    plan = []
    for seq, pool, frontier in commits:
        bundle = bundles.get(seq)
        sp = None if bundle is None else bundle.spaces.get(pool)
        r = sp.unit_row if sp is not None and sp.unit == unit else None
        if r is None or (seq, pool) in done:
            st.cov.check("UNIT-2", exercised=True)
            why = "twice" if (seq, pool) in done else "although it is not a row of the unit"
            raise violation("UNIT-2", f"unit {unit!r} commits {seq!r} ({pool}) {why}", unit=unit, seq=seq, pool=pool)
        done.add((seq, pool))
        s = r.space
        if frontier < s.committed:
            st.cov.check("UNIT-2", exercised=True)
            raise violation("UNIT-2", f"commit moves {seq!r} ({pool}) back from {s.committed} to {frontier}; only "
                            "an explicit truncate shortens a frontier", unit=unit, seq=seq, pool=pool)
        limit = s.committed if r.b is None else r.b
        if frontier > limit:
            st.cov.check("UNIT-2", exercised=True)
            raise violation("UNIT-2", f"commit of {seq!r} ({pool}) to {frontier} beyond the unit's written extent "
                            f"{limit}", unit=unit, seq=seq, pool=pool, frontier=frontier, written=limit)
        plan.append((s, frontier))
    for c in st.cov.cells(_COMMIT_RULES):
        c[0] += len(commits)
        c[1] += len(commits)
    for s, frontier in plan:
        commit_columns(st, s, frontier)
    _end(st, u)


def commit_columns(st, space, frontier: int) -> None:
    """Advance the committed frontier; the columns' content keys carry this space's writer token."""
    P = st.P
    lo = space.committed
    if frontier > lo:
        tp = st.t_pages
        token = space.token
        pages = space.pages
        for blk in range(lo // P, -(-frontier // P)):
            page = pages[blk]
            hi = frontier - blk * P
            if hi > P:
                hi = P
            segs = page.segments
            if not segs or segs[-1][1] != token:
                page.extend_segments(max(0, lo - blk * P), token)
            if hi > page.committed:
                page.committed = hi
            page.dev_epoch = page.epoch
            page.dev_cov = page.committed
            tp[page] = None
        space.committed = frontier
    st.t_spaces[space] = None


def fail(st, unit: str) -> None:
    """The unit formed no legal commit: nothing becomes visible, rows unfreeze."""
    _end(st, _live_unit(st, unit, "fail"))


def _end(st, u) -> None:
    del st.units[u.uid]
    st.ended_units.add(u.uid)
    t = st.t_spaces
    for r in u.rows:
        sp = r.space
        sp.unit = sp.frozen = sp.unit_row = None
        t[sp] = None
