"""Property tests of the store model: random operation histories (legal and illegal).

- A refused request and a rejected fact leave the model state exactly as it was.
- The model never reaches a state that a state rule rejects: incremental checking after each operation
  and the full audit both find nothing, on every history.
- Incremental checking and the full audit agree when an entity the last operation touched is corrupted
  the way a buggy store would corrupt it (a Host extent too: overlapping, beyond the arena, unaccounted).
"""

from __future__ import annotations

import bisect

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim.kvmodel.store import (
    BackendConfig,
    CapacityPolicy,
    ContractViolation,
    GrowthConfig,
    KVStore,
    Refusal,
    StoreConfig,
)
from kvsim.spec.checking import Checker
from kvsim.spec.leaks import ownership_graph, unreachable

SEQS = ("a", "b", "c", "d")
CKPTS = ("k0", "k1", "k2")
PAGE_BYTES = 131072  # bf16, 1 layer, 2 KV heads


def config(kind: str) -> StoreConfig:
    backend = {"off": BackendConfig("off"), "mtp": BackendConfig("mtp", draft_window=3),
               "dflash": BackendConfig("dflash", full_layers=1)}[kind]
    growth = GrowthConfig(window=128, cushion_pages=1) if kind == "off" else None
    return StoreConfig(max_context=512, max_concurrency=3, backend=backend,
                       capacity=CapacityPolicy(tokens=1024), host_arena_bytes=5 * PAGE_BYTES + 3000,
                       growth=growth, prefill_chunk=128)


