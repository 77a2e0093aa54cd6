"""Actionable engine findings without an engine venv, on crafted driver messages: PEER-14 / PEER-15 pass on legal
structures and fire on crafted violations (vLLM's free queue and reference counts, SGLang's page ownership, tree
links and eviction amounts, over-allocated tables); every finding about a block names the engine frame the
driver's ledger reported; one cause gives one root, the rest consequences; a kvsim-peer/1 log re-judges to the
same roots; the shrinker finds a minimal failing case deterministically."""

import copy
import io
import json

import numpy as np
import pytest

from kvsim.sim.peers import engines
from kvsim.sim.peers.judges.actionable import Actionable
from kvsim.sim.peers.judges.engine_judge import EngineJudge
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.judges.frames import Frames, site
from kvsim.sim.peers.judges.peer_recovery import PeerRecovery, Record, entities, mechanism
from kvsim.sim.peers.peer_log import Writer, is_peer_log, read
from kvsim.sim.peers.sglang import structure as sgl
from kvsim.sim.peers.shrink import Case, Shrinker, size
from kvsim.sim.peers.vllm import structure as vst
from kvsim.sim.peers.workload import Request, is_requests_header, read_requests, requests_jsonl

from .test_engine_judge import BLOCKS, BS, A, B, legal

FREED = ("freed by vllm/v1/core/block_pool.py:816 in free_blocks, called from vllm/v1/core/kv_cache_manager.py:599 "
         "in free")
ALLOC = "allocated by vllm/v1/core/block_pool.py:706 in get_new_blocks, called from x.py:1 in allocate"


def ledger(rows, frames=((0, ALLOC), (1, FREED)), **extra):
    return {"blocks": [list(r) for r in rows], "requests": [], "frames": [list(f) for f in frames], "ends_ok": True,
            "evictions": {"handed": 0, "evicted": 0, "stray": []}, **extra}


def legal_ledgers():
    """legal() with the ledger vLLM's driver would add: a's blocks allocated in step 0; in step 1 b hits 1 and 2
    and gets 4, a finishes: blocks 3 (a's partial tail) back in the queue, 1 and 2 held by b alone."""
    steps = legal()
    steps[0]["ledger"] = ledger([(1, 1, 0, 1, 1, 0, -1), (2, 1, 0, 1, 1, 0, -1), (3, 1, 0, 1, 0, 0, -1)])
    steps[1]["ledger"] = ledger([(1, 1, 0, 1, 1, 1, -1), (2, 1, 0, 1, 1, 1, -1), (3, 0, 1, 1, 0, 1, -1),
                                 (4, 1, 0, 1, 0, 0, -1)], frames=())
    return steps


def judge(steps, structure=vst.check, exact=True):
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    act = Actionable(BS, structure=structure, exact_tables=exact)
    j = EngineJudge(BS, BLOCKS, ev, act=act)
    j.submit("a", A)
    j.submit("b", B)
    for line, m in enumerate(steps, start=4):
        j.step(m, 0, at=line)
    return j, act


def roots(act):
    return [(r.rule, r.context.get("check")) for r in act.recovery.roots]


# -- PEER-14 / PEER-15 on vLLM ----------------------------------------------------------------------------------

def test_legal_structures_pass_and_are_exercised():
    j, act = judge(legal_ledgers())
    assert roots(act) == [] and j.premise["PEER-14"] == 2 and j.premise["PEER-15"] > 0


@pytest.mark.parametrize("row, check", [
    ((3, 0, 1, 0, 0, 1, -1), "links"),             # a queued block whose neighbours do not point back
    ((3, 1, 1, 1, 0, 1, -1), "queued_referenced"),  # in the free queue with ref_cnt 1 (and no table names it)
    ((3, 0, 0, 1, 0, 1, -1), "lost"),              # ref_cnt 0, not in the queue
    ((1, 2, 0, 1, 1, 1, -1), "ref_cnt"),           # b alone names block 1: ref_cnt 2 is a leaked reference
    ((3, -1, 0, 1, 0, 1, -1), "negative"),
])
def test_a_crafted_vllm_structure_violation_fires_peer14_naming_the_frame(row, check):
    steps = legal_ledgers()
    rows = steps[1]["ledger"]["blocks"]
    rows[[r[0] for r in rows].index(row[0])] = list(row)
    j, act = judge(steps)
    got = roots(act)
    assert got and got[0] == ("PEER-14", check), got
    first = act.recovery.roots[0]
    assert f"block {row[0]} was last freed by vllm/v1/core/block_pool.py:816 in free_blocks" in first.message
    assert first.frame == FREED and first.step == 1 and first.line == 5


