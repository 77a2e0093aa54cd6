"""TS-POOL-*: the LCM-parent BlockPool — indexes, failed acquires, placement order, the null block.

Checkers read a kvmodel.cache CacheState (its pool and journal records) and re-derive every fact from
the occupancy bitmaps or from the seed's wording; they never call the pool's own placement code.
Each returns None (premise absent), True (kept) or a one-line message (violated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.cache.journal import AcquireRecord, AdmitRecord
from kvsim.spec.catalogue import Reading, state_rule

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kvsim.kvmodel.cache.state import CacheState


def _records(st: CacheState, kind: type) -> list:
    return [r for r in st.journal if isinstance(r, kind)]


@state_rule("TS-POOL-1", "Pool indexes equal a recount after every transition; an empty parent is unbound and in "
            "the FIFO",
            'cache concepts: "The pool updates its free-slot count and bucket indexes together on every occupancy '
            'transition"; "A parent with zero occupants is unbound, so its capacity belongs to the global '
            'empty-parent FIFO rather than any group"', scope="cache",
            decisions="Indexes recounted: per-group free slots (holes of bound parents), the empty-parent FIFO "
                      "(each empty parent exactly once), per-parent occupied counts, per-(group, bucket) sets of "
                      "parents with a hole in that bucket.",
            evidence="model",
            tests=("tests/cache/test_rules.py::test_pool1_keeps_indexes_through_bind_release_and_unbind",
                   "tests/cache/test_rules.py::test_pool1_fires_on_a_stale_free_count_and_a_bound_empty_parent"))
def ts_pool_1(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    pool = st.pool
    if pool is None:
        return None
    groups = len(pool.packing)
    free = [0] * groups
    holes: dict = {}
    empty = set()
    for p in range(1, pool.num_parents + 1):
        bound, occ = pool.parent(p)
        used = sum(occ)
        if pool.occupied_count(p) != used:
            return f"parent {p}: occupied count {pool.occupied_count(p)} but {used} children occupied"
        if bound is None:
            empty.add(p)
            continue
        if used == 0:
            return f"parent {p} has zero occupants but is still bound to group {bound}"
        if len(occ) != pool.slots_per_parent(bound):
            return f"parent {p}: {len(occ)} children, group {bound} packs {pool.slots_per_parent(bound)}"
        free[bound] += len(occ) - used
        d = pool.shard_count(bound)
        for c, u in enumerate(occ):
            if not u:
                holes.setdefault((bound, c % d), set()).add(p)
    fifo = pool.empty_parents()
    if len(set(fifo)) != len(fifo) or set(fifo) != empty:
        return f"empty-parent FIFO {list(fifo)} is not the set of empty parents {sorted(empty)}"
    for g in range(groups):
        if pool.free_slots(g) != free[g]:
            return f"group {g}: free-slot count {pool.free_slots(g)}, recount {free[g]}"
        for b in range(pool.shard_count(g)):
            if set(pool.partial_parents(g, b)) != holes.get((g, b), set()):
                return (f"group {g} bucket {b}: index {sorted(pool.partial_parents(g, b))}, parents with a hole "
                        f"{sorted(holes.get((g, b), ()))}")
    return True


@state_rule("TS-POOL-2", "A failed acquire changes nothing, and is refused only when capacity is short",
            'cache concepts: "Insufficient capacity returns before changing the indices, occupancy, or FIFO"; '
            '"A failed acquire leaves both placement and request tables unchanged"', scope="cache",
            decisions="A refusal is legal only when holes in bound parents + empty parents × slots per parent "
                      "< the count; a refused admission acquires nothing.",
            evidence="model",
            tests=("tests/cache/test_rules.py::test_pool2_keeps_a_refused_acquire_unchanged",
                   "tests/cache/test_rules.py::test_pool2_fires_on_a_mutating_or_needless_refusal"))
def ts_pool_2(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    seen = False
    for r in _records(st, AcquireRecord):
        if r.result is not None:
            continue
        seen = True
        if r.before != r.after:
            return f"a refused acquire of {r.num} blocks for group {r.group} changed the pool"
        free, fifo, spp = _capacity(r.before, r.group)
        if free + fifo * spp >= r.num:
            return (f"acquire of {r.num} blocks for group {r.group} refused with {free} holes and {fifo} empty "
                    f"parents of {spp} slots")
    for r in _records(st, AdmitRecord):
        if not r.plan.fits:
            seen = True
            if r.fresh:
                return "a refused admission acquired blocks"
    return True if seen else None


def _capacity(snap: tuple, group: int) -> tuple[int, int, int]:
    """(holes, empty parents, slots per parent) of group in a BlockPool snapshot, recounted."""
    packing, shards, bound, occ, _count, fifo, _free, _partial = snap
    holes = sum(o.count(False) for p, o in enumerate(occ) if o is not None and bound[p] == group)
    return holes, sum(1 for p in range(1, len(bound)) if bound[p] is None), packing[group] * (shards[group] or 1)


@state_rule("TS-POOL-3", "Placement: least-loaded request bucket, most occupied parent, lowest child; FIFO "
            "parents only when bound holes are exhausted",
            'cache concepts: "it selects the least-loaded request bucket (ties by bucket ID), then the most '
            'occupied parent (ties by parent ID), then the lowest child ID"', scope="cache",
            decisions="Bucket load counts every nonnull block of the request's table in that group, updated after "
                      "each child; among all holes of bound parents the choice is the lexicographic minimum of "
                      "(bucket load, bucket, −parent occupancy, parent, child).",
            evidence="model",
            tests=("tests/cache/test_rules.py::test_pool3_keeps_placement_order_with_shards",
                   "tests/cache/test_rules.py::test_pool3_fires_when_a_fresh_parent_is_opened_before_bound_holes"))
def ts_pool_3(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    recs = [r for r in _records(st, AcquireRecord) if r.result]
    if not recs:
        return None
    for r in recs:
        want = naive_placement(r.before, r.group, r.num, r.table_ids)
        if want is None or tuple(want) != tuple(r.result):
            return f"group {r.group}: acquire of {r.num} placed {list(r.result)}, the placement order gives {want}"
    return True


def naive_placement(snap: tuple, group: int, num: int, table_ids: Iterable[int]) -> list[int] | None:
    """The seed's placement order replayed on a pool snapshot, by brute force over every hole."""
    packing, shards, bound, occ, _count, fifo, _free, _partial = snap
    d = shards[group] or 1
    spp = packing[group] * d
    occ = {p: list(o) for p, o in enumerate(occ) if o is not None and bound[p] == group}
    fifo = list(fifo)
    loads = [0] * d
    for b in table_ids:
        if b:
            loads[((b - 1) % spp) % d] += 1
    out: list[int] = []
    while len(out) < num:
        holes = [(loads[c % d], c % d, -sum(o), p, c) for p, o in occ.items() for c, u in enumerate(o) if not u]
        if not holes:
            if not fifo:
                return None
            occ[fifo.pop(0)] = [False] * spp
            continue
        _, b, _, p, c = min(holes)
        occ[p][c] = True
        loads[b] += 1
        out.append(1 + (p - 1) * spp + c)
    return out


