"""The scheduler simulation: prefix index, reuse against the trace's own bound, every rule checked, record ->
replay agreement, Host offload/restore, the CLI, sweeps (local executors and a Dask cluster), bench."""

from __future__ import annotations

import json

import pytest

from kvsim.sim.cli import main
from kvsim.sim.replay import replay_trace
from kvsim.sim.report.build import build_report
from kvsim.sim.simulate.engine import SimConfig, Simulation, simulate
from kvsim.sim.simulate.prefix import PrefixIndex, page_keys
from kvsim.sim.simulate.reuse import reusable_pages
from kvsim.sim.simulate.sweep import parse_axis, parse_bytes, run_sweep, sweep_points
from kvsim.sim.workloads import Request, open_workload
from kvsim.sim.workloads.open import shared_workloads

UNBOUNDED = SimConfig(pages=None, concurrency=512)
SMALL = SimConfig(max_context=65536, concurrency=8, pages=2048, host_bytes=16 << 20, layers=1, kv_heads=1,
                  prefill_chunk=4096)


@pytest.fixture(autouse=True)
def _reports(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))


class _C:
    def __init__(self, keys):
        self.keys = keys


def test_page_keys_chain_blocks_and_pages():
    a = page_keys((7, 8), 1000)  # 15 full pages
    assert len(a) == 15 and len(set(a)) == 15
    assert page_keys((7, 9), 1000)[:8] == a[:8] and page_keys((7, 9), 1000)[8] != a[8]
    assert page_keys((6, 8), 1000)[8] != a[8]  # a page's key depends on everything before it
    assert page_keys((7,), 63) == [] and page_keys((7,), 64) == a[:1]


def test_prefix_index_longest_match_prefers_the_shortest_holder_and_survives_removal():
    idx = PrefixIndex()
    long, short = _C([1, 2, 3, 4]), _C([1, 2])
    idx.register(long)
    assert idx.lookup([1, 2, 9]) == (long, 2) and idx.lookup([9]) == (None, 0)
    idx.register(short)
    assert idx.lookup([1, 2, 3]) == (long, 3) and idx.lookup([1, 2, 9]) == (short, 2)
    idx.touch(long)
    assert idx.lookup([1, 2]) == (short, 2)
    idx.remove(short)
    assert idx.lookup([1, 2]) == (long, 2)
    idx.remove(long)
    assert idx.lookup([1]) == (None, 0) and len(idx) == 0


def test_prefix_index_finds_another_holder_when_the_best_one_goes():
    """`kvsim fuzz --machine simulate` against the README's reference: with two equal holders of a prefix, the
    removal of the newer (Move into a request) left the index with no known holder, so a lookup stopped short
    (under-matched) or later named a longer holder than one that was there (a needless helper split)."""
    idx = PrefixIndex()
    split, prompt = _C([1, 2]), _C([1, 2])
    idx.register(split)
    idx.register(prompt)
    assert idx.lookup([1, 2, 9]) == (prompt, 2)  # the newest of equals
    idx.remove(prompt)
    assert idx.lookup([1, 2, 9]) == (split, 2)
    longer = _C([1, 2, 3])
    idx.register(longer)
    assert idx.lookup([1, 2, 9]) == (split, 2) and idx.lookup([1, 2, 3]) == (longer, 3)
    idx.touch(split)
    idx.remove(split)
    assert idx.lookup([1, 2]) == (longer, 2) and len(idx) == 3


def test_reuse_definition_on_a_hand_made_trace():
    rs = [Request(0, 0.0, 1000, 5, (1, 2)), Request(1, 1.0, 1000, 5, (1, 2)), Request(2, 2.0, 700, 5, (1, 3)),
          Request(3, 3.0, 300, 5, (1,)), Request(4, 4.0, 64, 5, (4,))]
    got = reusable_pages(rs)
    # r1: 15 full pages shared, capped at (1000-1)//64 = 15; r2: block 1 differs -> 8; r3: 4 (300 tokens);
    # r4: nothing
    assert got.reusable_pages == 15 + 8 + 4 and got.prompt_pages == 16 + 16 + 11 + 5 + 1
    sim = simulate(rs, UNBOUNDED)
    assert sim.stats["reused_pages"] == got.reusable_pages and sim.stats["violations"] == 0


