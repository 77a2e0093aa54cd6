"""Actionable findings on the real engines (slow tier): each realistic bug of ``tests/peers/planted_bugs.py``,
planted at run time into vLLM or SGLang, gives at most 3 root findings, the first of its rule, each naming the
engine frame that last changed what it reports; a bug that crashes the engine later is found by another rule at
the step of the corruption; `kvsim replay` of the run's --record log gives the same roots without the engine;
--shrink ends at <= 10 requests and its printed command fails again with the same rule. Skips without the engine
venvs (KVSIM_VLLM_PYTHON, KVSIM_SGLANG_PYTHON)."""

import json
import re
import shlex
from pathlib import Path

import pytest

from kvsim.sim.cli import main

from .planted import plant
from .planted_bugs import ALL
from .test_engines import need

STRESS = ["synthetic:prefix-stress", "--blocks", "160"]


def planted(name: str, tmp_path: Path, monkeypatch) -> tuple[str, str]:
    bug = ALL[name]
    py = need(bug.engine)
    for k, v in plant(tmp_path / "plant", bug.module, bug.patch).items():
        monkeypatch.setenv(k, v)
    return bug.engine, py


def roots_of(report: dict) -> list[tuple]:
    return [(v["rule"], v["line"], v["message"]) for v in report["violations"]]


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_planted_bug_gives_few_roots_naming_the_engine_frame_and_its_log_rejudges_the_same(name, tmp_path,
                                                                                            monkeypatch):
    bug = ALL[name]
    engine, py = planted(name, tmp_path, monkeypatch)
    rep, log = tmp_path / "r.json", tmp_path / "run.jsonl"
    rc = main(["peer", engine, *STRESS, "--engine-python", py, "--quiet", "--no-timing", "--json", str(rep),
               "--record", str(log)])
    report = json.loads(rep.read_text())
    roots = report["violations"]
    assert rc == 1 and 1 <= len(roots) <= 3, [(v["rule"], v["message"][:160]) for v in roots]
    first = roots[0]
    assert first["rule"] == bug.rule, first["message"]
    for v in roots:  # every root names the engine frame of what it reports (a crash names the frame that raised)
        frame = v["context"]["frame"] if v["rule"] == "PEER-11" else v.get("engine_frame")
        assert frame, v["message"]
    frame = first["context"]["frame"] if first["rule"] == "PEER-11" else first["engine_frame"]
    assert re.search(rf"\bin {re.escape(bug.function)}\b", frame), frame
    crash = report["stats"].get("engine_crash")
    if crash is not None and bug.rule != "PEER-11":  # found at the corruption, before the engine fell over
        assert first["event"] <= crash["step"] and first["rule"] != "PEER-11"
    again = tmp_path / "again.json"
    assert main(["replay", str(log), "--quiet", "--json", str(again)]) == 1
    replayed = json.loads(again.read_text())
    assert roots_of(replayed) == roots_of(report)
    assert replayed["stats"]["consequences"] == report["stats"]["consequences"]
    assert replayed["run"]["command"] == report["run"]["command"] and replayed["run"]["rejudged"] == str(log)


@pytest.mark.parametrize("name", ["refcount-leak", "free-shared", "free-per-slot", "split-old-parent"])
def test_shrink_ends_small_and_its_command_fails_again_with_the_same_rule(name, tmp_path, monkeypatch, capsys):
    bug = ALL[name]
    engine, py = planted(name, tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    rep = tmp_path / "min.json"
    rc = main(["peer", engine, *STRESS, "--engine-python", py, "--shrink", "--no-timing", "--json", str(rep)])
    err = capsys.readouterr().err
    report = json.loads(rep.read_text())
    shrink = report["stats"]["shrink"]
    assert rc == 1 and shrink["target_rule"] == bug.rule and shrink["same_rule"]
    assert shrink["to"]["requests"] <= 10 and shrink["to"]["blocks"] <= 160
    assert (tmp_path / "prefix-stress.min.jsonl").exists() and shrink["written"] == "prefix-stress.min.jsonl"
    command = re.search(r"reproduce it with: (.*)", err).group(1)
    assert command == shrink["command"] and command.startswith(f"kvsim peer {engine} prefix-stress.min.jsonl ")
    again = tmp_path / "again.json"
    assert main(shlex.split(command)[1:] + ["--quiet", "--no-timing", "--json", str(again)]) == 1
    assert json.loads(again.read_text())["violations"][0]["rule"] == bug.rule


def test_shrink_of_a_passing_run_says_there_is_nothing_to_shrink(tmp_path, monkeypatch, capsys):
    py = need("vllm")
    monkeypatch.chdir(tmp_path)
    rc = main(["peer", "vllm", "synthetic:prefix-stress", "--requests", "4", "--engine-python", py, "--shrink"])
    assert rc == 0 and "nothing to shrink" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())
