"""Campaigns: a clean model passes; a planted bug is found, written, and replays to the same rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvsim.kvmodel.store import activation
from kvsim.sim.cli import main
from kvsim.sim.fuzz.campaign import run_campaign
from kvsim.sim.replay import replay_trace
from kvsim.spec.catalogue import all_rules


def test_a_short_campaign_on_the_model_finds_nothing_and_reports_coverage(tmp_path):
    r = run_campaign("store", budget_s=2.0, seed=1, profile="ci", found_dir=tmp_path)
    assert not r.failed, r.failures
    assert r.examples > 0 and r.steps > r.examples
    ids = [x.id for x in all_rules() if x.kind != "clause" and x.scope != "cache"]  # the store rules with checkers
    assert list(r.coverage) == ids
    assert set(r.blind_spots) <= set(ids)
    assert all(r.coverage[b]["exercised"] == 0 for b in r.blind_spots)
    assert r.rules["activate"] > 0
    assert not list(tmp_path.iterdir())


def _fork_shares_the_partial_tail(monkeypatch):
    """A sharing decision gone wrong: Fork keeps the source's partial tail instead of copying it (COW)."""
    orig = activation.plan_pool

    def plan_pool(st, pool, source, move, entitlement, engine_pages):
        plan = orig(st, pool, source, move, entitlement, engine_pages)
        return plan._replace(members=tuple(m.page if isinstance(m, activation.CopyTail) else m
                                           for m in plan.members), cows=0)
    monkeypatch.setattr(activation, "plan_pool", plan_pool)


def test_a_planted_bug_is_found_and_its_counterexample_replays_to_the_same_rule(monkeypatch, tmp_path):
    if not os.environ.get("KVSIM_ISOLATED"):  # run alone in a fresh interpreter (see the note below)
        # In a process that has run much of the suite, this campaign was seen to end on an oracle-only
        # difference (ORACLE-refinement) that replay cannot show; run alone it ends on the replayable rule
        # every time (4 of 4, hash seeds 1-3 and random). The cause is not found yet.
        here = f"{__file__}::test_a_planted_bug_is_found_and_its_counterexample_replays_to_the_same_rule"
        done = subprocess.run([sys.executable, "-m", "pytest", here, "-m", "slow", "-p", "no:cacheprovider",
                               "-p", "no:xdist", "--basetemp", str(tmp_path / "child")],
                              env={**os.environ, "KVSIM_ISOLATED": "1"}, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:]
        return
    _fork_shares_the_partial_tail(monkeypatch)
    # the bug is found in seconds; the budget sets the shrink allowance (a quarter: 100 s, where 1200 gave 300 s of
    # shrinking to the same rule on a loaded runner, the slow tier's longest test)
    r = run_campaign("store", budget_s=400.0, seed=0, profile="ci", found_dir=tmp_path)
    assert r.failed
    f = r.failures[0]
    assert f["reproduced"] and f["rule"], f
    trace = f["trace"]
    assert trace.startswith(str(tmp_path)) and trace.endswith(".jsonl") and "store-" in trace
    replayed = replay_trace(trace)
    assert replayed.violations[0]["rule"] == f["rule"]
    assert main(["replay", trace, "--quiet"]) == 1
    monkeypatch.undo()  # the model fixed: the same trace replays clean up to the oracle's observations
    assert main(["replay", trace, "--quiet"]) == 0


def test_kvsim_fuzz_writes_json_and_exits_0_on_a_clean_model(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path))
    out = tmp_path / "fuzz.json"
    assert main(["fuzz", "--machine", "host", "--budget", "2", "--seed", "3", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    m = doc["machines"][0]
    assert doc["failed"] is False and m["machine"] == "host" and m["examples"] > 0
    assert {"steps", "failures", "rules", "coverage", "blind_spots"} <= set(m)


@pytest.mark.parametrize("bad", [["--budget", "0"], ["--database", "redis://nohost"]])
def test_kvsim_fuzz_input_errors_exit_2(bad, capsys):
    assert main(["fuzz", "--machine", "store", *bad]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1


def test_a_directory_database_keeps_a_found_bug_for_the_next_campaign(monkeypatch, tmp_path):
    _fork_shares_the_partial_tail(monkeypatch)
    db = str(tmp_path / "db")
    first = run_campaign("store", budget_s=90.0, seed=0, database=db, found_dir=tmp_path / "found")
    assert first.failed and any((tmp_path / "db").rglob("*"))
    again = run_campaign("store", budget_s=90.0, seed=777, database=db, found_dir=tmp_path / "found")
    assert again.failed and again.examples <= 3  # the saved example is replayed first


def test_coverage_of_a_judge_machine_names_the_rules_its_judge_reported(tmp_path, capsys):
    """A judge machine has no store catalogue coverage: --coverage prints the rules its judge reported (as the
    reference expected them), never an empty catalogue line."""
    rc = main(["fuzz", "--machine", "judge-policy", "--budget", "3", "--coverage", "--plain",
               "--json", str(tmp_path / "f.json"), "--found", str(tmp_path / "found")])
    out = capsys.readouterr().out
    assert rc == 0
    judged = next(line for line in out.splitlines() if line.startswith("  judge rules reported: "))
    assert "PEER-12 " in judged and "PEER-9 " in judged
    assert not any(line.rstrip() in ("  catalogue rules (checked / exercised):", "  oracle branches:")
                   for line in out.splitlines())
