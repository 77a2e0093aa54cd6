"""Bugs planted into the real engines at run time (tests/peers/planted.py: a sitecustomize on the engine
process's PYTHONPATH, never an edit of the engine venv), each modelled on a block-manager / radix-tree bug,
and the rule that must catch it: PEER-11 when the engine then raises (every earlier finding kept, every report
written, exit 1), PEER-9 from the deep counters the drivers read (sim/peers/ENGINE/counters.py). A raise in
the driver's own code stays kvsim's bug (exit 3). Skips without the engine venvs (KVSIM_VLLM_PYTHON,
KVSIM_SGLANG_PYTHON)."""

import json
from pathlib import Path

import pytest

from kvsim.sim.cli import main

from .planted import plant
from .test_engines import TINY, need

BLOCKS = "90"  # tiny_workload.jsonl evicts, hits free-queue blocks and splits nodes at this pool


def run(engine: str, tmp_path: Path, monkeypatch, module: str, patch: str) -> tuple[int, dict]:
    py = need(engine)
    for k, v in plant(tmp_path / "plant", module, patch).items():
        monkeypatch.setenv(k, v)
    rep, page = tmp_path / "r.json", tmp_path / "r.html"
    rc = main(["peer", engine, str(TINY), "--engine-python", py, "--blocks", BLOCKS, "--quiet", "--no-timing",
               "--json", str(rep), "--html", str(page)])
    report = json.loads(rep.read_text()) if rep.exists() else {}
    return rc, report


def messages(report: dict, rule: str) -> list[str]:
    """The messages of every listed finding of ``rule``: root causes and the consequences listed with them."""
    return [v["message"] for v in report["violations"] + report.get("consequences", []) if v["rule"] == rule]


def crash_of(report: dict) -> dict:
    """The engine's crash (PEER-11): a root cause, or listed as the consequence of the root that broke what it
    tripped over."""
    crash = [v for v in report["violations"] + report.get("consequences", []) if v["rule"] == "PEER-11"]
    assert len(crash) == 1, report["violations"][:5]
    return crash[0]


# -- vLLM -------------------------------------------------------------------------------------------------------

FREE_SHARED_BLOCKS = """
def patch(m):
    def free_blocks(self, ordered_blocks):  # bug: every freed block returns to the queue, shared ones too
        blocks = [b for b in ordered_blocks if not b.is_null]
        for b in blocks:
            b.ref_cnt -= 1
        self.free_block_queue.append_n(blocks)
    m.BlockPool.free_blocks = free_blocks
"""


def test_vllm_crash_is_a_finding_with_the_engine_frame_and_earlier_findings_kept(tmp_path, monkeypatch):
    """Blocks another request still holds go back to the free queue: PEER-14 sees one there with ref_cnt > 0 at
    the end of that step, naming the free_blocks that put it there; a step later vLLM's own assert in
    get_new_blocks trips when the queue hands it out -- PEER-11 names that frame and the request, as a consequence
    of the root (the block it tripped over); every report is written."""
    rc, report = run("vllm", tmp_path, monkeypatch, "vllm.v1.core.block_pool", FREE_SHARED_BLOCKS)
    assert rc == 1 and report["verdict"] == "fail"
    roots = report["violations"]
    assert 1 <= len(roots) <= 3
    first = roots[0]
    assert first["rule"] == "PEER-14" and first["context"]["check"] == "queued_referenced"
    assert first["engine_frame"].startswith("freed by sitecustomize.py:") and " in free_blocks, called from " \
        "vllm/v1/core/single_type_kv_cache_manager.py:" in first["engine_frame"]
    assert f"block {first['context']['block']} was last freed by sitecustomize.py:" in first["message"]
    c = crash_of(report)
    assert c["context"]["exception"] == "AssertionError"
    assert c["context"]["frame"].startswith("vllm/v1/core/block_pool.py:") and \
        c["context"]["frame"].endswith(" in get_new_blocks")
    assert c["context"]["request"] and "while processing" in c["message"]
    assert first["event"] < c["event"]  # the judge had found it at the corruption, before the engine fell over
    assert c.get("of") == first["id"]   # ... and the crash is its consequence
    assert report["rules"]["PEER-9"]["consequences"] > 0 and report["rules"]["PEER-11"]["violated"] == 0
    assert report["stats"]["engine_crash"]["frame"] == c["context"]["frame"]
    page = (tmp_path / "r.html").read_text()
    assert "PEER-14" in page and "PEER-11" in page and "sitecustomize.py" in page


