"""TS-TBL-1: live block tables alias a block only through its cache key, and never name a freed block."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.spec.catalogue import Reading, state_rule

if TYPE_CHECKING:
    from kvsim.kvmodel.cache.state import CacheState


@state_rule("TS-TBL-1", "No two live tables alias a block except through the same cache key; no live table names "
            "a freed block",
            'cache concepts: "A cache entry is metadata plus an owning CacheBlockRef that publishes an existing block '
            'for reuse"', scope="cache",
            decisions="A block in several table slots (of one or several requests) must be published, and every "
                      "such slot must be the slot its key covers; without an observed index, aliased slots must "
                      "at least be the same slot. Liveness comes from the pool or the observed live set. On a "
                      "scheduler's plans (sim.peers.cachetrace.contract) a hit's whole prefix pages name the published "
                      "block itself: a fresh copy of a published block at a hit slot fires (seed 002 L154 "
                      "\"registration neither allocates nor copies physical storage\"; fault hit-served-as-copy).",
            readings=(Reading("tokenspeed", "kvsim.sim.peers.cachetrace.contract.Contract._row"),),
            tests=("tests/cache/test_rules.py::test_tbl1_keeps_sharing_through_cache_keys",
                   "tests/cache/test_rules.py::test_tbl1_fires_on_private_aliasing_and_a_freed_block"),
            context=("request", "group", "slot", "block", "source"))
def ts_tbl_1(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    seen = False
    groups = len(st.config.groups)
    where: list[dict[int, list]] = [{} for _ in range(groups)]
    for req in sorted(st.tables):
        for g, ids in enumerate(st.tables[req]):
            for slot, b in enumerate(ids):
                if b:
                    seen = True
                    where[g].setdefault(b, []).append((req, slot))
                    live = st.is_live(g, b)
                    if live is False:
                        return f"request {req!r} group {g} slot {slot} names freed block {b}"
    for g in range(groups):
        for b, users in where[g].items():
            if len(users) < 2:
                continue
            slots = {s for _, s in users}
            if st.published is None:
                if len(slots) > 1:
                    return f"group {g}: block {b} aliased at different slots {sorted(slots)}"
                continue
            entry = st.published[g].get(b)
            if entry is None or slots != {entry[1]}:
                return f"group {g}: block {b} shared by {users[:2]} without its cache key covering that slot"
    return True if seen else None
