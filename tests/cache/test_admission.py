"""AdmissionPlanner: fast path, eviction order, reverse walk to a minimal set, refusal."""

from __future__ import annotations

from kvsim.kvmodel.cache.admission import AdmissionPlanner, EvictionCandidate, PoolShadow, Tier


def cand(epoch, parent, block, tier=Tier.CLOSED_PREFIX, group=0, rank=0):
    return EvictionCandidate(epoch, tier, rank, group, parent, block - 1, block)


def test_zero_eviction_path_lists_no_victims():
    shadow = PoolShadow(1, (1, 0), (2, 2), {})
    assert AdmissionPlanner.plan(shadow, (3, 0), [cand(1, 1, 1)]).victims == ()


def test_reverse_walk_restores_an_older_candidate_the_newer_one_makes_unnecessary():
    # group 1 needs a whole parent; x frees a slot of a still-occupied parent, y empties parent 2
    shadow = PoolShadow(0, (1, 0), (2, 2), {1: 2, 2: 1})
    x, y = cand(1, 1, 1), cand(2, 2, 3)
    plan = AdmissionPlanner.plan(shadow, (0, 2), [y, x])
    assert plan.fits and plan.victims == (y,)


def test_order_is_epoch_then_tier_then_rank():
    shadow = PoolShadow(0, (0,), (1,), {1: 1, 2: 1, 3: 1})
    old = cand(1, 3, 3, Tier.CLOSED_PREFIX)
    uncached = cand(0, 2, 2, Tier.UNCACHED)
    suffix = cand(1, 1, 1, Tier.PROBATIONARY)
    assert AdmissionPlanner.plan(shadow, (1,), [old, suffix, uncached]).victims == (uncached,)
    assert AdmissionPlanner.plan(shadow, (2,), [old, suffix]).victims == (suffix, old)


def test_refusal_when_every_candidate_is_not_enough():
    shadow = PoolShadow(0, (0,), (1,), {1: 1})
    plan = AdmissionPlanner.plan(shadow, (2,), [cand(1, 1, 1)])
    assert not plan.fits and plan.victims == ()