def test_vllm_crash_inside_one_scheduler_call_is_still_named(tmp_path, monkeypatch):
    """A hit on a free-queue block that never takes it out of the queue: the same schedule() call hands the
    block out again and vLLM's assert trips before any step is reported -- the structures read at the crash show
    the referenced block still queued (PEER-14, naming touch), the crash follows from it."""
    rc, report = run("vllm", tmp_path, monkeypatch, "vllm.v1.core.block_pool", """
def patch(m):
    def touch(self, blocks):  # bug: a hit on a free-queue block never takes it out of the queue
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1
    m.BlockPool.touch = touch
""")
    assert rc == 1
    c = crash_of(report)
    assert c["context"]["frame"].endswith(" in get_new_blocks") and c["context"]["request"]
    first = report["violations"][0]
    assert first["rule"] == "PEER-14" and first["event"] == c["event"] and len(report["violations"]) <= 3
    assert " in touch, called from " in first["engine_frame"]


def test_vllm_double_counted_hit_fires_the_ref_cnt_sum(tmp_path, monkeypatch):
    rc, report = run("vllm", tmp_path, monkeypatch, "vllm.v1.core.block_pool", """
def patch(m):
    touch = m.BlockPool.touch
    def touch_twice(self, blocks):  # bug: a hit block's reference counted twice
        touch(self, blocks)
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1
    m.BlockPool.touch = touch_twice
""")
    assert rc == 1
    first = report["violations"][0]
    assert first["rule"] == "PEER-14" and first["context"]["check"] == "ref_cnt" and len(report["violations"]) <= 3
    assert " in touch_twice, called from " in first["engine_frame"]
    assert report["rules"]["PEER-9"]["consequences"] > 0  # the pool-wide sum is off because of it


def test_vllm_free_counter_drift_fires_the_walk(tmp_path, monkeypatch):
    rc, report = run("vllm", tmp_path, monkeypatch, "vllm.v1.core.kv_cache_utils", """
def patch(m):
    prepend = m.FreeKVCacheBlockQueue.prepend_n
    def prepend_n(self, blocks):  # bug: the counter forgets blocks prepended to the queue
        prepend(self, blocks)
        self.num_free_blocks -= len(blocks)
    m.FreeKVCacheBlockQueue.prepend_n = prepend_n
""")
    assert rc == 1
    assert any("free queue walked from its head holds" in m for m in messages(report, "PEER-9"))


def test_vllm_driver_bug_is_exit_3_with_a_pointer(tmp_path, monkeypatch, capsys):
    """The stats object the driver reads lacks a field: the raise is in the driver's own code, kvsim's bug."""
    rc, report = run("vllm", tmp_path, monkeypatch, "vllm.v1.core.sched.scheduler", """
def patch(m):
    make = m.Scheduler.make_stats
    def make_stats(self, *a, **k):
        s = make(self, *a, **k)
        if s is not None:
            s.prefix_cache_stats = object()
        return s
    m.Scheduler.make_stats = make_stats
""")
    err = capsys.readouterr().err
    assert rc == 3 and "kvsim's own driver failed" in err and "driver.py:" in err and "report it" in err


# -- SGLang -----------------------------------------------------------------------------------------------------

def test_sglang_split_that_keeps_the_old_parent_is_caught(tmp_path, monkeypatch):
    """A node split that leaves the split child under its old parent: locks taken below it never reach the new
    node, so lock_ref disagrees with the locks held (PEER-9)."""
    rc, report = run("sglang", tmp_path, monkeypatch, "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    split = m.RadixCache._split_node
    def split_node(self, key, child, split_len):  # bug: the child keeps its old parent
        parent = child.parent
        new = split(self, key, child, split_len)
        child.parent = parent
        return new
    m.RadixCache._split_node = split_node
""")
    assert rc == 1
    rules = {v["rule"] for v in report["violations"]}
    assert rules & {"PEER-9", "PEER-11", "PEER-14"} and len(report["violations"]) <= 3, report["violations"][:5]


def test_sglang_missed_unlock_fires_lock_ref(tmp_path, monkeypatch):
    rc, report = run("sglang", tmp_path, monkeypatch, "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    dec = m.RadixCache.dec_lock_ref
    def dec_lock_ref(self, node, params=None):  # bug: the unlocked node keeps one reference
        out = dec(self, node, params)
        if node is not self.root_node:
            node.lock_ref += 1
        return out
    m.RadixCache.dec_lock_ref = dec_lock_ref
""")
    assert rc == 1
    assert any("have a lock_ref other than the locks held" in m for m in messages(report, "PEER-9"))


