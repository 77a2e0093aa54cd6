"""Comparing the engine's reported state with the model's (the `observe` fact).

The engine's report is itself a fact about its store, so it is checked against the rule it would break
before it is compared: counters that do not sum to the capacity break CAP-3 ("allocated+reserved+
available=capacity"); a table entry naming a page id that no lease carries is a stale handle (PAGE-2,
"generation 防止 release/reuse 后的 stale handle"); any other table difference breaks the mirror (AS-3,
"block table只是 active Device mapping 的执行镜像"); a frontier rounded down to a page boundary breaks
token exactness (AS-2, "Valid frontier精确到token"); any other difference is a divergence (TRACE-1).
"""

from __future__ import annotations

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


def observe_row(st, seq: str, pool: str, table=None, frontier=None) -> None:
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