@pytest.mark.parametrize("workload", ["excerpt:conversation", "excerpt:synthetic"])
def test_unbounded_reuse_equals_the_trace_bound_on_the_excerpts(workload):
    n = 150
    bound = reusable_pages(open_workload(workload, n), UNBOUNDED.max_context)
    res = simulate(open_workload(workload, n), UNBOUNDED)
    assert res.stats["violations"] == 0 and res.stats["refusals"] == 0
    assert res.stats["reused_pages"] == bound.reusable_pages > 0
    assert res.stats["reused_tokens"] == bound.reusable_tokens and res.stats["prompt_tokens"] == bound.prompt_tokens
    assert res.stats["evictions"] == 0


@pytest.mark.skipif(shared_workloads() is None, reason="the full workload files are not beside the repository")
@pytest.mark.parametrize("name, concurrency", [
    ("synthetic_trace.jsonl", 512),  # 3,993 requests, 330,190 pages at the peak: about 15 s
    # 12,031 requests holding 1,422,816 pages at the peak (M_max 2,097,152 at C = 1024): about 5 minutes and
    # 1.8 GB, so it runs on request: pytest -m wholefile
    pytest.param("conversation_trace.jsonl", 1024, marks=pytest.mark.wholefile),
])
def test_unbounded_reuse_equals_the_trace_bound_on_the_whole_files(name, concurrency):
    """Whole Mooncake files: with room for every prompt (M_max = C·L above the peak) nothing is evicted and
    the simulated reuse is exactly the bound the trace's hash_ids allow (sim/simulate/reuse.py)."""
    path = str(shared_workloads() / name)
    config = SimConfig(pages=None, concurrency=concurrency)
    bound = reusable_pages(open_workload(path), config.max_context)
    res = simulate(open_workload(path), config)
    s = res.stats
    assert s["violations"] == 0 and s["evictions"] == 0
    # prompts beyond max_context are rejected by the simulation and skipped by the bound alike (10 of the
    # synthetic file's prompts exceed 131,072 tokens)
    assert s["requests"] == bound.requests and s["prompt_tokens"] == bound.prompt_tokens
    assert s["reused_pages"] == bound.reusable_pages > 0
    assert s["reused_tokens"] == bound.reusable_tokens


def test_pressure_offloads_restores_and_evicts_without_violations():
    res = simulate(open_workload("synthetic:1", 150), SMALL)
    s = res.stats
    assert s["violations"] == 0 and s["refusals"] == 0 and s["requests"] == 150
    assert s["evictions"] > 0 and s["offloads"] > 0 and s["host_evictions"] > 0
    assert s["host_bytes_out"] > 0 and s["host_bytes_in"] > 0 and s["restored_pages"] > 0
    assert s["peak_pages"] <= s["capacity_pages"] == 2048
    assert s["forks"] > 0 and s["moves"] > 0 and s["splits"] > 0 and s["truncates"] > 0


def test_recorded_simulation_replays_to_the_same_verdict_and_counts(tmp_path):
    trace = tmp_path / "sim.jsonl"
    res = Simulation(SMALL, source="synthetic:2", record=trace).run(open_workload("synthetic:2", 60))
    again = replay_trace(trace)
    a, b = build_report([res.trace]), build_report([again])
    assert again.events == res.stats["events"] == res.trace.events and again.sha256 == res.trace.sha256
    assert a["verdict"] == b["verdict"] == "pass" and a["rules"] == b["rules"]
    assert a["stats"]["traces"][str(trace)] == b["stats"]["traces"][str(trace)]
    assert len(again.refusals) == len(res.trace.refusals)
    # deterministic: the same run writes the same bytes
    other = tmp_path / "again.jsonl"
    Simulation(SMALL, source="synthetic:2", record=other).run(open_workload("synthetic:2", 60))
    assert other.read_bytes() == trace.read_bytes()


def test_evicting_admission_serves_in_fewer_iterations_than_waiting_for_running_requests():
    """Cached checkpoints give way to an admission ("evict"): batches grow and the workload finishes in
    fewer engine iterations than when admission waits for running requests to return pages ("wait")."""
    rs = list(open_workload("excerpt:conversation", 200))
    evict = simulate(rs, SimConfig(pages=4096)).stats
    wait = simulate(rs, SimConfig(pages=4096, admission="wait")).stats
    assert evict["violations"] == wait["violations"] == 0
    assert evict["requests"] == wait["requests"] == 200
    assert evict["iterations"] < wait["iterations"] and evict["seconds"] < wait["seconds"]
    with pytest.raises(ValueError, match="admission policy"):
        Simulation(SimConfig(admission="lazy"))