def test_sglang_evictable_counter_drift_fires_the_walk(tmp_path, monkeypatch):
    rc, report = run("sglang", tmp_path, monkeypatch, "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    delete = m.RadixCache._delete_leaf
    def delete_leaf(self, node):  # bug: an evicted leaf's tokens stay counted evictable
        delete(self, node)
        self.evictable_size_ += len(node.key)
    m.RadixCache._delete_leaf = delete_leaf
""")
    assert rc == 1
    assert any("evictable tokens, its evictable_size_ counter says" in m for m in messages(report, "PEER-9"))


def test_sglang_unlisted_evictable_leaf_fires(tmp_path, monkeypatch):
    rc, report = run("sglang", tmp_path, monkeypatch, "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    update = m.RadixCache._update_leaf_status
    def update_leaf_status(self, node):  # bug: a node that becomes an unlocked leaf is never listed
        if node.lock_ref == 0 and node not in self.evictable_leaves:
            return
        update(self, node)
    m.RadixCache._update_leaf_status = update_leaf_status
""")
    assert rc == 1
    assert any("SGLang's evictable_leaves lists" in m for m in messages(report, "PEER-9"))


def test_sglang_crash_names_the_radix_cache_frame(tmp_path, monkeypatch):
    """A leaf evicted twice: SGLang's own assert in _delete_leaf trips -- PEER-11 with that frame, exit 1."""
    rc, report = run("sglang", tmp_path, monkeypatch, "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    delete = m.RadixCache._delete_leaf
    def delete_leaf(self, node):  # bug: the leaf is unlinked twice
        delete(self, node)
        delete(self, node)
    m.RadixCache._delete_leaf = delete_leaf
""")
    assert rc == 1
    ctx = crash_of(report)["context"]
    assert ctx["exception"] == "AssertionError"
    assert ctx["frame"].startswith("sglang/srt/mem_cache/radix_cache.py:") and ctx["frame"].endswith("_delete_leaf")
    assert ctx["request"]


@pytest.mark.parametrize("engine", ("vllm", "sglang"))
def test_clean_engine_at_an_evicting_pool_passes_and_reports_its_paths(engine, tmp_path):
    py = need(engine)
    rep = tmp_path / "r.json"
    rc = main(["peer", engine, str(TINY), "--engine-python", py, "--blocks", BLOCKS, "--quiet", "--json", str(rep)])
    report = json.loads(rep.read_text())
    assert rc == 0 and report["verdict"] == "pass", report["violations"][:5]
    cov = report["stats"]["coverage"]
    taken = {k for k, v in cov["engine_paths"].items() if v}
    assert {"hit_evictable", "whole_prompt_hit", "second_copy", "eviction", "clear_cache"} <= taken
    assert cov["exercised"] == len(taken) and cov["paths"] == len(cov["engine_paths"])
    if cov["not_exercised"]:
        assert report["headline"].startswith(f"PASS ({cov['exercised']} of {cov['paths']} engine paths exercised")
        assert "synthetic:prefix-stress" in report["headline"]
    assert report["rules"]["PEER-9"]["exercised"] > 0 and report["rules"]["PEER-11"]["violated"] == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_signal_mid_run_writes_the_steps_judged_so_far_marked_partial(engine, tmp_path, monkeypatch):
    """SIGINT/SIGTERM while the engine steps (a KeyboardInterrupt from the signal handler, here raised by the
    progress callback after the first finished request): the engine process is stopped, the report holds the
    steps judged so far and says partial, the event log is not renamed into place half written."""
    from kvsim.sim.peers import engines

    py = need(engine)
    real = engines.run_engine

    def interrupted_after_first(*a, **kw):
        def progress(done: int, total: int) -> None:
            if done:
                raise KeyboardInterrupt
        kw["progress"] = progress
        return real(*a, **kw)
    monkeypatch.setattr(engines, "run_engine", interrupted_after_first)
    rep, log = tmp_path / "r.json", tmp_path / "events.jsonl"
    rc = main(["peer", engine, str(TINY), "--engine-python", py, "--blocks", BLOCKS, "--quiet", "--no-timing",
               "--json", str(rep), "--record", str(log)])
    assert rc == 130
    report = json.loads(rep.read_text())
    assert report["partial"]["done"].endswith(" requests finished") and report["stats"]["peer"]["steps"] > 0
    assert report["verdict"] == "incomplete" and report["headline"].startswith("INCOMPLETE: interrupted by SIGINT")
    assert not log.exists()
    assert not [p for p in tmp_path.iterdir() if p.name not in ("r.json",)]
