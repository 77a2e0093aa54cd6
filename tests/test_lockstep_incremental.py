"""Lockstep's incremental checks (what each unit touched) agree with its whole-content audit.

Each corruption below reaches the physical pools through a path the lockstep follows (a missing COW copy, a
skipped Host restore, content written under the wrong key, a permuted table): the incremental checks alone
(audit only at the end) and the audit alone (after every unit, no incremental checks) must flag the same
rule at the same event for the same sequence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kvsim.sim.lockstep as L
from kvsim.sim.replay import replay_trace
from kvsim.sim.trace.generate import generate

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
NEVER = 1 << 62


def replay(path, incremental: bool, audit_units: int):
    return replay_trace(path, observer_factory=lambda st: L.Lockstep(st, None, audit_units, incremental))


def first(r):
    v = r.violations[0]
    return v["rule"], v["event"], v["context"].get("seq")


def skip_copies(monkeypatch):
    monkeypatch.setattr(L, "copy_pages", lambda *a, **k: None)


def skip_restores(monkeypatch):
    orig = L.unpack_pages

    def restore_nothing(pool, buf, ids):
        if (buf == 0x5A).all():  # keep scribbling over released pages
            orig(pool, buf, ids)
    monkeypatch.setattr(L, "unpack_pages", restore_nothing)


def wrong_keys(monkeypatch):
    orig = L.write_keys
    monkeypatch.setattr(L, "write_keys", lambda token, a, b: orig(token, a, b) ^ np.uint64(1))


def permuted_table(monkeypatch):
    orig = L.Lockstep._publish

    def permuted(self, pool, row):
        orig(self, pool, row)
        t = self.pools[pool].table
        if t[row, 1] >= 0:
            t[row, 0], t[row, 1] = int(t[row, 1]), int(t[row, 0])
    monkeypatch.setattr(L.Lockstep, "_publish", permuted)


@pytest.mark.parametrize("corrupt, scenario, rule", [
    (skip_copies, "fork_f1000.jsonl", "CONS-3"),
    (skip_restores, "host_offload_restore.jsonl", "CONS-3"),
    (wrong_keys, "batched_decode_nvfp4.jsonl", "CONS-3"),
    (permuted_table, "truncate_returns_leases.jsonl", "CONS-1"),
])
def test_incremental_and_audit_flag_the_same_corruption(monkeypatch, corrupt, scenario, rule):
    corrupt(monkeypatch)
    inc = replay(SCENARIOS / scenario, incremental=True, audit_units=NEVER)
    aud = replay(SCENARIOS / scenario, incremental=False, audit_units=1)
    assert inc.violations and aud.violations
    assert first(inc)[0] == rule
    assert first(inc) == first(aud)


def test_generated_workload_clean_and_checked_incrementally(tmp_path):
    path = tmp_path / "w.jsonl"
    generate(path, 600, seed=5, max_context=1024, concurrency=4)
    made = []

    def factory(st):
        made.append(L.Lockstep(st, None, 64, True))
        return made[-1]
    r = replay_trace(path, observer_factory=factory)
    assert r.violations == []
    lock = made[0]
    assert lock.units > 64 and {"follow", "incremental", "audit", "attention"} <= set(lock.timing)
    assert r.coverage.counts("CONS-3")[1] > 0


def test_untracked_corruption_is_left_to_the_audit(tmp_path):
    """A byte flipped behind the lockstep's back (no tracked path) is found by the periodic audit."""
    path = tmp_path / "w.jsonl"
    generate(path, 300, seed=2, max_context=1024, concurrency=4)
    made = []

    def factory(st):
        made.append(L.Lockstep(st, None, 16, True))
        return made[-1]
    orig = L.Lockstep.check

    def flip_then_check(self, index, line):
        if self.completed is not None and self.units == 20:
            seq = self.completed[0].seq
            page = self.st.space_of(seq, "main").pages[0].device
            self.pools["main"].planes[0]["k_code"][page].view(np.uint8).reshape(-1)[0] ^= 0xFF
        return orig(self, index, line)
    import unittest.mock as mock
    with mock.patch.object(L.Lockstep, "check", flip_then_check):
        r = replay_trace(path, observer_factory=factory)
    assert r.violations and r.violations[0]["rule"] == "CONS-3"


def test_bench_lockstep_prints_its_figures(tmp_path, capsys):
    import json

    from kvsim.sim.cli import main
    out = tmp_path / "b.json"
    assert main(["bench", "lockstep", "--events", "300", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == got
    assert got["events"] >= 300 and got["violations"] == 0 and got["profile"] == "bf16"
    assert got["seconds"] > 0 and got["events_per_s"] > 0 and set(got["timing"]) >= {"follow", "incremental"}
