"""SGLang's hybrid cache groups, driven for real (slow tier: the engine venv, 10-30 s a run): `kvsim peer sglang
--kv-groups` builds SGLang 0.5.23's UnifiedRadixCache with FULL + SWA and FULL + Mamba components on CPU.

Clean SGLang passes the bundled workload and synthetic:hybrid-stress with full+sliding, full+mamba and all three
groups, on both of its tree cores (the default native one and the Python one), every group's paths reached. Each bug
planted at run time in its SWA and Mamba components (tests/peers/hybrid_bugs.py) is caught by the rule naming the
broken clause, and that rule's finding comes first."""

import json

import pytest

from kvsim.sim.cli import main
from tests.peers import hybrid_bugs, planted
from tests.peers.test_engines import TINY, need

HYBRID = ["synthetic:hybrid-stress", "--requests", "40", "--blocks", "600"]
STRESS = ["synthetic:prefix-stress", "--requests", "60", "--blocks", "300"]
CORE = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"


def peer(tmp_path, name, args):
    rep = tmp_path / f"{name}.json"
    rc = main(["peer", "sglang", *args, "--engine-python", need("sglang"), "--no-timing", "--quiet", "--json",
               str(rep)])
    return rc, json.loads(rep.read_text())


@pytest.mark.parametrize("groups", ["full:16,sliding:16:128", "full:16,mamba:64", "full:16,sliding:16:128,mamba:64"])
@pytest.mark.parametrize("core", ["rust", "python"])
def test_clean_hybrid_sglang_passes_with_every_group_path_reached(groups, core, tmp_path, monkeypatch):
    monkeypatch.setenv(CORE, core)
    rc, r = peer(tmp_path, "clean", [*HYBRID, "--kv-groups", groups])
    assert rc == 0 and r["verdict"] == "pass", r["violations"][:3]
    cov = r["stats"]["coverage"]["engine_paths"]
    reached = (".hit", ".window_drop", ".hit_beyond_window", ".cow", ".checkpoint", ".track", ".eviction")
    assert all(cov[p] for p in cov if p.endswith(reached)), cov
    rules = ("PEER-20", "PEER-21", "PEER-22", "PEER-24", "PEER-9")
    assert all(r["rules"][rid]["exercised"] for rid in rules if rid in r["rules"])
    assert ("PEER-24" in r["rules"]) == ("mamba" in groups)
    assert r["stats"]["peer"]["kv_groups"] == groups


def test_clean_hybrid_sglang_passes_with_retractions(tmp_path, monkeypatch):
    """SGLang's own test knob retracts a decode batch every 5 forwards: retracted requests resume with a new hit."""
    monkeypatch.setenv("SGLANG_TEST_RETRACT", "1")
    monkeypatch.setenv("SGLANG_TEST_RETRACT_INTERVAL", "5")
    rc, r = peer(tmp_path, "retract", ["synthetic:hybrid-stress", "--requests", "40", "--blocks", "300",
                                       "--kv-groups", "full:16,sliding:16:128,mamba:64"])
    assert rc == 0 and r["verdict"] == "pass", r["violations"][:3]
    assert r["stats"]["coverage"]["engine_paths"]["preemption"] > 0


@pytest.mark.parametrize("groups", ["full:16,sliding:16:128", "full:16,mamba:64"])
def test_clean_hybrid_sglang_passes_the_bundled_workload(groups, tmp_path):
    rc, r = peer(tmp_path, "tiny", [str(TINY), "--blocks", "100", "--kv-groups", groups])
    assert rc == 0 and r["verdict"] == "pass", r["violations"][:3]


@pytest.mark.parametrize("bug, groups, core, rule", [
    (hybrid_bugs.SGLANG_SWA_HIT_RAISED, "full:16,sliding:16:64", "python", "PEER-20"),
    (hybrid_bugs.SGLANG_SWA_WINDOW_SHORT, "full:16,sliding:16:64", "rust", "PEER-21"),
    (hybrid_bugs.SGLANG_MAMBA_COW_DROPPED, "full:16,mamba:64", "rust", "PEER-22"),
    (hybrid_bugs.SGLANG_MAMBA_CHECKPOINT_LENGTH, "full:16,mamba:64", "rust", "PEER-24"),
], ids=["swa-validator-raises-hit", "swa-window-freed-a-page-early", "mamba-cow-dropped",
        "mamba-checkpoint-names-the-key-length"])
def test_a_planted_sglang_hybrid_bug_is_caught_by_its_rule(bug, groups, core, rule, tmp_path, monkeypatch):
    for k, v in planted.plant(tmp_path / "hook", *bug).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(CORE, core)
    rc, r = peer(tmp_path, "planted", [*STRESS, "--kv-groups", groups])
    assert rc == 1 and r["rules"][rule]["violated"] > 0
    assert r["violations"][0]["rule"] == rule, r["violations"][:3]  # the first finding names the broken clause


@pytest.mark.parametrize("groups", ["full:16,sliding:16:64", "full:16,mamba:64"])
def test_the_planted_bugs_workload_passes_clean(groups, tmp_path):
    rc, r = peer(tmp_path, "clean", [*STRESS, "--kv-groups", groups])
    assert rc == 0 and r["verdict"] == "pass", r["violations"][:3]
