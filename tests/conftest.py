"""The test tiers (pyproject's markers): the default run fits a 2-core CI runner; `slow` tests -- the ones
that build a wheel, drive the real engines in their own venvs, or fuzz seeded mutants in subprocesses -- run
in a second phase of `.ci/run` (``pytest -m slow``). They are marked here, by node id, so that the tier is one
table next to the reason for each entry; a test file that marks itself needs no entry."""

from __future__ import annotations

import pytest

SLOW = {
    # a wheel built and installed into a fresh venv (about 20 s idle, minutes on a loaded 2-core runner)
    "tests/test_wheel.py": "builds the wheel and runs kvsim from a fresh venv",
    # every install mode (pip editable default and strict, pip, wheel, uv) on each Python 3.11-3.13 present
    "tests/test_installs.py": "installs a fresh copy of the checkout in each mode, on each Python",
    # the real vLLM / SGLang schedulers, each in its own venv (torch imported per run)
    "tests/peers/test_engines.py::test_peer_run_passes_is_deterministic_and_its_log_judges_the_same":
        "drives each engine for real",
    "tests/peers/test_engines.py::test_mooncake_rows_under_a_tight_pool_pass": "drives each engine for real",
    "tests/peers/test_engines.py::test_compare_one_table": "drives every engine for real",
    "tests/peers/test_events_live.py::test_vllm_real_publisher_judged_live_with_replay":
        "a real vLLM publisher over ZMQ",
    "tests/peers/test_engines.py::test_install_engine_is_idempotent": "runs scripts/install-engine twice",
    # bugs planted into the real engines at run time (crashes, counters, eviction policy): 15-45 s each
    "tests/peers/test_engine_faults.py": "drives each engine for real with a planted bug",
    "tests/peers/test_policy_engines.py": "drives each engine for real with a planted policy bug",
    # realistic bugs planted into the real engines: few roots naming the engine frame, re-judged logs, shrinking
    "tests/peers/test_actionable_engines.py": "drives each engine for real with a planted bug, and shrinks it",
    # vLLM's hybrid groups and Host tier, clean and with bugs planted in its managers and connector: 10-40 s each
    "tests/peers/test_hybrid_engines.py": "drives vLLM's hybrid cache and Host tier for real",
    # SGLang's unified (SWA, Mamba) radix cache, clean and with bugs planted in its components: 10-30 s each
    "tests/peers/test_sglang_hybrid.py": "drives SGLang's hybrid cache for real",
    # a planted bug found, then shrunk until its counterexample replays (Hypothesis's full 300 s of shrinking)
    "tests/fuzz/test_fuzz_campaign.py::test_a_planted_bug_is_found_and_its_counterexample_replays_to_the_same_rule":
        "a fuzz campaign with full shrinking",
    # a whole ci campaign of the store machine (two minutes on a loaded 2-core runner)
    "tests/fuzz/test_reachability.py::test_a_ci_campaign_reaches_every_target_the_contract_allows":
        "a whole fuzz campaign",
    # a whole shared synthetic trace through the simulation (100 s measured on a loaded 2-core machine)
    "tests/test_simulate.py::test_unbounded_reuse_equals_the_trace_bound_on_the_whole_files[synthetic_trace.jsonl-512]":
        "a whole trace file simulated",
    # seeded mutants fuzzed in subprocesses until killed (a minute of budget each)
    "tests/mutants/test_mutants.py::test_reduced_selfcheck_kills_flags_and_reports": "fuzzes mutants until killed",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        node = item.nodeid.split("[")[0]
        if item.nodeid in SLOW or node in SLOW or node.split("::")[0] in SLOW:
            item.add_marker(pytest.mark.slow)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which tier runs (the default run leaves `slow` and `wholefile` to .ci/run and to whoever asks)."""
    marks = config.getoption("markexpr") or "every test"
    return f"kvsim test tier: -m {marks!r} (the slow tier: -m slow; whole shared workload files: -m wholefile)"
