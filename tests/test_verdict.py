"""One verdict per run: the exit code, the console's verdict line, the JSON, JUnit, Markdown and HTML headline
agree for every command; not on a terminal, findings print one per line, unwrapped, from however deep a
folder; replay keeps its last-run report out of the folder it runs in."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvsim.sim.report.junit import render_junit
from kvsim.sim.report.markdown import md_cell, render_markdown
from kvsim.sim.report.verdict import FAULTS_CLAIM, Verdict, fuzz_verdict, stamp, sweep_verdict, verdict_of

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
FAULTY = ROOT / "sim" / "peers" / "samples" / "faulty"
BOX = re.compile("[│─┃━┏┓┗┛╭╮╰╯┡┩┌┐└┘]")


def _report(violations: list[dict], **stats) -> dict:
    return {"format": "kvreport/1", "inputs": [{"path": "t.jsonl", "sha256": "0" * 64, "events": 10}],
            "verdict": "pass", "violations": violations, "refusals": [], "rules": {}, "stats": stats}


V = {"rule": "WR-2", "trace": "t.jsonl", "event": 3, "line": 5, "op": "launch", "message": "shared page"}


def test_the_verdict_is_derived_not_trusted():
    report = _report([V])  # says "pass" but carries a violation: the verdict is recomputed
    v = stamp(report)
    assert (v.status, v.exit_code, report["verdict"]) == ("fail", 1, "fail")
    assert report["headline"] == v.headline == "FAIL: 1 violation of 1 rule in 1 trace (1 trace, 10 events, 0 refusals)"
    assert list(report)[:5] == ["format", "inputs", "verdict", "headline", "counts"]
    assert render_markdown(report).startswith("## kvsim replay: ❌ FAIL")
    with pytest.raises(ValueError):
        Verdict("maybe", "?")


def test_consequences_are_listed_never_counted():
    after = dict(V, event=4, line=6, consequence_of=1)
    v = verdict_of(_report([V, after]))
    assert v.counts["root_causes"] == 1 and v.counts["consequences"] == 1 and v.counts["violations"] == 1
    assert "1 consequence of earlier findings, not counted" in v.headline
    only = verdict_of(_report([after]))
    assert only.passed and only.exit_code == 0


def test_injected_faults_pass_when_each_is_flagged_and_nothing_else():
    stats = {"faults_injected": 24, "faults_flagged": 24, "faults_missed": [], "faults_not_injected": [],
             "violations_unexpected": 0}
    v = verdict_of(_report([V] * 24, **stats))
    assert v.passed and v.headline.startswith(f"PASS: {FAULTS_CLAIM} (24 of 24 injected faults flagged")
    bad = verdict_of(_report([V] * 24, **dict(stats, violations_unexpected=1)))
    assert not bad.passed and bad.headline.startswith(f"FAIL: not {FAULTS_CLAIM}")
    assert "1 other violation" in bad.headline
    none = verdict_of(_report([], **dict(stats, faults_injected=0, faults_flagged=0)))
    assert not none.passed  # nothing injected is no evidence


def test_sweep_and_fuzz_verdicts():
    assert sweep_verdict([{"violations": 0}, {"violations": 0}]).headline == "PASS: 2 points, no violation"
    v = sweep_verdict([{"violations": 3}, {"violations": 0}])
    assert v.exit_code == 1 and v.headline == "FAIL: 3 violations in 1 of 2 points"
    fuzz = fuzz_verdict([("store", True, 5), ("host", False, 7)])
    assert fuzz.headline == "FAIL: 1 of 2 machines found a failure: store"


def test_check_junit_failures_equal_failed_scenarios():
    report = _report([dict(V, expected=False), dict(V, trace="u.jsonl", expected=True)])
    report["inputs"].append({"path": "u.jsonl", "sha256": "1" * 64, "events": 4})
    report["stats"]["check"] = {"legal_scenarios": 1, "violation_scenarios": 1, "rules_fired": ["WR-2"],
                                "mismatches": [{"trace": "t.jsonl", "expected": [], "reported": [["WR-2", 3, 5]],
                                                "why": [dict(V, difference="undeclared")]}]}
    v = stamp(report)
    junit = render_junit(report).decode()
    assert v.counts["failed_scenarios"] == 1 and 'failures="1"' in junit and junit.count("<failure") == 1
    assert "t.jsonl: behaves as declared" in junit and "u.jsonl: behaves as declared" in junit


# --- the command line as CI runs it: a subprocess, no terminal, a folder over 150 characters deep ----------


@pytest.fixture(scope="module")
def deep(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("v")
    while len(str(folder)) < 160:
        folder = folder / "a_folder_with_a_rather_long_name"
    folder.mkdir(parents=True)
    scen = folder / "scen"
    (scen / "violations").mkdir(parents=True)
    shutil.copy(SCENARIOS / "fork_f1000.jsonl", scen)
    shutil.copy(SCENARIOS / "violations" / "AS-1_row_leased_twice.jsonl", scen / "violations")
    shutil.copy(FAULTY / "EV-1_remove_twice.jsonl", folder)
    shutil.copy(SCENARIOS / "violations" / "AS-1_row_leased_twice.jsonl", folder)
    return folder


def _kvsim(cwd: Path, *args: str, env: dict | None = None) -> tuple[int, list[str], str]:
    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
                                                              "COLUMNS", "KVSIM_REPORTS", "NO_COLOR")}
    base.update({"XDG_CACHE_HOME": str(cwd / ".cache"), **(env or {})})
    entry = "import sys; from kvsim.sim.cli import main; sys.exit(main())"
    p = subprocess.run([sys.executable, "-c", entry, *args], cwd=cwd, env=base, capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout.splitlines(), p.stderr


CASES = [
    # (arguments, exit code, first line of stdout, last line of stdout)
    (["replay", "AS-1_row_leased_twice.jsonl"], 1, "AS-1_row_leased_twice.jsonl:6: AS-1 main row 0 is leased",
     "FAIL: 1 violation of 1 rule in 1 trace (1 trace, 9 events, 0 refusals)"),
    (["replay", "AS-1_row_leased_twice.jsonl", "--quiet"], 1, "FAIL: 1 violation of 1 rule in 1 trace", None),
    (["replay", "scen/fork_f1000.jsonl"], 0, "PASS: no violation (1 trace,", None),
    (["replay", "AS-1_row_leased_twice.jsonl", "--format", "github"], 1,
     "::error file=AS-1_row_leased_twice.jsonl,line=6,title=AS-1::AS-1 main row 0", "FAIL: 1 violation"),
    (["events", "EV-1_remove_twice.jsonl", "--block-size", "4"], 1, "EV-1_remove_twice.jsonl:", "FAIL: "),
    (["check", "--scenarios", "scen", "--out", "out"], 0,
     "PASS — every scenario behaved as declared (1 legal scenario without a violation, 1 violation scenario "
     "reporting exactly their 1 declared violation)", None),
    (["rules"], 0, "kvsim rules (", None),
    (["capacity"], 0, "capacity (max): M = 256 pages", None),
    (["simulate", "excerpt:synthetic", "--requests", "6", "--fault", "double-release", "--fault-every", "5"], 0,
     "simulation of excerpt:synthetic", f"PASS: {FAULTS_CLAIM} ("),
    (["simulate", "excerpt:synthetic", "--requests", "6", "--sweep", "pages=4096,8192", "--executor", "serial",
      "--quiet"], 0, "PASS: 2 points, no violation", None),
]


@pytest.mark.parametrize("args, code, first, last", CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_cli_case_table_from_a_deep_folder(deep, args, code, first, last):
    rc, lines, err = _kvsim(deep, *args)
    assert rc == code, err
    assert lines and lines[0].startswith(first), lines[:3]
    if last is not None:
        assert lines[-1].startswith(last), lines[-3:]
    assert not any(BOX.search(line) for line in lines), "no box characters when not on a terminal"
    assert "Traceback" not in err


def test_an_event_finding_is_one_unwrapped_line_from_a_deep_folder(deep):
    """tests/peers/test_events.py::test_cli_reports_the_finding, run where rich used to wrap the line."""
    expect = json.loads((FAULTY / "expect.json").read_text())["EV-1_remove_twice.jsonl"]
    rule, line = expect["expect"][0]
    path = str(deep / "EV-1_remove_twice.jsonl")
    rc, lines, _ = _kvsim(deep, "events", path, "--block-size", str(expect["options"]["block_size"]))
    assert rc == 1 and len(str(deep)) >= 150
    assert any(out.startswith(f"{path}:{line}: {rule} ") for out in lines), lines


def test_check_reports_say_the_same_as_the_console(deep, tmp_path):
    bad = tmp_path / "scen"
    shutil.copytree(deep / "scen", bad)
    trace = bad / "violations" / "AS-1_row_leased_twice.jsonl"
    text = trace.read_text().splitlines(keepends=True)
    text[0] = text[0].replace('"line":6', '"line":5').replace('"event":4', '"event":3')
    trace.write_text("".join(text))
    rc, lines, err = _kvsim(tmp_path, "check", "--scenarios", "scen", "--out", "out")
    assert rc == 1 and len(lines) == 3 and err.startswith("0 distinct rules fired as declared; reports in out/")
    scenario = "scen/violations/AS-1_row_leased_twice.jsonl"
    assert lines[-1] == f"FAIL — 1 of 2 scenarios did not behave as declared: {scenario}"
    assert lines[0].startswith(f"{scenario}:5: AS-1 declared at event 3 but not reported")
    assert lines[1].startswith(f"{scenario}:6: AS-1 ")
    assert "[not declared by the scenario]" in lines[1]
    report = json.loads((tmp_path / "out" / "kvreport.json").read_text())
    assert report["verdict"] == "fail" and report["headline"] == lines[-1]
    assert report["counts"]["failed_scenarios"] == 1
    assert 'failures="1"' in (tmp_path / "out" / "junit.xml").read_text()
    assert md_cell(lines[-1]) in (tmp_path / "out" / "summary.md").read_text()
    assert lines[-1] in (tmp_path / "out" / "report.html").read_text()


def test_replay_keeps_its_last_run_out_of_the_folder_it_runs_in(deep, tmp_path):
    rc, _, err = _kvsim(tmp_path, "replay", str(deep / "scen" / "fork_f1000.jsonl"))
    assert rc == 0 and not (tmp_path / "reports").exists()
    kept = tmp_path / ".cache" / "kvsim" / "last-run.json"
    assert kept.exists() and f"kept in {kept}" in err
    rc, lines, _ = _kvsim(tmp_path, "rules")
    assert rc == 0 and any(line.startswith("id ") and "checked" in line for line in lines)
    rc, _, _ = _kvsim(tmp_path, "replay", str(deep / "scen" / "fork_f1000.jsonl"),
                      env={"KVSIM_REPORTS": str(tmp_path / "mine")})
    assert rc == 0 and (tmp_path / "mine" / "last-run.json").exists()


SAMPLES = ROOT / "sim" / "peers" / "samples"


@pytest.mark.parametrize("args", [
    ["replay", str(SAMPLES / "findings" / "swa_orphans.cachetrace.jsonl")],
    ["replay", str(SAMPLES / "findings" / "tail_hit.cachetrace.jsonl")],
    ["events", str(SAMPLES / "vllm_array_sha256.jsonl"), "--block-size", "4", "--hash", "sha256", "--capacity", "4"],
    ["events", str(SAMPLES / "tokenspeed_events.jsonl"), "--partial-tails"],
])
def test_coverage_never_shows_more_exercised_than_checked(args, tmp_path, monkeypatch):
    """Peer and event rules count plans (or batches) in both counters, so exercised <= checked; the HTML bar is
    never wider than its box."""
    from kvsim.sim.cli import main
    from kvsim.sim.report.html_page import render_html

    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path))
    main([*args, "--json", str(tmp_path / "r.json"), "--quiet"])
    report = json.loads((tmp_path / "r.json").read_text())
    peer = {r: c for r, c in report["rules"].items() if r.startswith(("TS-", "PEER-", "EV-"))}
    assert peer and any(c["exercised"] for c in peer.values())
    assert all(c["exercised"] <= c["checked"] for c in peer.values()), peer
    widths = [float(w) for w in re.findall(r'style="width:([0-9.]+)%"', render_html(report, {}))]
    assert widths and max(widths) <= 100.0


def test_a_consequence_says_so_in_every_format():
    from kvsim.sim.report.console import finding_line
    from kvsim.sim.report.html_page import render_html

    after = dict(V, event=4, line=6, consequence_of=1)
    report = _report([V, after])
    stamp(report)
    assert finding_line(after).endswith("[consequence of finding #1, not counted] (event 4, launch)")
    assert "consequence of finding #1" in render_markdown(report)
    assert "consequence of finding #1" in render_html(report, {})
    junit = render_junit(report).decode()
    assert junit.count("<failure") == 1 and 'failures="1"' in junit
