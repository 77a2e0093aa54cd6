"""Error recovery during replay (sim.recovery): one cause, one finding.

A rejected fact whose claim determines the state is adopted (the rest of the trace is judged as usual); one
whose claim does not desynchronizes what it names, and the later failures there are consequences counted
apart; an unrelated bug after it is still its own finding; without recovery the old cascade shows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kvsim.sim.cli import main as kvsim
from kvsim.sim.recovery import Recovery, event_keys
from kvsim.sim.replay import replay_trace
from kvsim.sim.report.build import build_report
from kvsim.sim.report.kvreport import headline
from kvsim.sim.trace import records as kt

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scenarios")]

from tracebook import Trace, config  # noqa: E402

M128 = {"tokens": 8192}
M64 = {"tokens": 4096}


def _write(t: Trace, tmp_path: Path) -> Path:
    path = tmp_path / f"{t.name}.jsonl"
    t.write(path)
    return path


def _commit_beyond_written() -> Trace:
    t = Trace("commit_beyond", "a commit beyond the written extent, then an ordinary life", config(kv_capacity=M128))
    t.activate("s0", 100, 200)
    t.prefill("s0", 100)
    t.map("s0", 128)
    u = t.unit()
    t.launch(u, [("s0", "main", 100, 104)])
    t.complete(u, [("s0", "main", 106)], expect="UNIT-2")
    t.row("s0", frontier=106)
    for a in range(106, 110):
        t.step("s0", a, a + 1)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def _beyond_entitlement() -> Trace:
    t = Trace("beyond", "a map beyond the entitlement, then the engine uses what it mapped", config(kv_capacity=M64))
    t.activate("s0", 300, 200, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}})
    t.map("s0", 300, result={"ok": True, "pages": [0, 1, 2, 3, 4]})
    t.step("s0", 0, 300)
    t.map("s0", 600, result={"ok": True, "pages": [5, 6, 7, 8, 9]}, expect="ENT-2")
    u = t.unit()
    t.launch(u, [("s0", "main", 300, 600)])
    t.complete(u, [("s0", "main", 600)])
    t.row("s0", frontier=600)
    t.pool(allocated=10, reserved=0, available=54)
    return t


def test_adopted_claim_leaves_one_finding(tmp_path):
    r = replay_trace(_write(_commit_beyond_written(), tmp_path))
    assert [(v["id"], v["rule"], v["event"], v["recovery"]) for v in r.violations] == [(1, "UNIT-2", 6, "adopted")]
    assert r.suppressed == 0 and r.consequences == []
    assert r.coverage.counts("UNIT-2")[2] == 1


def test_without_recovery_the_rejected_fact_cascades(tmp_path):
    """The old behaviour (and the fuzzer's, which judges every step alone): the commit is not applied, so the
    observation of the published frontier disagrees too."""
    r = replay_trace(_write(_commit_beyond_written(), tmp_path), recover=False)
    assert [v["rule"] for v in r.violations][0] == "UNIT-2" and len(r.violations) > 1


def test_desynchronized_sequence_reports_consequences_once_each(tmp_path):
    r = replay_trace(_write(_beyond_entitlement(), tmp_path))
    assert [(v["id"], v["rule"], v["recovery"]) for v in r.violations] == [(1, "ENT-2", "desynchronized")]
    # launch (ENT-3 on s0), complete (TRACE-2: the unit never launched), the row and the counters
    assert r.suppressed == 4
    assert [(c["rule"], c["of"], c["entity"]) for c in r.consequences] == [
        ("ENT-3", 1, "seq s0"), ("TRACE-2", 1, "unit u2"), ("TRACE-1", 1, "observe pool main")]
    assert all(r.coverage.counts(rule)[2] == 0 for rule in ("ENT-3", "TRACE-2", "TRACE-1"))
    report = build_report([r])
    assert report["stats"]["findings"] == 1 and report["stats"]["consequences"] == 4
    assert report["consequences"][0]["of"] == 1 and report["violations"][0]["id"] == 1
    line = headline(report)
    assert line.startswith("FAIL: 1 violation of 1 rule in 1 trace") and "1 finding (4 consequences suppressed)" in line
    assert report["verdict"] == "fail" and report["counts"]["root_causes"] == 1
    assert report["counts"]["consequences"] == 4


def test_unadoptable_claim_leaves_the_state_as_it_was(tmp_path):
    """The map beyond the entitlement is not applied: the row keeps its five pages and frontier 300."""
    t = _beyond_entitlement()
    t.events = t.events[:5]
    t.row("s0", table=range(5), frontier=300)
    t.pool(allocated=5, reserved=3, available=56)
    r = replay_trace(_write(t, tmp_path))
    assert [v["rule"] for v in r.violations] == ["ENT-2"] and r.suppressed == 0


def test_second_unrelated_bug_is_its_own_finding(tmp_path):
    t = _beyond_entitlement()
    t.activate("s1", 100, 28, result={"ok": True, "rows": {"main": 1}, "pages": {"main": []}})
    t.map("s1", 100, result={"ok": True, "pages": [20, 2]}, expect="PAGE-1")  # s0's block 2
    r = replay_trace(_write(t, tmp_path))
    assert [(v["id"], v["rule"]) for v in r.violations] == [(1, "ENT-2"), (2, "PAGE-1")]


def test_new_incarnation_is_synchronized(tmp_path):
    """A sequence the model could not activate is desynchronized; activated again under the same id after it
    finished (engine side), its new life is judged as usual."""
    t = Trace("again", "an activation beyond capacity, then the id reused", config(kv_capacity=M64))
    t.activate("s9", 2000, 2000)  # 63 pages: all but one
    t.activate("s0", 300, 200, result={"ok": True, "rows": {"main": 1}, "pages": {"main": []}}, expect="TRACE-1")
    t.map("s0", 64)  # consequence: s0 is not active in the model
    t.finish("s0")  # consequence (same entity: counted, not listed)
    t.finish("s9")
    t.activate("s0", 300, 200)
    t.prefill("s0", 300)
    t.launch(t.unit(), [("s0", "main", 299, 301)], expect="UNIT-3")  # a new bug of the new incarnation
    r = replay_trace(_write(t, tmp_path))
    assert [v["rule"] for v in r.violations] == ["TRACE-1", "UNIT-3"]
    assert r.suppressed == 2 and [c["entity"] for c in r.consequences] == ["seq s0"]


def test_observation_marks_only_itself():
    ev = kt.Observe(pool="main", seq="s0", frontier=3)
    lookup, marked = event_keys(ev, "observe", ["main"])
    assert ("seq", "s0") in lookup and marked == [("observe", "seq", "s0", "main")]
    lookup, marked = event_keys(kt.Truncate(seq="s0", pool="main", frontier=3), "truncate", ["main", "mtp"])
    assert lookup == [("seq", "s0")] and ("observe", "pool", "mtp") in marked
    rec = Recovery()
    rec.mark([("seq", "s0")], 1)
    rec.renew(("seq", "s0"))
    assert rec.marks == {}


def test_check_compares_declared_consequences(tmp_path, capsys):
    """`kvsim check`: a violation scenario declaring a wrong number of consequences is a mismatch."""
    root = tmp_path / "sc"
    (root / "violations").mkdir(parents=True)
    t = _beyond_entitlement()
    t.name = "ENT-2_x"
    t.consequences = 3  # the replay suppresses 4
    t.write(root / "violations" / "ENT-2_x.jsonl")
    assert kvsim(["check", "--scenarios", str(root), "--out", str(tmp_path / "out")]) == 1
    report = json.loads((tmp_path / "out" / "kvreport.json").read_text())
    m = report["stats"]["check"]["mismatches"][0]
    assert m["consequences"] == {"expected": 3, "reported": 4} and m["expected"] == m["reported"]
    t.consequences = 4
    t.write(root / "violations" / "ENT-2_x.jsonl")
    assert kvsim(["check", "--scenarios", str(root), "--out", str(tmp_path / "out")]) == 0


@pytest.mark.parametrize("events", [_commit_beyond_written, _beyond_entitlement])
def test_recovery_is_deterministic(tmp_path, events):
    p = _write(events(), tmp_path)
    a, b = build_report([replay_trace(p)]), build_report([replay_trace(p)])
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("name", ["WR-2_failed_launch_writes_shared_page", "TRACE-1_activation_refused_with_capacity"])
def test_a_fact_or_request_the_engine_says_failed_stays_in_step(name):
    """The engine's own ok:false (a failed launch, a refused activation) is what the model holds too: the
    finding is reported, nothing is adopted or desynchronized."""
    r = replay_trace(ROOT / "scenarios" / "violations" / f"{name}.jsonl")
    assert [v["recovery"] for v in r.violations] == ["in step"] and r.suppressed == 0
