"""The eviction-policy rules on the real engines: the clean vLLM and SGLang keep PEER-12 / PEER-13 on the
prefix-stress workload at a pool that evicts, and a policy bug planted at run time (``tests/peers/planted.py``:
an import hook on PYTHONPATH, the engine venv untouched) is caught by `kvsim peer` with exit 1 and the rule."""

import json

import pytest

from kvsim.sim.cli import main
from tests.peers import planted
from tests.peers.test_engines import need

STRESS = "synthetic:prefix-stress"


def peer(engine, tmp_path, blocks, requests, name):
    rep = tmp_path / f"{name}.json"
    rc = main(["peer", engine, STRESS, "--engine-python", need(engine), "--blocks", str(blocks), "--requests",
               str(requests), "--no-timing", "--quiet", "--json", str(rep)])
    return rc, json.loads(rep.read_text())


@pytest.mark.parametrize("engine, rule, bug", [
    ("vllm", "PEER-12", planted.VLLM_HEAD_FIRST),
    ("vllm", "PEER-12", planted.VLLM_CACHED_TO_HEAD),
    ("sglang", "PEER-13", planted.SGLANG_MRU),
])
def test_a_planted_policy_bug_is_caught_and_the_clean_engine_passes(engine, rule, bug, tmp_path, monkeypatch):
    need(engine)
    rc, clean = peer(engine, tmp_path, 100, 80, "clean")
    assert rc == 0 and clean["verdict"] == "pass", clean["violations"][:3]
    assert clean["rules"][rule]["exercised"] > 0 and clean["stats"]["kv_events"]["removed"] > 0
    monkeypatch.setenv("PYTHONPATH", planted.plant(tmp_path / "hook", *bug))
    rc, bad = peer(engine, tmp_path, 100, 80, "planted")
    assert rc == 1 and bad["rules"][rule]["violated"] > 0
    assert {v["rule"] for v in bad["violations"]} == {rule}  # the state stays legal: only the policy rule fires