def test_the_walk_finds_what_no_step_touched():
    steps = legal_ledgers()
    steps[1]["walk"] = {"queue_walk": 5, "queue_count": 6, "queue_ended": False, "asym": [], "twice": [6],
                        "lost": [7], "lost_n": 1, "negative": [], "refs": [1, 1, 2, 1, 4, 1, 8, 1], "unmapped": [5]}
    found = {ctx["check"] for _r, _m, ctx, _a in vst.check(steps[1], {1: 1, 2: 1, 4: 1}, BS)}
    assert found == {"cycle", "queue_lost", "unmapped", "ref_cnt"}
    steps[1]["walk"] = {"queue_walk": 6, "queue_count": 6, "queue_ended": True, "asym": [], "twice": [], "lost": [],
                        "lost_n": 0, "negative": [], "refs": [1, 1, 2, 1, 4, 1], "unmapped": []}
    assert vst.check(steps[1], {1: 1, 2: 1, 4: 1}, BS) == []


def test_a_crash_message_judges_structure_not_the_unseen_tables():
    """At a crash the step's tables never reached the judge: a reference count is not compared with them."""
    msg = {"crash": {}, "ledger": ledger([(5, 1, 0, 1, 0, 0, -1)]), "walk": {"refs": [5, 1]}}
    assert vst.check(msg, {}, BS) == []
    msg["ledger"]["blocks"] = [[5, 1, 1, 1, 0, 0, -1]]  # but a referenced block in the free queue is
    assert [c["check"] for _r, _m, c, _a in vst.check(msg, {}, BS)] == ["queued_referenced"]


def test_a_stray_eviction_fires_peer15():
    steps = legal_ledgers()
    steps[1]["ledger"]["evictions"] = {"handed": 1, "evicted": 2, "stray": [[6, 0]]}
    j, act = judge(steps)
    assert roots(act) == [("PEER-15", "stray_eviction")]


def test_an_over_allocated_table_fires_peer15():
    """a's 10 computed tokens need 3 blocks of 4; a fourth block is an allocation beyond what they need."""
    steps = legal_ledgers()
    steps[0]["new"] = [["a", 0, [1, 2, 3, 5]]]
    steps[0]["free_blocks"] = 5
    j, act = judge(steps)
    assert ("PEER-15", "over_allocation") in roots(act)
    j, act = judge(legal_ledgers(), exact=False)  # engines that reserve whole tables are not judged so
    assert roots(act) == []


# -- PEER-14 / PEER-15 on SGLang --------------------------------------------------------------------------------

def sg_walk(**kw):
    return {"nodes": 3, "bad_links": [], "bad_len": [], "negative": [], "listed_off_tree": [], "lost": [],
            "lost_n": 0, "double": [], "double_n": 0, **kw}


@pytest.mark.parametrize("walk, check", [
    (sg_walk(double=[[7, 1, 1, 0]], double_n=1), "owned_twice"),
    (sg_walk(lost=[9], lost_n=1), "leaked"),
    (sg_walk(bad_links=[4]), "tree_links"),
    (sg_walk(bad_len=[4]), "tree_value"),
    (sg_walk(negative=[4]), "tree_negative"),
    (sg_walk(listed_off_tree=[4]), "stale_leaf"),
])
def test_a_crafted_sglang_structure_violation_fires_peer14(walk, check):
    assert sgl.check({"walk": sg_walk()}, {}, 16) == []
    got = sgl.check({"walk": walk}, {}, 16)
    assert [(r, c["check"]) for r, _m, c, _a in got] == [("PEER-14", check)]


def evict(need, gone, pages=(1, 2, 4)):
    """A tree of three unlocked leaves under the root (pages each), of which ``gone`` were removed."""
    nodes = [[-1, 0, k, 10 + k, p, 100 + k] for k, p in enumerate(pages)]
    return {"need": need, "nodes": nodes, "evicted": list(gone)}


