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

from kvsim.kvmodel.store.address_space import content_key
from kvsim.kvmodel.store.errors import violation
from kvsim.kvmodel.store.mapping import active_space
from kvsim.kvmodel.store.tables import HOLE


def observe_pool(st, pool: str, allocated=None, reserved=None, available=None) -> None:
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
    if diff:
        text = ", ".join(f"{k} {v[0]} (model {v[1]})" for k, v in diff.items())
        raise violation("TRACE-1", f"engine reports {pool} {text}", pool=pool, diff=diff)


def committed_content(st, space) -> tuple[list[int], int | None]:
    """The content keys of [0, committed) read through a valid replica of each member page, and the first
    position no valid replica covers (None when every committed column is readable)."""
    P, keys = st.P, []
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


def _observe_content(st, space, content, **ctx) -> None:
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


def observe_ckpt(st, ckpt: str, pool: str, frontier=None, content=None) -> None:
    """A retained checkpoint's reported frontier and/or content."""
    ck = st.checkpoints.get(ckpt)
    st.cov.check("TRACE-2")
    space = None if ck is None else ck.spaces.get(pool)
    if space is None:
        why = st.ended_ckpts.get(ckpt)
        raise violation("TRACE-2", f"observe of checkpoint {ckpt!r} ({pool}), which " +
                        (f"was {why}" if why else "is unknown" if ck is None else "has no such address space"),
                        ckpt=ckpt, pool=pool)
    if frontier is not None:
        st.cov.check("TRACE-1", exercised=True)
        if frontier != space.committed:
            raise violation("TRACE-1", f"engine reports checkpoint {ckpt!r} ({pool}) frontier {frontier}, the model "
                            f"has {space.committed}", ckpt=ckpt, pool=pool, engine=frontier, model=space.committed)
    if content is not None:
        _observe_content(st, space, content, ckpt=ckpt, pool=pool)


def observe_row(st, seq: str, pool: str, table=None, frontier=None, content=None) -> None:
    cov = st.cov
    _, space = active_space(st, seq, pool, "observe")
    if table is not None:
        mine = st.tables[pool].table[space.row]
        cov.check("AS-3", exercised=bool(table))
        if len(table) > len(mine):
            raise violation("AS-3", f"engine reports {len(table)} table entries; a row has {len(mine)}",
                            seq=seq, pool=pool)
        pp = st.pools[pool]
        cov.add("PAGE-2", len(table), sum(1 for pid in table if pid >= 0))
        for b, pid in enumerate(table):
            if pid != mine[b]:
                stale = pid != HOLE and pp.is_free(pid)
                rule = "PAGE-2" if stale else "AS-3"
                what = "a released page (stale handle)" if stale else ("a hole" if pid == HOLE else f"page {pid}")
                expect = "a hole" if mine[b] == HOLE else f"page {mine[b]}"
                raise violation(rule, f"{seq!r} ({pool}) row {space.row} block {b}: engine maps {what}, the "
                                f"membership requires {expect}", seq=seq, pool=pool, block=b, engine=pid, model=mine[b])
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
