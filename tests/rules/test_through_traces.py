"""Every rule that judges the engine is reached through a recorded trace, not by editing model state.

For each catalogue rule whose evidence is "engine", some bundled violation scenario (a buggy engine's trace)
declares it and its replay reports it at the declared event; every legal scenario replays clean. Rules that
guard the model, and clauses not checkable from traces, are listed apart (kvsim rules --json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.sim.cli.check import expected, got
from kvsim.sim.replay import replay_trace
from kvsim.spec.catalogue import all_rules
from tests.rules.conftest import ELSEWHERE

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
BAD = sorted((SCENARIOS / "violations").glob("*.jsonl"))
ENGINE_RULES = [r.id for r in all_rules()  # TS-* judge schedulers through cachetrace/1: tests/cache, tests/peers
                if r.evidence == "engine" and r.id not in ELSEWHERE and r.scope != "cache"]


def _declared() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for path in BAD:
        for rule, _, _ in expected(path):
            out.setdefault(rule, []).append(path)
    return out


@pytest.mark.parametrize("rule", ENGINE_RULES)
def test_engine_rule_fires_from_a_trace(rule):
    paths = _declared().get(rule)
    assert paths, f"{rule} judges the engine, but no violation scenario reaches it through a trace"
    result = replay_trace(paths[0])
    assert got(result) == expected(paths[0])


def test_model_guards_and_clauses_are_marked():
    rules = {r.id: r for r in all_rules()}
    for rid in ("CAP-2", "CAP-4", "CAP-5", "PAGE-4", "PAGE-5", "WR-1", "ENT-1", "ENT-4"):
        assert rules[rid].evidence == "model", rid
    assert rules["WR-3"].subsumed_by == ("WR-2", "UNIT-3")
    clauses = [r for r in rules.values() if r.kind == "clause"]
    assert clauses and all(r.evidence == "none" and r.not_checkable and r.checker is None for r in clauses)


def test_rules_json_gives_the_evidence_kind(capsys, tmp_path, monkeypatch):
    from kvsim.sim.cli import main as kvsim
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path))  # no last run: the catalogue alone
    assert kvsim(["rules", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    kinds = [r["evidence"] for r in rows]
    assert set(kinds) == {"engine", "model", "none"}
    assert kinds == sorted(kinds, key=("engine", "model", "none").index)  # shown apart: engine rules first
    assert all(r["not_checkable"] for r in rows if r["evidence"] == "none")


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_a_rejected_fact_is_not_applied(path):
    """After every declared violation an `observe` states the state the replay holds after it, and the replay
    agrees: what it was before the bad event, or, where error recovery adopted the engine's claim
    (sim.replay `_adopt`), the claimed outcome."""
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    for _, event, _ in expected(path):
        assert event + 1 < len(events) and events[event + 1]["op"] == "observe", f"event {event}"
