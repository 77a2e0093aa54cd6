"""Options and positionals in any order, for every command: `kvsim peer vllm --engine-python PY WORKLOAD` is
the same run as `kvsim peer vllm WORKLOAD --engine-python PY`, and `kvsim replay a --json r b` replays both
traces. Each command's representative invocation is parsed with its options before, after and between its
positionals, and must give the same arguments; the cheap commands also run both ways with the same exit code
and the same report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvsim.sim.cli import main
from kvsim.sim.cli.parser import COMMANDS, build_parser
from kvsim.sim.trace.generate import generate

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sim" / "peers" / "samples"


def _invocations(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """command -> (its words and positionals, its options): every command of the parser has one."""
    trace = str(tmp / "t.jsonl")
    return {
        "replay": (["replay", trace, trace], ["--json", str(tmp / "r.json"), "--quiet", "--max-findings", "3"]),
        "check": (["check"], ["--out", str(tmp / "out"), "--quiet"]),
        "rules": (["rules", "PEER", "EV"], ["--json"]),
        "explain": (["explain", "PEER-9"], ["--json"]),
        "capacity": (["capacity", trace], ["--profile", "fp8", "--json"]),
        "bench": (["bench", "replay"], ["--events", "200", "--json", str(tmp / "b.json")]),
        "simulate": (["simulate", "excerpt:conversation"], ["--requests", "5", "--json", str(tmp / "s.json")]),
        "generate": (["generate", str(tmp / "g.jsonl")], ["--events", "50", "--seed", "3"]),
        "fuzz": (["fuzz"], ["--machine", "store", "--budget", "1", "--seed", "2"]),
        "selfcheck": (["selfcheck"], ["--only", "m1", "--budget", "2"]),
        "peer": (["peer", "vllm", "synthetic:prefix-stress"], ["--engine-python", sys.executable, "--blocks", "40",
                                                              "--requests", "5", "--json", str(tmp / "p.json")]),
        "events": (["events", str(SAMPLES / "tokenspeed_events.jsonl")], ["--engine", "tokenspeed",
                                                                          "--json", str(tmp / "e.json")]),
    }


def _orders(words: list[str], options: list[str]) -> list[list[str]]:
    """Options after every positional, before them (right after the command), and split around the first."""
    command, positionals = words[:1], words[1:]
    orders = [command + positionals + options, command + options + positionals]
    if positionals:
        orders.append(command + options[:2] + positionals[:1] + options[2:] + positionals[1:])
    if len(positionals) > 1:
        orders.append(command + positionals[:1] + options + positionals[1:])
    return orders


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))
    monkeypatch.chdir(tmp_path)
    generate(tmp_path / "t.jsonl", 60, seed=1, max_context=1024, concurrency=3)
    return tmp_path


def test_every_command_has_an_invocation(tmp):
    assert set(_invocations(tmp)) == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_options_before_between_and_after_positionals_parse_alike(command, tmp):
    words, options = _invocations(tmp)[command]
    parsed = []
    for argv in _orders(words, options):
        args = build_parser(argv).parse_args(argv)
        parsed.append({k: v for k, v in vars(args).items() if k != "fn"})
    assert all(p == parsed[0] for p in parsed), parsed


@pytest.mark.parametrize("command", ["replay", "rules", "explain", "capacity", "simulate", "generate", "events"])
def test_cheap_commands_run_alike_in_every_order(command, tmp, capsys):
    words, options = _invocations(tmp)[command]
    outcomes = []
    for argv in _orders(words, options):
        code = main(argv)
        out = capsys.readouterr().out
        written = {p.name: p.read_bytes() for p in sorted(tmp.glob("*.json")) if p.name != "t.jsonl"}
        outcomes.append((code, out, written))
    assert outcomes[0][0] in (0, 1), outcomes[0]
    assert all(o == outcomes[0] for o in outcomes)


def test_peer_with_options_before_the_workload_reaches_the_engine_check(tmp):
    """The regression users hit: the workload after `--engine-python PY` was "unrecognized arguments"."""
    for argv in (["peer", "vllm", "--engine-python", str(tmp / "no-venv" / "bin" / "python"), "synthetic"],
                 ["peer", "tokenspeed", "--pages", "40", "--requests", "0", "synthetic"]):
        done = subprocess.run([sys.executable, "-c", "import sys; from kvsim.sim.cli import main; sys.exit(main())",
                               *argv], capture_output=True, text=True, cwd=tmp, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "unrecognized" not in done.stderr and "required" not in done.stderr, done.stderr
