"""What the drivers add to each step, judged without an engine: the deep counters (PEER-9 through
sim/peers/ENGINE/counters.py), an engine crash (PEER-11) and the run's path coverage in the report and its
headline. Each check passes on consistent figures and fires on one crafted inconsistency."""

import copy

import pytest

from kvsim.sim.peers.judges.engine_judge import EngineJudge
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.judges.path_coverage import STRESS_HINT, coverage, coverage_line
from kvsim.sim.peers.sglang import counters as sglang_counters
from kvsim.sim.peers.sglang import paths as sglang_paths
from kvsim.sim.peers.vllm import counters as vllm_counters
from kvsim.sim.peers.vllm import paths as vllm_paths
from kvsim.sim.report.verdict import verdict_of

from .test_engine_judge import BLOCKS, BS, A, B, legal

VLLM_OK = {"free_walk": 6, "free_count": 6, "free_referenced": 0, "free_referenced_ids": [], "ref_sum": 3,
           "free_list_broken": False}
SGLANG_OK = {"nodes": 3, "evictable_walk": 32, "protected_walk": 16, "evictable": 32, "protected": 16,
             "lock_mismatch": 0, "lock_mismatch_nodes": [], "locks_off_tree": 0, "leaves_walk": 1,
             "leaves_listed": 1, "leaves_differ": 0}


def run(steps, check):
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    j = EngineJudge(BS, BLOCKS, ev, probe_check=check)
    j.submit("a", A)
    j.submit("b", B)
    before = 0
    for m in steps:
        j.step(m, before)
        before += len(m.get("batches", ()))
    return j


def with_probe(probe):
    steps = legal()
    steps[1]["probe"] = probe
    return steps


def test_vllm_probe_consistent_with_the_live_tables_passes():
    """After step 1, b names blocks 1, 2, 4 (a finished): ref_cnt sums to 3, six blocks free."""
    j = run(with_probe(dict(VLLM_OK)), vllm_counters.check)
    assert j.findings == [] and j.premise["PEER-9"] > 0


@pytest.mark.parametrize(("change", "words"), [
    ({"free_walk": 5}, "free queue walked from its head holds 5 blocks, its num_free_blocks counter says 6"),
    ({"free_list_broken": True, "free_walk": 2}, "free queue is broken"),
    ({"free_referenced": 1, "free_referenced_ids": [4]}, "1 blocks in vLLM's free queue have ref_cnt > 0 (first: 4)"),
    ({"ref_sum": 4}, "ref_cnt summed over vLLM's pool is 4; the live requests' tables name blocks 3 times"),
])
def test_vllm_probe_inconsistency_fires_peer_9(change, words):
    j = run(with_probe({**VLLM_OK, **change}), vllm_counters.check)
    assert [f.rule for f in j.findings] == ["PEER-9"] and words in j.findings[0].message


def test_sglang_probe_consistent_passes():
    assert sglang_counters.check(dict(SGLANG_OK), {}) == []


@pytest.mark.parametrize(("change", "words"), [
    ({"lock_mismatch": 1, "lock_mismatch_nodes": [[7, 2, 1]]}, "node 7 lock_ref 2 (held 1)"),
    ({"locks_off_tree": 1}, "no longer in SGLang's tree"),
    ({"evictable": 48}, "walked holds 32 evictable tokens, its evictable_size_ counter says 48"),
    ({"protected_walk": 0}, "walked holds 0 protected tokens, its protected_size_ counter says 16"),
    ({"leaves_listed": 0, "leaves_differ": 1}, "evictable_leaves lists 0 nodes"),
])
def test_sglang_probe_inconsistency_fires_peer_9(change, words):
    j = run(with_probe({**SGLANG_OK, **change}), sglang_counters.check)
    assert [f.rule for f in j.findings] == ["PEER-9"] and words in j.findings[0].message