@state_rule("TS-POOL-4", "The null block 0 is never allocated or written; virtual/local translation is one "
            "operation with shard_count as a parameter",
            'cache concepts: "Virtual block 0 is the null block; no path writes to it, at any DCP size"; '
            '"Translation from virtual to local IDs is one operation with shard_count as a parameter"', scope="cache",
            decisions="Checked: no acquired (fresh, to-be-zeroed) id is 0 or beyond the virtual block count "
                      "1 + N·D·K; every occupied block translates to an owner < D and a local page in "
                      "[1, 1 + N·K), distinct per owner, and a replicated group's local id is its own id. On a "
                      "scheduler's plans (sim.peers.cachetrace.contract) a full-attention table never names block 0, "
                      "holds -1 only as trailing padding and never loses a slot of a live row (seed 002 L165 \"full "
                      "attention never expires\"; fault full-row-hole).",
            readings=(Reading("tokenspeed", "kvsim.sim.peers.cachetrace.contract.Contract._row",
                              title="Null block 0 never handed out, zeroed or named by a full-attention table; a "
                                    "full-attention row holds -1 only as trailing padding and never loses a slot"),),
            tests=("tests/cache/test_rules.py::test_pool4_keeps_the_null_block_and_translation",
                   "tests/cache/test_rules.py::test_pool4_fires_when_block_zero_is_handed_out"),
            context=("group", "request", "slot"))
def ts_pool_4(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    seen = False
    pool = st.pool
    for r in _records(st, AcquireRecord):
        if not r.result:
            continue
        seen = True
        packing, shards = r.before[0], r.before[1]
        bound = 1 + (len(r.before[2]) - 1) * packing[r.group] * (shards[r.group] or 1)
        bad = [b for b in r.result if not 0 < b < bound]
        if bad:
            return f"group {r.group}: acquire handed out {bad} (null block 0 or beyond {bound - 1})"
    for r in _records(st, AdmitRecord):
        for g, ids in enumerate(r.fresh):
            seen = True
            if 0 in ids:
                return f"group {g}: the null block 0 is among the pages to zero"
    if pool is not None:
        for g in range(len(pool.packing)):
            d, k = pool.shard_count(g), pool.packing[g]
            seen_local = set()
            for p in range(1, pool.num_parents + 1):
                bnd, occ = pool.parent(p)
                if bnd != g:
                    continue
                for c, used in enumerate(occ):
                    if not used:
                        continue
                    seen = True
                    block = pool.block_id(g, p, c)
                    loc = pool.to_local(g, block)
                    if loc is None:
                        return f"group {g}: occupied child ({p}, {c}) translates to the null block"
                    owner, local = loc
                    if not (0 <= owner < d and 1 <= local < 1 + pool.num_parents * k):
                        return f"group {g}: block {block} translates to owner {owner}, local page {local}"
                    if (owner, local) in seen_local or (d == 1 and local != block):
                        return f"group {g}: block {block} translates to a local page already taken or not itself"
                    seen_local.add((owner, local))
    return True if seen else None
