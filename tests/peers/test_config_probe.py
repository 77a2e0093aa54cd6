"""TS-GEO-3..7: the configuration gate probed through the bindings. On the real wheel (skipped without it) the
probes that agree keep their rules and the wheel's disagreements fire; a stand-in package that accepts every
configuration and names page_size fires every rule; the standalone reproducer answers like kvsim's probes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvsim.sim.peers.tokenspeed import config_probe as cp

REPRODUCER = Path(__file__).resolve().parents[2] / "sim" / "peers" / "samples" / "findings" / "config_gate.py"
RULES = ("TS-GEO-3", "TS-GEO-4", "TS-GEO-5", "TS-GEO-6", "TS-GEO-7")

LAX = '''
page_size = 16
class SchedulerConfig:
    pass
class AttnKind:
    Full, SlidingWindow, State = 0, 1, 2
class CacheGroupConfig:
    def __init__(self, *args, **kwargs):
        pass
    def validate(self):
        pass
class Scheduler:
    def __init__(self, config=None):
        pass
class CapacityModel:
    def __init__(self, config):
        pass
'''


@pytest.fixture(scope="module")
def wheel():
    pytest.importorskip("tokenspeed_scheduler")
    return {o.probe: o for o in cp.run_probes()}


@pytest.fixture(scope="module")
def lax(tmp_path_factory):
    """Every probe against a stand-in tokenspeed_scheduler that accepts everything and exports page_size."""
    d = tmp_path_factory.mktemp("lax")
    pkg = d / "tokenspeed_scheduler"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(LAX)
    sys.path.insert(0, str(d))
    saved = sys.modules.pop("tokenspeed_scheduler", None)
    try:
        import importlib
        mod = importlib.import_module("tokenspeed_scheduler")
        env = {**os.environ, "PYTHONPATH": str(d)}
        return {o.probe: o for o in cp.run_probes(env=env, module=mod)}
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("tokenspeed_scheduler", None)
        if saved is not None:
            sys.modules["tokenspeed_scheduler"] = saved


def rules_that_disagree(outcomes):
    return sorted({o.rule for o in outcomes.values() if not o.agrees})


@pytest.mark.rule("TS-GEO-4", "keeps")
@pytest.mark.rule("TS-GEO-5", "keeps")
@pytest.mark.rule("TS-GEO-6", "keeps")
@pytest.mark.rule("TS-GEO-7", "keeps")
def test_the_wheels_gate_refuses_sliding_state_and_bad_spans_and_its_bindings_are_grep_zero(wheel):
    for name in ("state_sliding", "full_bg_0", "swa_bg_0", "full_bg_48", "full_bg_32", "scheduler_without_config",
                 "capacity_bad_geometry", "capacity_without_pages", "scheduler_without_pages", "bindings_vocabulary"):
        assert wheel[name].agrees, wheel[name]
    assert "only a sliding-window group carries sliding_window_tokens" in wheel["state_sliding"].detail


@pytest.mark.rule("TS-GEO-3", "fires")
@pytest.mark.rule("TS-GEO-6", "fires")
def test_the_wheels_findings_state_group_span_and_chunk_budget(wheel):
    """Findings (seed L62, L64, L318, L319): the wheel refuses a State group of block_granularity P or P/2 and
    accepts 0; it accepts a State group with a 32-token chunk budget under P = 64."""
    assert rules_that_disagree(wheel) == ["TS-GEO-3", "TS-GEO-6"]
    assert [n for n, o in wheel.items() if not o.agrees] == ["state_bg_p", "state_bg_half", "state_bg_0",
                                                             "state_chunk_below_p"]
    assert "block_granularity must be 0" in wheel["state_bg_p"].detail


@pytest.mark.rule("TS-GEO-3", "keeps")
def test_a_gate_that_accepts_the_seeds_state_spans_keeps(lax):
    assert lax["state_bg_p"].agrees and lax["state_bg_half"].agrees and lax["full_bg_32"].agrees


@pytest.mark.rule("TS-GEO-4", "fires")
@pytest.mark.rule("TS-GEO-5", "fires")
@pytest.mark.rule("TS-GEO-7", "fires")
def test_a_gate_that_accepts_everything_fires_every_rule(lax):
    assert rules_that_disagree(lax) == list(RULES)
    assert lax["bindings_vocabulary"].got == "present" and "name tokenspeed_scheduler.page_size" in \
        lax["bindings_vocabulary"].detail


def test_probe_config_cli_reports_the_wheels_findings(tmp_path, capsys):
    pytest.importorskip("tokenspeed_scheduler")
    from kvsim.sim.cli import main
    out = tmp_path / "probe.json"
    assert main(["peer", "tokenspeed", "--probe-config", "--json", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    import re
    assert [re.match(r"\(config probe\):(\d+): (\S+) ", ln).groups() for ln in lines[:-1]] == \
        [("1", "TS-GEO-3"), ("2", "TS-GEO-3"), ("3", "TS-GEO-3"), ("9", "TS-GEO-6")]
    assert lines[-1].startswith("FAIL: 4 of 14 configuration probes disagree")
    doc = json.loads(out.read_text())
    assert len(doc["probes"]) == 14 and len(doc["findings"]) == 4
    assert main(["peer", "tokenspeed", "--probe-config", str(REPRODUCER)]) == 2


def test_the_standalone_reproducer_answers_like_kvsims_probes(wheel):
    r = subprocess.run([sys.executable, str(REPRODUCER)], capture_output=True, text=True, check=True)
    got = {d["probe"]: d["accepted"] for d in map(json.loads, r.stdout.splitlines())}
    assert got == {n: o.got == "accepted" for n, o in wheel.items() if n != "bindings_vocabulary"}


def test_every_config_rule_is_catalogued_and_tested_both_ways():
    from kvsim.spec.catalogue import all_rules
    assert set(RULES) == set(cp.RULES) and set(RULES) <= {r.id for r in all_rules()}
    assert {p.rule for p in cp.PROBES} | {"TS-GEO-7"} == set(RULES)
    marks = {(m.args[0], m.args[1]) for f in globals().values() if callable(f)
             for m in getattr(f, "pytestmark", []) if m.name == "rule"}
    assert {(rid, k) for rid in RULES for k in ("keeps", "fires")} <= marks


@pytest.mark.parametrize("argv,flag", [(["peer", "tokenspeed"], "WORKLOAD is required"),
                                       (["peer", "vllm", "--probe-config"], "--probe-config"),
                                       (["peer", "tokenspeed", str(REPRODUCER.parents[1] / "tiny_workload.jsonl"),
                                         "--no-state-checkpoints"], "--state-group")])
def test_peer_cli_option_errors_exit_2(argv, flag, capsys):
    from kvsim.sim.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and err.count("\n") == 1