def draw_op(data, store: KVStore):
    """Draw one operation, mostly over live handles (so most are legal), sometimes over stale ones."""
    d = data.draw
    active = [s for s in SEQS if s in store.bundles]
    ckpts = list(store.checkpoints)
    live_units = list(store.units)
    full = [c for c in ckpts if store.checkpoints[c].spaces["main"].pages]
    host_ops = ("offload", "offload", "drop_device", "drop_host", "xfer", "xfer", "xfer") if full else ()
    spaces = [sp for x in active for sp in store.bundles[x].spaces.values()]
    # bias towards the engine's natural next step, so that histories get deep (pages committed, retained)
    nudges = (("complete",) * 4 if live_units else ()) + \
        (("launch",) * 4 if any(sp.mapped_tokens > sp.committed and sp.unit is None for sp in spaces) else ()) + \
        (("map",) * 2 if any(sp.mapped_tokens <= sp.committed for sp in spaces) else ())
    kind = d(st.sampled_from(("activate", "activate", "map", "launch", "complete", "fail", "truncate", "finish",
                              "finish", "release", "grow", "cow") + host_ops + nudges))
    any_seq = st.sampled_from(SEQS)
    seq = d(st.sampled_from(active) if active and d(st.integers(0, 9)) else any_seq)
    pool = d(st.sampled_from(store.pool_names) if d(st.integers(0, 9))
             else st.sampled_from(("main", "mtp", "draft_full")))
    ckpt = d(st.sampled_from(ckpts) if ckpts and d(st.integers(0, 9)) else st.sampled_from(CKPTS))
    space = store.space_of(seq, pool)
    if kind == "activate":
        free = [x for x in SEQS if x not in store.bundles]
        seq = d(st.sampled_from(free)) if free and d(st.integers(0, 9)) else seq
        src = d(st.sampled_from(ckpts)) if ckpts and d(st.booleans()) else None
        floor = store.checkpoints[src].frontier if src else 0
        prompt = d(st.integers(floor, 520))
        return ("activate", seq, prompt, d(st.integers(0, 300)), src, d(st.booleans()))
    if kind == "map":
        ent = space.entitlement if space is not None else 4
        return ("map", seq, pool, d(st.integers(0, (ent + 1) * 64)))
    if kind == "launch":
        rows = []
        ready = [(sp.owner, sp.pool) for sp in spaces if sp.mapped_tokens > sp.committed and sp.unit is None]
        picks = d(st.lists(st.sampled_from(ready), min_size=1, max_size=2, unique=True)) \
            if ready and d(st.integers(0, 5)) \
            else [(x, d(st.sampled_from(store.pool_names))) for x in
                  d(st.lists(st.sampled_from(active or list(SEQS)), min_size=1, max_size=2, unique=True))]
        for s2, p2 in picks:
            sp = store.space_of(s2, p2)
            base = sp.committed if sp is not None else 0
            room = (sp.mapped_tokens - base) if sp is not None else 64
            if d(st.integers(0, 5)) == 0:
                rows.append((s2, p2, None))
            else:
                a = base if d(st.integers(0, 7)) else max(0, base + d(st.integers(-70, 70)))
                rows.append((s2, p2, (a, a + d(st.integers(0, max(1, room + (0 if d(st.integers(0, 7)) else 65)))))))
        return ("launch", d(st.sampled_from(("u0", "u1", "u2"))), rows)
    if kind in ("complete", "fail"):
        unit = d(st.sampled_from(live_units)) if live_units and d(st.integers(0, 9)) else "u9"
        if kind == "fail":
            return ("fail", unit)
        commits = []
        u = store.units.get(unit)
        for row in (u.rows if u else ()):
            space = row.space
            end = space.committed if row.b is None else row.b
            f = d(st.integers(space.committed, max(space.committed, end))) if d(st.integers(0, 9)) \
                else d(st.integers(0, end + 70))
            commits.append((space.owner, space.pool, f))
        return ("complete", unit, commits)
    if kind == "truncate":
        top = space.committed if space is not None else 100
        return ("truncate", seq, pool, d(st.integers(0, top + (0 if d(st.integers(0, 9)) else 64))))
    if kind == "finish":
        return ("finish", seq, d(st.sampled_from((None,) + CKPTS)), d(st.integers(0, 9)) > 0)
    if kind == "release":
        return ("release", ckpt)
    if kind == "grow":
        return ("grow", seq)
    if kind == "cow":
        n = len(space.pages) if space is not None else 3
        return ("cow", seq, pool, d(st.integers(0, n)))
    if full and d(st.integers(0, 9)):
        ckpt = d(st.sampled_from(full))
    cs = store.checkpoints.get(ckpt)
    n = len(cs.spaces["main"].pages) if cs is not None else 3
    blocks = d(st.lists(st.integers(0, max(0, n - 1) if d(st.integers(0, 9)) else n), min_size=1, max_size=3,
                        unique=True))
    if kind == "xfer":
        x = d(st.sampled_from(list(store.xfers) + ["x0", "x1"]))
        xo = store.xfers.get(x)
        if xo is not None and d(st.integers(0, 9)):
            nxt = {"reserve": "copy", "copy": "verify", "verify": "publish", "publish": "release_source"}
            return ("xfer", x, xo.direction, xo.ckpt, xo.pool, [p.block for p in xo.pages],
                    nxt.get(xo.phase, "release_source"))
        return ("xfer", x, d(st.sampled_from(("d2h", "h2d"))), ckpt, "main", blocks,
                d(st.sampled_from(("reserve", "reserve", "copy", "publish"))))
    return (kind, ckpt, "main", blocks)


def apply(store: KVStore, o):
    kind = o[0]
    if kind == "activate":
        return store.activate(*o[1:])
    if kind in ("offload", "drop_device", "drop_host"):
        return getattr(store, kind)(*o[1:])
    return getattr(store, kind)(*o[1:])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(("off", "mtp", "dflash")), data=st.data())
