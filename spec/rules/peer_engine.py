"""PEER-11: the engine under test (vLLM, SGLang) completes every call without raising.

The checker is the block-table judge's (sim.peers.judges.engine_judge.EngineJudge.crashed, named by dotted path: the
catalogue never imports sim); the driver in the engine's venv classifies the exception from its traceback
(sim/peers/vllm/driver.py, sim/peers/sglang/driver.py: ``crash_facts``). PEER-5 ... PEER-9 are the same judge's
and live in its RULES table; TokenSpeed's internal error is PEER-10 (sim.peers.cachetrace.contract).
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

transition_rule(
    "PEER-11", "The engine under test completes every call without raising",
    'cache concepts L112: "The scheduler asserts both when batching a plan\'s ops ... neither side dedups or '
    'invents an acknowledgement"; L319: "the pools and the coordinator assert on the same fields" -- an '
    "engine's own asserts guard the invariants the contract states, so an engine that raises has broken one",
    "kvsim.sim.peers.judges.engine_judge.EngineJudge.crashed",
    decisions="An exception raised while the engine steps (its own assert included) is a finding of the engine "
              "under test when the traceback has a frame inside the engine's package and the innermost frame is "
              "not the driver script's own code: the finding names the exception type, its message, the "
              "innermost engine frame (path relative to site-packages, e.g. vllm/v1/core/block_pool.py:NNN in "
              "get_new_blocks), the step and the request being processed (the innermost engine frame's "
              "``request`` for vLLM, the request the driver was handling for SGLang). The run stops there; every "
              "earlier finding is kept and every report written (exit 1). SGLang answers the driver cannot go on "
              "from (the allocator short after eviction, a checkpoint the tree does not hold) are reported the "
              "same way, naming the driver line that found them. An exception with no engine frame, or raised in "
              "the driver's own code, is kvsim's bug (exit 3); one before the first step is a setup the engine "
              "refused (exit 2).",
    scope="cache")
