"""Reachability (sim.fuzz.reach): a ci-profile campaign of fixed rounds builds every state the contract
allows that the targets name — every refusal reason, every transfer phase of both directions left open in
every pool while every other operation is legally attempted, appends into Host-backed pages after Move —
and the one structurally impossible target says why. Fixed rounds, derandomized: the same runs on every
machine, whatever its speed (no time budget decides what is reached)."""

from __future__ import annotations

import json

from kvsim.sim.cli import main
from kvsim.sim.fuzz.campaign import run_campaign
from kvsim.sim.fuzz.reach import REASONS, Reach, render, table, targets

ROUNDS = 60  # ci rounds of 20 examples (about 1,700 runs, 66,000 steps, under a minute of CPU on one core)


def test_a_ci_campaign_reaches_every_target_the_contract_allows(tmp_path):
    r = run_campaign("store", budget_s=1.0, seed=0, profile="ci", found_dir=tmp_path, rounds=ROUNDS)
    assert not r.failed, r.failures
    tab = r.reachability
    missed = [(t["kind"], t["target"], t["blind_spot"]) for t in tab["targets"]
              if not t["count"] and not t["blind_spot"].startswith("structural")]
    assert missed == []
    assert tab["structural"] == 1 and tab["reached"] == tab["total"] - 1
    assert {t["target"][0] for t in tab["targets"] if t["kind"] == "refusal" and t["count"]} == set(REASONS)
    assert "busy" in REASONS and "engine" not in REASONS


def test_the_table_lists_every_target_and_explains_each_blind_spot():
    reach = Reach()
    tab = table(reach)
    assert tab["total"] == len(targets()) and tab["reached"] == 0
    blind = {(t["kind"], *t["target"]): t["blind_spot"] for t in tab["targets"]}
    assert blind[("append", "fork")].startswith("structural")
    assert "no configuration drawn" in blind[("open", "h2d", "copy", "mtp", "launch")]
    assert "busy" in blind[("refusal", "busy")] or "Host arena" in blind[("refusal", "busy")]
    lines = render("store", tab)
    assert lines[0].startswith("store: reachability 0/")
    assert any("blind spots" in ln for ln in lines)


def test_fuzz_coverage_prints_the_table_and_writes_it(tmp_path, capsys):
    out = tmp_path / "fuzz.json"
    assert main(["fuzz", "--machine", "store", "--budget", "1", "--seed", "3", "--coverage", "--json", str(out),
                 "--found", str(tmp_path / "found")]) == 0
    text = capsys.readouterr().out
    assert "reachability" in text and "open transfer x other op attempted" in text
    doc = json.loads(out.read_text())
    tab = doc["machines"][0]["reachability"]
    assert tab["total"] == len(targets()) and len(tab["targets"]) == tab["total"]
