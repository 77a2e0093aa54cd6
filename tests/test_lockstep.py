"""Lockstep: the physical implementation beside the model (CONS-1..3), on every scenario and profile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kvsim.sim.lockstep as L
from kvsim.gpu.codecs import PLANE_SCHEMA
from kvsim.kvmodel.store.address_space import content_key
from kvsim.kvmodel.store.planes import profile_planes
from kvsim.sim.replay import replay_trace
from tests.test_lockstep_incremental import permuted_table

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
LEGAL = sorted(str(p.relative_to(SCENARIOS.parent)) for p in SCENARIOS.glob("*.jsonl"))
assert LEGAL, "no bundled scenarios found"
PROFILES = ("bf16", "int8", "fp8", "nvfp4", "k8v4")


def run(path, profile=None):
    return replay_trace(SCENARIOS.parent / path, observer_factory=lambda st: L.lockstep_factory(st, profile))


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path", LEGAL)
def test_every_legal_scenario_replays_clean_in_lockstep_under_every_profile(path, profile):
    r = run(path, profile)
    assert r.violations == []


def test_lockstep_checks_are_exercised():
    r = run("scenarios/fork_f1000.jsonl")
    for rule in ("CONS-1", "CONS-2", "CONS-3"):
        checked, exercised, violated = r.coverage.counts(rule)
        assert checked > 0 and exercised > 0 and violated == 0, rule


def rules_at(r):
    return sorted({(v["rule"], v["event"]) for v in r.violations})


def test_cons3_fires_when_a_cow_tail_is_not_copied(monkeypatch):
    monkeypatch.setattr(L, "copy_pages", lambda *a, **k: None)
    r = run("scenarios/fork_f1000.jsonl")
    assert r.violations and {v["rule"] for v in r.violations} == {"CONS-3"}
    assert "position 960" in r.violations[0]["message"]  # the first column of the copied 40-column tail


def test_cons3_fires_when_a_host_restore_is_skipped(monkeypatch):
    orig = L.unpack_pages

    def restore_nothing(pool, buf, ids):
        if not (buf == 0x5A).all():  # keep scribbling over released pages, skip real restores
            return None
        return orig(pool, buf, ids)
    monkeypatch.setattr(L, "unpack_pages", restore_nothing)
    r = run("scenarios/host_offload_restore.jsonl")
    assert {v["rule"] for v in r.violations} == {"CONS-3"}


def test_cons3_fires_on_content_written_under_the_wrong_key(monkeypatch):
    orig = L.write_keys
    monkeypatch.setattr(L, "write_keys", lambda token, a, b: orig(token, a, b) ^ np.uint64(1))
    r = run("scenarios/batched_decode_nvfp4.jsonl")
    assert {v["rule"] for v in r.violations} == {"CONS-3"}


def test_cons3_fires_when_attention_drifts_from_the_oracle(monkeypatch):
    orig = L.attention

    def drift(*args):
        out = orig(*args)
        out[:, 0] *= np.float32(1.001)
        return out
    monkeypatch.setattr(L, "attention", drift)
    r = run("scenarios/k8v4_profile.jsonl")
    assert {v["rule"] for v in r.violations} == {"CONS-3"}
    assert "oracle" in r.violations[0]["message"]


def test_cons1_fires_when_the_physical_table_is_permuted(monkeypatch):
    permuted_table(monkeypatch)
    r = run("scenarios/truncate_returns_leases.jsonl")
    assert r.violations and {v["rule"] for v in r.violations} == {"CONS-1"}


@pytest.mark.parametrize("entry", [-1, 0])
def test_cons2_fires_on_a_hole_or_an_alias_in_the_read_domain(entry):
    from kvsim.kvmodel.store import KVStore, StoreConfig
    st = KVStore(StoreConfig(1024, 2))
    lk = L.Lockstep(st)
    st.activate("s", 200, 0)
    st.map("s", "main", 200)
    space = st.space_of("s", "main")
    st.tables["main"].table[space.row][1] = entry  # a corrupt mirror: a hole, or block 1 aliasing block 0
    lk._publish("main", space.row)
    space.committed = 200
    found = lk.check_row("s", "main", space)
    assert [f.rule for f in found] == ["CONS-2"]


def test_vectorised_content_keys_agree_with_the_model():
    tokens = [0, 1, 2**63 + 12345, 2**64 - 1]
    for tok in tokens:
        got = L.write_keys(tok, 60, 70)
        assert [int(x) for x in got] == [content_key(tok, p) for p in range(60, 70)]


@pytest.mark.parametrize("profile", PROFILES)
def test_physical_plane_schema_matches_the_model_inventory(profile):
    mine = profile_planes(profile, 256)
    theirs = PLANE_SCHEMA[profile]
    assert [(p.part, p.role, p.extent, p.bytes_per_token_head) for p in mine] == \
        [(s.part, s.role, s.extent, s.bytes_per_token_per_head) for s in theirs]
