"""The state tags of a state group whose states travel by copy (SGLang's Mamba component, PEER-22's SGLang reading
and PEER-24) on hand-built step messages, no engine venv: a legal run keeps every rule; each crafted read or
publication of a wrong state fires the rule naming the broken clause."""

import copy

import numpy as np

from kvsim.sim.peers.judges import events as pe
from kvsim.sim.peers.judges.engine_judge import EngineJudge
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.judges.group_judge import GroupJudge
from kvsim.sim.peers.kv_groups import parse_kv_groups

BS, BLOCKS = 4, 40  # block 0 is the null block: 39 usable
GROUPS = parse_kv_groups("full:4,mamba:4")
A = np.arange(16, dtype=np.int64)                         # 16 prompt tokens: 4 pages
B = np.concatenate([A, np.array([90, 91, 92, 93])])       # A's 16 tokens, then 4 of its own
C = np.concatenate([A[:8], np.array([70, 71, 72, 73, 74, 75, 76, 77])])  # A's first 8 tokens, then its own


def stored(hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None}


def legal():
    """a computes its 16-token prompt from the zeroed state (tag 1: the state after 16 tokens), its checkpoint hands
    the tree that state for the node ending at 16 (the tree keeps a copy: tag 1 again), decodes one token (tag 2)
    and finishes; b then hits 16 tokens and reads the tree's copy (tag 1) in its own slot, computing its 4."""
    return [
        {"step": 0, "new": [["a", 0, [1, 2, 3, 4]]], "cached": [], "scheduled": {"a": 16}, "tokens": {"a": 500},
         "finished": [], "preempted": [], "stats": None,
         "batches": [[0, [stored([11, 12, 13, 14], None, list(range(16)))], 0]],
         "groups": {"tables": [[0, "a", 0, [1, 2, 3, 4]], [1, "a", 0, [30]]],
                    "states": {"reads": [["a", 0, 0]], "writes": [[1, "a", 16]]},
                    "published": [[1, "a", 16]]}},
        {"step": 1, "new": [], "cached": [["a", False, [5], 16]], "scheduled": {"a": 1}, "tokens": {"a": 501},
         "finished": ["a"], "preempted": [], "stats": None, "batches": [],
         "groups": {"tables": [[0, "a", 4, [5]]], "states": {"reads": [["a", 16, 1]], "writes": [[2, "a", 17]]},
                    "published": []}},
        {"step": 2, "new": [["b", 16, [1, 2, 3, 4]]], "cached": [], "scheduled": {"b": 4}, "tokens": {"b": 7},
         "finished": [], "preempted": [], "stats": None, "batches": [],
         "groups": {"tables": [[0, "b", 0, [1, 2, 3, 4, 6]], [1, "b", 0, [31]]],
                    "states": {"reads": [["b", 16, 1]], "writes": [[3, "b", 20]]}, "published": []}},
    ]


def judge(steps):
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    gj = GroupJudge(GROUPS, BLOCKS - 1, tag_states=True)
    j = EngineJudge(BS, BLOCKS, ev, parse=lambda b: pe.parse_batch(b)[0], groups=gj)
    for rid, toks in (("a", A), ("b", B), ("c", C)):
        j.submit(rid, toks)
    before = 0
    for m in steps:
        j.step(m, before)
        before += len(m.get("batches", ()))
    return j, ev


def findings(steps):
    j, ev = judge(steps)
    return [f for f in j.findings + ev.findings]


def changed(step, fn):
    steps = copy.deepcopy(legal())
    fn(steps[step]["groups"])
    return steps


def test_tags_keep_a_run_that_reads_and_publishes_the_right_states():
    j, ev = judge(legal())
    assert j.findings == [] and ev.findings == [], [f.message for f in j.findings + ev.findings]
    assert j.premise["PEER-22"] == 3 and j.premise["PEER-24"] == 1
    assert {"PEER-22", "PEER-24"} <= set(j.rules) and "SGLang's reading" in j.decisions["PEER-22"]


def test_a_state_read_after_another_boundary_fires_peer_22():
    """b hits 16 tokens but its slot holds a's state after 17 (the copy-on-write took the running slot)."""
    got = findings(changed(2, lambda g: g["states"].update(reads=[["b", 16, 2]])))
    assert [f.rule for f in got] == ["PEER-22"] and "after 17 tokens" in got[0].message
    assert got[0].context["state_after"] == 17 and got[0].context["writer"] == "a"


def test_a_state_no_forward_wrote_fires_peer_22():
    got = findings(changed(2, lambda g: g["states"].update(reads=[["b", 16, 0]])))
    assert [f.rule for f in got] == ["PEER-22"] and "the zeroed state" in got[0].message


def test_a_first_forward_from_a_state_never_zeroed_fires_peer_22():
    """a's first forward reads a slot still holding a state (the clear of a fresh slot skipped)."""
    def dirty(g):
        g["states"].update(reads=[["a", 0, 1]], writes=[[1, "a", 16]])
    got = findings(changed(0, dirty))
    assert [f.rule for f in got] == ["PEER-22"] and "never zeroed" in got[0].message


def test_a_state_read_of_another_prefix_fires_peer_22():
    """c shares only a's first 8 tokens: a state after 16 tokens of a is another prefix's state at c's 16."""
    steps = legal()
    steps[2] = {"step": 2, "new": [["c", 16, [1, 2, 3, 4]]], "cached": [], "scheduled": {"c": 4}, "tokens": {"c": 7},
                "finished": [], "preempted": [], "stats": None, "batches": [],
                "groups": {"tables": [[0, "c", 0, [1, 2, 3, 4, 6]], [1, "c", 0, [31]]],
                           "states": {"reads": [["c", 16, 1]], "writes": [[3, "c", 20]]}, "published": []}}
    got = [f for f in findings(steps) if f.rule == "PEER-22"]
    assert got and "another prefix" in got[0].message


def test_a_state_published_for_another_boundary_fires_peer_24():
    """a's checkpoint hands the tree its decode state (after 17 tokens) for the node ending at 16."""
    def late(g):
        g["published"] = [[2, "a", 16]]
    steps = changed(1, late)
    steps[0]["groups"]["published"] = []
    got = findings(steps)
    assert [f.rule for f in got] == ["PEER-24"] and "after 17 tokens for the node ending at 16" in got[0].message
    assert got[0].context["length"] == 16 and got[0].context["state_after"] == 17


def test_a_state_no_forward_wrote_published_fires_peer_24():
    got = findings(changed(0, lambda g: g.update(published=[[9, "a", 16]])))
    assert [f.rule for f in got] == ["PEER-24"] and "no forward wrote" in got[0].message
