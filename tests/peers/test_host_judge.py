"""The Host-tier judge (TS-L2-1, -3, -4, -5 and PEER-23 on vLLM's CPU offloading) on hand-built step messages, no
engine venv: a legal run keeps every rule -- a stores its two blocks, the store completes, b loads them back and
hits them -- and each crafted violation fires the rule naming the broken clause."""

import copy

import numpy as np
import pytest

from kvsim.sim.peers.judges import events as pe
from kvsim.sim.peers.judges.engine_judge import EngineJudge
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.judges.host_judge import RULE_IDS, HostTierJudge

BS, BLOCKS, CHUNKS = 4, 10, 4
A = np.arange(8, dtype=np.int64)
B = np.array([0, 1, 2, 3, 4, 5, 6, 7, 100, 101])


def gpu_store(hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": 0}


def off(**kw):
    base = {"stores": [], "loads": [], "acks": [], "flushed": [], "evicted": [], "lookups": [], "held": []}
    base.update(kw)
    return base


def empty(step, **kw):
    return {"step": step, "new": [], "cached": [], "scheduled": {}, "tokens": {}, "finished": [], "preempted": [],
            "stats": None, "batches": [], **kw}


def legal():
    return [
        {**empty(0), "new": [["a", 0, [1, 2]]], "scheduled": {"a": 8}, "tokens": {"a": 500}, "finished": ["a"],
         "batches": [[0, [gpu_store([11, 12], None, list(range(8)))], 0]],
         "offload": off(stores=[[0, "a", [[1, 0, "k1"], [2, 1, "k2"]]]], lookups=[["k1", "MISS"]])},
        {**empty(1), "offload": off(acks=[[0, True]])},
        {**empty(2), "offload": off(loads=[[1, "b", [[0, 4, "k1"], [1, 5, "k2"]], False]],
                                    lookups=[["k1", "HIT"], ["k2", "HIT"]], held=[["b", [4, 5, 6]]])},
        {**empty(3), "offload": off(acks=[[1, True]], held=[["b", [4, 5, 6]]])},
        {**empty(4), "new": [["b", 8, [4, 5, 6]]], "scheduled": {"b": 2}, "tokens": {"b": 7}, "finished": ["b"],
         "offload": off(lookups=[["k1", "HIT"]])},
    ]


def judge(steps):
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    tier = HostTierJudge(CHUNKS, BLOCKS)
    j = EngineJudge(BS, BLOCKS, ev, parse=lambda b: pe.parse_batch(b)[0], tier=tier)
    j.submit("a", A)
    j.submit("b", B)
    before = 0
    for m in steps:
        j.step(m, before)
        before += len(m.get("batches", ()))
    return j


def rules(steps):
    return sorted({f.rule for f in judge(steps).findings})


def test_legal_run_keeps_every_rule():
    j = judge(legal())
    assert j.findings == [], [f.message for f in j.findings]
    assert all(j.premise[r] > 0 for r in RULE_IDS)
    assert j.tier.summary()["acks"] == 2 and j.stats["hit_tokens"] == 8


def changed(step, fn):
    steps = copy.deepcopy(legal())
    fn(steps[step])
    return steps


@pytest.mark.rule("TS-L2-1", "fires")
def test_a_forward_writing_a_store_source_before_its_ack_fires_ts_l2_1():
    """The store issued at step 0 completes only at step 2; c is handed block 2 at step 1 and computes into it."""
    steps = copy.deepcopy(legal())
    steps[1] = {**empty(1), "new": [["c", 0, [2]]], "scheduled": {"c": 4}, "tokens": {}, "finished": [],
                "offload": off()}
    steps[2]["offload"]["acks"] = [[0, True]]
    j = EngineJudge(BS, BLOCKS, EventChecker(block_size=BS), tier=HostTierJudge(CHUNKS, BLOCKS))
    j.submit("a", A)
    j.submit("b", B)
    j.submit("c", np.arange(50, 58))
    for k, m in enumerate(steps[:2]):
        j.step(m, k)
    assert [f.rule for f in j.findings] == ["TS-L2-1"] and "source of store job 0" in j.findings[0].message


@pytest.mark.rule("TS-L2-5", "fires")
def test_a_load_of_a_chunk_whose_store_has_not_completed_fires_ts_l2_5():
    steps = copy.deepcopy(legal())
    steps[1]["offload"]["acks"] = []
    steps[2]["offload"]["lookups"] = [["k1", "HIT_PENDING"], ["k2", "HIT_PENDING"]]
    steps[3]["offload"]["acks"] = [[0, True], [1, True]]
    assert rules(steps) == ["TS-L2-5"]


@pytest.mark.rule("TS-L2-5", "fires")
def test_a_load_under_another_key_fires_ts_l2_5():
    assert rules(changed(2, lambda m: m["offload"]["loads"][0][2][1].__setitem__(2, "k9"))) == ["TS-L2-5"]


@pytest.mark.rule("TS-L2-4", "fires")
def test_a_key_stored_again_while_on_the_tier_fires_ts_l2_4():
    steps = changed(2, lambda m: m["offload"]["stores"].append([2, "b", [[6, 2, "k1"]]]))
    steps[3]["offload"]["acks"].append([2, True])
    assert rules(steps) == ["TS-L2-4"]


@pytest.mark.rule("TS-L2-3", "fires")
def test_a_job_without_transfers_or_out_of_range_fires_ts_l2_3():
    assert rules(changed(2, lambda m: m["offload"]["stores"].append([2, "b", []]))) == ["TS-L2-3"]
    steps = changed(2, lambda m: m["offload"]["stores"].append([2, "b", [[6, 9, "k7"]]]))
    steps[3]["offload"]["acks"].append([2, True])
    assert rules(steps) == ["TS-L2-3"]


@pytest.mark.rule("PEER-23", "fires")
def test_a_hit_on_a_key_whose_store_is_in_flight_fires_peer_23():
    steps = copy.deepcopy(legal())
    steps[1]["offload"]["lookups"] = [["k1", "HIT"]]  # answered before the ack of that very step's worker
    assert rules(steps) == ["PEER-23"]


@pytest.mark.rule("PEER-23", "fires")
def test_a_miss_on_a_key_the_tier_holds_fires_peer_23():
    assert rules(changed(4, lambda m: m["offload"].__setitem__("lookups", [["k2", "MISS"]]))) == ["PEER-23"]


@pytest.mark.rule("PEER-23", "fires")
def test_an_eviction_of_a_key_the_tier_does_not_hold_fires_peer_23():
    assert rules(changed(4, lambda m: m["offload"].__setitem__("evicted", ["k5"]))) == ["PEER-23"]


@pytest.mark.rule("TS-L2-1", "fires")
def test_an_eviction_of_a_chunk_a_load_reads_fires_ts_l2_1():
    steps = changed(2, lambda m: m["offload"].__setitem__("evicted", ["k1"]))
    steps[4]["offload"]["lookups"] = []
    j = judge(steps)
    assert j.findings[0].rule == "TS-L2-1" and "while a load reads it" in j.findings[0].message


@pytest.mark.rule("TS-L2-5", "fires")
def test_a_failed_load_leaves_its_blocks_without_content_and_the_hit_over_them_is_peer_7():
    steps = changed(3, lambda m: m["offload"].__setitem__("acks", [[1, False]]))
    assert rules(steps) == ["PEER-7"]


def test_a_held_block_counts_in_the_pool_accounting():
    steps = copy.deepcopy(legal())
    steps[2]["free_blocks"] = BLOCKS - 1 - 3  # b holds three blocks while its load runs
    assert rules(steps) == []
    steps[2]["offload"]["held"] = []
    assert rules(steps) == ["PEER-9"]