def test_refusals_and_violations_leave_state_unchanged_and_checks_agree(kind, data):
    store = KVStore(config(kind))
    checker = Checker(store)
    assert checker.config() == []
    for _ in range(data.draw(st.integers(0, 80))):
        o = draw_op(data, store)
        before = store.snapshot()
        prior_bounded = store.bundles[o[1]].bounded_at if o[0] == "grow" and o[1] in store.bundles else None
        try:
            out = apply(store, o)
        except ContractViolation as exc:
            assert exc.findings and all(f.rule for f in exc.findings)
            assert store.snapshot() == before, f"{o} raised {exc.rules} but changed the state"
            continue
        if isinstance(out, Refusal):
            if out.bounded_at is not None:  # a refused growth records bounded completion, and nothing else
                bundle = store.bundles[o[1]]
                assert bundle.bounded_at == out.bounded_at
                bundle.bounded_at, kept = prior_bounded, bundle.bounded_at
                assert store.snapshot() == before, f"{o} was refused ({out.reason}) but changed the state"
                bundle.bounded_at = kept
            assert store.snapshot() == before or out.bounded_at is not None, \
                f"{o} was refused ({out.reason}) but changed the state"
        assert checker.incremental(o[0]) == [], o
    assert checker.audit() == []


def _corruptions(store):
    """(rule, entity kind, entity, corrupt) for entities of a legal state; corrupt() breaks that rule."""
    out = []
    for name, pool in store.pools.items():
        out.append(("CAP-3", "pool", name, lambda p=pool: setattr(p, "reserved", p.reserved + p.available + 1)))
    for space in store.all_spaces():
        if space.active:
            out.append(("AS-2", "space", space, lambda s=space: setattr(s, "committed", len(s.pages) * 64 + 1)))
            out.append(("AS-1", "space", space, lambda s=space: setattr(s, "row", -1)))
            out.append(("ENT-1", "space", space, lambda s=space: setattr(s, "reservation", -1)))
        else:
            out.append(("CKPT-1", "space", space, lambda s=space: setattr(s, "protected", 0) if s.committed else None))
    for ps in store.page_stores.values():
        for page in ps.live_pages():
            if page.holders and page.device >= 0:
                out.append(("PAGE-3", "page", page, lambda p=page: setattr(p, "dev_epoch", p.epoch + 1000)
                            if p.host is None else None))
            if len(page.holders) > 1:
                out.append(("WR-2", "page", page, lambda p=page: setattr(p, "writer", p.holders[0])))
            if page.holders and not page.pins:  # a pinned page may lose its references (released mid-copy)
                out.append(("PAGE-4", "page", page, lambda p=page: p.holders.clear()))
    return out + _host_corruptions(store)


