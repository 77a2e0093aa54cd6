"""The judge of real block-table engines (PEER-5 ... PEER-9) on hand-built driver step messages: a legal
two-request run keeps every rule; one crafted violation per rule fires exactly that rule."""

import copy
import re

import numpy as np
import pytest

from kvsim.sim.peers.judges.engine_judge import DECISIONS, RULES, EngineJudge, batch_events
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.trace import cachetrace as ct

BS, BLOCKS = 4, 10  # block 0 reserved: 9 usable
A = np.arange(10, dtype=np.int64)                     # 10 prompt tokens
B = np.array([0, 1, 2, 3, 4, 5, 6, 7, 100, 101])      # shares A's first two blocks


def stored(hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": 0}


def legal():
    """a computes its prompt in step 0 (two full blocks stored); b hits them in step 1 while a decodes and
    finishes."""
    return [
        {"step": 0, "new": [["a", 0, [1, 2, 3]]], "cached": [], "scheduled": {"a": 10}, "tokens": {"a": 500},
         "finished": [], "preempted": [], "stats": {"requests": 1, "queries": 10, "hits": 0},
         "free_blocks": 6, "cached_blocks": 2, "batches": [[0, [stored([11, 12], None, list(range(8)))], 0]]},
        {"step": 1, "new": [["b", 8, [1, 2, 4]]], "cached": [["a", False, None, 10]], "scheduled": {"a": 1, "b": 2},
         "tokens": {"a": 501, "b": 7}, "finished": ["a"], "preempted": [],
         "stats": {"requests": 1, "queries": 10, "hits": 8}, "free_blocks": 6, "cached_blocks": 2, "batches": []},
    ]


def judge(steps, same_step_hits=True):
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    j = EngineJudge(BS, BLOCKS, ev, same_step_hits=same_step_hits)
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
    assert j.findings == [] and ev.findings == []
    s = j.summary()
    assert s["hit_tokens"] == 8 and s["prompt_tokens"] == 20 and s["hit_ratio"] == 0.4
    assert s["trace_bound_ratio"] == 0.4  # b's two shared blocks were in a's earlier prompt
    assert all(j.premise[r] > 0 for r in RULES)


def test_same_step_hit_on_blocks_the_forward_computes_is_legal():
    """vLLM caches blocks when it allocates them: b may hit what a computes in the same step."""
    steps = legal()
    s0, s1 = steps
    s0["new"].append(["b", 8, [1, 2, 4]])
    s0["scheduled"]["b"] = 2
    s0["tokens"]["b"] = 7
    s0["stats"] = {"requests": 2, "queries": 20, "hits": 8}
    s0["free_blocks"] = 5
    s1.update(new=[], cached=[["a", False, None, 10], ["b", False, None, 10]], stats={"requests": 0, "queries": 0,
                                                                                      "hits": 0})
    assert fired(steps) == []
    j, _ = judge(steps, same_step_hits=False)  # an engine that inserts after the forward (SGLang) may not
    assert {f.rule for f in j.findings} == {"PEER-7"} and "this step's own forward" in j.findings[0].message


@pytest.mark.parametrize("rule, mutate", [
    ("PEER-5", lambda s: s[1]["new"][0].__setitem__(2, [1, 2, 10])),             # block id beyond the pool
    ("PEER-6", lambda s: s[1]["new"][0].__setitem__(1, 6)),  # hit inside a block (then b writes into a's block)
    ("PEER-7", lambda s: s[1]["new"][0].__setitem__(2, [1, 5, 4])),               # hit through an empty block
    ("PEER-7", lambda s: s[0].__setitem__("batches", [[0, [stored([11], None, [0, 1, 2, 3])], 0]])),  # not in stream
    ("PEER-8", lambda s: s[1]["new"][0].__setitem__(2, [1, 2, 3])),               # fresh block a still names
    ("PEER-9", lambda s: s[1]["stats"].__setitem__("hits", 4)),                    # stats disagree with the hit
    ("PEER-9", lambda s: s[1].__setitem__("free_blocks", 7)),                       # a block unaccounted for
])
def test_crafted_violation_fires_its_rule(rule, mutate):
    steps = copy.deepcopy(legal())
    mutate(steps)
    got = fired(steps)
    allowed = {rule, "PEER-9"} | ({"PEER-8"} if rule == "PEER-6" else set())
    assert rule in got and set(got) <= allowed, got


def test_write_into_a_block_another_request_named_fires():
    steps = legal()
    # b is handed block 3 (a's partial last block) as the block after its hit... and writes into it
    steps[1]["new"] = [["b", 8, [1, 2, 3]]]
    j, _ = judge(steps)
    assert {f.rule for f in j.findings} == {"PEER-8"}
    assert any("computes block 2 into block 3" in f.message for f in j.findings)
    assert all(f.message.startswith("step 1: ") and f.line == 1 for f in j.findings)  # the log's last batch


def test_capacity_over_the_pool_fires():
    ev = EventChecker(block_size=BS, capacity=2)
    j = EngineJudge(BS, 3, ev)  # 2 usable blocks, a names 3
    j.submit("a", A)
    j.step({"step": 0, "new": [["a", 0, [1, 2, 3]]], "scheduled": {"a": 10}, "batches": []}, 0)
    assert {f.rule for f in j.findings} == {"PEER-5"}


def test_native_vllm_and_array_events_are_read_and_unknown_fields_ignored():
    evs = batch_events([3, [stored([1, 2], None, list(range(8))), {"type": "BlockRemoved", "block_hashes": [2],
                                                                    "medium": "GPU", "group_idx": 0},
                            ["AllBlocksCleared"]], 0])
    assert isinstance(evs[0], ct.BlockStored) and evs[0].block_hashes == [1, 2] and evs[0].medium == "GPU"
    assert isinstance(evs[1], ct.BlockRemoved) and isinstance(evs[2], ct.AllBlocksCleared)
    with pytest.raises(ValueError):
        batch_events([0, [{"type": "Mystery"}]])


def test_every_rule_cites_the_seed_and_records_its_reading():
    for rid, (title, clause) in RULES.items():  # "seed 002 (cache concepts) l.13" or "cache concepts L112"
        assert title and re.search(r"(seed 002|cache concepts).* (l\.|L)[0-9]", clause) and DECISIONS[rid], rid


def test_duplicate_copies_keep_a_hash_live_until_every_copy_is_removed():
    """vLLM re-stores a live hash (a second block with the same content) and removes one copy per evicted block:
    where the checker allows copies (vLLM's preset) the stream view counts them, as vLLM's cached-block map does;
    without the allowance a removal drops the hash (a set, as a plain router keeps it)."""
    def run(counted):
        ev = EventChecker(block_size=BS)
        ev.duplicate_copies = counted
        j = EngineJudge(BS, BLOCKS, ev)
        j.submit("a", A)
        block = stored([11], None, [0, 1, 2, 3])
        j.step({"step": 0, "batches": [[0, [block], 0], [0, [block], 0]], "cached_blocks": 1}, 0)
        j.step({"step": 1, "batches": [[1, [{"type": "BlockRemoved", "block_hashes": [11]}], 0]],
                "cached_blocks": 1}, 2)
        return j
    assert [f.rule for f in run(True).findings] == []
    assert [f.rule for f in run(False).findings] == ["PEER-9"]


def test_a_new_request_may_hit_a_block_a_running_request_was_handed_in_the_same_step():
    """The scheduler serves running requests (and resumed ones, at the waiting queue's head) before new ones:
    a's block 2 is handed out and computed in step 1, and b, admitted later in that step, hits it (vLLM caches
    at allocation). The judge takes the step's tables in that order, so this is no PEER-8."""
    steps = [
        {"step": 0, "new": [["a", 0, [1]]], "cached": [], "scheduled": {"a": 4}, "tokens": {}, "finished": [],
         "preempted": [], "stats": None, "free_blocks": 8, "cached_blocks": 1,
         "batches": [[0, [stored([11], None, [0, 1, 2, 3])], 0]]},
        {"step": 1, "new": [["b", 8, [1, 2, 4]]], "cached": [["a", False, [2], 4]], "scheduled": {"a": 4, "b": 2},
         "tokens": {"b": 7}, "finished": [], "preempted": [], "stats": None, "free_blocks": 6, "cached_blocks": 2,
         "batches": [[1, [stored([12], 11, [4, 5, 6, 7])], 0]]},
    ]
    assert fired(steps) == []


def test_a_new_request_hitting_its_whole_prompt_fires_peer6():
    """The token sampled in the admission step is not part of what the hit may cover: b (8 prompt tokens, both
    blocks cached by a) hit 8 with nothing left to compute (found by the judge-engine fuzz machine)."""
    steps = legal()
    j0 = EngineJudge(BS, BLOCKS, EventChecker(block_size=BS, capacity=BLOCKS - 1))
    j0.submit("a", A)
    j0.submit("b", B[:8])
    steps[1]["new"] = [["b", 8, [1, 2, 4]]]
    steps[1]["scheduled"] = {"a": 1, "b": 0}
    steps[1]["stats"] = {"requests": 1, "queries": 8, "hits": 8}
    before = 0
    for m in steps:
        j0.step(m, before)
        before += len(m.get("batches", ()))
    assert [(f.rule, f.step) for f in j0.findings] == [("PEER-6", 1)]
    assert "hits 8 of its 8 tokens" in j0.findings[0].message
