"""TRACE-*: the engine's results against the contract, and stale handles in a trace."""

from __future__ import annotations

from kvsim.kvmodel.store import mapping, observe
from kvsim.spec.catalogue import transition_rule

transition_rule("TRACE-1", "The engine's result agrees with what the contract requires",
                'store contract: "ensure_mapped_to_tokens()…只有所需页数超过 entitlement 才失败" (results are facts)',
                observe.observe_pool,
                decisions="A refusal where the model has capacity, an ok where the model must refuse, and any "
                          "observed counter/frontier the model does not have are divergences. Every request is "
                          "judged, `cow` included (an ok without a page for the copy, a refusal with one). Growth is "
                          "judged only by what the contract fixes (kvmodel.store.mapping.check_engine_growth); "
                          "choices a trace leaves out (page ids, Host offsets, a growth step) are guessed and the "
                          "engine's adopted at first sighting, never a divergence by themselves.",
                tests=("tests/rules/test_trace.py::test_trace1_keeps_agreeing_observations",
                       "tests/rules/test_trace.py::test_trace1_fires_on_diverging_pool_counters",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "block", "diff", "position", "xfer", "ckpt"))

transition_rule("TRACE-2", "No reference to an unknown or ended sequence, unit, checkpoint or transfer",
                'store contract: "generation 防止 release/reuse 后的 stale handle"', mapping.active_space,
                tests=("tests/rules/test_trace.py::test_trace2_keeps_live_references",
                       "tests/rules/test_trace.py::test_trace2_fires_on_ended_handles",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "ckpt", "pool", "block", "xfer", "unit"))
