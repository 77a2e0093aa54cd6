"""Each TS-* rule: legal behaviour keeps it (checked and exercised, not violated); a crafted violation fires it."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import struct
import sys
from pathlib import Path

import pytest

from kvsim.kvmodel.cache import journal as J
from kvsim.kvmodel.cache.admission import AdmissionPlan
from kvsim.kvmodel.cache.convergence import ConvergedProbe
from kvsim.kvmodel.cache.layer_binding import LayerBinding
from kvsim.kvmodel.cache.state import CacheState
from kvsim.spec.cache_checking import cache_rules
from tests.cache.builders import P, assert_fires, assert_kept, coordinator, hybrid_config, tokens, warm

_ROOT = Path(__file__).resolve().parents[2]
SEED = next((p for p in (_ROOT / ".." / "shared" / "seeds" / "002_c3e3f0858b1b6fb0.txt",
                         _ROOT / ".." / ".." / "shared" / "seeds" / "002_c3e3f0858b1b6fb0.txt") if p.exists()),
            _ROOT / "shared-seed-absent")


def _busy():
    """A coordinator after shared prefixes, a refused admission, retention and a free."""
    c = coordinator(num_parents=20)
    a = tokens(16)
    warm(c, "a", a)
    c.admit("b", a + [99, 98, 97], 19, reserve_tokens=2)
    c.reclaim_expired("b", 19)
    assert c.admit("big", tokens(400, 1000), 400) is None
    c.free("a")
    return c


# -- TS-POOL ------------------------------------------------------------------------------------------

@pytest.mark.rule("TS-POOL-1", "keeps")
def test_pool1_keeps_indexes_through_bind_release_and_unbind():
    c = _busy()
    assert_kept(c.state(), "TS-POOL-1")
    c.free("b")
    assert_kept(c.state(), "TS-POOL-1")


@pytest.mark.rule("TS-POOL-1", "fires")
def test_pool1_fires_on_a_stale_free_count_and_a_bound_empty_parent():
    c = _busy()
    c.pool._free[0] += 1
    assert_fires(c.state(), "TS-POOL-1", "free-slot count")
    c = _busy()
    p = c.pool._fifo.popleft()  # an empty parent left out of the FIFO
    assert_fires(c.state(), "TS-POOL-1", "FIFO")
    c.pool._fifo.appendleft(p)
    c.pool._fifo.append(p)
    assert_fires(c.state(), "TS-POOL-1", "FIFO")


@pytest.mark.rule("TS-POOL-2", "keeps")
def test_pool2_keeps_a_refused_acquire_unchanged():
    c = coordinator(num_parents=3)
    jr = []
    assert J.acquire_recorded(c.pool, jr, 0, 7) is None  # 3 parents × 2 slots
    assert J.acquire_recorded(c.pool, jr, 0, 6) is not None
    st = c.state()
    st.journal = jr
    assert_kept(st, "TS-POOL-2")


@pytest.mark.rule("TS-POOL-2", "fires")
def test_pool2_fires_on_a_mutating_or_needless_refusal():
    c = coordinator(num_parents=3)
    before = c.pool.snapshot()
    c.pool.acquire(0, 1)
    st = c.state()
    st.journal = [J.AcquireRecord(0, 9, (), before, c.pool.snapshot(), None)]
    assert_fires(st, "TS-POOL-2", "changed the pool")
    snap = c.pool.snapshot()
    st.journal = [J.AcquireRecord(0, 2, (), snap, snap, None)]  # 1 hole + 2 empty parents × 2 slots
    assert_fires(st, "TS-POOL-2", "refused with")


@pytest.mark.rule("TS-POOL-3", "keeps")
def test_pool3_keeps_placement_order_with_shards():
    c = coordinator(num_parents=10, shards=2)
    jr = []
    first = J.acquire_recorded(c.pool, jr, 0, 3)
    J.acquire_recorded(c.pool, jr, 2, 1)
    c.pool.release(0, first[1])
    J.acquire_recorded(c.pool, jr, 0, 6, first)
    st = c.state()
    st.journal = jr
    assert_kept(st, "TS-POOL-3")


@pytest.mark.rule("TS-POOL-3", "fires")
def test_pool3_fires_when_a_fresh_parent_is_opened_before_bound_holes():
    c = coordinator(num_parents=10)
    c.pool.acquire(0, 1)  # parent 1 bound, one hole left
    before = c.pool.snapshot()
    got = c.pool.acquire(0, 1)
    st = c.state()
    st.journal = [J.AcquireRecord(0, 1, (), before, c.pool.snapshot(), (got[0] + 2,))]
    assert_fires(st, "TS-POOL-3", "placement order")


@pytest.mark.rule("TS-POOL-4", "keeps")
def test_pool4_keeps_the_null_block_and_translation():
    c = coordinator(num_parents=10, shards=2)
    warm(c, "a", tokens(12))
    assert_kept(c.state(), "TS-POOL-4")


@pytest.mark.rule("TS-POOL-4", "fires")
def test_pool4_fires_when_block_zero_is_handed_out():
    c = coordinator(num_parents=6)
    snap = c.pool.snapshot()
    st = c.state()
    st.journal = [J.AcquireRecord(0, 1, (), snap, snap, (0,))]
    assert_fires(st, "TS-POOL-4", "null block 0")


# -- TS-PFX -------------------------------------------------------------------------------------------

@pytest.mark.rule("TS-PFX-1", "keeps")
def test_pfx1_keeps_chained_hashes_and_page_multiples():
    c = coordinator()
    warm(c, "a", tokens(13))
    c.probe(tokens(13))
    assert_kept(c.state(), "TS-PFX-1")


def _unchained(toks, p):
    """A plausible mistake: each page hashed alone (no prior digest)."""
    return [hashlib.sha256(struct.pack(f"<I{p}I", p, *toks[i * p:(i + 1) * p])).hexdigest()
            for i in range(len(toks) // p)]


@pytest.mark.rule("TS-PFX-1", "fires")
def test_pfx1_fires_on_unchained_hashes_and_a_mid_page_hit():
    c = coordinator()
    st = c.state()
    toks = tuple(tokens(8))
    st.journal = [J.PublishRecord(P, toks, tuple(_unchained(toks, P)), ())]
    assert_fires(st, "TS-PFX-1", "page 0")  # the first page still frames a zero prior length
    st.journal = [J.ProbeRecord(P, 8, (), ConvergedProbe(6, ()))]
    assert_fires(st, "TS-PFX-1", "not a multiple")


@pytest.mark.rule("TS-PFX-2", "keeps")
def test_pfx2_keeps_full_window_and_state_matching():
    c = coordinator()
    warm(c, "a", tokens(20))
    c.probe(tokens(20) + [5])
    c.probe(tokens(9) + [7] * 8)
    assert_kept(c.state(), "TS-PFX-2")


@pytest.mark.rule("TS-PFX-2", "fires")
def test_pfx2_fires_on_a_hit_beyond_what_every_group_supports():
    c = coordinator()
    warm(c, "a", tokens(8))
    c.state()
    c.probe(tokens(20))
    st = c.state()
    rec = next(r for r in st.journal if isinstance(r, J.ProbeRecord))
    st.journal = [dataclasses.replace(rec, result=ConvergedProbe(12, rec.result.probes))]
    assert_fires(st, "TS-PFX-2", "support 8")


# -- TS-ADM -------------------------------------------------------------------------------------------

def _pressure():
    c = coordinator(num_parents=10)
    for i in range(3):
        warm(c, f"r{i}", tokens(8, 100 * i))
        c.free(f"r{i}")
    return c


@pytest.mark.rule("TS-ADM-1", "keeps")
def test_adm1_keeps_the_fast_path_and_a_minimal_eviction_set():
    c = _pressure()
    c.state()
    hit = c.admit("x", tokens(8, 100) + [1], 9)  # hits r1's prefix; must evict others
    assert hit is not None and hit.victims
    st = c.state()
    assert_kept(st, "TS-ADM-1")


@pytest.mark.rule("TS-ADM-1", "fires")
def test_adm1_fires_on_a_surplus_victim_and_on_evicting_with_room():
    c = _pressure()
    c.state()
    c.admit("x", tokens(8, 100) + [1], 9)
    st = c.state()
    rec = next(r for r in st.journal if isinstance(r, J.AdmitRecord))
    extra = next(x for x in rec.candidates if x not in rec.plan.victims)
    st.journal = [dataclasses.replace(rec, plan=AdmissionPlan(True, rec.plan.victims + (extra,)))]
    assert_fires(st, "TS-ADM-1")
    roomy = dataclasses.replace(rec.shadow, empty_parents=99)
    st.journal = [dataclasses.replace(rec, shadow=roomy)]
    assert_fires(st, "TS-ADM-1", "zero eviction")
    prot = frozenset({(rec.plan.victims[0].group, rec.plan.victims[0].block)})
    st.journal = [dataclasses.replace(rec, protected=prot)]
    assert_fires(st, "TS-ADM-1", "prefix hit")


# -- TS-GEO / TS-RET ----------------------------------------------------------------------------------

LAYERS = (LayerBinding(0, 0, None, 4, "registry"), LayerBinding(1, 1, 3, 2, "config"),
          LayerBinding(2, 2, None, None))


@pytest.mark.rule("TS-GEO-1", "keeps")
def test_geo1_keeps_spans_kernel_pages_and_visibility():
    assert_kept(coordinator(layers=LAYERS).state(), "TS-GEO-1")


@pytest.mark.rule("TS-GEO-1", "fires")
def test_geo1_fires_on_a_derived_kernel_page_and_a_window_wider_than_retention():
    derived = (LayerBinding(0, 0, None, 4, "prefix_granularity"),)
    assert_fires(coordinator(layers=derived).state(), "TS-GEO-1", "kernel_page_size taken")
    wide = (LayerBinding(1, 1, 4, 2, "registry"),)  # window_left + 1 = 5 > 4
    assert_fires(coordinator(layers=wide).state(), "TS-GEO-1", "exceeds")
    cfg = hybrid_config()
    bad = dataclasses.replace(cfg.groups[0], rows_per_page=3)
    object.__setattr__(cfg, "groups", (bad,) + cfg.groups[1:])  # bypass the configuration gate
    assert_fires(CacheState(cfg), "TS-GEO-1", "does not divide")


@pytest.mark.rule("TS-RET-1", "keeps")
def test_ret1_keeps_whole_page_expiry():
    c = coordinator()
    warm(c, "a", tokens(13))
    c.reclaim_expired("a", 13)  # swa: (13 - 4 + 1) // 2 = 5 slots; mamba: 12 // 4 = 3; full: 0
    assert c.state and c.tables["a"][1].ids[:5] == [0] * 5 and 0 not in c.tables["a"][0].ids
    assert_kept(c.state(), "TS-RET-1")


@pytest.mark.rule("TS-RET-1", "fires")
def test_ret1_fires_on_partial_expiry_and_a_full_history_hole():
    c = coordinator()
    warm(c, "a", tokens(13))
    st = c.state()
    st.journal = [J.ReclaimRecord(1, 2, 4, 13, 6)]
    assert_fires(st, "TS-RET-1", "retention gives 5")
    st.journal = []
    st.tables["a"][0][1] = 0
    assert_fires(st, "TS-RET-1", "hole")
    st.tables["a"][0][1] = -1  # -1 only as trailing padding (seed 002 L165)
    assert_fires(st, "TS-RET-1", "hole at slot 1")


# -- TS-TBL -------------------------------------------------------------------------------------------

@pytest.mark.rule("TS-TBL-1", "keeps")
def test_tbl1_keeps_sharing_through_cache_keys():
    c = coordinator()
    warm(c, "a", tokens(12))
    c.admit("b", tokens(12) + [1, 2], 14)
    st = c.state()
    assert set(st.tables["a"][0]) & set(st.tables["b"][0])
    assert_kept(st, "TS-TBL-1")


@pytest.mark.rule("TS-TBL-1", "fires")
def test_tbl1_fires_on_private_aliasing_and_a_freed_block():
    c = coordinator()
    c.admit("a", tokens(8), 8)
    c.admit("b", tokens(8, 50), 8)
    st = c.state()
    st.tables["b"][0][0] = st.tables["a"][0][0]  # b names a's unpublished block
    assert_fires(st, "TS-TBL-1", "without its cache key")
    st = c.state()
    freed = st.tables["b"][0][1]
    c.free("b")
    st.tables = {"ghost": [[0, freed], [], []]}
    assert_fires(st, "TS-TBL-1", "freed block")


# -- the catalogue entries ----------------------------------------------------------------------------

def test_every_ts_rule_has_a_keeps_and_a_fires_test():
    marks = {}
    for _, fn in inspect.getmembers(sys.modules[__name__], inspect.isfunction):
        for m in getattr(fn, "pytestmark", []):
            if m.name == "rule":
                marks.setdefault(m.args[0], set()).add(m.args[1])
    ids = [r.id for r in cache_rules()]
    assert len(ids) == 10
    assert {i: marks.get(i, set()) for i in ids} == {i: {"keeps", "fires"} for i in ids}


def test_ts_clauses_are_verbatim_in_the_seed():
    if not SEED.exists():
        pytest.skip("the cache-concepts seed is not beside the repository")
    text = SEED.read_text(encoding="utf-8")
    for rule in cache_rules():
        quoted = rule.clause.split('"')[1::2]
        assert quoted, rule.id
        for phrase in quoted:
            assert phrase in text, f"{rule.id}: {phrase!r}"


def test_checker_entry_point_is_documented():
    from kvsim.spec import cache_checking
    assert "check_cache(state, coverage=None, rules=None)" in cache_checking.__doc__
    c = coordinator()
    c.pool._free[0] += 1
    st = c.state()
    assert [f.rule for f in cache_checking.check_cache(st)] == ["TS-POOL-1"]
    assert cache_checking.check_cache(st, rules={"TS-TBL-1"}) == []
