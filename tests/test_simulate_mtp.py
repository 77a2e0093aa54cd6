"""MTP speculative decode rounds in the simulation: both pools written, only accepted tokens committed, the
workload's outputs produced exactly, every rule checked, record -> replay agreement, seeded acceptance."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvsim.sim.cli import main
from kvsim.sim.replay import replay_trace
from kvsim.sim.report.build import build_report
from kvsim.sim.simulate.engine import SimConfig, Simulation, simulate
from kvsim.sim.simulate.mtp import SpeculativeRounds
from kvsim.sim.workloads import open_workload

MTP = SimConfig(backend="mtp")
SMALL = SimConfig(max_context=65536, concurrency=8, pages=2048, host_bytes=16 << 20, layers=1, kv_heads=1,
                  prefill_chunk=4096, backend="mtp")


@pytest.fixture(autouse=True)
def _reports(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))


def _outputs(workload: str, n: int, max_context: int) -> int:
    return sum(min(r.output, max_context - r.prompt) for r in open_workload(workload, n)
               if 1 <= r.prompt <= max_context)


@pytest.mark.parametrize("workload", ["excerpt:conversation", "excerpt:synthetic"])
def test_mtp_simulation_on_the_excerpts_is_clean_and_produces_the_workload_outputs(workload):
    n = 80
    res = simulate(open_workload(workload, n), MTP)
    s = res.stats
    assert s["violations"] == 0 and s["refusals"] == 0 and s["requests"] == n
    assert s["output_tokens"] == _outputs(workload, n, MTP.max_context) > 0
    assert s["output_tokens"] == simulate(open_workload(workload, n), SimConfig()).stats["output_tokens"]
    assert 0 < s["accepted_draft_tokens"] < s["draft_tokens"]
    # every decode token is the round's verified token or an accepted draft
    assert s["spec_rounds"] + s["accepted_draft_tokens"] == s["output_tokens"]
    assert 1.5 < s["tokens_per_round"] < 4 and 0.3 < s["acceptance"] < 0.7  # drafts stop at the first rejection
    assert s["peak_mtp_pages"] >= s["peak_pages"] and s["capacity_mtp_pages"] == s["capacity_pages"] + 256


def test_mtp_rounds_write_both_pools_lead_in_mtp_and_commit_the_accepted_tokens(tmp_path):
    trace = tmp_path / "mtp.jsonl"
    Simulation(MTP, source="excerpt:conversation", record=trace).run(open_workload("excerpt:conversation", 6))
    lines = trace.read_text().splitlines()
    assert json.loads(lines[0])["config"]["backend"] == {"kind": "mtp", "draft_window": 4}
    leads = commits = 0
    for line in lines[1:]:
        ev = json.loads(line)
        if ev["op"] == "launch":
            rows = {}
            for r in ev["rows"]:
                rows.setdefault(r["seq"], {})[r["pool"]] = r["write"]
            for w in rows.values():
                assert set(w) == {"main", "mtp"} and w["main"][0] == w["mtp"][0] and w["mtp"][1] >= w["main"][1]
                leads += w["mtp"][1] > w["main"][1]
        elif ev["op"] == "complete":
            fr = {}
            for c in ev["commit"]:
                fr.setdefault(c["seq"], {})[c["pool"]] = c["frontier"]
            assert all(f["main"] == f["mtp"] for f in fr.values())
            commits += 1
        elif ev["op"] in ("map", "truncate", "offload", "drop_device"):
            assert ev["pool"] in ("main", "mtp")
    assert leads > 0 and commits > 0


def test_recorded_mtp_simulation_under_pressure_replays_to_the_same_verdict(tmp_path):
    trace, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    res = Simulation(SMALL, source="synthetic:1", record=trace).run(open_workload("synthetic:1", 150))
    s = res.stats
    assert s["violations"] == 0 and s["refusals"] == 0 and s["requests"] == 150
    assert s["evictions"] > 0 and s["offloads"] > 0 and s["restored_pages"] > 0 and s["truncates"] > 0
    assert s["output_tokens"] == _outputs("synthetic:1", 150, SMALL.max_context)
    text = trace.read_text()
    assert '"op":"offload","ckpt"' in text.replace(" ", "") and '"pool":"mtp"' in text
    again = replay_trace(trace)
    a, b = build_report([res.trace]), build_report([again])
    assert a["verdict"] == b["verdict"] == "pass" and a["rules"] == b["rules"] and again.sha256 == res.trace.sha256
    Simulation(SMALL, source="synthetic:1", record=other).run(open_workload("synthetic:1", 150))
    assert other.read_bytes() == trace.read_bytes()


@pytest.mark.parametrize("rate, k", [(0.0, 4), (1.0, 4), (0.5, 1), (0.9, 8)])
def test_acceptance_extremes_and_windows(rate, k):
    cfg = replace(MTP, accept_rate=rate, draft_window=k)
    s = simulate(open_workload("excerpt:synthetic", 20), cfg).stats
    assert s["violations"] == 0 and s["output_tokens"] == _outputs("excerpt:synthetic", 20, cfg.max_context)
    if rate == 0.0 or k == 1:
        assert s["accepted_draft_tokens"] == 0 and s["tokens_per_round"] == 1.0
    if rate == 1.0:
        assert s["accepted_draft_tokens"] == s["draft_tokens"] > 0


def test_acceptance_draws_are_seeded_and_in_range():
    a, b = SpeculativeRounds(MTP), SpeculativeRounds(replace(MTP, seed=1))
    draws = [a.accepted(rid, f, 4) for rid in range(50) for f in range(100, 140)]
    assert draws == [SpeculativeRounds(MTP).accepted(rid, f, 4) for rid in range(50) for f in range(100, 140)]
    assert draws != [b.accepted(rid, f, 4) for rid in range(50) for f in range(100, 140)]
    assert set(draws) == {1, 2, 3, 4} and all(a.accepted(7, f, 1) == 1 for f in range(100))
    with pytest.raises(ValueError):
        SpeculativeRounds(replace(MTP, draft_window=0))


def test_cli_simulate_mtp(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["simulate", "excerpt:conversation", "--requests", "10", "--backend", "mtp", "--draft-window", "3",
                 "--accept-rate", "0.6", "--seed", "2", "--json", str(out)]) == 0
    assert "accepted_draft_tokens" in capsys.readouterr().out
    s = json.loads(out.read_text())["stats"]
    assert s["violations"] == 0 and s["output_tokens"] == _outputs("excerpt:conversation", 10, 131072)
    assert main(["simulate", "excerpt:conversation", "--backend", "mtp", "--draft-window", "0"]) == 2
    assert main(["simulate", "excerpt:conversation", "--backend", "mtp", "--accept-rate", "1.5"]) == 2
