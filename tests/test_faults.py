"""Engine faults in the generator: each fault's trace is flagged with its rule at the bad event, and only
there; the legal workload stays clean under every configuration a fault needs; one seed fixes the trace."""

from __future__ import annotations

import json

import pytest

from kvsim.sim.cli import main
from kvsim.sim.replay import replay_trace
from kvsim.sim.trace.faults import FAULTS
from kvsim.sim.trace.generate import generate_with, options_for
from kvsim.spec.catalogue import get


def test_at_least_twelve_fault_classes_with_catalogued_rules():
    assert len(FAULTS) >= 12
    for f in FAULTS.values():
        assert get(f.rule).id == f.rule and f.bug


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_flagged_with_its_rule_at_the_bad_event(tmp_path, name):
    path = tmp_path / "t.jsonl"
    g = generate_with(path, options_for(1500, seed=7, fault=name))
    assert g.rule == FAULTS[name].rule and g.event is not None
    r = replay_trace(path)
    got = {(v["rule"], v["event"], v["line"]) for v in r.violations}
    assert (g.rule, g.event, g.line) in got
    assert {e for _, e, _ in got} == {g.event}, f"violations away from the bad event: {sorted(got)}"


@pytest.mark.parametrize("needs", [dict(backend="mtp"), dict(growth=True), dict(host_pages=16),
                                   dict(concurrency=4, max_context=2048)])
def test_legal_workload_clean_under_every_fault_configuration(tmp_path, needs):
    path = tmp_path / "t.jsonl"
    g = generate_with(path, options_for(4000, seed=3, **needs))
    r = replay_trace(path)
    assert g.fault is None and r.events == g.events >= 4000
    assert r.violations == [] and r.refusals == []


def test_one_seed_fixes_the_trace_and_the_fault_position(tmp_path):
    a, b, c = (tmp_path / f"{n}.jsonl" for n in "abc")
    ga = generate_with(a, options_for(1200, seed=11, fault="double-release"))
    gb = generate_with(b, options_for(1200, seed=11, fault="double-release"))
    generate_with(c, options_for(1200, seed=12, fault="double-release"))
    assert a.read_bytes() == b.read_bytes() and ga == gb
    assert a.read_bytes() != c.read_bytes()
    header = json.loads(a.read_text().splitlines()[0])
    assert header["meta"]["options"]["fault"] == "double-release"
    assert header["meta"]["options"]["fault_after"] == options_for(1200, seed=11, fault="double-release").fault_after


def test_options_refuse_unknown_fault_and_small_configurations():
    with pytest.raises(ValueError, match="unknown fault"):
        options_for(100, fault="no-such-bug")
    with pytest.raises(ValueError, match="max_context"):
        options_for(100, fault="double-release", max_context=1024)


def test_cli_generate_then_replay(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))
    out = tmp_path / "g.jsonl"
    assert main(["generate", str(out), "--events", "800", "--seed", "2", "--fault", "stale-table-after-truncate"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rule"] == "PAGE-2" and summary["line"] == summary["event"] + 2
    assert main(["replay", str(out), "--quiet", "--json", str(tmp_path / "r.json")]) == 1
    assert capsys.readouterr().out.startswith("FAIL: 1 violation")  # --quiet keeps the verdict line
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [(v["rule"], v["line"]) for v in rep["violations"]] == [("PAGE-2", summary["line"])]
    assert main(["generate", "--list-faults"]) == 0
    assert {r["name"] for r in json.loads(capsys.readouterr().out)} == set(FAULTS)
    assert main(["generate", str(out), "--fault", "double-release", "--max-context", "1024"]) == 2
