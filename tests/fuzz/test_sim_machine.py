"""The `simulate` fuzz machine: `kvsim simulate`'s engine against the README's reference (sim.fuzz.sim_reference).

The reference imports nothing of kvsim; on hand-made workloads its facts are the README's (derived in the
comments) and the engine's equal them; a seeded scheduler bug shows as the first differing fact; a broken
store rule fails the run; a short campaign on the clean tree finds nothing and a mutated engine is caught."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import kvsim.sim.simulate.engine as engine
from kvsim.sim.fuzz import sim_reference
from kvsim.sim.fuzz.campaign import MACHINES, machines, run_campaign
from kvsim.sim.fuzz.simulation import Setup, compare, engine_facts, reference_facts, write_workload
from kvsim.sim.workloads import open_workload

# r0 and r1: 200-token prompts of blocks 1 and 2 (4 pages each: 3 full and a partial); r2 reuses 2 pages of r0
# (a helper splits r0's checkpoint at 128 tokens); r3 (260 tokens, 5 pages) needs one retained prompt to give
# way: r1's, the least recently used (r0's was used by r2); r4 then reuses 3 pages of r0, r5 none of r1.
LRU = Setup(pages=12, concurrency=2, max_context=512, chunk=8192)
LRU_ROWS = [(0.0, 200, 0, [1]), (0.01, 200, 0, [2]), (0.02, 130, 0, [1]), (0.03, 260, 0, [3]), (0.04, 200, 0, [1]),
            (0.05, 200, 0, [2])]  # arrivals in whole milliseconds, as a Mooncake file has them


def test_the_reference_shares_nothing_with_kvsim():
    tree = ast.parse(Path(sim_reference.__file__).read_text(encoding="utf-8"))
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules <= {"__future__", "collections"}, modules


def test_reference_facts_on_a_hand_made_workload():
    facts, stats = reference_facts(LRU_ROWS, LRU)
    admits = {f[1]: f for f in facts if f[0] == "admit"}
    assert [admits[r][3] for r in range(6)] == [0, 0, 2, 0, 3, 0]  # matched pages
    assert admits[0][4] == 12 - 4 and admits[1][4] == 12 - 8  # free once the prefill holds its pages
    assert stats["checkpoints_evicted"] == 4 and stats["requests"] == 6 and stats["reused_tokens"] == 5 * 64


def test_engine_and_reference_agree_on_the_hand_made_workload():
    got, stats, violations = engine_facts(LRU_ROWS, LRU)
    assert violations == [] and got == reference_facts(LRU_ROWS, LRU)[0]
    assert compare(LRU_ROWS, LRU) is None


def test_whole_page_prompt_recomputes_its_last_page_and_the_decode_copies_a_tail():
    """A 128-token prompt repeated: (128 - 1) // 64 = 1 page reused, not 2. The repeat's own checkpoint will
    hold all of the first one, so a helper takes that over (Move) and keeps its reused page as a split: the
    first prompt's page 2 goes, the repeat computes its own. Each decode Forks (128 + 10 tokens over 3 pages, 2
    full shared: 1 private page). A 100-token prompt with 20 output tokens: 1 full page and a partial one
    retained, its decode copies the partial page (1 private page). Free after each retention: 8 - 2 - 1,
    8 - 2 - 1, 8 - 4 - 1."""
    setup = Setup(pages=8, concurrency=2, max_context=256, chunk=128)
    rows = [(0.0, 128, 10, [5]), (0.5, 128, 10, [5]), (1.0, 100, 20, [6])]
    facts, _ = reference_facts(rows, setup)
    assert [f[3] for f in facts if f[0] == "admit"] == [0, 1, 0]
    assert [(f[3], f[4]) for f in facts if f[0] == "retain"] == [(5, "fork"), (5, "fork"), (3, "fork")]
    assert compare(rows, setup) is None


def test_the_wait_policy_keeps_the_cache_for_what_lanes_will_return():
    """r0 decodes 60 tokens (2 private pages), r0's and r1's prompts are retained, 2 pages free. r2 needs 4:
    `evict` releases r1's prompt (r0's is in use) and starts r2 at once; `wait` counts r0's 2 pages as coming
    back, keeps r1's prompt and starts r2 when r0 is done, so r3 (r1's prompt again) reuses its page."""
    rows = [(0.0, 100, 60, [1]), (0.0, 100, 0, [2]), (0.0, 150, 0, [3]), (2.0, 100, 0, [2])]
    admits = {}
    for admission in ("evict", "wait"):
        setup = Setup(pages=8, concurrency=3, max_context=256, chunk=128, admission=admission)
        facts, _ = reference_facts(rows, setup)
        admits[admission] = [(f[1], f[2], f[3]) for f in facts if f[0] == "admit"]
        assert compare(rows, setup) is None
    assert admits["evict"][2:] == [(2, 2, 0), (3, 61, 0)]
    assert admits["wait"][2:] == [(2, 61, 0), (3, 63, 1)]


def test_wait_counts_the_prompt_pages_a_lane_holds_alone():
    """Found by the simulate machine: r3 decodes from its 128-token prompt's checkpoint (2 full pages) when r5,
    the same prompt, reuses 1 page and takes that checkpoint over (a helper cuts it at 64 tokens): page 2 is
    then r3's alone and comes back when r3 finishes. Under `wait` the engine counted only r3's own pages, so
    r6's first try released r2's cached prompt although what the lanes return covered it."""
    rows = [(0.004, 221, 20, [1]), (0.014, 226, 52, [1]), (0.044, 5, 41, [1]), (0.074, 128, 60, [1]),
            (0.174, 11, 31, [2]), (0.178, 128, 68, [1]), (0.182, 190, 35, [3]), (0.212, 160, 73, [1])]
    setup = Setup(pages=12, concurrency=4, max_context=256, chunk=256, admission="wait")
    facts, stats = reference_facts(rows, setup)
    assert ("admit", 6, 133, 0, 1) in facts and stats["checkpoints_left"] == 6
    assert compare(rows, setup) is None


@pytest.mark.parametrize("patch, first", [
    ("touch", "fact 6"),  # reuse not counted as a use: r1's prompt stays, r0's gives way
    ("evict_mru", "fact 6"),
])
def test_a_seeded_scheduler_bug_shows_as_the_first_differing_fact(monkeypatch, patch, first):
    if patch == "touch":
        def touch(self, c):
            self.index.touch(c)
            self.ckpts.move_to_end(c.cid)
            self.dev[c.cid] = None
        monkeypatch.setattr(engine.Simulation, "_touch", touch)
    else:
        evict = engine.Simulation._evict_for

        def evict_for(self, need, protect, pending=0):
            self.dev = type(self.dev)(reversed(self.dev.items()))
            return evict(self, need, protect, pending)
        monkeypatch.setattr(engine.Simulation, "_evict_for", evict_for)
    why = compare(LRU_ROWS, LRU)
    assert why is not None and why.startswith(first), why


def test_a_store_rule_broken_by_the_engine_fails_the_run(monkeypatch):
    """The engine's events are judged by the store model: a prefill that writes past its mapping breaks one."""
    launch_row = engine.kt.LaunchRow

    def wide(seq, pool, write):
        return launch_row(seq, pool, (write[0], write[1] + 64))
    monkeypatch.setattr(engine.kt, "LaunchRow", wide)
    why = compare([(0.0, 100, 0, [1])], Setup(pages=8, concurrency=2, max_context=512, chunk=128))
    assert why is not None and why.startswith("store rule "), why


