"""cachetrace/1: the committed schema is current, records round-trip, bad input is one line with its line
number, and `kvsim replay` detects the format from the header."""

import json
from pathlib import Path

import msgspec
import pytest

from kvsim.sim.cli import main
from kvsim.sim.trace import cachetrace as ct


def header(pages=10, p=4):
    return ct.Header(format=ct.FORMAT, config=ct.Config(
        scheduler="test", prefix_granularity=p, groups=[ct.Group("full", p, pages)], num_device_pages=pages))


def test_committed_schema_is_current():
    assert ct.SCHEMA_PATH.read_text(encoding="utf-8") == ct.schema_text(), \
        "spec/cachetrace.schema.json is stale: run `python -m kvsim.sim.trace.cachetrace --write-schema`"


def test_schema_names_every_record():
    doc = ct.schema_document()
    assert {"Header", "Submit", "Plan", "Result", "KvEvents", "BlockStored"} <= set(doc["$defs"])
    assert msgspec.json.decode(ct.schema_text()) == doc


def test_round_trip(tmp_path):
    path = tmp_path / "t.jsonl"
    records = [
        ct.Submit("a", [1, 2, 3, 4, 5], 2),
        ct.Plan(0, ct.Batch(["a"], 1, [5], [0], [5]), {"full": {"a": [1, 2]}}, {"full": [1, 2]}),
        ct.Result(0, [[9]], [], []),
        ct.KvEvents(0, [ct.BlockStored([2**64 - 1], None, [1, 2, 3, 4], 4), ct.BlockRemoved(["ab"]),
                        ct.AllBlocksCleared()]),
    ]
    with ct.CacheTraceWriter(path, header()) as w:
        for r in records:
            w.write(r)
    assert ct.is_cachetrace(path)
    h, lines = ct.read_cachetrace(path)
    assert h == header()
    assert [r for _, r in lines] == records


@pytest.mark.parametrize("text,line,reason", [
    ('{"format": "kvtrace/1"}\n', 1, "header"),
    ('{"format":"cachetrace/1","config":{"scheduler":"t","prefix_granularity":4,"groups":[],'
     '"num_device_pages":4}}\n{"op":"nope"}\n', 2, "op"),
    ('{"format":"cachetrace/1","config":{"scheduler":"t","prefix_granularity":4,"groups":[],'
     '"num_device_pages":4}}\n{"op":"submit","request":"a","tokens":[-1]}\n', 2, ">= 0"),
])
def test_input_errors_name_the_line(tmp_path, text, line, reason):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ct.CacheTraceInputError) as err:
        h, lines = ct.read_cachetrace(path)
        list(lines)
    assert err.value.line == line and reason in str(err.value)
    assert "\n" not in str(err.value)


def test_replay_detects_cachetrace(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    with ct.CacheTraceWriter(path, header()) as w:
        w.write(ct.Submit("a", [1, 2, 3, 4, 5], 1))
        w.write(ct.Plan(0, ct.Batch(["a"], 1, [5], [0], [5]), {"full": {"a": [0, 2]}}, {"full": [2]}))
    out = tmp_path / "r.json"
    assert main(["replay", str(path), "--json", str(out), "--quiet"]) == 1
    report = json.loads(out.read_text())
    assert report["inputs"][0]["path"] == str(path)
    assert [(v["rule"], v["line"]) for v in report["violations"]] == [("TS-POOL-4", 3)]


def test_replay_bad_cachetrace_is_exit_2(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text('{"format":"cachetrace/1","config":{}}\n')
    assert main(["replay", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:1:") and err.count("\n") == 1


def test_replay_mixes_kvtrace_and_cachetrace_in_every_format(tmp_path):
    root = Path(__file__).resolve().parents[2]
    legal = sorted((root / "scenarios").glob("*.jsonl"))[0]
    finding = root / "sim" / "peers" / "samples" / "findings" / "tail_hit.cachetrace.jsonl"
    outs = {k: tmp_path / f"r.{k}" for k in ("json", "junit", "markdown", "html")}
    args = ["replay", str(legal), str(finding), "--quiet"] + [a for k, p in outs.items() for a in (f"--{k}", str(p))]
    assert main(args) == 1
    report = json.loads(outs["json"].read_text())
    assert [i["path"] for i in report["inputs"]] == [str(legal), str(finding)]
    assert {v["rule"] for v in report["violations"]} == {"TS-PFX-1"}
    for k in ("junit", "markdown", "html"):
        assert "TS-PFX-1" in outs[k].read_text()
