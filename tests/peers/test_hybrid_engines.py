"""vLLM's hybrid cache groups and its Host tier, driven for real (slow tier: the engine venv, 10-40 s a run).

Clean vLLM passes synthetic:hybrid-stress with full+sliding, full+mamba and all three groups, every group's paths
reached; with the Host tier it reports only the three argued findings of sim/peers/samples/README.md (a Host-served
whole-prompt hit at num_tokens - 1, placeholder stores that lost their payload, a Host store under a parent no tier
holds). Each bug planted at run time (tests/peers/hybrid_bugs.py) is caught by the rule naming the broken clause."""

import json

import pytest

from kvsim.sim.cli import main
from tests.peers import hybrid_bugs, planted
from tests.peers.test_engines import need

HYBRID = ["synthetic:hybrid-stress", "--requests", "40", "--blocks", "600"]
HOST = ["synthetic:hybrid-stress", "--requests", "65", "--blocks", "200", "--offload-blocks", "100", "--ack-delay",
        "25", "--seed", "3"]


def peer(tmp_path, name, args):
    rep = tmp_path / f"{name}.json"
    rc = main(["peer", "vllm", *args, "--engine-python", need("vllm"), "--no-timing", "--quiet", "--json", str(rep)])
    return rc, json.loads(rep.read_text())


@pytest.mark.parametrize("groups", ["full:16,sliding:16:128", "full:16,mamba:64", "full:16,sliding:16:128,mamba:64"])
def test_clean_hybrid_vllm_passes_with_every_group_path_reached(groups, tmp_path):
    rc, r = peer(tmp_path, "clean", [*HYBRID, "--kv-groups", groups])
    assert rc == 0 and r["verdict"] == "pass", r["violations"][:3]
    cov = r["stats"]["coverage"]["engine_paths"]
    assert all(cov[p] for p in cov if p.endswith(".hit") or p.endswith(".window_drop") or p.endswith("state_free"))
    assert all(r["rules"][rid]["exercised"] for rid in ("PEER-20", "PEER-21", "PEER-22") if rid in r["rules"])
    assert r["stats"]["peer"]["kv_groups"] == groups


@pytest.mark.parametrize("bug, groups, rule", [
    (hybrid_bugs.VLLM_HIT_RAISED, "full:16,sliding:16:64", "PEER-20"),
    (hybrid_bugs.VLLM_WINDOW_SHORT, "full:16,sliding:16:64", "PEER-21"),
    (hybrid_bugs.VLLM_STATE_FREED, "full:16,mamba:64", "PEER-22"),
    (hybrid_bugs.VLLM_STATE_SAME_STEP, "full:16,mamba:16", "PEER-22"),
], ids=["coordinator-raises-hit", "window-drops-a-block-early", "state-freed-early", "state-hit-same-step"])
def test_a_planted_hybrid_bug_is_caught_by_its_rule(bug, groups, rule, tmp_path, monkeypatch):
    for k, v in planted.plant(tmp_path / "hook", *bug).items():
        monkeypatch.setenv(k, v)
    rc, r = peer(tmp_path, "planted", ["synthetic:prefix-stress", "--requests", "60", "--blocks", "300",
                                       "--kv-groups", groups])
    assert rc == 1 and r["rules"][rule]["violated"] > 0
    assert r["violations"][0]["rule"] == rule, r["violations"][:3]  # the first finding names the broken clause


ARGUED = {"PEER-6": "hits 271 tokens, not a multiple", "EV-4": "placeholder store", "EV-3": "store under parent"}


def test_clean_host_tier_reports_only_the_argued_findings(tmp_path):
    rc, r = peer(tmp_path, "host", HOST)
    assert {v["rule"] for v in r["violations"]} == set(ARGUED), r["violations"][:3]
    assert all(ARGUED[v["rule"]] in v["message"] for v in r["violations"])
    cov = r["stats"]["coverage"]["engine_paths"]
    for path in ("host.store", "host.load", "host.load_sync", "host.flush", "host.hit_pending", "host.host_eviction",
                 "host.reset"):
        assert cov[path] > 0, path
    assert all(r["rules"][rid]["exercised"] for rid in ("TS-L2-1", "TS-L2-3", "TS-L2-4", "TS-L2-5", "PEER-23"))


@pytest.mark.parametrize("bug, rule", [
    (hybrid_bugs.VLLM_ACK_NOT_PUBLISHED, "PEER-23"),
    (hybrid_bugs.VLLM_PUBLISHED_BEFORE_ACK, "PEER-23"),
    (hybrid_bugs.VLLM_FLUSH_DROPPED, "TS-L2-1"),
], ids=["ack-not-published", "published-before-ack", "flush-dropped"])
def test_a_planted_host_tier_bug_is_caught_by_its_rule(bug, rule, tmp_path, monkeypatch):
    for k, v in planted.plant(tmp_path / "hook", *bug).items():
        monkeypatch.setenv(k, v)
    rc, r = peer(tmp_path, "planted", HOST)
    assert rc == 1 and r["rules"][rule]["violated"] > 0
    first = next(v for v in r["violations"] if v["rule"] not in ARGUED)
    assert first["rule"] == rule, r["violations"][:3]
