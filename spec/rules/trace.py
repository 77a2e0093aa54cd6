"""TRACE-*: the engine's results against the contract, and stale handles in a trace."""

from __future__ import annotations

from kvsim.kvmodel.store import mapping, observe

from kvsim.spec.catalogue import transition_rule

transition_rule("TRACE-1", "The engine's result agrees with what the contract requires",
                'store contract: "ensure_mapped_to_tokens()…只有所需页数超过 entitlement 才失败" (results are facts)',
                observe.observe_pool,
                decisions="A refusal where the model has capacity, an ok where the model must refuse, and any "
                          "observed counter/frontier the model does not have are divergences.")

transition_rule("TRACE-2", "No reference to an unknown or ended sequence, unit, checkpoint or transfer",
                'store contract: "generation 防止 release/reuse 后的 stale handle"', mapping.active_space)
