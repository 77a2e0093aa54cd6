"""The engines' eviction-policy rules on crafted step streams: PEER-12 (vLLM's free queue) and PEER-13
(SGLang's LRU over unlocked leaves) keep a legal eviction and fire on one the policy does not allow."""

import copy

import numpy as np
import pytest

from kvsim.sim.peers.judges.engine_judge import EngineJudge
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.sglang import policy as sgl
from kvsim.sim.peers.vllm import policy as vpol

BS, BLOCKS = 4, 7  # block 0 reserved: 6 usable
A = np.arange(10, dtype=np.int64)          # 10 tokens: two full blocks and a partial one
C = np.arange(100, 120, dtype=np.int64)    # 20 tokens: five full blocks, nothing shared with A


def stored(hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": 0}


def removed(hashes):
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}


def vllm_steps(c_blocks, evicted_hash):
    """a computes and finishes in step 0 (blocks 1, 2 cached; block 3 partial); c is admitted in step 1 into
    ``c_blocks``, evicting one of a's cached blocks."""
    return [
        {"step": 0, "new": [["a", 0, [1, 2, 3]]], "cached": [], "scheduled": {"a": 10}, "tokens": {"a": 500},
         "finished": ["a"], "preempted": [], "stats": None, "free_blocks": 6, "cached_blocks": 2,
         "batches": [[0, [stored([11, 12], None, list(range(8)))], 0]]},
        {"step": 1, "new": [["c", 0, c_blocks]], "cached": [], "scheduled": {"c": 20}, "tokens": {"c": 7},
         "finished": [], "preempted": [], "stats": None, "free_blocks": 1, "cached_blocks": 6,
         "batches": [[1, [removed([evicted_hash]), stored([21, 22, 23, 24, 25], None, list(range(100, 120)))], 0]]},
    ]


def run_vllm(steps):
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    j = EngineJudge(BS, BLOCKS, ev, policy=vpol.checker(BLOCKS - 1))
    j.submit("a", A)
    j.submit("c", C)
    before = 0
    for m in steps:
        j.step(m, before)
        before += len(m["batches"])
    return j, ev


@pytest.mark.rule("PEER-12", "keeps")
def test_vllm_tail_first_eviction_keeps_peer_12():
    """a's table [1, 2, 3] goes back reversed: 3 (no content) to the head, then 2, then 1 to the tail. c takes
    the never-used blocks and 3 first, then evicts 2 -- a's tail."""
    j, ev = run_vllm(vllm_steps([3, 4, 5, 6, 2], 12))
    assert j.findings == [] and ev.findings == []
    assert j.premise["PEER-12"] == 1 and j.counts["PEER-12"] == 0
    assert "PEER-12" in j.rules and "PEER-12" in j.decisions


@pytest.mark.rule("PEER-12", "fires")
def test_vllm_head_first_eviction_fires_peer_12():
    """Evicting block 1 (a's head) while block 2 (its tail) stays cached is the head-first free bug."""
    j, _ = run_vllm(vllm_steps([3, 4, 5, 6, 1], 11))
    got = [f for f in j.findings if f.rule == "PEER-12"]
    assert len(got) == 1 and "block 1" in got[0].message and "block 2" in got[0].message
    assert "nearer its tail" in got[0].message and got[0].context == {"request": "c", "block": 1, "ahead": 2}


@pytest.mark.rule("PEER-12", "fires")
def test_vllm_evicting_while_an_empty_block_is_free_fires_peer_12():
    """Block 3 was freed without content: it sits ahead of every cached block, so evicting 2 while 3 stays free
    is out of order (the cached blocks went to the head)."""
    j, _ = run_vllm(vllm_steps([2, 4, 5, 6, 1], 12))
    got = [f for f in j.findings if f.rule == "PEER-12"]
    assert len(got) == 1 and "block 3, free without content" in got[0].message


