"""The group judge (PEER-20 ... PEER-22, and PEER-8 / PEER-9 across groups) on hand-built hybrid step messages,
no engine venv: a legal run of a full, a sliding-window (window 8) and a Mamba group (blocks of 4 tokens) keeps
every rule; each crafted violation fires the rule naming the broken clause."""

import copy

import numpy as np
import pytest

from kvsim.sim.peers.judges import events as pe
from kvsim.sim.peers.judges.engine_judge import EngineJudge
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.judges.group_judge import RULE_IDS, GroupJudge
from kvsim.sim.peers.kv_groups import KvGroupsError, parse_kv_groups

BS, BLOCKS = 4, 40  # block 0 is the null block: 39 usable
GROUPS = parse_kv_groups("full:4,sliding:4:8,mamba:4")
A = np.arange(16, dtype=np.int64)                         # 16 prompt tokens: 4 blocks
B = np.concatenate([A, np.array([90, 91, 92, 93])])       # A's 16 tokens, then 4 of its own


def stored(group, hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": group}


def legal():
    """a computes its 16-token prompt (every group stores its blocks; the Mamba group keeps the state after 16
    tokens in slot 3), decodes one token and finishes; b then hits 16 tokens: the full group's four blocks, the
    window's last two, the state after 16 -- and computes its own 4."""
    a_events = [stored(0, [11, 12, 13, 14], None, list(range(16))), stored(1, [11, 12, 13, 14], None, list(range(16))),
                stored(2, [14], 13, list(range(12, 16)))]
    return [
        {"step": 0, "new": [["a", 0, [1, 2, 3, 4]]], "cached": [], "scheduled": {"a": 16}, "tokens": {"a": 500},
         "finished": [], "preempted": [], "stats": None, "batches": [[0, a_events, 0]],
         "groups": {"tables": [[0, "a", 0, [1, 2, 3, 4]], [1, "a", 0, [5, 6, 7, 8]], [2, "a", 0, [0, 0, 0, 9]]],
                    "copies": [], "free": 30, "cached_all": 9, "cached": [4, 4, 1]}},
        {"step": 1, "new": [], "cached": [["a", False, [10], 16]], "scheduled": {"a": 1}, "tokens": {"a": 501},
         "finished": ["a"], "preempted": [], "stats": None, "batches": [],
         "groups": {"tables": [[0, "a", 4, [10]], [1, "a", 0, [0, 0, 7, 8, 15]], [2, "a", 4, [16]]],
                    "copies": [], "free": 39, "cached_all": 9}},
        {"step": 2, "new": [["b", 16, [1, 2, 3, 4, 17]]], "cached": [], "scheduled": {"b": 4}, "tokens": {"b": 7},
         "finished": [], "preempted": [], "stats": None, "batches": [],
         "groups": {"tables": [[0, "b", 0, [1, 2, 3, 4, 17]], [1, "b", 0, [0, 0, 7, 8, 18]],
                               [2, "b", 0, [0, 0, 0, 9, 19]]],
                    "copies": [], "free": 29, "cached_all": 9, "cached": [4, 4, 1]}},
    ]


def judge(steps):
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    gj = GroupJudge(GROUPS, BLOCKS - 1)
    j = EngineJudge(BS, BLOCKS, ev, parse=lambda b: pe.parse_batch(b)[0], groups=gj)
    j.submit("a", A)
    j.submit("b", B)
    before = 0
    for m in steps:
        j.step(m, before)
        before += len(m.get("batches", ()))
    return j, ev


def fired(steps):
    j, ev = judge(steps)
    return sorted({f.rule for f in j.findings} | {f.rule for f in ev.findings})


def test_legal_run_keeps_every_rule():
    j, ev = judge(legal())
    assert j.findings == [] and ev.findings == [], [f.message for f in j.findings + ev.findings]
    assert all(j.premise[r] > 0 for r in RULE_IDS if r != "PEER-24")  # PEER-24: tag-judged groups (test_state_tags)
    assert j.premise["PEER-9"] > 0 and j.premise["PEER-8"] > 0
    assert set(RULE_IDS) - {"PEER-24"} <= set(j.rules) and "several cache groups" in j.decisions["PEER-9"]


def with_change(step: int, fn):
    steps = copy.deepcopy(legal())
    fn(steps[step])
    return steps


def table(msg: dict, group: int, rid: str) -> list:
    return next(t[3] for t in msg["groups"]["tables"] if t[0] == group and t[1] == rid)


@pytest.mark.rule("PEER-20", "fires")
def test_a_hit_the_window_group_cannot_serve_fires_peer_20():
    """b hits 16 tokens, but its sliding-window table names no block in slot 2: the window before the hit
    ([9, 16)) needs it (vLLM PR 45614's shape: a later group raised the common hit)."""
    steps = with_change(2, lambda m: table(m, 1, "b").__setitem__(2, 0))
    assert fired(steps) == ["PEER-20", "PEER-9"]  # the window block left out is free: one more free block
    j, _ = judge(steps)
    assert any("window before the hit" in f.message for f in j.findings if f.rule == "PEER-20")


@pytest.mark.rule("PEER-20", "fires")
def test_a_window_slot_holding_another_prefix_fires_peer_20():
    steps = with_change(2, lambda m: table(m, 1, "b").__setitem__(2, 6))  # block 6 holds tokens 4..8, not 8..12
    j, _ = judge(steps)
    assert [f.rule for f in j.findings if f.rule.startswith("PEER-2")] == ["PEER-20"]
    assert "does not hold that prefix block" in j.findings[0].message


@pytest.mark.rule("PEER-21", "fires")
def test_a_window_slot_dropped_while_the_queries_read_it_fires_peer_21():
    """a's decode at 16 reads [9, 17): slot 2 (tokens 8..12) must stay; the engine dropped it."""
    steps = with_change(1, lambda m: table(m, 1, "a").__setitem__(2, 0))
    j, _ = judge(steps)
    assert {f.rule for f in j.findings} == {"PEER-21"}
    assert any("window its queries read" in f.message for f in j.findings)


@pytest.mark.rule("PEER-21", "fires")
def test_a_full_group_slot_turning_null_fires_peer_21():
    steps = with_change(1, lambda m: m["groups"]["tables"].append([0, "a", 1, [0, 3, 4, 10]]))
    steps[1]["groups"]["tables"] = [t for t in steps[1]["groups"]["tables"] if not (t[0] == 0 and t[2] == 4)]
    j, _ = judge(steps)
    assert "PEER-21" in {f.rule for f in j.findings}
    assert any("full history never expires" in f.message for f in j.findings)


@pytest.mark.rule("PEER-22", "fires")
def test_a_hit_on_a_state_never_written_there_fires_peer_22():
    """b hits 16 tokens through a state block that holds no state (the checkpoint was never written)."""
    steps = with_change(2, lambda m: table(m, 2, "b").__setitem__(3, 20))
    j, _ = judge(steps)
    assert [f.rule for f in j.findings] == ["PEER-22"]
    assert "holds no state" in j.findings[0].message


@pytest.mark.rule("PEER-22", "fires")
def test_a_hit_on_the_state_after_another_boundary_fires_peer_22():
    """The state block a running request moved past (its state after 17 tokens) is no checkpoint at 16."""
    steps = with_change(2, lambda m: table(m, 2, "b").__setitem__(3, 16))
    steps[1]["finished"] = []  # a keeps block 16 ... and finishes in step 2 instead, after b named it
    steps[2]["finished"] = ["a"]
    j, _ = judge(steps)
    rules = [f.rule for f in j.findings]
    assert "PEER-22" in rules
    assert any("holds a state after 17 tokens" in f.message for f in j.findings)


@pytest.mark.rule("PEER-22", "fires")
def test_a_running_state_freed_fires_peer_22():
    """a's decode starts from the state after 16 tokens in slot 3; the engine nulled that slot."""
    steps = with_change(1, lambda m: table(m, 2, "a").__setitem__(0, 0))
    steps[1]["groups"]["tables"] = [t if t[0] != 2 else [2, "a", 3, [0, 16]] for t in steps[1]["groups"]["tables"]]
    j, _ = judge(steps)
    assert "PEER-22" in {f.rule for f in j.findings}
    assert any("the state it starts from is gone" in f.message for f in j.findings)


@pytest.mark.rule("PEER-22", "fires")
def test_a_hit_on_a_state_the_same_step_computes_fires_peer_22():
    """b is admitted in a's step and hits the state a's forward is about to write."""
    steps = copy.deepcopy(legal())
    s0, s2 = steps[0], steps[2]
    s0["new"].append(s2["new"][0])
    s0["scheduled"]["b"] = 4
    s0["tokens"]["b"] = 7
    s0["groups"]["tables"] += [[0, "b", 0, [1, 2, 3, 4, 17]], [1, "b", 0, [0, 0, 7, 8, 18]],
                               [2, "b", 0, [0, 0, 0, 9, 19]]]
    s0["groups"]["free"] = 20
    del steps[1:]
    j, _ = judge(steps)
    assert [f.rule for f in j.findings if f.rule == "PEER-22"] == ["PEER-22"]
    assert any("this same step computes" in f.message for f in j.findings)


@pytest.mark.rule("PEER-8", "fires")
def test_one_block_in_two_groups_fires_peer_8():
    steps = with_change(0, lambda m: table(m, 1, "a").__setitem__(0, 1))  # block 1 is the full group's slot 0
    j, _ = judge(steps)
    assert any(f.rule == "PEER-8" and "group 0" in f.message for f in j.findings)


@pytest.mark.rule("PEER-9", "fires")
def test_a_free_count_off_by_one_fires_peer_9():
    steps = with_change(0, lambda m: m["groups"].__setitem__("free", 31))
    assert fired(steps) == ["PEER-9"]


@pytest.mark.rule("PEER-9", "fires")
def test_a_group_holding_more_hashes_than_its_stream_fires_peer_9():
    steps = with_change(0, lambda m: m["groups"].__setitem__("cached", [4, 5, 1]))
    j, _ = judge(steps)
    assert [f.rule for f in j.findings] == ["PEER-9"] and "group 1" in j.findings[0].message


def test_kv_groups_spec_errors_are_one_line():
    for bad, why in [("full", "expected full:BLOCK"), ("sliding:16", "sliding:BLOCK:WINDOW"),
                     ("mamba:64", "at least one full group"), ("full:0", "not a positive integer"),
                     ("swa:16", "kind must be one of")]:
        with pytest.raises(KvGroupsError, match=why):
            parse_kv_groups(bad)
    g = parse_kv_groups("full:16,sliding:16:128,mamba:64")
    assert [x.label() for x in g] == ["full:16", "sliding:16:128", "mamba:64"]