def test_sglang_eviction_amount():
    ok = [evict(16, [0]), evict(17, [0, 1]), evict(64, [0, 1, 2]), evict(200, [0, 1, 2])]  # 1 page = 16 tokens
    assert all(sgl.check({"evictions": [e]}, {}, 16) == [] for e in ok)
    too_much = sgl.check({"evictions": [evict(16, [0, 1])]}, {}, 16)  # it had 16 after the first leaf
    assert [(r, c["check"], c["node"]) for r, _m, c, _a in too_much] == [("PEER-15", "amount", 100)]
    short = sgl.check({"evictions": [evict(40, [0])]}, {}, 16)  # stopped at 16 of 40 with two leaves left
    assert [r for r, *_ in short] == ["PEER-15"] and "2 unlocked leaves stayed" in short[0][1]


# -- frames and recovery ----------------------------------------------------------------------------------------

def test_frames_name_the_subject_of_a_finding():
    f = Frames()
    f.update({"frames": [[0, FREED], [1, "popped from the free queue's head at a.py:3 in get_new_blocks"]],
              "blocks": [[47, 0, 1, 1, 1, 0, 1]], "requests": [["r1", 0]]})
    assert f.describe({"block": 47}) == (f"block 47 was last {FREED}", FREED)
    assert f.describe({"block": 47}, "queue")[0].startswith("block 47 was last popped from the free queue's head")
    assert f.describe({"request": "r1", "slot": 2})[0].startswith("request r1 was last freed by")
    assert f.describe({"block": 3}) is None
    assert site(FREED) == "freed by vllm/v1/core/block_pool.py:816 in free_blocks"


def test_a_raised_common_hit_outranks_the_first_groups_content_finding_of_its_step():
    """PEER-20 (a group cannot serve the common hit) names the cause of a same-step PEER-7 about the same request:
    it takes the root's place and the PEER-7 is its first consequence; at another step, or about another request,
    it does not."""
    rec = PeerRecovery()
    content = Record("PEER-7", 77, "step 14: s7 hits block 0 through block 159, which holds no computed content",
                     {"request": "s7", "slot": 0, "block": 159, "hit": 128}, 14)
    assert rec.add(content) == 1
    raised = Record("PEER-20", 77, "step 14: s7 hits 128 tokens but its group 1 slot 0 names block 148",
                    {"request": "s7", "group": 1, "slot": 0, "block": 148, "hit": 128}, 14)
    assert rec.add(raised) == 1
    assert [(r.rule, r.id) for r in rec.roots] == [("PEER-20", 1)] and content.id == 0
    assert rec.rule_roots == {"PEER-20": 1} and rec.suppressed == 1 and rec.per_root == {1: 1}
    assert rec.first[0]["rule"] == "PEER-7" and rec.first[0]["of"] == 1
    later = Record("PEER-7", 80, "step 15: s8 hits block 0 through block 160, which holds no computed content",
                   {"request": "s8", "block": 160}, 15)
    assert rec.add(later) is None  # the same check again: the same cause
    other = PeerRecovery()
    assert other.add(Record("PEER-7", 1, "step 3: s1 hits block 0 through block 4, which holds no computed content",
                            {"request": "s1", "block": 4}, 3)) == 1
    assert other.add(Record("PEER-20", 2, "step 4: s1 hits 16 tokens but its group 1 slot 0 names block 4",
                            {"request": "s1", "group": 1, "block": 4}, 4)) is None  # a later step: a consequence
    assert [r.rule for r in other.roots] == ["PEER-7"]


def test_one_cause_one_root_a_different_mechanism_a_new_root():
    rec = PeerRecovery()
    leak = Record("PEER-14", 10, "step 3: block 5 has ref_cnt 2; the live requests' tables name it 1 times",
                  {"block": 5}, 3)
    assert rec.add(leak, "freed by x.py:1 in free_blocks") == 1
    # the same check where the same function left another block: the same cause
    again = Record("PEER-14", 11, "step 4: block 9 has ref_cnt 2; the live requests' tables name it 1 times",
                   {"block": 9}, 4)
    assert rec.add(again, "freed by x.py:1 in free_blocks") is None
    # anything about a block a root marked follows from it
    assert rec.add(Record("PEER-12", 12, "step 5: s1 evicts block 7 while block 5 stays cached",
                          {"block": 7, "ahead": 5}, 5)) is None
    # a pool-wide count naming the marked blocks too
    assert rec.add(Record("PEER-9", 12, "step 5: ref_cnt summed is 9", {"blocks": [9]}, 5)) is None
    # a different check on an untouched block: a new cause
    other = Record("PEER-7", 13, "step 6: s2 hits block 0 through block 3, which holds another prefix",
                   {"block": 3, "request": "s2"}, 6)
    assert rec.add(other) == 2
    assert [r.id for r in rec.roots] == [1, 2] and rec.suppressed == 3 and rec.per_root == {1: 3}
    assert rec.rule_roots == {"PEER-14": 1, "PEER-7": 1}
    assert [c["entity"] for c in rec.first] == ["the same check, at the same place", "block 5", "block 9"]
    assert entities(Record("EV-7", 3, "block 1234 does not recompute", {"block": 1234})) == \
        ([("hash", "1234")], [("hash", "1234"), ("stream",)])
    assert mechanism(again)[2] == "block # has ref_cnt #; the live requests' tables name it # times"


