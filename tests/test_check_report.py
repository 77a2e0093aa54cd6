"""`kvsim check`'s headline tells the truth: PASS when every scenario behaved as declared, with the declared
violations listed as expected, in the console, summary.md, JUnit and HTML; FAIL naming the scenarios
that did not. `kvsim replay` of the same violation scenario still fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvsim.sim.cli import main

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
LEGAL = "fork_f1000.jsonl"
BAD = "AS-1_row_leased_twice.jsonl"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "scen"
    (root / "violations").mkdir(parents=True)
    shutil.copy(SCENARIOS / LEGAL, root / LEGAL)
    shutil.copy(SCENARIOS / "violations" / BAD, root / "violations" / BAD)
    return root


def _reports(out: Path) -> dict:
    return {"json": json.loads((out / "kvreport.json").read_text()), "md": (out / "summary.md").read_text(),
            "junit": (out / "junit.xml").read_text(), "html": (out / "report.html").read_text()}


def test_check_passes_when_every_scenario_behaves_as_declared(folder, tmp_path, capsys):
    assert main(["check", "--scenarios", str(folder), "--out", str(tmp_path / "out")]) == 0
    console = " ".join(capsys.readouterr().out.split())
    assert "PASS — every scenario behaved as declared" in console
    r = _reports(tmp_path / "out")
    assert r["json"]["verdict"] == "pass" and [v["expected"] for v in r["json"]["violations"]] == [True]
    assert r["md"].startswith("## kvsim check: ✅ PASS") and "FAIL" not in r["md"]
    assert "### Expected violations (declared by the violation scenarios)" in r["md"]
    assert "Unexpected" not in r["md"]
    assert 'name="kvsim check"' in r["junit"] and 'failures="0"' in r["junit"] and "<failure" not in r["junit"]
    assert "expected (declared by the scenario)" in r["junit"]
    assert "<h1>kvsim check report: PASS</h1>" in r["html"] and "PASS — every scenario behaved as declared" in r["html"]
    assert "Expected violations (declared by the violation scenarios) (1)" in r["html"]


def test_check_fails_naming_the_scenario_that_did_not_behave(folder, tmp_path, capsys):
    path = folder / "violations" / BAD
    lines = path.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"line":6', '"line":5').replace('"event":4', '"event":3')  # declared elsewhere
    path.write_text("".join(lines))
    assert main(["check", "--scenarios", str(folder), "--out", str(tmp_path / "out")]) == 1
    console = " ".join(capsys.readouterr().out.split())
    assert "FAIL — 1 of 2 scenarios did not behave as declared: scen/violations/" + BAD in console
    r = _reports(tmp_path / "out")
    assert r["json"]["verdict"] == "fail" and [v["expected"] for v in r["json"]["violations"]] == [False]
    assert r["md"].startswith("## kvsim check: ❌ FAIL")
    assert "### Unexpected violations" in r["md"] and "### Declared but not reported" in r["md"]
    assert 'type="AS-1"' in r["junit"] and 'failures="1"' in r["junit"]
    assert "<h1>kvsim check report: FAIL</h1>" in r["html"] and "Declared but not reported" in r["html"]


def test_a_declared_violation_that_never_happens_fails_its_case(folder, tmp_path):
    path = folder / "violations" / BAD
    lines = path.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"expect":[', '"expect":[{"event":1,"line":3,"rule":"WR-1"},')
    path.write_text("".join(lines))
    assert main(["check", "--scenarios", str(folder), "--out", str(tmp_path / "out")]) == 1
    junit = _reports(tmp_path / "out")["junit"]
    assert 'type="declared-not-reported"' in junit and "WR-1 declared at event 1 (line 3)" in junit


def test_replay_of_a_violation_scenario_still_fails(folder, tmp_path):
    md = tmp_path / "r.md"
    assert main(["replay", str(folder / "violations" / BAD), "--markdown", str(md), "--quiet"]) == 1
    assert md.read_text().startswith("## kvsim replay: ❌ FAIL")
