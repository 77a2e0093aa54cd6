"""TS-ADM-2: each retraction adds admission headroom to its victim's next admission (cache concepts L254).

Crafted cachetrace/1 with P = 4 and one full-attention group: request a (8 prompt tokens, up to 40 new) is
admitted with 4 blocks (8 tokens of headroom), produces 2 tokens, is retracted (SnapshotOp) and restored;
its readmission row decides. Then the real wheel: forced retraction of requests whose generation outgrows
one admission, clean, and the same run with the readmission row cut back (an injected fault).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvsim.sim.peers.cachetrace.contract import RULES, Contract
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import all_rules

A = [1, 2, 3, 4, 5, 6, 7, 8]
SAMPLES = Path(__file__).resolve().parents[2] / "sim" / "peers" / "samples"


def contract():
    return Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=40, num_snapshot_pages=16,
                              max_retracted_requests=2, groups=[ct.Group("full", 4, 40)]))


def batch(ids=(), ext=0, inl=(), pfx=()):
    return ct.Batch(list(ids), ext, list(inl), list(pfx), [len(A)] * len(ids))


def steps(readmitted: list[int], max_new: int = 40, retract_twice: bool = False):
    """a's admission, two tokens, a retraction and a restore; then a decodes with table ``readmitted``."""
    snap = ct.CacheOp("SnapshotOp", [1], [(1, 1), (2, 2), (3, 3)], groups=[0, 0, 0], request="a", pool_index=1,
                      slot=1)
    restore = ct.CacheOp("RestoreOp", [2], [(1, 5), (2, 6), (3, 7)], groups=[0, 0, 0], keys=["", "", ""],
                         offsets=[0, 0, 0], request="a", pool_index=1, slot=1, tiers=["snapshot"] * 3)
    fresh = [b for b in readmitted if b not in (5, 6, 7)]
    out = [(ct.Submit("a", A, max_new), 2),
           (ct.Plan(0, batch(["a"], 1, [8], [0]), {"full": {"a": [1, 2, 3, 4]}}, {"full": [1, 2, 3, 4]}), 3),
           (ct.Result(0, [[50]]), 4),
           (ct.Plan(1, batch(["a"], 0, [1])), 5), (ct.Result(1, [[51]]), 6),
           (ct.Plan(2, batch(), cache=[snap]), 7), (ct.Result(2, done=[1]), 8),
           (ct.Plan(3, batch(["a"], 0, [1]), {"full": {"a": readmitted}}, {"full": fresh} if fresh else {},
                    cache=[restore]), 9),
           (ct.Result(3, [[52]], done=[2]), 10)]
    return out


def run(records):
    c = contract()
    for rec, line in records:
        c.apply(rec, line)
    c.finish(999)
    return c


def found(c):
    return sorted({(f.rule, f.line) for f in c.findings})


def test_rule_is_catalogued_and_reported():
    assert "TS-ADM-2" in {r.id for r in all_rules()} and "TS-ADM-2" in RULES


@pytest.mark.rule("TS-ADM-2", "keeps")
def test_readmission_with_more_headroom_is_clean():
    c = run(steps([5, 6, 7, 8, 9]))  # 20 slots for 10 tokens: 10 > the 8 its admission secured
    assert found(c) == [] and c.exercised["TS-ADM-2"] == 1
    assert c.headroom.stats == {"retractions": 1, "readmissions": 1, "escalated": 1, "covered": 0,
                                "max_retractions": 1}


@pytest.mark.rule("TS-ADM-2", "keeps")
def test_readmission_covering_the_rest_of_the_generation_is_clean():
    # max_new 6: 4 tokens left after two; 16 slots for 10 tokens secure 6 >= 4, though no more than before
    assert found(run(steps([5, 6, 7, 8], max_new=6))) == []


@pytest.mark.rule("TS-ADM-2", "fires")
def test_readmission_with_no_more_headroom_fires():
    c = run(steps([5, 6, 7, 8]))  # 16 slots for 10 tokens: 6 <= 8, and 38 tokens may still come
    assert found(c) == [("TS-ADM-2", 9)]
    assert "after retraction 1 with 6 tokens of headroom" in c.findings[0].message


# -- the real wheel ------------------------------------------------------------------------------------------

def _long_run(fault=None, max_plans=4500):
    T = pytest.importorskip("kvsim.sim.peers.tokenspeed")
    pytest.importorskip("tokenspeed_scheduler")
    from kvsim.sim.peers.workload import read_mooncake

    reqs = read_mooncake(SAMPLES / "tiny_workload.jsonl", 2)
    # m0 outgrows four 4,096-token windows; m1 fits one
    reqs = [dataclasses.replace(reqs[0], max_new_tokens=20000), dataclasses.replace(reqs[1], max_new_tokens=300)]
    return T.run(reqs, T.RunConfig(pages=T.unbounded_pages(reqs, 64), snapshot_pages=256, max_retracted=2,
                                   force_retraction=1000, fault=fault), max_plans=max_plans)


def test_wheel_escalates_the_headroom_of_each_readmission():
    out = _long_run()
    st = out.contract.headroom.stats
    assert out.contract.counts["TS-ADM-2"] == 0 and out.contract.findings == []
    assert st["readmissions"] == 4 and out.contract.exercised["TS-ADM-2"] == 4
    # the wheel's steps (min(remaining, 4096 x (1 + retractions)), scheduler.md §4): three readmissions secure
    # more than the one before, the fourth covers the rest of the generation
    assert (st["escalated"], st["covered"]) == (3, 1)


def test_flat_readmission_fault_fires_on_the_wheel():
    out = _long_run("flat-readmission", max_plans=1500)
    assert out.contract.counts["TS-ADM-2"] == 1