def test_vllm_a_hit_takes_a_block_out_of_the_queue():
    """A hit on a's block 1 touches it: c's later eviction of block 2 alone is then the head of the queue."""
    steps = vllm_steps([3, 4, 5, 6, 2], 12)
    q = vpol.checker(BLOCKS - 1)
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    j = EngineJudge(BS, BLOCKS, ev, policy=q)
    j.submit("a", A)
    j.submit("c", C)
    j.step(steps[0], 0)
    assert list(q.cached) == [2, 1] and q.empty == {3, 4, 5, 6}
    q._named("b", [1], 1, [])
    assert list(q.cached) == [2]


@pytest.mark.rule("PEER-12", "keeps")
def test_vllm_releases_in_one_step_by_two_requests_are_unordered():
    q = vpol.checker(4)
    q.cached = {5: (1, 0, 0, 0, "x"), 6: (1, 1, 0, 0, "y")}
    q.empty = set()
    ev = EventChecker(block_size=BS, capacity=4)
    j = EngineJudge(BS, 5, ev, policy=q)
    q._check(j, [("z", 0, 6, (1, 1, 0, 0, "y"))], set(), 0)  # y's block before x's: same step, not ordered
    assert j.findings == []


# -- SGLang ------------------------------------------------------------------------------------------------------

def tree():
    """Root children: X (leaf, accessed first), Y (accessed last) with child Z (leaf, accessed second)."""
    #        [parent, lock_ref, access rank, first page, pages]
    return [[-1, 0, 0, 1, 2],    # 0: X
            [-1, 0, 2, 3, 1],    # 1: Y
            [1, 0, 1, 4, 2]]     # 2: Z, Y's child


@pytest.mark.rule("PEER-13", "keeps")
@pytest.mark.parametrize("removed_nodes", [[0], [0, 2], [0, 1, 2]])
def test_sglang_lru_peeling_keeps_peer_13(removed_nodes):
    assert sgl.judge_eviction({"need": 4, "nodes": tree(), "evicted": removed_nodes}) is None


@pytest.mark.parametrize("nodes, removed_nodes, why", [
    (tree(), [2], "accessed earlier, stays"),                 # Z before the older leaf X: most recent first
    (tree(), [1], "not a leaf"),                              # Y still has its child Z
    ([[-1, 1, 0, 1, 2], [-1, 0, 2, 3, 1], [1, 0, 1, 4, 2]], [0], "locked"),   # X locked by a live request
])
@pytest.mark.rule("PEER-13", "fires")
def test_sglang_out_of_policy_eviction_fires_peer_13(nodes, removed_nodes, why):
    got = sgl.judge_eviction({"need": 4, "nodes": nodes, "evicted": removed_nodes})
    assert got is not None and why in got


@pytest.mark.rule("PEER-13", "keeps")
def test_sglang_equal_access_times_are_either_order():
    nodes = copy.deepcopy(tree())
    nodes[2][2] = 0  # Z accessed together with X
    assert sgl.judge_eviction({"need": 4, "nodes": nodes, "evicted": [2]}) is None
    assert sgl.judge_eviction({"need": 4, "nodes": nodes, "evicted": [0]}) is None


def test_sglang_checker_reports_through_the_judge():
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    j = EngineJudge(BS, BLOCKS, ev, same_step_hits=False, policy=sgl.checker(BLOCKS - 1))
    msg = {"step": 0, "new": [], "cached": [], "scheduled": {}, "tokens": {}, "finished": [], "preempted": [],
           "stats": None, "batches": [], "evictions": [{"need": 8, "nodes": tree(), "evicted": [2]},
                                                      {"need": 4, "nodes": tree(), "evicted": [0]}]}
    j.step(msg, 0)
    assert j.premise["PEER-13"] == 2 and j.counts["PEER-13"] == 1
    f = j.findings[0]
    assert f.rule == "PEER-13" and f.message.startswith("step 0: evict call 1 of the step (for 8 tokens)")
