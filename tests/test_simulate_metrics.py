"""What a capacity planner reads off a simulation: eviction that keeps running prefixes, latency in virtual time
from a replaceable timing model, unbounded capacity, explained rejections, Host arena fill, workload notes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvsim.sim.cli import main
from kvsim.sim.simulate.engine import SimConfig, simulate, unbounded_config
from kvsim.sim.simulate.reuse import reusable_pages
from kvsim.sim.simulate.sweep import parse_axis, run_sweep
from kvsim.sim.simulate.timing import Timing, TimingFileError, load_timing
from kvsim.sim.workloads import Request, open_workload

SMALL = SimConfig(max_context=65536, concurrency=8, pages=2048, host_bytes=16 << 20, layers=1, kv_heads=1,
                  prefill_chunk=4096)
TINY = SimConfig(max_context=8192, concurrency=8, pages=150, layers=1, kv_heads=1)


@pytest.fixture(autouse=True)
def _reports(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))


def test_eviction_without_host_keeps_the_prefix_a_running_request_uses():
    """A decodes for 2,000 iterations; B needs more pages than are free; C shares A's prompt. Releasing A's
    checkpoint would free nothing (A's lane uses every page) and drop A's prefix from the index: B waits for
    A instead and C reuses A's prompt."""
    rs = [Request(0, 0.0, 4096, 2000, tuple(range(1, 9))), Request(1, 0.1, 4096, 10, tuple(range(11, 19))),
          Request(2, 0.2, 4096, 10, tuple(range(1, 9)))]
    s = simulate(rs, TINY).stats
    assert s["violations"] == 0 and s["requests"] == 3
    assert s["reused_pages"] == 63 and s["evictions"] == 0
    assert s["queue_p99"] > 2000 * Timing().base_s  # B waited for A's decode


def test_eviction_counts_events_checkpoints_and_pages_apart():
    s = simulate(open_workload("excerpt:conversation", 200), SimConfig(pages=4096)).stats
    assert s["evictions"] == s["checkpoints_evicted"] > 0  # Host off: every eviction releases a checkpoint
    assert s["pages_freed"] >= s["evictions"]
    h = simulate(open_workload("synthetic:1", 150), SMALL).stats
    assert h["offloads"] > 0 and h["checkpoints_evicted"] <= h["evictions"] and h["pages_freed"] > 0


def test_latency_of_one_request_follows_the_timing_model():
    timing = Timing(base_s=0.01, prefill_token_s=0.0, decode_lane_s=0.0)
    s = simulate([Request(0, 0.0, 1000, 10, (1, 2))], SimConfig(timing=timing)).stats
    # the prefill takes one iteration (1,000 tokens <= one chunk) and yields the first token; 10 decode
    # iterations follow
    assert s["queue_p50"] == 0.0 and s["ttft_p50"] == 0.01 and s["e2e_p99"] == 0.11 and s["tpot_mean"] == 0.01
    assert s["throughput_rps"] == round(1 / 0.11, 6) and s["makespan_s"] == 0.11


def test_latency_percentiles_are_ordered_and_host_copies_take_link_time():
    fast = simulate(open_workload("synthetic:1", 150), SMALL).stats
    for m in ("queue", "ttft", "tpot", "e2e"):
        assert 0 <= fast[f"{m}_p50"] <= fast[f"{m}_p90"] <= fast[f"{m}_p99"]
    assert fast["ttft_p50"] >= fast["queue_p50"] and fast["e2e_p50"] >= fast["ttft_p50"]
    assert fast["throughput_rps"] > 0 and fast["tokens_per_s"] > fast["output_tokens_per_s"] > 0
    slow = simulate(open_workload("synthetic:1", 150), replace(SMALL, timing=Timing(host_link_bytes_per_s=1e6))).stats
    assert fast["host_bytes_out"] > 0 and slow["seconds"] > fast["seconds"]


def test_timing_files_json_yaml_and_bad_input(tmp_path):
    j = tmp_path / "t.json"
    j.write_text('{"base_s": 0.02, "decode_lane_s": 0}')
    assert load_timing(str(j)) == Timing(base_s=0.02, decode_lane_s=0.0)
    pytest.importorskip("yaml")
    y = tmp_path / "t.yaml"
    y.write_text("prefill_token_s: 1.0e-5\nhost_link_bytes_per_s: 4.5e11\n")
    assert load_timing(str(y)) == Timing(prefill_token_s=1e-5, host_link_bytes_per_s=4.5e11)
    for text, why in (('{"base": 1}', "unknown key 'base'"), ('{"base_s": -1}', "non-negative"),
                      ('{"host_link_bytes_per_s": 0}', "positive"), ('{"base_s": "x"}', "number"), ("[1]", "mapping"),
                      ("{", "not JSON")):
        j.write_text(text)
        with pytest.raises(TimingFileError, match=why):
            load_timing(str(j))


def test_cli_timing_changes_latency_and_bad_files_are_one_line(tmp_path, capsys):
    t = tmp_path / "t.json"
    t.write_text('{"base_s": 0.05}')
    out = {name: tmp_path / f"{name}.json" for name in ("default", "slow")}
    assert main(["simulate", "excerpt:conversation", "--requests", "20", "--quiet", "--json", str(out["default"])]) == 0
    assert main(["simulate", "excerpt:conversation", "--requests", "20", "--quiet", "--timing", str(t), "--json",
                 str(out["slow"])]) == 0
    a, b = (json.loads(p.read_text())["stats"] for p in out.values())
    assert b["ttft_p50"] > a["ttft_p50"] and b["seconds"] > a["seconds"]
    t.write_text('{"base_s": -1}')
    assert main(["simulate", "excerpt:conversation", "--requests", "2", "--timing", str(t)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{t}:1:") and "Traceback" not in err[0]


@pytest.mark.parametrize("workload", ["excerpt:conversation", "excerpt:synthetic"])
def test_unbounded_capacity_evicts_nothing_at_the_default_concurrency(workload):
    n = 150
    cfg = unbounded_config(SimConfig(), open_workload(workload, n))
    assert cfg.unbounded and cfg.concurrency == 256 and cfg.pages is not None
    s = simulate(open_workload(workload, n), cfg).stats
    bound = reusable_pages(open_workload(workload, n), cfg.max_context)
    assert s["violations"] == 0 and s["evictions"] == 0 and s["capacity_mode"] == "unbounded"
    assert s["reused_pages"] == bound.reusable_pages and s["peak_pages"] <= s["capacity_pages"] == cfg.pages


def test_cli_pages_unbounded_reports_its_size_and_help_says_what_max_is(tmp_path, capsys):
    rep = tmp_path / "r.json"
    assert main(["simulate", "excerpt:conversation", "--requests", "30", "--pages", "unbounded", "--json",
                 str(rep)]) == 0
    stats = json.loads(rep.read_text())["stats"]
    assert stats["capacity_mode"] == "unbounded" and stats["evictions"] == 0
    assert any("unbounded capacity" in n for n in stats["notes"])
    assert "unbounded capacity" in capsys.readouterr().out
    try:
        rc = main(["simulate", "--help"])
    except SystemExit as exc:  # argparse's own exit, where the CLI does not catch it
        rc = exc.code
    assert rc in (0, None)
    text = " ".join(capsys.readouterr().out.split())
    assert "M_max = C·L" in text and "unbounded" in text and "not unbounded" in text


def test_rejections_are_refused_by_the_store_counted_and_explained(tmp_path, capsys):
    cfg = SimConfig(max_context=65536, concurrency=8, pages=1024, layers=1, kv_heads=1)
    rs = [Request(0, 0.0, 0, 5, ()), Request(1, 0.0, 70000, 5, tuple(range(137))), Request(2, 0.0, 100, 3, (5,))]
    res = simulate(rs, cfg)
    s = res.stats
    assert s["rejected"] == 2 and s["requests"] == 1 and s["violations"] == 0
    assert s["rejections"] == {"empty prompt": 1, "longer than max_context": 1}
    why = {r["request"]: r["reason"] for r in s["rejected_requests"]}
    assert why[1] == "prompt of 70,000 tokens is longer than max_context S = 65,536" and "empty" in why[0]
    # the store was asked and refused: the report counts it among its refusals
    assert [r["reason"] for r in res.trace.refusals] == ["context"] and s["refusals"] == 1
    wl = tmp_path / "w.jsonl"
    wl.write_text('{"timestamp": 0, "input_length": 140000, "output_length": 3, "hash_ids": ['
                  + ", ".join(str(i) for i in range(274)) + ']}\n{"timestamp": 1, "input_length": 10, '
                  '"output_length": 2, "hash_ids": [9]}\n')
    assert main(["simulate", str(wl)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "rejected 1 request(s): 1 longer than max_context" in out and "140,000 tokens is longer" in out


def test_host_offload_by_page_runs_fills_the_arena_that_whole_checkpoints_fragment():
    run = simulate(open_workload("synthetic:1", 150), SMALL).stats
    ckpt = simulate(open_workload("synthetic:1", 150), replace(SMALL, host_extents="checkpoint")).stats
    assert run["violations"] == ckpt["violations"] == 0
    assert run["host_fragmented_events"] == 0 and run["offload_extents"] >= run["offloads"]
    assert run["host_fill_when_full"] >= ckpt["host_fill_when_full"] and run["host_full_events"] > 0
    assert 0 < run["host_fill_mean"] <= 1
    # restores count the matched pages the requests use; pages restored past the match are apart
    for s in (run, ckpt):
        assert s["restored_pages"] <= s["reused_pages"] and s["host_bytes_in"] == s["restored_pages"] * s["page_bytes"]
    with pytest.raises(ValueError, match="host extents"):
        simulate([], replace(SMALL, host_extents="pages"))


def test_azure_traces_say_they_carry_no_prefix_data(tmp_path, capsys):
    rep = tmp_path / "r.json"
    assert main(["simulate", "excerpt:azure-conv", "--requests", "20", "--json", str(rep)]) == 0
    stats = json.loads(rep.read_text())["stats"]
    assert stats["hit_ratio"] == 0 and any("no prefix data" in n for n in stats["notes"])
    assert "no prefix data" in capsys.readouterr().out


def test_sweep_rows_carry_latency_and_an_unbounded_point():
    assert parse_axis("pages=4096,unbounded") == ("pages", [4096, "unbounded"])
    base = SimConfig(max_context=65536, concurrency=8, pages=1024, layers=1, kv_heads=1)
    rows = run_sweep("synthetic:1", 30, base, [("pages", [1024, "unbounded"])], executor="serial")
    assert [r["point"]["pages"] for r in rows] == [1024, "unbounded"]
    assert all(r["violations"] == 0 and r["ttft_p99"] >= r["ttft_p50"] > 0 for r in rows)
    assert rows[1]["evictions"] == 0 and rows[1]["capacity_pages"] > 1024