def test_a_request_filling_the_whole_store_is_served_alone():
    """65,000 + 536 tokens (the output cut at max_context) fill all 1,024 pages: alone in the store, the
    request runs without the decode tail copy's page (its decode continuation Moves the prompt's checkpoint)."""
    cfg = SimConfig(max_context=65536, concurrency=8, pages=1024, layers=1, kv_heads=1)
    res = simulate([Request(0, 0.0, 65000, 600, tuple(range(127))), Request(1, 0.0, 100, 3, (5,))], cfg)
    assert res.stats["rejected"] == 0 and res.stats["requests"] == 2 and res.stats["violations"] == 0


def test_cli_simulate_writes_report_page_and_trace(tmp_path, capsys):
    out = {k: tmp_path / f"r.{k}" for k in ("json", "html", "record")}
    rc = main(["simulate", "excerpt:conversation", "--requests", "40", "--quiet"]
              + [a for k, p in out.items() for a in (f"--{k}", str(p))])
    assert rc == 0
    rep = json.loads(out["json"].read_text())
    assert rep["format"] == "kvreport/1" and rep["verdict"] == "pass"
    for key in ("requests", "prompt_pages", "reused_pages", "hit_ratio", "evictions", "host_bytes_out",
                "host_bytes_in", "peak_pages", "seconds"):
        assert key in rep["stats"]
    assert rep["stats"]["requests"] == 40
    page = out["html"].read_text()
    assert page.count("<svg") == 2 and "Host traffic" in page and "prefix hit" in page and "TTFT" in page
    assert main(["replay", str(out["record"]), "--quiet"]) == 0


def test_cli_simulate_input_errors_are_one_line(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "none.jsonl")]) == 2
    assert main(["simulate", "excerpt:conversation", "--pages", "12"]) == 2  # below M_min
    assert main(["simulate", "excerpt:conversation", "--sweep", "colour=red"]) == 2
    assert main(["simulate", "excerpt:conversation", "--sweep", "profile=bf16,fp8"]) == 2  # needs an HBM budget
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(":" in line and "Traceback" not in line for line in err)


def test_sweep_axes_and_bytes():
    assert parse_bytes("64G") == 64 << 30 and parse_bytes("512MiB") == 512 << 20 and parse_bytes("100") == 100
    assert parse_axis("profile=bf16,k8v4") == ("profile", ["bf16", "k8v4"])
    assert parse_axis("pages=4096,8192") == ("pages", [4096, 8192])
    with pytest.raises(ValueError):
        parse_axis("profile=fp16")
    assert sweep_points([("hbm", [1, 2]), ("profile", ["a", "b"])])[1] == {"hbm": 1, "profile": "b"}


def test_profile_sweep_at_a_fixed_budget_gets_capacity_from_the_model(tmp_path):
    base = SimConfig(max_context=65536, concurrency=8, hbm_bytes=512 << 20, pages=None, layers=1, kv_heads=4)
    rows = run_sweep("synthetic:3", 20, base, [("profile", ["bf16", "nvfp4", "k8v4"])], executor="thread")
    caps = [r["capacity_pages"] for r in rows]
    assert [r["point"]["profile"] for r in rows] == ["bf16", "nvfp4", "k8v4"]
    assert caps[0] < caps[2] < caps[1]  # bytes per token: bf16 1024 > k8v4 402 > nvfp4 288
    assert all(r["violations"] == 0 and r["requests"] == 20 for r in rows)


def test_cli_sweep_table_json_and_page(tmp_path, capsys):
    out = tmp_path / "s.json"
    html = tmp_path / "s.html"
    rc = main(["simulate", "synthetic:1", "--requests", "12", "--max-context", "65536", "--concurrency", "8",
               "--layers", "1", "--kv-heads", "1", "--sweep", "pages=1024,2048", "--executor", "serial",
               "--json", str(out), "--html", str(html)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert [p["point"] for p in doc["points"]] == [{"pages": 1024}, {"pages": 2048}]
    assert "what-if sweep" in capsys.readouterr().out and html.read_text().count("<svg") == 1


def test_sweep_runs_on_a_local_dask_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        address = cluster.scheduler_address.removeprefix("tcp://")
        base = SimConfig(max_context=65536, concurrency=8, pages=1024, layers=1, kv_heads=1)
        rows = run_sweep("synthetic:1", 10, base, [("pages", [1024, 2048])], executor=f"dask://{address}")
        local = run_sweep("synthetic:1", 10, base, [("pages", [1024, 2048])], executor="serial")
    assert rows == local and all(r["violations"] == 0 for r in rows)


def test_bench_simulate_reports_its_figures(capsys):
    assert main(["bench", "simulate", "--workload", "excerpt:conversation", "--requests", "15"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"requests", "seconds", "peak_rss_bytes", "violations", "events"} <= set(out)
    assert out["requests"] == 15 and out["violations"] == 0