def test_the_leak_collapses_to_one_root_in_the_judge():
    """A reference leaked on block 1 when a finishes shows at every later step (PEER-14 per block, PEER-9's
    free-block accounting and pool-wide sum): one root, every repetition a consequence."""
    steps = legal_ledgers()
    steps[1]["ledger"]["blocks"][0] = [1, 2, 0, 1, 1, 1, -1]
    steps[1]["free_blocks"] = 5
    for k in range(2, 6):
        steps.append({"step": k, "new": [], "cached": [["b", False, None, 8 + k]], "scheduled": {"b": 1},
                      "tokens": {"b": 700 + k}, "finished": [], "preempted": [], "free_blocks": 5, "batches": [],
                      "ledger": ledger([(1, 2, 0, 1, 1, 1, -1)], ()),
                      "probe": {"free_walk": 5, "free_count": 5, "free_referenced": 0, "ref_sum": 4}})
    from kvsim.sim.peers.vllm.counters import check
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    act = Actionable(BS, structure=vst.check, exact_tables=True)
    j = EngineJudge(BS, BLOCKS, ev, act=act, probe_check=check)
    j.submit("a", A)
    j.submit("b", B)
    for line, m in enumerate(steps, start=4):
        j.step(m, 0, at=line)
    assert roots(act) == [("PEER-14", "ref_cnt")]
    assert j.counts["PEER-14"] == 1 and j.counts["PEER-9"] == 9 and act.recovery.suppressed == 9  # repeats unfiled
    assert act.recovery.roots[0].frame == FREED


# -- record and re-judge ----------------------------------------------------------------------------------------

def test_a_peer_log_rejudges_to_the_same_roots():
    steps = legal_ledgers()
    steps[1]["ledger"]["blocks"][0] = [1, 2, 0, 1, 1, 1, -1]
    buf = io.BytesIO()
    w = Writer(buf)
    cfg = {"block_size": BS, "num_blocks": BLOCKS, "max_num_seqs": 4, "max_num_batched_tokens": 64,
           "max_model_len": 64, "probe_every": 1, "clear_at_end": True}
    w.header("vllm", cfg, {"reserved": 1, "same_step_hits": True, "bounded": True}, {"command": "kvsim peer ..."})
    w.request({"id": "a", "tokens": A.tolist(), "max_new_tokens": 2})
    w.request({"id": "b", "tokens": B.tolist(), "max_new_tokens": 1})
    w.message({"hello": {"engine": "vllm 0", "import_s": 9.9}})
    lines = [w.message({**m, "engine_s": 0.5}) for m in steps] + [w.message({"done": {"steps": 2}})]
    assert lines == [5, 6, 7]
    data = buf.getvalue()
    assert is_peer_log(data.splitlines()[0]) and b"engine_s" not in data and b"import_s" not in data
    head, reqs, messages = read("t.jsonl", io.BytesIO(data))
    out = engines.replay_log(head, reqs, messages)
    live = EngineJudge(BS, BLOCKS, EventChecker(block_size=BS, capacity=BLOCKS - 1),
                       act=Actionable(BS, structure=vst.check, exact_tables=True))
    live.submit("a", A)
    live.submit("b", B)
    for line, m in zip((5, 6), steps, strict=True):
        live.step(m, 0, at=line)
    want = [(r.rule, r.line, r.message) for r in live.act.recovery.roots]
    assert want and [(r.rule, r.line, r.message) for r in out.judge.act.recovery.roots] == want


# -- the shrinker and its workload ------------------------------------------------------------------------------

def reqs(n):
    return [Request(f"r{i}", np.arange(40 + i, dtype=np.int64), 8, (), i) for i in range(n)]