def test_crash_is_one_peer_11_finding_after_the_earlier_ones():
    steps = legal()
    bad = copy.deepcopy(steps)
    bad[1]["stats"]["hits"] = 4  # an earlier finding (PEER-9) the crash must not discard
    ev = EventChecker(block_size=BS, capacity=BLOCKS - 1)
    j = EngineJudge(BS, BLOCKS, ev)
    j.submit("a", A)
    j.submit("b", B)
    j.step(bad[0], 0)
    j.step(bad[1], 1)
    j.crashed({"type": "AssertionError", "message": "", "frame": "vllm/v1/core/block_pool.py:727 in get_new_blocks",
               "step": 2, "request": "b", "phase": "schedule", "traceback": ["driver.py:300 in main"]}, 1)
    assert [f.rule for f in j.findings] == ["PEER-9", "PEER-11"]
    f = j.findings[-1]
    assert f.step == 2 and f.context["request"] == "b" and f.context["exception"] == "AssertionError"
    assert "vllm/v1/core/block_pool.py:727 in get_new_blocks while processing b" in f.message
    assert j.counts["PEER-11"] == 1


def test_driver_and_kvsim_name_the_same_paths():
    """The drivers' PATHS tuples (read from their source: they are never imported) match the kvsim modules."""
    import ast
    from pathlib import Path
    root = Path(vllm_paths.__file__).resolve().parent.parent
    for engine, mod in (("vllm", vllm_paths), ("sglang", sglang_paths)):
        tree = ast.parse((root / engine / "driver.py").read_text())
        names = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], "id", "") == "PATHS")
        assert list(names) == list(mod.PATHS), engine


def _report(cov):
    return {"format": "kvreport/1", "inputs": [{"path": "w", "events": 5}], "violations": [], "refusals": [],
            "rules": {}, "stats": {"peer": {"stalled_requests": 0}, "coverage": cov}}


def test_pass_headline_names_the_paths_never_taken():
    rules = {"PEER-7": {"checked": 5, "exercised": 0}, "PEER-9": {"checked": 5, "exercised": 5}}
    cov = coverage(vllm_paths.PATHS, {"eviction": 3, "clear_cache": 1}, rules)
    assert cov["exercised"] == 2 and cov["paths"] == len(vllm_paths.PATHS)
    assert cov["rules_not_exercised"] == ["PEER-7"] and cov["hint"] == STRESS_HINT
    v = verdict_of(_report(cov))
    assert v.passed and v.headline.startswith(f"PASS (2 of {len(vllm_paths.PATHS)} engine paths exercised; "
                                              "not exercised: hit_evictable, whole_prompt_hit")
    assert "synthetic:prefix-stress[:SEED]" in v.headline
    assert "eviction 3" in coverage_line(cov) and "idle: PEER-7" in coverage_line(cov)


def test_pass_headline_plain_when_every_path_ran():
    cov = coverage(sglang_paths.PATHS, dict.fromkeys(sglang_paths.PATHS, 1), {})
    v = verdict_of(_report(cov))
    assert v.headline == "PASS: no violation (5 plans)" and cov["hint"] is None


def test_html_lists_the_engine_paths():
    from kvsim.sim.report.html_page import render_html
    cov = coverage(vllm_paths.PATHS, {"eviction": 2}, {})
    page = render_html(_report(cov), {})
    assert '<h2 id="engine-paths">Engine paths</h2>' in page and "1 of 7 engine paths exercised" in page
    assert page.count('class="unchecked"') >= len(vllm_paths.PATHS) - 1


def test_the_hint_names_each_missing_paths_option_and_skips_the_stress_workload_already_run():
    from kvsim.sim.peers.tokenspeed import paths as ts_paths
    cov = coverage(ts_paths.PATHS, {"prefix_hit": 3, "eviction": 2}, {}, ts_paths.REACH, stress=True)
    assert "prefix-stress" not in cov["hint"]
    assert "write_back: --host-pages N" in cov["hint"] and "clear_cache: --clear-every N" in cov["hint"]
    v = verdict_of(_report(cov))
    assert v.passed and v.headline.endswith(cov["hint"])
    bare = coverage(vllm_paths.PATHS, {"eviction": 3}, {}, stress=True)  # nothing left to suggest
    assert bare["hint"] is None and not verdict_of(_report(bare)).headline.endswith("None")
