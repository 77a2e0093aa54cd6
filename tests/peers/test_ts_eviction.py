"""TS-ADM-4 on crafted TokenSpeed plans: an admission that evicts a cached page while a free, empty page stays
unused fires; evicting only once the empty pages are used up keeps it; configurations outside its premise are
not judged."""

import pytest

from kvsim.sim.peers.cachetrace import eviction
from kvsim.sim.peers.cachetrace.contract import Contract
from kvsim.sim.trace import cachetrace as ct

A = [1, 2, 3, 4, 5, 6, 7, 8, 9]            # pages 0, 1 full (published), page 2 a partial tail
C = [20, 21, 22, 23, 24, 25, 26, 27, 28]   # nothing shared with A


def contract(pages, **cfg):
    return Contract(ct.Config(scheduler="test", prefix_granularity=4, groups=[ct.Group("full", 4, pages)],
                              num_device_pages=pages, **cfg))


def plan(n, ids, inl, tables, zero):
    return ct.Plan(n, ct.Batch(ids, 1, inl, [0], [len(A)] * len(ids)), {"full": tables}, {"full": zero})


def run(pages, c_pages, **cfg):
    """a fills pages 1, 2, 3 and finishes; c is then admitted into ``c_pages``."""
    c = contract(pages, **cfg)
    for rec, line in [(ct.Submit("a", A, 1), 2), (ct.Submit("c", C, 1), 3),
                      (plan(0, ["a"], [9], {"a": [1, 2, 3]}, [1, 2, 3]), 4), (ct.Result(0, [[50]], ["a"]), 5),
                      (plan(1, ["c"], [9], {"c": c_pages}, c_pages), 6)]:
        c.apply(rec, line)
    return c


def found(c):
    return [(f.rule, f.line) for f in c.findings]


@pytest.mark.rule("TS-ADM-4", "keeps")
def test_evicting_once_the_empty_pages_are_used_keeps_ts_adm_3():
    c = run(6, [4, 5, 1])   # pages 1..5: 4 and 5 empty, then a's oldest cached page 1
    assert found(c) == [] and c.exercised["TS-ADM-4"] == 1


@pytest.mark.rule("TS-ADM-4", "fires")
def test_evicting_while_an_empty_page_stays_fires_ts_adm_3():
    c = run(6, [1, 2, 4])   # page 5 was free and empty, yet two cached pages were taken
    assert found(c) == [("TS-ADM-4", 6)]
    assert "page 5 is free and empty" in c.findings[0].message


@pytest.mark.rule("TS-ADM-4", "keeps")
def test_a_written_partial_tail_is_not_counted_empty():
    c = run(5, [4, 1, 2])   # pages 1..4: page 3 holds a's partial tail (published as a tail): not an empty page
    assert found(c) == [] and c.exercised["TS-ADM-4"] == 1


def test_no_eviction_is_nothing_to_judge():
    c = run(10, [4, 5, 6])
    assert found(c) == [] and c.exercised["TS-ADM-4"] == 0


def test_outside_the_premise_it_is_not_judged():
    assert eviction.premise(contract(6, num_host_pages=4).config) is None
    assert eviction.premise(contract(6, num_snapshot_pages=3, max_retracted_requests=1).config) is None
    two = ct.Config(scheduler="t", prefix_granularity=4, groups=[ct.Group("full", 4, 6), ct.Group("swa", 4, 6,
                    "sliding", 8)], num_device_pages=6)
    assert eviction.premise(two) is None
    c = run(6, [1, 2, 4], num_host_pages=4)
    assert "TS-ADM-4" not in {r for r, _ in found(c)}
