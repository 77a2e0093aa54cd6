"""Engine faults injected into the simulation: each episode flagged at its bad event with its declared rule and
nothing else, the background untouched, recorded runs replaying to the same violations, at scale; faults a
configuration cannot host are input errors."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvsim.sim.cli import main
from kvsim.sim.replay import replay_trace
from kvsim.sim.simulate.engine import SimConfig, Simulation
from kvsim.sim.simulate.inject import plan_faults
from kvsim.sim.trace.faults import FAULTS
from kvsim.sim.workloads import open_workload

DEFAULT = SimConfig()
HOST = replace(DEFAULT, host_bytes=1 << 30)
MTP = replace(HOST, backend="mtp")
SMALL = SimConfig(max_context=65536, concurrency=8, pages=2048, host_bytes=16 << 20, layers=1, kv_heads=1,
                  prefill_chunk=4096)


@pytest.fixture(autouse=True)
def _reports(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))


def _config_for(name: str) -> SimConfig:
    needs = FAULTS[name].needs
    return MTP if "mtp" in needs else HOST if "host" in needs else DEFAULT


def _run(cfg, names, workload="excerpt:synthetic", n=12, every=20, seed=0, record=None):
    sim = Simulation(cfg, source=workload, record=record, faults=plan_faults(names, cfg, every, seed))
    return sim, sim.run(open_workload(workload, n))


def _expected(sim) -> set:
    return {(rule, event) for _, rule, event, _ in sim.injector.injected}


def _got(result) -> set:
    return {(v["rule"], v["event"]) for v in result.trace.violations}


@pytest.mark.parametrize("name", sorted(n for n in FAULTS if "growth" not in FAULTS[n].needs))
def test_each_fault_flagged_at_its_bad_event_with_its_rule_and_nothing_else(name):
    sim, res = _run(_config_for(name), [name])
    s = res.stats
    assert s["faults_injected"] >= 2 and s["faults_by_name"] == {name: s["faults_injected"]}
    assert s["faults_flagged"] == s["faults_injected"] and s["faults_missed"] == []
    assert s["violations_unexpected"] == 0 and s["requests"] == 12
    assert _got(res) == _expected(sim) and len(res.trace.violations) == s["faults_injected"]
    assert {r for r, _ in _got(res)} == {FAULTS[name].rule}


@pytest.mark.parametrize("cfg, missing", [(DEFAULT, {"host", "mtp", "growth"}), (HOST, {"mtp", "growth"}),
                                          (MTP, {"growth"})])
def test_all_injects_every_fault_the_configuration_supports(cfg, missing):
    sim, res = _run(cfg, ["all"], n=20, every=5)
    s = res.stats
    supported = {n for n, f in FAULTS.items() if not f.needs & missing}
    if cfg.backend == "mtp":  # their fork results list Main's page table only: the MTP bundle needs both pools'
        supported -= {"cow-skipped-for-partial-tail", "fork-drops-partial-tail"}
    assert set(s["faults_by_name"]) == supported and set(s["faults_skipped"]) == set(FAULTS) - supported
    assert s["faults_flagged"] == s["faults_injected"] > len(supported)
    assert s["violations_unexpected"] == 0 and s["faults_not_injected"] == []
    assert _got(res) == _expected(sim)


def test_the_background_runs_as_without_faults_and_the_record_replays_to_the_same_violations(tmp_path):
    """Strip every fault event (ids f…) from a faulted record: what remains is the clean run's events, then
    only the releases that made room for the episodes injected after the workload ended."""
    clean, faulted, again = tmp_path / "clean.jsonl", tmp_path / "faulted.jsonl", tmp_path / "again.jsonl"
    Simulation(SMALL, source="synthetic:1", record=clean).run(open_workload("synthetic:1", 150))
    sim, res = _run(SMALL, ["all"], "synthetic:1", 150, every=40, seed=3, record=faulted)
    s = res.stats
    assert s["faults_injected"] > 100 and s["faults_flagged"] == s["faults_injected"]
    assert s["violations_unexpected"] == 0 and s["evictions"] > 0 and s["host_evictions"] > 0  # under pressure

    def background(path):
        out = []
        for line in path.read_text().splitlines()[1:]:
            ev = json.loads(line)
            if not any(str(ev.get(k, "")).startswith("f") for k in ("seq", "unit", "ckpt", "xfer")):
                out.append(line)
        return out

    base, rest = background(clean), background(faulted)
    assert rest[:len(base)] == base
    assert all(json.loads(line)["op"] == "release" for line in rest[len(base):])
    replayed = replay_trace(faulted)
    assert [(v["rule"], v["event"]) for v in replayed.violations] == \
        [(v["rule"], v["event"]) for v in res.trace.violations]
    _run(SMALL, ["all"], "synthetic:1", 150, every=40, seed=3, record=again)
    assert again.read_bytes() == faulted.read_bytes()
    _, other = _run(SMALL, ["all"], "synthetic:1", 150, every=40, seed=4)
    assert _got(other) != _got(res)  # the seed places the episodes


def test_faults_at_scale_all_flagged():
    """Hundreds of episodes among 300 requests with Host offload under pressure."""
    cfg = replace(SMALL, pages=8192, concurrency=32, host_bytes=64 << 20)
    sim, res = _run(cfg, ["all"], "excerpt:conversation", 300, every=4, seed=1)
    s = res.stats
    assert s["requests"] + s["rejected"] == 300 and s["evictions"] > 0
    assert s["faults_injected"] >= 300 and s["faults_flagged"] == s["faults_injected"]
    assert s["faults_missed"] == [] and s["violations_unexpected"] == 0
    assert len(s["faults_by_name"]) == len(FAULTS) - 2  # all but the MTP and growth faults
    assert _got(res) == _expected(sim)


def test_plan_refuses_faults_the_configuration_cannot_host():
    with pytest.raises(ValueError, match="Host arena"):
        plan_faults(["publish-before-copy"], DEFAULT)
    with pytest.raises(ValueError, match="MTP backend"):
        plan_faults(["mtp-lead-beyond-l"], HOST)
    with pytest.raises(ValueError, match="kv_lease_growth"):
        plan_faults(["growth-inside-step"], MTP)
    with pytest.raises(ValueError, match="exactly WR-4"):
        plan_faults(["fork-drops-partial-tail"], MTP)
    with pytest.raises(ValueError, match="unknown fault"):
        plan_faults(["no-such-bug"], DEFAULT)
    with pytest.raises(ValueError, match="at least 1"):
        plan_faults(["all"], DEFAULT, every=0)


def test_cli_simulate_with_faults_reports_them_and_replays(tmp_path, capsys):
    rep, trace = tmp_path / "r.json", tmp_path / "t.jsonl"
    rc = main(["simulate", "excerpt:conversation", "--requests", "15", "--fault", "double-release", "--fault",
               "decode-skips-a-position", "--fault-every", "10", "--seed", "5", "--json", str(rep),
               "--record", str(trace)])
    assert rc == 0  # every injected fault flagged with its rule at its bad event, nothing else
    out = capsys.readouterr().out
    assert "faults_flagged" in out and "injected engine faults" in out
    doc = json.loads(rep.read_text())
    s = doc["stats"]
    assert s["faults_injected"] == s["faults_flagged"] >= 2 and s["violations_unexpected"] == 0
    assert set(s["faults_by_name"]) == {"double-release", "decode-skips-a-position"}
    assert {v["rule"] for v in doc["violations"]} == {"CKPT-2", "CONS-1"}
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["meta"]["faults"] == {"names": ["double-release", "decode-skips-a-position"], "every": 10,
                                        "seed": 5, "skipped": []}
    assert main(["replay", str(trace), "--quiet", "--json", str(tmp_path / "again.json")]) == 1
    again = json.loads((tmp_path / "again.json").read_text())
    assert [(v["rule"], v["line"]) for v in again["violations"]] == [(v["rule"], v["line"]) for v in doc["violations"]]


def test_cli_simulate_fault_input_errors_are_one_line(capsys):
    base = ["simulate", "excerpt:conversation", "--requests", "3", "--quiet"]
    assert main(base + ["--fault", "publish-before-copy"]) == 2
    assert main(base + ["--fault", "mtp-lead-beyond-l", "--host-bytes", "1G"]) == 2
    assert main(base + ["--fault", "growth-inside-step"]) == 2
    assert main(base + ["--fault", "no-such-bug"]) == 2
    assert main(base + ["--fault", "all", "--fault-every", "0"]) == 2
    assert main(base + ["--fault", "all", "--sweep", "pages=4096,8192"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 6 and all(line.startswith("kvsim simulate: --fault") for line in err), err
