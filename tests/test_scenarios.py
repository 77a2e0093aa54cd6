"""The bundled scenarios: built reproducibly, legal ones replay clean, violation ones report exactly their
declared (rule, event, line) triples, every observation is really compared, and `kvsim check` passes with
byte-identical reports run after run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvsim.sim.cli import main as kvsim
from kvsim.sim.cli.check import expected, got
from kvsim.sim.replay import replay_trace

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
LEGAL = sorted(SCENARIOS.glob("*.jsonl"))
BAD = sorted((SCENARIOS / "violations").glob("*.jsonl"))
REPORTS = ("kvreport.json", "junit.xml", "summary.md")


def _ids(paths):
    return [p.name for p in paths]


def _relative_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.glob("*.jsonl")) + sorted((root / "violations").glob("*.jsonl"))}


def test_builder_output_equals_committed_files(tmp_path):
    run = subprocess.run([sys.executable, str(SCENARIOS / "build.py"), str(tmp_path)], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    built, committed = _relative_files(tmp_path), _relative_files(SCENARIOS)
    assert sorted(built) == sorted(committed)
    for name, data in built.items():
        assert data == committed[name], f"{name}: rebuild with `python scenarios/build.py`"


def test_the_required_scenarios_are_there():
    assert len(LEGAL) >= 13 and len(BAD) >= 20
    names = {p.stem for p in LEGAL}
    for required in ("fork_f1000", "move_private_checkpoint", "mtp_speculative_round", "dflash_draft_full",
                     "lease_growth_bounded_completion", "host_offload_restore", "activation_refused_capacity",
                     "truncate_returns_leases", "prefix_chain_four_sequences", "auto_capacity", "k8v4_profile",
                     "xfer_phases", "engine_results"):
        assert required in names


def _header(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.loads(f.readline())


@pytest.mark.parametrize("path", LEGAL + BAD, ids=_ids(LEGAL + BAD))
def test_header_names_its_source(path):
    meta = _header(path)["meta"]
    source = meta["source"]
    assert source.strip() and "\n" not in source and "store contract" in source
    assert ("expect" in meta) == (path.parent.name == "violations")


@pytest.mark.parametrize("path", LEGAL, ids=_ids(LEGAL))
def test_legal_scenario_replays_clean(path):
    result = replay_trace(path)
    assert result.violations == []
    assert result.events > 0


@pytest.mark.parametrize("path", BAD, ids=_ids(BAD))
def test_violation_scenario_reports_exactly_its_expect_list(path):
    want = expected(path)
    assert want, "a violation scenario must declare what it triggers"
    assert path.stem.split("_")[0] in {rule for rule, _, _ in want}, "named after the rule it triggers"
    for _, event, line in want:
        assert line == event + 2  # header on line 1, no blank lines
    assert got(replay_trace(path)) == want


def test_violation_scenarios_cover_at_least_15_rules():
    rules = {rule for path in BAD for rule, _, _ in expected(path)}
    assert len(rules) >= 15, sorted(rules)


def _perturbed(event: dict) -> dict:
    """The same observation with one reported value changed."""
    out = dict(event)
    for key in ("allocated", "reserved", "available", "frontier"):
        if key in out:
            out[key] += 1
            return out
    if "table" not in out:
        out["replicas"] = ["none" if r != "none" else "host" for r in out["replicas"]]
        return out
    table = list(out["table"])
    table[0] = table[0] + 1 if table[0] >= 0 else 0
    out["table"] = table
    return out


@pytest.mark.parametrize("path", LEGAL, ids=_ids(LEGAL))
def test_every_observation_is_compared(path, tmp_path):
    """Changing any one observed value of a legal scenario makes the replay report that observe event."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    observed = [i for i, line in enumerate(lines[1:]) if json.loads(line)["op"] == "observe"]
    assert observed, "a legal scenario proves its state with observe events"
    for index in observed:
        changed = list(lines)
        changed[index + 1] = json.dumps(_perturbed(json.loads(lines[index + 1]))) + "\n"
        copy = tmp_path / f"{index}.jsonl"
        copy.write_text("".join(changed), encoding="utf-8")
        assert {v["event"] for v in replay_trace(copy).violations} == {index}, f"observe at event {index}"


def test_kvsim_check_passes_with_deterministic_reports(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "last"))
    monkeypatch.chdir(ROOT)
    first, second = tmp_path / "a", tmp_path / "b"
    assert kvsim(["check", "--out", str(first)]) == 0
    for name in REPORTS + ("report.html",):
        assert (first / name).is_file() and (first / name).stat().st_size > 0
    report = json.loads((first / "kvreport.json").read_text(encoding="utf-8"))
    check = report["stats"]["check"]
    assert check["mismatches"] == [] and check["legal_scenarios"] == len(LEGAL)
    assert check["violation_scenarios"] == len(BAD)
    assert kvsim(["check", "--out", str(second)]) == 0
    for name in REPORTS:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_kvsim_check_fails_on_a_misdeclared_scenario(tmp_path, monkeypatch):
    """The check is not vacuous: a violation scenario whose expect list is off by one event fails it."""
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "last"))
    folder = tmp_path / "scenarios"
    (folder / "violations").mkdir(parents=True)
    source = BAD[0]
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["meta"]["expect"] = [{**e, "event": e["event"] + 1, "line": e["line"] + 1}
                                for e in header["meta"]["expect"]]
    (folder / "violations" / source.name).write_text(json.dumps(header) + "\n" + "".join(lines[1:]),
                                                      encoding="utf-8")
    assert kvsim(["check", "--scenarios", str(folder), "--out", str(tmp_path / "out")]) == 1
