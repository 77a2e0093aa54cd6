"""The `kvsim` command line: exit codes, one-line input errors, reports, rules, capacity, bench plumbing."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim.sim.cli import main
from kvsim.sim.trace.generate import default_header, generate
from kvsim.sim.trace.stream import encode_line

HEADER = encode_line(default_header(max_context=1024, concurrency=4)).decode().rstrip("\n")


def write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines), encoding="utf-8")
    return p


@pytest.fixture(autouse=True)
def _reports(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))


def test_legal_trace_exits_0_and_writes_every_report(tmp_path, capsys):
    trace = tmp_path / "w.jsonl"
    generate(trace, 3000, seed=3, max_context=1024, concurrency=4)
    out = {k: tmp_path / f"r.{k}" for k in ("json", "junit", "markdown", "html")}
    rc = main(["replay", str(trace), "--quiet"] + [a for k, p in out.items() for a in (f"--{k}", str(p))])
    assert rc == 0
    rep = json.loads(out["json"].read_text())
    assert rep["format"] == "kvreport/1" and rep["verdict"] == "pass" and rep["inputs"][0]["events"] >= 3000
    assert all(p.stat().st_size > 0 for p in out.values())
    assert (tmp_path / "reports" / "last-run.json").exists()


def test_violating_trace_exits_1_with_rule_event_and_line(tmp_path):
    t = write(tmp_path, "bad.jsonl", [HEADER,
                                      '{"op":"activate","seq":"s","prompt":10,"budget":10}',
                                      '{"op":"map","seq":"s","pool":"main","tokens":10}',
                                      '{"op":"launch","unit":"u","rows":[{"seq":"s","pool":"main","write":[0,10]}]}',
                                      '{"op":"truncate","seq":"s","pool":"main","frontier":0}',
                                      '{"op":"complete","unit":"u","commit":[{"seq":"s","pool":"main","frontier":10}]}',
                                      '{"op":"release","ckpt":"nope"}'])
    rc = main(["replay", str(t), "--json", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 1
    rep = json.loads((tmp_path / "r.json").read_text())
    got = [(v["rule"], v["event"], v["line"], v["op"]) for v in rep["violations"]]
    assert got == [("UNIT-1", 3, 5, "truncate"), ("TRACE-2", 5, 7, "release")]


def test_stop_at_first(tmp_path):
    t = write(tmp_path, "bad.jsonl", [HEADER, '{"op":"release","ckpt":"a"}', '{"op":"release","ckpt":"b"}'])
    main(["replay", str(t), "--stop-at-first", "--json", str(tmp_path / "r.json"), "--quiet"])
    assert len(json.loads((tmp_path / "r.json").read_text())["violations"]) == 1


def test_unsupported_config_is_an_input_error_at_line_1(tmp_path, capsys):
    t = write(tmp_path, "p32.jsonl", [HEADER.replace('"page_size":64', '"page_size":32')])
    assert main(["replay", str(t)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{t}:1: unsupported config: CAP-1")


def test_missing_file_is_an_input_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "none.jsonl")]) == 2
    assert str(tmp_path / "none.jsonl") in capsys.readouterr().err


# malformed input: every kind of garbage exits 2 with one line "file:line: reason", never a traceback
GOOD = ['{"op":"activate","seq":"s","prompt":10,"budget":10}', '{"op":"map","seq":"s","pool":"main","tokens":10}']
garbage = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: b.decode("latin-1")),
    st.text(alphabet=string.printable, min_size=1, max_size=40),
    st.sampled_from(['{"op":"nope"}', '{"op":"map","seq":"s","pool":"main","tokens":"10"}',
                     '{"op":"map","seq":"s","pool":"main","tokens":1e3}', '{"op":"map","seq":"s","pool":"main"}',
                     '{"op":"map","seq":"s","pool":"main","tokens":99999999999999999999999}',
                     '{"op":"map","seq":"s","pool":"main","tokens":-1}',
                     '{"op":"map","seq":1,"pool":"main","tokens":1}',
                     '{"op":"launch","unit":"u","rows":[{"seq":"s","pool":"main","write":[5,1]}]}',
                     '[' * 5000, '{"op":"release","ckpt":"a","extra":1}', '"just a string"', 'null']),
    st.sampled_from(GOOD).map(lambda s: s[: len(s) // 2]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=garbage, where=st.integers(0, 2), header_missing=st.booleans())
def test_malformed_input_exits_2_with_file_and_line(tmp_path, capsys, bad, where, header_missing):
    import json as _json
    try:
        ok = _json.loads(bad)
        if isinstance(ok, dict) and ok.get("op") in ("activate", "map"):
            return  # a valid line drawn by chance
    except (ValueError, RecursionError):
        pass
    if bad.strip() == "" or "\n" in bad or "\r" in bad:
        bad = "{" + bad.replace("\n", " ").replace("\r", " ")
    lines = ([] if header_missing else [HEADER]) + GOOD[:where] + [bad]
    p = tmp_path / "m.jsonl"
    p.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    rc = main(["replay", str(p), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines_err = err.strip().splitlines()
    assert len(lines_err) == 1 and "Traceback" not in err
    want_line = 1 if header_missing else where + 2
    assert lines_err[0].startswith(f"{p}:{want_line}: ") or lines_err[0].startswith(f"{p}:1: ")


def test_rules_json_lists_every_rule_with_coverage_of_the_last_run(tmp_path, capsys):
    trace = tmp_path / "w.jsonl"
    generate(trace, 500, seed=1, max_context=1024, concurrency=4)
    main(["replay", str(trace), "--quiet"])
    capsys.readouterr()
    assert main(["rules", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) >= 39 and "WR-2" in ids and "TRACE-2" in ids
    assert all({"id", "title", "clause", "kind"} <= set(r) for r in rows)
    assert next(r for r in rows if r["id"] == "UNIT-1")["checked"] > 0


def test_capacity_json_matches_the_seed_tables(capsys):
    assert main(["capacity", "--backend", "mtp:4", "--profile", "k8v4", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["profiles_d256"] == {"bf16": 1024, "int8": 528, "fp8": 516, "nvfp4": 288, "k8v4": 402}
    pools = {p["pool"]: p for p in facts["pools"]}
    m = facts["capacity"]["m"]
    assert pools["mtp"]["pages"] == m + 4 * 1  # M + C·ceil((K-1)/P) with C = 4, K = 4
    assert main(["capacity", "--kv-tokens", "10"]) == 2  # below max_context: refused config


def test_bench_replay_plumbing(tmp_path):
    from kvsim.sim.cli.bench import bench_replay
    r = bench_replay(events=2000, seed=2, concurrency=4)
    assert r["events"] >= 2000 and r["violations"] == 0 and r["events_per_s"] > 0
    assert set(r) >= {"events", "seconds", "events_per_s"} and r["decode_lanes"] == 2
