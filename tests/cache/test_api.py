"""The differential-test surface (kvmodel.cache.api)."""

from __future__ import annotations

from kvsim.kvmodel.cache.api import MatchSession, admission_fits, lcm_blocks_needed_for
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.group_spec import full, sliding


def test_lcm_blocks_needed_for_folds_by_packing():
    assert lcm_blocks_needed_for((2, 1), (3, 3)) == 5
    assert lcm_blocks_needed_for((2, 1), (4, 1)) == 3
    assert lcm_blocks_needed_for((4,), (0,)) == 0


def test_admission_fits_counts_holes_then_whole_parents():
    assert admission_fits(1, (1, 0), (2, 2), (3, 0))
    assert not admission_fits(1, (1, 0), (2, 2), (3, 1))


def test_match_session_hits_whole_pages_of_earlier_requests():
    s = MatchSession(CacheConfig(4, (full("f", 4), sliding("s", 2, 4)), (1, 2), 64))
    first = list(range(10))
    assert s.hit_tokens(first) == 0
    assert s.cache(first)
    assert s.hit_tokens(first) == 8  # (10 − 1) // 4 pages probed
    assert s.hit_tokens(first[:8]) == 4  # a prompt never hits its own last page
    assert s.hit_tokens(first[:5] + [99] * 5) == 4
    assert not MatchSession(CacheConfig(4, (full("f", 4),), (1,), 1)).cache(list(range(9)))


def test_reclaim_first_keeps_only_the_last_boundary_lookback():
    """Observed on the TokenSpeed wheel (P 4, full bg 4 + sliding bg 2 window 4, one request then a second
    sharing all but its last token): a 22-token first request leaves a 20-token hit, a 24-token one none."""
    cfg = CacheConfig(4, (full("f", 4), sliding("s", 2, 4)), (1, 1), 64)
    for n, want in ((20, 0), (21, 20), (22, 20), (23, 20), (24, 0)):
        s = MatchSession(cfg)
        a = list(range(100, 100 + n))
        assert s.cache(a + [5], num_computed_tokens=n, reclaim_first=True)
        assert s.hit_tokens(a[:n - 1] + [1, 2, 3]) == want, n
