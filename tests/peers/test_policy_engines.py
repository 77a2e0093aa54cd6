"""The eviction-policy rules on the real engines: the clean vLLM and SGLang keep PEER-12 / PEER-13 on the
prefix-stress workload at a pool that evicts, and a policy bug planted at run time (``tests/peers/policy_bugs.py``
through ``tests/peers/planted.py``: an import hook on PYTHONPATH, the engine venv untouched) is caught by
`kvsim peer` with exit 1 and the rule."""

import json

import pytest

from kvsim.sim.cli import main
from tests.peers import planted, policy_bugs
from tests.peers.test_engines import need

STRESS = "synthetic:prefix-stress"


def peer(engine, tmp_path, blocks, requests, name):
    rep = tmp_path / f"{name}.json"
    rc = main(["peer", engine, STRESS, "--engine-python", need(engine), "--blocks", str(blocks), "--requests",
               str(requests), "--no-timing", "--quiet", "--json", str(rep)])
    return rc, json.loads(rep.read_text())


@pytest.mark.parametrize("engine, rule, bug", [
    ("vllm", "PEER-12", policy_bugs.VLLM_HEAD_FIRST),
    ("vllm", "PEER-12", policy_bugs.VLLM_CACHED_TO_HEAD),
    ("sglang", "PEER-13", policy_bugs.SGLANG_MRU),
])
def test_a_planted_policy_bug_is_caught_and_the_clean_engine_passes(engine, rule, bug, tmp_path, monkeypatch):
    need(engine)
    rc, clean = peer(engine, tmp_path, 100, 80, "clean")
    assert rc == 0 and clean["verdict"] == "pass", clean["violations"][:3]
    assert clean["rules"][rule]["exercised"] > 0 and clean["stats"]["kv_events"]["removed"] > 0
    for k, v in planted.plant(tmp_path / "hook", *bug).items():
        monkeypatch.setenv(k, v)
    rc, bad = peer(engine, tmp_path, 100, 80, "planted")
    assert rc == 1 and bad["rules"][rule]["violated"] > 0
    assert {v["rule"] for v in bad["violations"]} == {rule}  # the state stays legal: only the policy rule fires
