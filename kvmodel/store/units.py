"""GPU execution units: launch (publication freezes the rows), complete (commit) and fail.

Store contract: "从 block-table publication 到 GPU unit 完成" (selected rows' tables, payload,
memberships and readable frontiers frozen; rows not recycled), "Unit 成功后，Program 才推进
corresponding committed frontiers" (a failed unit commits nothing), "各阶段只保障自己会写入的 pool",
"每个 launch 在 round boundary 上要求 entitlement 覆盖该步所需 pages", "任一 logical page 同时至多一个
writer。存在多个 address-space references 的 full page immutable；需要写入 shared partial tail 时必须
先 COW", "Published checkpoint所需coverage不可被writer覆盖" and the consumer's "read domain 不超过该
sequence 的 frozen valid frontier".

A launch row writes positions [a, b) and reads [0, b) (a read-only row reads [0, committed)). Decisions
(UNIT-1 / CONS-1 entries): several in-flight units may hold read-only rows of one address space (the
contract freezes it against mutation, it does not forbid readers), but a written row needs the space to
itself (a reader would see the writer's commit move its frozen frontier mid-flight); a write starting
beyond the committed frontier leaves stale columns inside the read domain, which the consumer rule forbids.

Plan, then execute: `plan_launch` / `plan_complete` only read the state and return an immutable plan (or
raise the violation); `launch` / `complete` apply a plan completely and count its coverage. Nothing is
marked before every row has been validated, so a violation leaves nothing to roll back.

"In flight" has one source of truth, `KVStore.units` (unit id -> `Unit`). `KVAddressSpace.in_flight` is a
cache of it (the `UnitRow` holding that space, or None) so that a row is found in O(1); its only writers
are `apply_launch`, `apply_complete`, `_end` and `_leave_readers` below, and UNIT-1 checks the cache against
`KVStore.units`.
Records are frozen `msgspec.Struct`s (named fields, slots, built in C: this is the replay's hot path).
This module knows nothing of traces: rows are any records with the fields of `LaunchRow` / `CommitRow`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.kvmodel.store.errors import ContractViolation, Finding, InvariantError, violation
from kvsim.kvmodel.store.mapping import lookup_active

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.store import KVStore

P = PAGE_SIZE

# Rules a launch evaluates: per row TRACE-2, UNIT-1; per written row ENT-3, WR-1, CONS-1, UNIT-3, AS-6 (their
# premise holds) and WR-2, WR-3, REP-2 (premise: a shared / protected / pinned page, rare). Counted once per
# applied launch.
LAUNCH_RULES = ("TRACE-2", "UNIT-1", "ENT-3", "WR-1", "CONS-1", "UNIT-3", "WR-2", "WR-3", "AS-6", "REP-2")
COMMIT_RULES = ("TRACE-2", "UNIT-2")


class LaunchRow(msgspec.Struct, frozen=True, gc=False):
    """One row of a launch: `write` is the written positions (a, b), or None for a read-only row."""

    seq: str
    pool: str
    write: tuple[int, int] | None


class CommitRow(msgspec.Struct, frozen=True, gc=False):
    """One row of a completion: the committed frontier (tokens) the unit publishes for (seq, pool)."""

    seq: str
    pool: str
    frontier: int


class UnitRow(msgspec.Struct, frozen=True):
    """One row of an in-flight unit and what launch froze of its space (UNIT-1 compares against it)."""

    unit: str  # the unit's id
    space: object  # the KVAddressSpace
    a: int | None  # written positions [a, b); None, None for a read-only row
    b: int | None
    num_pages: int  # frozen at launch: membership length, committed frontier, execution row, reservation
    committed: int
    row: int
    reservation: int
    index: int  # the row's place in Unit.rows (UNIT-1 finds it there in O(1))


class Unit(msgspec.Struct, frozen=True, gc=False):
    """A validated launch (`plan_launch`); once applied, the in-flight unit (the value of `KVStore.units[uid]`).

    Nothing refers back to a Unit, so it can stay out of the cycle collector (gc=False).
    """

    uid: str
    rows: tuple  # UnitRow, in the launch's order
    num_written: int  # rows with a write range (the coverage apply_launch counts, in rows)
    num_shared: int  # written rows meeting a shared page (WR-2's premise)
    num_protected: int  # written rows meeting checkpoint-protected columns (WR-3's premise)
    forced: tuple = ()  # spaces spending their one forced control span after bounded completion (ENT-3)


class CompletePlan(msgspec.Struct, frozen=True, gc=False):
    """A validated completion (transient: nothing refers back to it); commit i publishes frontiers[i]
    for spaces[i], in the event's order."""

    unit: Unit
    spaces: tuple  # KVAddressSpace: rows of the unit, each at most once
    frontiers: tuple  # int, tokens: each >= the space's committed frontier and <= its row's write end