def _host_corruptions(store):
    """(REP-3, "host", offset, corrupt) for each Host slice in the arena; corrupt() returns the touched offset."""
    out = []
    cap = store.arena.capacity
    for off in sorted(o for o in store.host_slices if o < cap):  # a Host extent, as a buggy transfer leaves it
        size = store.host_slices[off].host.size
        out += [("REP-3", "host", off, lambda o=off, s=size: _rekey(store, o, o + s // 2)),  # overlaps
                ("REP-3", "host", off, lambda o=off: _rekey(store, o, cap + store.host_virtual_end + 8)),  # beyond
                ("REP-3", "host", off, lambda o=off: _forget(store, o)),  # freed, never given back to the arena
                ("REP-3", "host", off, lambda o=off, s=size: _recount(store, o, s)),  # counted twice
                ("REP-3", "host", off, lambda o=off, s=size: store.arena.release(o, s) or o)]  # free while live
    for off, x in sorted(store.host_dests.items()):  # a pending d2h destination moved half over its neighbour
        out.append(("REP-3", "host", off, lambda o=off, x=x: _move_dest(store, x, o)))
    return out


def _move_dest(store, x, old: int) -> int:
    new = old + store.pools[x.pool].page_bytes // 2
    x.dest = [new if d == old else d for d in x.dest]
    del store.host_dests[old]
    store.host_dests[new] = x
    store.host_order.remove(old)
    bisect.insort(store.host_order, new)
    return new


def _rekey(store, old: int, new: int) -> int:
    """The slice at `old` recorded at `new` (the model's index kept in step, as its own paths would)."""
    page = store.host_slices.pop(old)
    page.host.offset = new
    store.host_slices[new] = page
    store.host_order.remove(old)
    if new < store.arena.capacity:
        bisect.insort(store.host_order, new)
    else:
        store.host_live_bytes -= page.host.size
    return new


def _forget(store, off: int) -> int:
    page = store.host_slices.pop(off)
    store.host_order.remove(off)
    store.host_live_bytes -= page.host.size
    page.host = None
    return off


def _recount(store, off: int, size: int) -> int:
    store.host_live_bytes += size
    return off


def _history(kind, data, steps):
    store = KVStore(config(kind))
    for _ in range(data.draw(st.integers(0, steps))):
        try:
            apply(store, draw_op(data, store))
        except ContractViolation:
            pass
    return store


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(("off", "mtp")), data=st.data(), pick=st.integers(0, 10**6),
       host=st.integers(0, 3))
def test_incremental_and_audit_agree_on_a_corrupted_touched_entity(kind, data, pick, host):
    store = _history(kind, data, 50)
    options = _corruptions(store)
    if host == 0 and _host_corruptions(store):  # a quarter of the cases corrupt a Host extent, when there is one
        options = _host_corruptions(store)
    if not options:
        return
    rule, kind_, entity, corrupt = options[pick % len(options)]
    got = corrupt()
    if got is None and rule in ("CKPT-1", "PAGE-3"):
        return  # corruption not applicable to this entity
    store.reset_touched()
    if kind_ == "host":  # the Host extent the corruption touched (its offset, perhaps a new one)
        store.t_host[got] = 0
    else:
        {"pool": store.t_pools, "space": store.t_spaces, "page": store.t_pages}[kind_][entity] = None
    checker = Checker(store)
    inc = {f.rule for f in checker.incremental()}
    full = {f.rule for f in checker.audit()}
    assert rule in inc, (rule, inc)
    assert rule in full, (rule, full)
    assert inc <= full


def _host_op(data, store):
    d = data.draw
    ckpt = d(st.sampled_from(("c", "d")))
    blocks = d(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True))
    kind = d(st.sampled_from(("offload", "offload", "drop_host", "drop_device", "xfer", "xfer")))
    if kind != "xfer":
        return kind, (ckpt, "main", blocks)
    x = d(st.sampled_from(("x0", "x1", "x2")))
    xo = store.xfers.get(x)
    if xo is not None:  # the next phase, or now and then a step the transfer may not take
        nxt = {"reserve": "copy", "copy": "verify", "verify": "publish", "publish": "release_source"}[xo.phase]
        return "xfer", (x, xo.direction, xo.ckpt, xo.pool, [p.block for p in xo.pages],
                        nxt if d(st.integers(0, 7)) else "publish")
    return "xfer", (x, d(st.sampled_from(("d2h", "d2h", "h2d"))), ckpt, "main", blocks, "reserve")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), pick=st.integers(0, 10**6))
def test_incremental_and_audit_agree_on_a_corrupted_host_extent(data, pick):
    """Host-tier histories (offloads, split releases, drops, transfers left in flight) check clean after every
    operation on the touched extents alone; then a corrupted touched Host extent (overlapping a neighbour or a
    free extent, beyond the arena, unaccounted) is reported by both the incremental check and the audit."""
    from tests.rules.builders import retained, small
    store = small(host_pages=6)
    retained(store, "c", 256)
    retained(store, "d", 192)
    checker = Checker(store)
    for _ in range(data.draw(st.integers(1, 14))):
        kind, args = _host_op(data, store)
        try:
            getattr(store, kind)(*args)
        except ContractViolation:
            pass
        assert checker.incremental(kind) == [], (kind, args)
    assert checker.audit() == []
    options = _host_corruptions(store)
    if not options:
        return
    _, _, _, corrupt = options[pick % len(options)]
    touched = corrupt()
    store.reset_touched()
    store.t_host[touched] = 0
    inc = {f.rule for f in Checker(store).incremental()}
    full = {f.rule for f in Checker(store).audit()}
    assert "REP-3" in inc and "REP-3" in full and inc <= full, (inc, full)


