"""KV-event logs: the shipped samples are clean in both wire forms; each crafted faulty log gives exactly
its finding at its line; bad input is one line naming the file and line (exit 2)."""

import json
from pathlib import Path

import pytest

from kvsim.sim.cli import main
from kvsim.sim.peers.judges.events import EventChecker, fnv1a64, read_event_log_seq
from kvsim.sim.trace import cachetrace as ct

SAMPLES = Path(__file__).resolve().parents[2] / "sim" / "peers" / "samples"
FAULTY = SAMPLES / "faulty"
EXPECT = json.loads((FAULTY / "expect.json").read_text())


def judge(path, **opts):
    form, batches = read_event_log_seq(path)
    c = EventChecker(opts.get("block_size"), opts.get("hash", "none"), opts.get("capacity"),
                     opts.get("partial_tails", False))
    for line, events, seq in batches:
        if seq is not None:
            c.sequence(seq, line)
        c.batch(events, line)
    return form, c


@pytest.mark.parametrize("name,form", [("vllm_array_sha256.jsonl", "array"),
                                       ("sglang_object_sha256.jsonl", "object")])
def test_samples_are_clean(name, form):
    got_form, c = judge(SAMPLES / name, block_size=4, hash="sha256", capacity=4)
    assert got_form == form
    assert c.findings == []
    assert c.stats["stored"] == 9 and c.stats["removed"] == 4 and c.stats["cleared"] == 1


def test_one_faulty_log_per_check():
    assert sorted({want[0] for e in EXPECT.values() for want in e["expect"]}) == [f"EV-{i}" for i in range(1, 9)]


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_faulty_log_gives_its_finding_at_its_line(name):
    _, c = judge(FAULTY / name, **EXPECT[name]["options"])
    assert sorted([f.rule, f.line] for f in c.findings) == EXPECT[name]["expect"]


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_cli_reports_the_finding(name, tmp_path, capsys):
    opts = EXPECT[name]["options"]
    args = ["events", str(FAULTY / name), "--block-size", str(opts["block_size"]), "--hash", opts["hash"],
            "--json", str(tmp_path / "r.json")]
    if "capacity" in opts:
        args += ["--capacity", str(opts["capacity"])]
    assert main(args) == 1
    out = capsys.readouterr().out
    rule, line = EXPECT[name]["expect"][0]
    assert any(text.startswith(f"{FAULTY / name}:{line}: {rule} ") for text in out.splitlines())  # never wrapped
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "fail" and report["rules"][rule]["violated"] == 1


def test_fnv1a64_framing():
    # FNV-1a 64 of the single byte 0x00 then count 0 (u64): computed by hand from the offset basis
    h = 0xCBF29CE484222325
    for byte in b"\x00" + (0).to_bytes(8, "little"):
        h = ((h ^ byte) * 0x100000001B3) & (2**64 - 1)
    assert fnv1a64(None, []) == h
    assert fnv1a64(5, [1]) != fnv1a64(None, [1])


def test_partial_tail_never_a_parent():
    c = EventChecker(block_size=4, partial_tails=True)
    c.batch([ct.BlockStored([1], None, [1, 2], 4)], 1)
    c.batch([ct.BlockStored([2], 1, [3, 4, 5, 6], 4)], 2)
    assert [(f.rule, f.line) for f in c.findings] == [("EV-3", 2)]


def test_same_hash_on_two_media_is_not_a_double_store():
    c = EventChecker(block_size=2)
    c.batch([ct.BlockStored([1], None, [1, 2], 2, None, "GPU"), ct.BlockStored([1], None, [1, 2], 2, None, "CPU")], 1)
    c.batch([ct.BlockRemoved([1], "GPU")], 2)
    assert c.findings == []


@pytest.mark.parametrize("text,reason", [
    ("not json\n", "malformed"),
    ('[1.0, [["BlockGone", [1]]], null]\n', "unknown event"),
    ('{"ts": 1, "events": [{"type": "BlockStored", "block_hashes": [1]}]}\n', "missing required field"),
    ('"just a string"\n', "event batch"),
])
def test_bad_lines_are_input_errors(tmp_path, capsys, text, reason):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"ts": 0, "events": []}\n' + text)
    assert main(["events", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:2:") and reason in err.lower() and err.count("\n") == 1


def test_fnv1a64_bulk_equals_one_by_one_and_finds_a_bad_hash():
    import random

    from kvsim.sim.peers.judges.events import fnv1a64_many
    rng = random.Random(7)
    parents = [None if rng.random() < 0.3 else rng.randrange(2**64) for _ in range(200)]
    tokens = [[rng.randrange(-2**31, 2**31) for _ in range(rng.choice([4, 4, 3, 0]))] for _ in parents]
    assert fnv1a64_many(parents, tokens) == [fnv1a64(p, t) for p, t in zip(parents, tokens, strict=True)]
    c = EventChecker(block_size=4, hash_scheme="fnv1a64")
    good = fnv1a64(None, [1, 2, 3, 4])
    c.batch([ct.BlockStored([good], None, [1, 2, 3, 4], 4)], 1)
    c.batch([ct.BlockStored([fnv1a64(good, [5, 6, 7, 8]) ^ 1], good, [5, 6, 7, 8], 4)], 2)
    c.flush()
    assert [(f.rule, f.line) for f in c.findings] == [("EV-7", 2)]


def test_every_finding_is_listed_however_many_there_are(tmp_path, capsys):
    """No fixed cap: 1,500 removals of blocks never stored are 1,500 findings listed in the JSON report (the
    judges kept the first 1,000 and the rest was counted only)."""
    log = tmp_path / "removals.jsonl"
    log.write_text("".join(json.dumps({"ts": i, "events": [{"type": "BlockRemoved", "block_hashes": [10_000 + i]}]})
                           + "\n" for i in range(1500)))
    checker = EventChecker(block_size=4)
    for i in range(1500):
        checker.batch([ct.BlockRemoved([10_000 + i])], i + 1)
    assert checker.counts["EV-1"] == 1500 and len(checker.findings) == 1500
    out = tmp_path / "r.json"
    assert main(["events", str(log), "--block-size", "4", "--json", str(out), "--quiet"]) == 1
    report = json.loads(out.read_text())
    assert len(report["violations"]) == 1500 and "violations_not_listed" not in report["stats"]