# -- launch ---------------------------------------------------------------------------------------------
def launch(st: KVStore, unit: str, rows: Sequence[LaunchRow]) -> None:
    """A unit starts: rows are LaunchRow-shaped records (seq, pool, write)."""
    apply_launch(st, plan_launch(st, unit, rows))


def plan_launch(st: KVStore, unit: str, rows: Sequence[LaunchRow]) -> Unit:
    """Validate every row (TRACE-2, UNIT-1, ENT-3, UNIT-3, WR-1/2/3, CONS-1); reads the state only."""
    if unit in st.units:
        raise violation("TRACE-2", f"unit {unit!r} is already in flight", unit=unit)
    planned: list[UnitRow] = []
    bundles = st.bundles
    max_context = st.S
    written = shared = protected = 0
    forced: list[KVAddressSpace] = []  # spaces whose write is their one forced control span after bounded completion
    listed = set()
    for r in rows:
        seq, pool, write = r.seq, r.pool, r.write
        bundle = bundles.get(seq)
        space = None if bundle is None else bundle.spaces.get(pool)
        if space is None:
            lookup_active(st, seq, pool, "launch")  # raises the TRACE-2 / AS-5 violation
            raise AssertionError("unreachable")
        held = space.in_flight
        if held is not None and (write is not None or held.a is not None):
            # readers may share a space (the contract forbids mutation in flight, not readers); a writer may not
            # join a unit reading it, nor a reader join the unit writing it (its commit would move the frontier)
            raise violation("UNIT-1", f"{seq!r} ({pool}) is already a row of in-flight unit {held.unit!r}"
                            + ("" if write is None else " (a written row needs the space to itself)"),
                            seq=seq, pool=pool, unit=unit)
        if space in listed:  # spaces hash by identity
            raise violation("UNIT-1", f"{seq!r} ({pool}) is listed twice in unit {unit!r}", seq=seq, pool=pool,
                            unit=unit)
        listed.add(space)
        pages = space.pages
        if write is None:
            planned.append(UnitRow(unit, space, None, None, len(pages), space.committed, space.row,
                                   space.reservation, len(planned)))
            continue
        a, b = write
        written += 1
        # the common case inline (see _write_findings): at the frontier, mapped, within S, sole writer of
        # unpinned pages, nothing protected, no bounded completion
        plain = a == space.committed and b <= len(pages) * P and b <= max_context and not space.protected and \
            bundle.bounded_at is None  # type: ignore[union-attr]  # space is not None: bundle is not
        if plain:
            for blk in range(a // P, -(-b // P)):
                page = pages[blk]
                if page.writer is not space or page.pins:
                    plain = False
                    break
        if not plain:
            findings, flags = _write_findings(st, space, a, b)
            if findings and not (st.waived and _claim_determines(st, space, a, b, findings)):
                for f in findings:
                    f.context.setdefault("unit", unit)
                raise ContractViolation(findings)
            shared += flags & 1
            protected += (flags >> 1) & 1
            if flags & 4:
                forced.append(space)
        planned.append(UnitRow(unit, space, a, b, len(pages), space.committed, space.row, space.reservation,
                               len(planned)))
    return Unit(unit, tuple(planned), written, shared, protected, tuple(forced))


def _claim_determines(st: KVStore, space: KVAddressSpace, a: int, b: int, findings: list[Finding]) -> bool:
    """Replay's error recovery adopts a rejected write (the unit ran, as the engine says) only when every rule
    it breaks is waived and the write stays in the space's own mapped pages, unshared and unpinned: then the
    claim changes nothing but that sequence's own columns (sim.replay `_adopt`)."""
    if any(f.rule not in st.waived for f in findings) or b > len(space.pages) * P:
        return False
    return all(space.pages[blk].writer is space and not space.pages[blk].pins for blk in range(a // P, -(-b // P)))


def apply_launch(st: KVStore, plan: Unit) -> None:
    n, written = len(plan.rows), plan.num_written
    trace_2, unit_1, ent_3, wr_1, cons_1, unit_3, wr_2, wr_3, as_6, rep_2 = st.launch_cells
    trace_2.checked += n
    trace_2.exercised += n
    unit_1.checked += n
    unit_1.exercised += n
    if written:
        for cell in (ent_3, wr_1, cons_1, unit_3, as_6):
            cell.checked += written
            cell.exercised += written
        rep_2.checked += written
        wr_2.checked += written
        wr_2.exercised += plan.num_shared
        wr_3.checked += written
        wr_3.exercised += plan.num_protected
    st.units[plan.uid] = plan
    for sp in plan.forced:
        sp.forced_used = True
    t = st.t_spaces
    for r in plan.rows:
        sp = r.space
        if sp.in_flight is None:
            sp.in_flight = r  # the cache of st.units (this module is its only writer)
        else:
            sp.readers += 1  # another unit's read-only row of a space already read in flight
        if sp.provisional and r.a is not None:
            sp.provisional = 0  # the stage that needed the mapping has launched (UNIT-4's premise ends)
        t[sp] = None


def _write_findings(st: KVStore, space: KVAddressSpace, a: int, b: int) -> tuple[list[Finding], int]:
    """ENT-3, UNIT-3, WR-1/2/3 and CONS-1 for one written row [a, b): (findings, flags 1=shared 2=protected)."""
    need = -(-b // P)
    ctx = {"seq": space.owner, "pool": space.pool, "write": [a, b]}
    if need > len(space.pages) + space.reservation:
        return [Finding("ENT-3", f"write up to position {b} needs {need} pages, beyond the entitlement of "
                        f"{space.entitlement} pages at this round boundary", ctx)], 0
    bounded = st.bundles[space.owner].bounded_at
    forced = 0
    if bounded is not None:
        # bounded completion ("request 在 window 覆盖的 frontier 上以 length 结束"): the request completes at the
        # window's frontier F in every pool that writes; the cushion covers "即将 launch 的那一步" (a write starting
        # at or before F; MTP: F plus its provisional lead) and "一次 forced control span" (one more write per
        # space), nothing after
        limit = bounded + (st.config.backend.draft_window - 1 if space.pool == "mtp" else 0)
        if a > limit:
            if space.forced_used:
                return [Finding("ENT-3", f"write [{a}, {b}) starts beyond the frontier {limit} where the request "
                                f"completed (bounded completion at {bounded}), after its one forced control span",
                                ctx)], 0
            forced = 4
    if b > st.config.max_context:
        return [Finding("AS-6", f"write [{a}, {b}) reaches beyond the per-sequence ceiling S = "
                        f"{st.config.max_context}", ctx)], 0
    pages = space.pages
    if b > len(pages) * P:
        return [Finding("UNIT-3", f"write [{a}, {b}) reaches beyond the mapped extent {space.mapped_tokens}",
                        ctx)], 0
    findings = []
    committed = space.committed
    flags = 0
    if a < committed:
        findings.append(Finding("UNIT-3", f"write [{a}, {b}) starts below the committed frontier {committed}",
                                dict(ctx)))
    for blk in range(a // P, need):
        page = pages[blk]
        holders = page.holders
        if page.pins:
            findings.append(Finding("REP-2", f"write into block {blk}: page {page.device} is pinned by an in-flight "
                                    "copy (its source or destination)",
                                    {"seq": space.owner, "pool": space.pool, "block": blk, "page": page.device}))
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
                                dict(ctx, frontier=committed)))
    return findings, flags | forced


# -- complete / fail ------------------------------------------------------------------------------------
def _live_unit(st: KVStore, unit: str, op: str) -> Unit:
    u = st.units.get(unit)
    if u is None:
        raise violation("TRACE-2", f"{op} of unit {unit!r}, which is not in flight (it ended, or was never "
                        "launched)", unit=unit)
    return u


def complete(st: KVStore, unit: str, commits: Sequence[CommitRow]) -> None:
    """The unit succeeded: commits (CommitRow-shaped records) are published, then the rows unfreeze."""
    apply_complete(st, plan_complete(st, unit, commits))


def plan_complete(st: KVStore, unit: str, commits: Sequence[CommitRow]) -> CompletePlan:
    """Validate every commit against the unit's rows (TRACE-2, UNIT-2); reads the state only."""
    u = st.units.get(unit)
    if u is None:
        u = _live_unit(st, unit, "complete")  # raises the TRACE-2 violation
    bundles = st.bundles
    spaces: list[KVAddressSpace] = []
    frontiers: list[int] = []
    committed = set()
    for c in commits:
        seq, pool, frontier = c.seq, c.pool, c.frontier
        bundle = bundles.get(seq)
        sp = None if bundle is None else bundle.spaces.get(pool)
        r = None if sp is None else sp.in_flight
        if r is not None and r.unit != unit and sp.readers:  # type: ignore[union-attr]  # r set: sp is too; one of several readers
            r = next((x for x in u.rows if x.space is sp), None)
        if r is None or r.unit != unit:
            raise violation("UNIT-2", f"unit {unit!r} commits {seq!r} ({pool}) although it is not a row of the "
                            "unit", unit=unit, seq=seq, pool=pool)
        if sp is None:  # r is one of its rows, so its space exists
            raise InvariantError("a unit row has its space", f"unit {unit!r}: {seq!r} ({pool})")
        if sp in committed:  # spaces hash by identity
            raise violation("UNIT-2", f"unit {unit!r} commits {seq!r} ({pool}) twice", unit=unit, seq=seq,
                            pool=pool)
        committed.add(sp)
        if frontier < sp.committed:
            raise violation("UNIT-2", f"commit moves {seq!r} ({pool}) back from {sp.committed} to {frontier}; "
                            "only an explicit truncate shortens a frontier", unit=unit, seq=seq, pool=pool)
        limit = sp.committed if r.b is None else r.b
        if frontier > limit and not ("UNIT-2" in st.waived and r.b is not None and frontier <= len(sp.pages) * P):
            raise violation("UNIT-2", f"commit of {seq!r} ({pool}) to {frontier} beyond the unit's written "
                            f"extent {limit}", unit=unit, seq=seq, pool=pool, frontier=frontier, written=limit)
        spaces.append(sp)
        frontiers.append(frontier)
    return CompletePlan(u, tuple(spaces), tuple(frontiers))


def apply_complete(st: KVStore, plan: CompletePlan) -> None:
    n = len(plan.spaces)
    trace_2, unit_2 = st.commit_cells
    trace_2.checked += 1
    unit_2.checked += n
    unit_2.exercised += n
    tp = st.t_pages
    for sp, frontier in zip(plan.spaces, plan.frontiers):
        lo = sp.committed
        if frontier > lo:  # commit columns [lo, frontier): their content keys carry the writer's token
            token, pages = sp.token, sp.pages
            for blk in range(lo // P, -(-frontier // P)):
                page = pages[blk]
                base = blk * P
                hi = frontier - base
                if hi > P:
                    hi = P
                segs = page.segments
                if not segs or segs[-1][1] != token:
                    page.extend_segments(max(0, lo - base), token)
                if hi > page.committed:
                    page.committed = hi
                page.dev_epoch = page.epoch
                page.dev_cov = page.committed
                tp[page] = None
            sp.committed = frontier
    u = plan.unit  # the unit ends (as in _end, inlined on this hot path)
    del st.units[u.uid]
    ts = st.t_spaces
    for r in u.rows:
        sp = r.space
        if sp.readers:  # another unit still reads the space
            _leave_readers(st, sp, r)
        else:
            sp.in_flight = None
        ts[sp] = None


def fail(st: KVStore, unit: str) -> None:
    """The unit formed no legal commit: nothing becomes visible, rows unfreeze."""
    st.cov.check("TRACE-2")
    _end(st, _live_unit(st, unit, "fail"))


def _end(st: KVStore, u: Unit) -> None:
    """The unit leaves `KVStore.units`; its rows' `in_flight` caches are cleared with it (a space still read
    by another unit points at that unit's row)."""
    del st.units[u.uid]
    t = st.t_spaces
    for r in u.rows:
        sp = r.space
        if sp.readers:
            _leave_readers(st, sp, r)
        else:
            sp.in_flight = None
        t[sp] = None


def _leave_readers(st: KVStore, sp: KVAddressSpace, r: UnitRow) -> None:
    """Read-only row `r` of an ended unit leaves a space other in-flight units still read: the cache points
    at one of theirs (`KVStore.units` no longer holds r's unit)."""
    sp.readers -= 1
    if sp.in_flight is r:
        sp.in_flight = next(x for v in st.units.values() for x in v.rows if x.space is sp)