def test_a_failing_workload_is_written_as_mooncake_and_loads(tmp_path):
    path = write_workload(LRU_ROWS, LRU, tmp_path)
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    assert [r["input_length"] for r in rows] == [200, 200, 130, 260, 200, 200]
    reqs = list(open_workload(path))
    assert [(r.prompt, r.output, list(r.hash_ids)) for r in reqs] == [(n, o, b) for _, n, o, b in LRU_ROWS]
    assert [r.arrival for r in reqs] == [a for a, _, _, _ in LRU_ROWS]


def test_the_machine_is_registered_and_a_clean_round_finds_nothing(tmp_path):
    assert "simulate" in MACHINES and machines()["simulate"].name == "simulate"
    r = run_campaign("simulate", 1.0, seed=3, found_dir=str(tmp_path), rounds=1)
    assert not r.failed, r.failures
    assert r.examples > 0 and r.rules.get("simulate:arrive", 0) > 0
    assert any(c["exercised"] for c in r.coverage.values())  # the engine's events went through the catalogue


def test_a_mutated_engine_is_caught_by_a_short_campaign(tmp_path, monkeypatch):
    """An engine that makes room for one page less than it needs (the decode tail's copy forgotten)."""
    evict = engine.Simulation._evict_for

    def short(self, need, protect, pending=0):
        return evict(self, need - 1, protect, pending)
    monkeypatch.setattr(engine.Simulation, "_evict_for", short)
    r = run_campaign("simulate", 60.0, seed=0, found_dir=str(tmp_path), rounds=3)
    assert r.failed, "the campaign did not catch an engine that makes room for one page too few"
    f = r.failures[0]
    assert f["kind"] == "reference" and f["rule"] == "ORACLE-reference" and f["replay"].startswith("fact ")
    assert f["trace"] and Path(f["trace"]).exists() and f["command"].startswith(f"kvsim simulate {f['trace']} --pages")


def test_engine_and_reference_agree_exactly_on_a_real_workload_under_pressure():
    """The first 40 requests of the bundled Mooncake conversation excerpt at S = 32,768 in 640 pages: 2 prompts
    rejected as too long, dozens of retained prompts giving way, hundreds of pages reused; every fact equal."""
    from kvsim.sim.workloads.open import excerpt_path
    rows = [(r.arrival, r.prompt, r.output, list(r.hash_ids))
            for r in open_workload(str(excerpt_path("conversation")), 40)]
    setup = Setup(pages=640, concurrency=256, max_context=32768, chunk=8192)
    facts, stats = reference_facts(rows, setup)
    assert stats["checkpoints_evicted"] > 20 and stats["reused_tokens"] > 0 and stats["rejected"] == 2
    assert compare(rows, setup, audit_every=None) is None


def test_an_engine_crash_fails_the_run_with_its_workload(tmp_path, monkeypatch):
    from kvsim.sim.fuzz.simulation import SimulateMachine, SimulationFailure
    from kvsim.sim.fuzz.stats import RUN

    def crash(self, pf):
        raise RuntimeError("the decode continuation could not be activated")
    monkeypatch.setattr(engine.Simulation, "_prefill_done", crash)
    RUN.reset(tmp_path)
    m = SimulateMachine()
    m.setup, m.rows = LRU, list(LRU_ROWS)
    with pytest.raises(SimulationFailure, match="INTERNAL"):
        m.teardown()
    f = RUN.last_failure
    assert f is not None and f["kind"] == "crash" and f["replay"].startswith("crash RuntimeError")
    assert Path(f["trace"]).parent == tmp_path and Path(f["trace"]).exists()
