"""Matchers and convergence, on the seed's examples and a cascade of window groups."""

from __future__ import annotations

from kvsim.kvmodel.cache.convergence import GroupMatch, converge
from kvsim.kvmodel.cache.geometry import GroupGeometry
from kvsim.kvmodel.cache.group_spec import full, sliding, state
from kvsim.kvmodel.cache.matchers import FullAttnMatcher, SwaMatcher, matcher_for

CACHED = {0, 1, 2, 5}  # a 24-token prompt in pages of 4: pages 0, 1, 2 and 5 cached


def test_full_walks_to_the_first_miss():
    assert FullAttnMatcher().probe(CACHED.__contains__, 0, 6).hits == (True,) * 3


def test_window_needs_its_lookback_run():
    swa = matcher_for(GroupGeometry(sliding("s", 4, 8)))  # ceil(7 / 4) = 2 slots
    assert swa.lookback_slots == 2
    assert swa.probe(CACHED.__contains__, 0, 6).hits == (False, True, True)  # boundary 12 tokens


def test_mamba_is_window_two_and_w1_needs_nothing():
    mamba = matcher_for(GroupGeometry(state("m", 4)))
    assert mamba.probe(CACHED.__contains__, 0, 6).hits == (False,) * 5 + (True,)
    assert SwaMatcher(0).probe(lambda s: False, 0, 3).hits == (False,) * 3
    assert mamba.probe(lambda s: False, 0, 6).hits == ()


def test_a_short_run_reaching_the_start_resumes():
    assert SwaMatcher(3).probe({0, 1}.__contains__, 0, 2).hits == (True, True)


def _group(spec, cached):
    geo = GroupGeometry(spec)
    return GroupMatch(matcher_for(geo), geo.block_granularity, cached.__contains__, spec.replayable)


def test_convergence_rematches_an_earlier_window_group_after_a_later_one_lowers_the_bound():
    groups = [_group(full("f", 4), set(range(6))),
              _group(sliding("a", 4, 5), {5}),  # supports 24 (slot 5) but nothing at 16 or below
              _group(sliding("b", 4, 9), {1, 2, 3, 5})]  # supports 16, not 24
    got = converge(groups, 24, 4)
    assert got.hit_tokens == 0 and all(p.hits == () for p in got.probes)


def test_convergence_trims_closed_groups_and_ignores_replayable_ones():
    groups = [_group(full("f", 2), set(range(12))),
              _group(sliding("r", 2, 3, replayable=True), set()),
              _group(state("m", 4), {2})]
    got = converge(groups, 24, 4)
    assert got.hit_tokens == 12
    assert got.probes[0].hits == (True,) * 6 and got.probes[1].hits == () and got.probes[2].hits == (False, False, True)
