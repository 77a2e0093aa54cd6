"""Comparing the engine's reported state with the model's (the `observe` fact).

The engine's report is itself a fact about its store, so it is checked against the rule it would break
before it is compared: counters that do not sum to the capacity break CAP-3 ("allocated+reserved+
available=capacity"); a table entry naming a page id that no lease carries is a stale handle (PAGE-2,
"generation 防止 release/reuse 后的 stale handle"); any other table difference breaks the mirror (AS-3,
"block table只是 active Device mapping 的执行镜像"); a frontier rounded down to a page boundary breaks
token exactness (AS-2, "Valid frontier精确到token"); any other difference is a divergence (TRACE-1).
Reported content (the content keys of the committed positions, an extension a fuzzing oracle writes) is
compared with the model's own keys read through a valid replica, Device or Host ("replica.epoch=
page.epoch \\land replica.coverage\\ge n"): a committed column that no valid replica covers has lost its
last replica (REP-4); a different key is a divergence (TRACE-1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import adopt
from kvsim.kvmodel.store.address_space import content_key
from kvsim.kvmodel.store.errors import violation
from kvsim.kvmodel.store.mapping import active_space
from kvsim.kvmodel.store.tables import HOLE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore


def observe_pool(st: KVStore, pool: str, allocated: int | None = None, reserved: int | None = None,
                 available: int | None = None) -> None:
    cov = st.cov
    if pool not in st.pools:
        cov.check("AS-5")
        raise violation("AS-5", f"observe of pool {pool!r}, which this configuration does not enable", pool=pool)
    mine = st.pool_counters(pool)
    seen = {k: v for k, v in (("allocated", allocated), ("reserved", reserved), ("available", available))
            if v is not None}
    cov.check("CAP-3", exercised=len(seen) == 3)
    if len(seen) == 3 and sum(seen.values()) != mine["capacity"]:
        raise violation("CAP-3", f"engine reports {pool} allocated {allocated} + reserved {reserved} + available "
                        f"{available} = {sum(seen.values())} != capacity {mine['capacity']}", pool=pool, **seen)
    cov.check("TRACE-1", exercised=True)
    diff = {k: [v, mine[k]] for k, v in seen.items() if v != mine[k]}
    adopt_growth = _growth_settled_by(st, pool, seen, mine) if diff else None
    if diff and adopt_growth is None:
        text = ", ".join(f"{k} {v[0]} (model {v[1]})" for k, v in diff.items())
        raise violation("TRACE-1", f"engine reports {pool} {text}", pool=pool, diff=diff)
    if adopt_growth is not None:  # the engine's own growth step, read from its counters
        space, delta = adopt_growth
        space.reservation += delta
        st.pools[pool].reserved += delta
        st.touch_space(space)
    _settle_growth_guesses(st, pool)


def _settle_growth_guesses(st: KVStore, pool: str) -> None:
    """Counters seen: a guessed growth in this pool is settled either way."""
    for b in st.bundles.values():
        if b.growth_guess is not None and pool in b.growth_guess:
            del b.growth_guess[pool]
            if not b.growth_guess:
                b.growth_guess = None


def _growth_settled_by(st: KVStore, pool: str, seen: dict, mine: dict
                      ) -> tuple[KVAddressSpace, int] | None:
    """(space, reservation delta) when the only difference is the size of one sequence's accepted growth whose
    step the trace did not state (the contract fixes none: "按需扩充"): allocated agrees, reserved and
    available differ by the same amount, and the engine's entitlement lies between the one before the
    growth and L. None otherwise; the ENT-5 violation when that entitlement exceeds the bounded window the
    growth could lease ("当前 frontier 加一个 bounded window ... 加一个 per-lane cushion")."""
    if "reserved" not in seen or seen.get("allocated", mine["allocated"]) != mine["allocated"]:
        return None
    delta = seen["reserved"] - mine["reserved"]
    if "available" in seen and seen["available"] - mine["available"] != -delta:
        return None
    guessed = [b for b in st.bundles.values() if b.growth_guess is not None and pool in b.growth_guess]
    if len(guessed) != 1:
        return None
    space = guessed[0].spaces[pool]
    ent = space.entitlement + delta
    gg = guessed[0].growth_guess or {}  # filtered on growth_guess above: never empty here
    before, bound = gg[pool]
    if not before <= ent <= st.L or space.reservation + delta < 0 or mine["available"] - delta < 0:
        return None
    st.cov.check("ENT-5", exercised=True)
    if ent > bound:  # the counters show a lease beyond the bounded window (ENT-5, kvmodel.store.mapping)
        raise violation("ENT-5", f"engine's {pool} counters show {space.owner!r} leasing {ent} pages after its "
                        f"growth; kv_lease_growth leases at most the frontier + the bounded window + the cushion = "
                        f"{bound} pages", seq=space.owner, pool=pool, entitlement=ent, bound=bound)
    return space, delta


def committed_content(st: KVStore, space: KVAddressSpace) -> tuple[list[int], int | None]:
    """The content keys of [0, committed) read through a valid replica of each member page, and the first
    position no valid replica covers (None when every committed column is readable)."""
    P = st.P
    keys: list[int] = []
    for b, page in enumerate(space.pages):
        cols = min(P, space.committed - b * P)
        if cols <= 0:
            break
        if not (page.device_valid(cols) or page.host_valid(cols)):
            return keys, b * P
        for c in range(cols):
            token = page.key_token_at(c)
            if token is None:
                return keys, b * P + c
            keys.append(content_key(token, b * P + c))
    return keys, None


def _observe_content(st: KVStore, space: KVAddressSpace, content: Sequence[int], **ctx: object) -> None:
    st.cov.check("REP-4", exercised=bool(content))
    keys, lost = committed_content(st, space)
    if lost is not None and lost < len(content):
        raise violation("REP-4", f"committed position {lost} has no valid Device or Host replica (its content is "
                        "lost)", position=lost, **ctx)
    st.cov.check("TRACE-1", exercised=True)
    if list(content) != keys:
        at = next((i for i, (x, y) in enumerate(zip(content, keys)) if x != y), min(len(content), len(keys)))
        raise violation("TRACE-1", f"reported content differs from the model's at position {at} (reported "
                        f"{len(content)} keys, the model has {len(keys)})", position=at, **ctx)


def observe_row(st: KVStore, seq: str, pool: str, table: Sequence[int] | None = None, frontier: int | None = None,
                content: Sequence[int] | None = None) -> None:
    cov = st.cov
    _, space = active_space(st, seq, pool, "observe")
    moves = []
    if table is not None:
        t = st.tables[pool]
        mine, last = t.table[space.row], t.last[space.row]
        cov.check("AS-3", exercised=bool(table))
        if len(table) > len(mine):
            raise violation("AS-3", f"engine reports {len(table)} table entries; a row has {len(mine)}",
                            seq=seq, pool=pool)
        pp = st.pools[pool]
        gen = pp.generation
        cov.add("PAGE-2", len(table), sum(1 for pid in table if pid >= 0))
        for b, pid in enumerate(table):
            if pid == mine[b]:
                continue
            if pid != HOLE and mine[b] != HOLE and adopt.is_guess(st, pool, mine[b]):
                moves.append((space.pages[b], pid))  # the model guessed this id: the engine's is adopted
                continue
            prev = last[b]
            stale = pid != HOLE and ((prev is not None and prev[0] == pid and gen[pid] != prev[1])
                                     or pp.is_free(pid))
            rule = "PAGE-2" if stale else "AS-3"
            what = (f"page {pid}, released since it was published there (stale handle: generation "
                    f"{prev[1]}, now {gen[pid]})" if stale and prev is not None and prev[0] == pid
                    else "a released page (stale handle)" if stale
                    else "a hole" if pid == HOLE else f"page {pid}")
            expect = "a hole" if mine[b] == HOLE else f"page {mine[b]}"
            raise violation(rule, f"{seq!r} ({pool}) row {space.row} block {b}: engine maps {what}, the "
                            f"membership requires {expect}", seq=seq, pool=pool, block=b, engine=pid, model=mine[b])
        if moves:
            _distinct(st, pool, table, seq=seq)
            cov.check("PAGE-1", exercised=True)
            adopt.check_adoption(st, pool, moves, seq=seq)
    if frontier is not None:
        cov.check("AS-2", exercised=True)
        if frontier != space.committed:
            rounded = space.committed % st.P and frontier == space.committed - space.committed % st.P
            rule = "AS-2" if rounded else "TRACE-1"
            why = " (rounded down to a page boundary; frontiers are token-exact)" if rounded else ""
            raise violation(rule, f"engine reports {seq!r} ({pool}) frontier {frontier}, the model has "
                            f"{space.committed}{why}", seq=seq, pool=pool, engine=frontier, model=space.committed)
    if content is not None:
        _observe_content(st, space, content, seq=seq, pool=pool)
    if table is not None:
        _adopt_table(st, pool, moves, table)


REPLICAS = ("device", "host", "both")


def observe_checkpoint(st: KVStore, ckpt: str, pool: str, table: Sequence[int] | None = None,
                       frontier: int | None = None, replicas: Sequence[str] | None = None,
                       content: Sequence[int] | None = None) -> None:
    """An engine's report of a retained checkpoint: its membership's Device ids (-1: no Device replica), its
    frontier, where each page has a valid replica ("device", "host" or "both") and/or its content keys
    (read through a valid replica: REP-4 when a committed column has none, TRACE-1 when different).

    A checkpoint is the complete inactive end state of every failed activation from it ("Active publication
    前，source 保持有效，任一失败都回到完整 inactive 终态"): a report that differs after a refused activation
    from it breaks AS-4; otherwise a stale id is PAGE-2 and any other difference TRACE-1.
    """
    cov = st.cov
    cov.check("TRACE-2")
    ck = st.checkpoints.get(ckpt)
    if ck is None:
        why = st.ended_ckpts.get(ckpt)
        raise violation("TRACE-2", f"observe of checkpoint {ckpt!r}, which " + (f"was {why}" if why else "is unknown"),
                        ckpt=ckpt, pool=pool)
    space = ck.spaces.get(pool)
    if space is None:
        cov.check("AS-5")
        raise violation("AS-5", f"observe of checkpoint {ckpt!r} names pool {pool!r}, which it does not hold",
                        ckpt=ckpt, pool=pool)
    rule = "AS-4" if ck.refused_from else "TRACE-1"
    cov.check("AS-4", exercised=ck.refused_from)
    after = " after a refused activation from it (a failure must leave the source complete)" if ck.refused_from else ""
    moves = []
    pp = st.pools[pool]
    if table is not None:
        cov.check(rule, exercised=True)
        if len(table) != len(space.pages):
            raise violation(rule, f"engine reports {len(table)} member pages of checkpoint {ckpt!r} ({pool}), the "
                            f"model has {len(space.pages)}{after}", ckpt=ckpt, pool=pool)
        for b, (pid, page) in enumerate(zip(table, space.pages)):
            if pid == page.device:
                continue
            if pid != HOLE and page.device >= 0 and adopt.is_guess(st, pool, page.device):
                moves.append((page, pid))
                continue
            stale = pid != HOLE and pp.is_free(pid)
            r = "PAGE-2" if stale and not ck.refused_from else rule
            what = "no Device replica" if pid == HOLE else f"Device page {pid}" + (" (released)" if stale else "")
            expect = "no Device replica" if page.device < 0 else f"Device page {page.device}"
            raise violation(r, f"checkpoint {ckpt!r} ({pool}) block {b}: engine reports {what}, the model has "
                            f"{expect}{after}", ckpt=ckpt, pool=pool, block=b, engine=pid, model=page.device)
        if moves:
            _distinct(st, pool, table, ckpt=ckpt)
            cov.check("PAGE-1", exercised=True)
            adopt.check_adoption(st, pool, moves, ckpt=ckpt)
    if frontier is not None:
        cov.check(rule, exercised=True)
        if frontier != space.committed:
            raise violation(rule, f"engine reports checkpoint {ckpt!r} ({pool}) frontier {frontier}, the model has "
                            f"{space.committed}{after}", ckpt=ckpt, pool=pool, engine=frontier, model=space.committed)
    if replicas is not None:
        cov.check(rule, exercised=True)
        mine = [_where(page) for page in space.pages]
        if list(replicas) != mine:
            b = next((i for i, (x, y) in enumerate(zip(replicas, mine)) if x != y), min(len(replicas), len(mine)))
            raise violation(rule, f"checkpoint {ckpt!r} ({pool}): engine reports replicas {list(replicas)}, the "
                            f"model has {mine} (first difference at block {b}){after}", ckpt=ckpt, pool=pool,
                            block=b)
    if content is not None:
        _observe_content(st, space, content, ckpt=ckpt, pool=pool)
    if table is not None:
        _adopt_table(st, pool, moves, table)


def _adopt_table(st: KVStore, pool: str, moves: list[tuple[LogicalKVPage, int]], table: Sequence[int]) -> None:
    """The engine named these ids (checked): adopt its moves of guessed ids and confirm every named id."""
    adopt.adopt(st, pool, moves)
    for pid in table:
        if pid != HOLE:
            adopt.confirm(st, pool, pid)


def _distinct(st: KVStore, pool: str, table: Sequence[int], **ctx: object) -> None:
    """Two blocks of one report naming the same id: one lease would carry two logical pages (PAGE-1)."""
    seen: dict[int, int] = {}
    for b, pid in enumerate(table):
        if pid == HOLE:
            continue
        if pid in seen:
            st.cov.check("PAGE-1", exercised=True)
            raise violation("PAGE-1", f"engine maps {pool} page {pid} at blocks {seen[pid]} and {b}: one lease would "
                            "carry two logical pages", pool=pool, page=pid, **ctx)
        seen[pid] = b


def _where(page: LogicalKVPage) -> str:
    """Where a checkpoint page has a replica valid for its committed columns."""
    dev, host = page.device_valid(page.committed), page.host_valid(page.committed)
    return "both" if dev and host else "device" if dev else "host" if host else "none"
