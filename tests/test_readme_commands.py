"""Every command README.md's "Using it" block shows runs as shown (on small inputs): each `kvsim <command>`
line there has an invocation below, and every option the line names is accepted and exercised."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvsim.sim.cli import main
from kvsim.sim.trace.generate import generate

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _using_it() -> dict[str, set[str]]:
    """{"replay": {"--json", ...}, "bench replay": {...}, ...} from the README's "Using it" code block."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Using it\s+```sh\n(.*?)```", text, re.S).group(1)
    shown: dict[str, set[str]] = {}
    command = None
    for line in block.splitlines():
        m = re.match(r"kvsim (bench \w+|\w+)", line)
        if m:
            command = m.group(1)
        if command:
            shown.setdefault(command, set()).update(re.findall(r"--[a-z][a-z-]*", line.split("#")[0]))
    return shown


@pytest.fixture
def traces(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))
    monkeypatch.chdir(tmp_path)
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "tiny.jsonl"]
    for seed, (p, n) in enumerate(zip(paths, (120, 120, 12))):  # the lockstep runs take the tiny one
        generate(p, n, seed=seed, max_context=1024, concurrency=3)
    rows = (ROOT / "sim" / "workloads" / "excerpts" / "mooncake_conversation_500.jsonl").read_bytes().split(b"\n")
    (tmp_path / "conversation.txt").write_bytes(b"\n".join(rows[:10]) + b"\n")  # a name that does not say its format
    return [str(p) for p in paths]


def _runs(traces: list[str], tmp: Path) -> dict[str, list[list[str]]]:
    a, b, tiny = traces
    (tmp / "timing.json").write_text('{"base_s": 0.01, "host_link_bytes_per_s": 4.5e11}\n')
    return {
        "replay": [["replay", a, b, "--json", f"{tmp}/r.json", "--junit", f"{tmp}/r.xml", "--markdown", f"{tmp}/r.md",
                    "--html", f"{tmp}/r.html", "--stop-at-first"],
                   ["replay", tiny, "--lockstep"], ["replay", tiny, "--lockstep-profile", "int8"]],
        "check": [["check"]],
        "rules": [["rules"], ["rules", "--json"], ["rules", "PEER", "EV"]],
        "explain": [["explain", "PEER-9"], ["explain", "EV-3", "--json"]],
        "capacity": [["capacity", a], ["capacity", "--max-context", "2048", "--concurrency", "2", "--profile", "fp8",
                                       "--backend", "mtp:3"], ["capacity", "--backend", "dflash:1"]],
        "bench replay": [["bench", "replay", "--events", "500", "--json", f"{tmp}/b.json"]],
        "bench attention": [["bench", "attention", "--contexts", "128", "--json", f"{tmp}/a.json"]],
        "bench simulate": [["bench", "simulate", "--workload", "excerpt:conversation", "--requests", "20",
                            "--json", f"{tmp}/bs.json"]],
        "simulate": [["simulate", "excerpt:conversation", "--requests", "20", "--pages", "4096", "--profile", "int8",
                      "--admission", "wait", "--host-bytes", "64M", "--record", f"{tmp}/sim.jsonl",
                      "--json", f"{tmp}/sim.json",
                      "--html", f"{tmp}/sim.html", "--quiet"],
                     ["simulate", "excerpt:conversation", "--requests", "10", "--hbm-bytes", "16G",
                      "--sweep", "profile=bf16,fp8", "--executor", "thread", "--json", f"{tmp}/sweep.json",
                      "--quiet"],
                     ["simulate", f"{tmp}/conversation.txt", "--format", "mooncake", "--pages", "4096", "--quiet"],
                     ["simulate", "excerpt:synthetic", "--requests", "10", "--backend", "mtp", "--draft-window", "3",
                      "--accept-rate", "0.6", "--seed", "1", "--host-bytes", "1G", "--fault", "all",
                      "--fault-every", "50", "--quiet"],
                     ["simulate", "excerpt:conversation", "--requests", "10", "--pages", "unbounded", "--host-bytes",
                      "1G", "--host-extents", "checkpoint", "--timing", f"{tmp}/timing.json", "--quiet"]],
        "bench lockstep": [["bench", "lockstep", "--events", "300", "--json", f"{tmp}/l.json"]],
        "generate": [["generate", f"{tmp}/g.jsonl", "--events", "200", "--seed", "1"],
                     ["generate", f"{tmp}/f.jsonl", "--events", "400", "--fault", "publish-before-copy"],
                     ["generate", "--list-faults"]],
        "selfcheck": [["selfcheck", "--only", "reservation-leaked-at-finish", "--no-faults", "--budget", "30",
                       "--workers", "1", "--json", f"{tmp}/s.json"]],
        "fuzz": [["fuzz", "--machine", "store", "--budget", "2", "--seed", "1", "--profile", "ci",
                  "--database", f"{tmp}/db", "--json", f"{tmp}/fz.json"]],
    }


def test_every_command_shown_has_a_run_using_every_option_shown(traces, tmp_path):
    runs = _runs(traces, tmp_path)
    shown = _using_it()
    assert set(shown) == set(runs), "a README command without a run here (or the other way round)"
    for command, options in shown.items():
        used = {arg for argv in runs[command] for arg in argv if arg.startswith("--")}
        assert options <= used, f"kvsim {command}: README options {options - used} are not exercised"


@pytest.mark.parametrize("command", list(_using_it()))
def test_the_command_runs(command, traces, tmp_path, capsys):
    for argv in _runs(traces, tmp_path)[command]:
        assert main(argv) == 0, (argv, capsys.readouterr().err)
    out = capsys.readouterr().out
    if command == "rules":
        assert '"id": "UNIT-1"' in out or "UNIT-1" in out
    if command == "explain":
        assert "sim/peers/judges/engine_judge.py:" in out and '"id": "EV-3"' in out
    if command.startswith("bench"):
        name = {"bench replay": "b.json", "bench attention": "a.json", "bench lockstep": "l.json",
                "bench simulate": "bs.json"}[command]
        assert json.loads((tmp_path / name).read_text())
