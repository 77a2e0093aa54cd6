"""TS-PFX-3: a replayable group claims no hit (cache concepts L179, L185).

Crafted cachetrace/1 with P = 4: a full-attention group "full" and a replayable sliding group "swa" (window 4).
Request a computes 12 tokens; b shares its first 8 and is admitted with an 8-token hit, re-feeding the
4-token replay window: its input starts at token 4, so its swa row is a null hole at slot 0 and fresh pages
from slot 1. Then the real wheel with --swa-replayable, and an injected fault.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.sim.peers.cachetrace.contract import RULES, Contract
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import all_rules

A = list(range(1, 13))
B = list(range(1, 9)) + [40, 41, 42, 43]


def run(swa_b, zero_swa_b, fresh_full=(7,)):
    c = Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=30,
                           groups=[ct.Group("full", 4, 30), ct.Group("swa", 4, 30, "sliding", 4, replayable=True)]))
    c.submit(ct.Submit("a", A, 1), 2)
    c.plan(ct.Plan(0, ct.Batch(["a"], 1, [12], [0], [12]), {"full": {"a": [1, 2, 3]}, "swa": {"a": [4, 5, 6]}},
                   {"full": [1, 2, 3], "swa": [4, 5, 6]}), 3)
    c.result(ct.Result(0, [[50]], ["a"]), 4)
    c.submit(ct.Submit("b", B, 1), 5)
    zero = {"full": list(fresh_full), **({"swa": list(zero_swa_b)} if zero_swa_b else {})}
    c.plan(ct.Plan(1, ct.Batch(["b"], 1, [8], [4], [12], [4]), {"full": {"b": [1, 2, 7]}, "swa": {"b": swa_b}},
                   zero), 6)
    c.result(ct.Result(1, [[60]], ["b"]), 7)
    c.finish(8)
    return c


def found(c):
    return sorted({(f.rule, f.line) for f in c.findings})


def test_rule_is_catalogued_and_reported():
    assert "TS-PFX-3" in {r.id for r in all_rules()} and "TS-PFX-3" in RULES


@pytest.mark.rule("TS-PFX-3", "keeps")
def test_hole_below_the_replay_window_and_fresh_pages_from_it_are_clean():
    c = run([0, 8, 9], [8, 9])
    assert found(c) == [] and c.exercised["TS-PFX-3"] == 2  # a's first extend (all fresh) and b's


@pytest.mark.rule("TS-PFX-3", "fires")
def test_page_below_the_replay_window_fires():
    assert ("TS-PFX-3", 6) in found(run([4, 8, 9], [8, 9]))


@pytest.mark.rule("TS-PFX-3", "fires")
def test_replayable_page_shared_from_an_earlier_request_fires():
    c = run([0, 5, 9], [9])  # a's swa page 5 holds the same tokens, but a replayable page is never cached
    assert ("TS-PFX-3", 6) in found(c) and ("TS-TBL-1", 6) in found(c)


@pytest.mark.rule("TS-PFX-3", "fires")
def test_replay_shorter_than_the_window_fires():
    c = Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=30,
                           groups=[ct.Group("full", 4, 30), ct.Group("swa", 4, 30, "sliding", 8, replayable=True)]))
    c.submit(ct.Submit("a", A, 1), 2)
    c.plan(ct.Plan(0, ct.Batch(["a"], 1, [12], [0], [12]), {"full": {"a": [1, 2, 3]}, "swa": {"a": [4, 5, 6]}},
                   {"full": [1, 2, 3], "swa": [4, 5, 6]}), 3)
    c.result(ct.Result(0, [[50]], ["a"]), 4)
    c.submit(ct.Submit("b", B, 1), 5)
    # an 8-token hit with an 8-token window re-feeds all 8 tokens; this plan re-feeds only 4
    c.plan(ct.Plan(1, ct.Batch(["b"], 1, [8], [4], [12], [4]), {"full": {"b": [1, 2, 7]}, "swa": {"b": [0, 8, 9]}},
                   {"full": [7], "swa": [8, 9]}), 6)
    assert ("TS-PFX-3", 6) in found(c) and "must re-feed 8" in c.findings[0].message


@pytest.mark.rule("TS-PFX-3", "fires")
def test_hole_inside_the_replay_window_fires():
    assert ("TS-PFX-3", 6) in found(run([0, 0, 9], [9]))


def test_replayable_group_on_the_wheel_is_clean_and_the_fault_fires():
    pytest.importorskip("tokenspeed_scheduler")
    from kvsim.sim.peers import tokenspeed as T
    from kvsim.sim.peers.workload import read_mooncake

    reqs = read_mooncake(Path(__file__).resolve().parents[2] / "sim" / "peers" / "samples" / "tiny_workload.jsonl")
    kw = {"pages": 80, "swa_window": 128, "swa_replayable": True, "stagger": 3}
    clean = T.run(reqs, T.RunConfig(**kw))
    assert clean.contract.counts["TS-PFX-3"] == 0 and clean.contract.exercised["TS-PFX-3"] >= 6
    bad = T.run(reqs, T.RunConfig(**kw, fault="replayable-hit"))
    assert bad.contract.counts["TS-PFX-3"] == 1


@pytest.mark.rule("TS-PFX-3", "fires")
def test_replayable_declared_on_a_full_attention_group_fires():
    """L66: "replayable, set only on a sliding History group" -- a configuration that says otherwise."""
    c = Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=30,
                           groups=[ct.Group("full", 4, 30, replayable=True)]))
    c.submit(ct.Submit("a", A, 1), 2)
    c.plan(ct.Plan(0, ct.Batch(["a"], 1, [12], [0], [12]), {"full": {"a": [1, 2, 3]}}, {"full": [1, 2, 3]}), 3)
    assert ("TS-PFX-3", 3) in found(c) and "not a sliding-window group" in c.findings[0].message