def test_shrinker_finds_the_two_requests_a_failure_needs():
    """A failure that needs r3 and r7 with prompts of at least 10 tokens: the shrinker keeps exactly those two,
    cuts their prompts to 10 tokens and their outputs to 1, the pool to the least they fit in; deterministic."""
    def fails(case):
        ids = {r.id: r for r in case.requests}
        return "r3" in ids and "r7" in ids and len(ids["r3"].tokens) >= 10 and case.blocks >= 3

    def need(case):
        return max(-(-(len(r.tokens) + r.max_new_tokens) // 16) for r in case.requests)

    runs = []
    for _ in range(2):
        s = Shrinker(fails, 400, need)
        best = s.run(Case(tuple(reqs(12)), 64))
        runs.append((size(best), [r.id for r in best.requests], s.trials))
    assert runs[0] == runs[1]
    (n, prompt, out, blocks), ids, trials = runs[0]
    assert ids == ["r3", "r7"] and n == 2 and out == 2 and blocks == 3 and trials < 400
    assert prompt <= 10 + 1  # r3 at 10 tokens, r7 at one


def test_shrinker_stays_within_its_budget():
    s = Shrinker(lambda c: True, 5, lambda c: 1)
    s.run(Case(tuple(reqs(50)), 64))
    assert s.trials == 5


def test_the_minimal_workload_reads_back_exactly(tmp_path):
    from kvsim.sim.files import open_source
    rs = reqs(3)
    p = tmp_path / "w.min.jsonl"
    p.write_bytes(requests_jsonl(rs, {"source": "synthetic:prefix-stress", "target_rule": "PEER-14"}))
    assert is_requests_header(p.read_bytes().splitlines()[0])
    with open_source(str(p)) as src:
        back = read_requests(src)
    assert [(r.id, r.tokens.tolist(), r.max_new_tokens, r.arrival_step) for r in back] == \
        [(r.id, r.tokens.tolist(), r.max_new_tokens, r.arrival_step) for r in rs]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"format": "kvsim-requests/1"}) + "\n" + json.dumps({"id": "x", "tokens": [],
                                                                                   "max_new_tokens": 1}) + "\n")
    from kvsim.sim.peers.workload import WorkloadError
    with open_source(str(bad)) as src, pytest.raises(WorkloadError, match=r"bad.jsonl:2: tokens"):
        read_requests(src)


def test_min_name():
    from kvsim.sim.cli.peer_shrink import min_name
    assert min_name("synthetic:prefix-stress") == "prefix-stress.min.jsonl"
    assert min_name("synthetic:prefix-stress:7") == "prefix-stress-7.min.jsonl"
    assert min_name("/a/b/w.jsonl") == "w.min.jsonl" and min_name("w.min.jsonl") == "w.min.jsonl"
    assert min_name("-") == "stdin.min.jsonl"


def test_structure_checks_copy_safe():
    """The checkers only read their message."""
    steps = legal_ledgers()
    before = copy.deepcopy(steps[1])
    vst.check(steps[1], {1: 1}, BS)
    assert steps[1] == before


def test_a_broken_link_names_the_neighbour_whose_pointer_went_stale():
    """Block 3's previous link names block 7, which no longer points back (a remove that did not repair its
    neighbours): the finding names block 7's last queue operation, where the link went stale."""
    msg = {"ledger": ledger([(3, 0, 1, 0, 0, 1, 2, 7, 0, -1, 1)], frames=(
        (1, FREED), (2, "appended to the free queue by kv_cache_utils.py:459 in append_n, called from a.py:1 in f"),
        (3, "taken out of the free queue by sitecustomize.py:3 in remove, called from block_pool.py:807 in touch")))}
    msg["ledger"]["blocks"].append([7, 1, 0, 1, 0, 1, 3])
    ((rule, message, ctx, aspect),) = [f for f in vst.check(msg, {7: 1}, BS) if f[2]["check"] == "links"]
    assert message == "block 3's free-queue links are broken: its previous link names block 7, which does not " \
                      "point back at it" and ctx["neighbour"] == 7
    act = Actionable(BS)
    act.begin(msg)
    text = act.finding(rule, 4, 0, message, dict(ctx), aspect)
    assert text.endswith("(block 7 was last taken out of the free queue by sitecustomize.py:3 in remove, called "
                         "from block_pool.py:807 in touch)")