@pytest.mark.parametrize("kind", ["off", "mtp", "dflash"])
def test_a_clean_store_audits_clean(kind):
    store = KVStore(config(kind))
    assert Checker(store).audit() == []


def _leak(store, pick: int) -> None:
    """Break ownership in one of the ways a leak happens: an orphan lease, a page dropped from a space's page
    list without being released, a checkpoint forgotten with its pages."""
    kinds = ["lease"]
    spaces = [s for s in store.all_spaces() if s.pages]
    if spaces:
        kinds.append("unmap")
    if store.checkpoints:
        kinds.append("forget")
    kind = kinds[pick % len(kinds)]
    if kind == "lease":
        pool = store.pools["main"]
        if pool.available:
            pool.lease(None)
    elif kind == "unmap":
        spaces[pick % len(spaces)].pages.pop()
    else:
        del store.checkpoints[sorted(store.checkpoints)[pick % len(store.checkpoints)]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(("off", "mtp")), data=st.data(), pick=st.integers(0, 10**6), leak=st.booleans())
def test_leak_reachability_equals_networkx_descendants(kind, data, pick, leak):
    """PAGE-4's audit computes reachability by set unions; it must find exactly the nodes of the networkx
    ownership graph that are not descendants of "roots"."""
    store = KVStore(config(kind))
    for _ in range(data.draw(st.integers(0, 50))):
        try:
            apply(store, draw_op(data, store))
        except ContractViolation:
            pass
    if leak:
        _leak(store, pick)
    g = ownership_graph(store)
    reach = nx.descendants(g, "roots")
    expected = sorted((n for n in g.nodes if n != "roots" and n not in reach), key=repr)
    assert unreachable(store) == expected



def _shared_stores():
    """Legal stores with pages of three or more holders: active forks of a checkpoint beside it and beside
    retained siblings (Device), and checkpoints only, offloaded and dropped from Device (Host-only)."""
    from tests.rules.builders import new_store, retained, run
    st1 = new_store(max_concurrency=4, max_context=1024, host_pages=64)
    retained(st1, "c", 200)
    run(st1, ("activate", "a", 200, 64, {"source": "c"}), ("finish", "a", "k1"),
        ("activate", "b", 200, 64, {"source": "c"}), ("activate", "d", 200, 64, {"source": "k1"}))
    st2 = new_store(max_concurrency=4, max_context=1024, host_pages=64)
    retained(st2, "c", 200)
    for k in ("k1", "k2"):
        run(st2, ("activate", "a", 200, 64, {"source": "c"}), ("finish", "a", k))
    run(st2, ("offload", "c", "main", [0, 1, 2]), ("drop_device", "c", "main", [0, 1, 2]))
    return st1, st2


def test_a_shared_page_losing_one_of_several_holders_breaks_no_page_rule():
    """KVStore.drop_ref does not mark a page touched when it stays shared and writerless: every page-scope
    state rule must then be monotone in the holder set. Removing any one holder of such a page (in legal
    stores with active and inactive holders, Device and Host-only replicas) leaves every page rule holding."""
    from kvsim.spec.catalogue import all_rules
    rules = [r for r in all_rules() if r.kind == "state" and r.scope == "page"]
    seen = set()
    for store in _shared_stores():
        for ps in store.page_stores.values():
            for page in ps.live_pages():
                if len(page.holders) < 3 or page.writer is not None:
                    continue
                seen.add((len(page.holders), any(h.active for h in page.holders), page.device >= 0))
                assert all(r.checker(store, page, False) in (None, True) for r in rules)
                for i in range(len(page.holders)):
                    gone = page.holders.pop(i)
                    try:
                        bad = [(r.id, m) for r in rules if (m := r.checker(store, page, False)) not in (None, True)]
                    finally:
                        page.holders.insert(i, gone)
                    assert bad == [], bad
    assert {(a, d) for _, a, d in seen} == {(True, True), (False, False)}, seen  # both kinds were exercised
