"""PEER-23: a real engine's Host tier answers lookups with what it holds (vLLM's CPUOffloadingManager).

``kvsim peer vllm --offload-blocks N`` puts vLLM's OffloadingConnector and its CPUOffloadingManager behind the
scheduler, the driver playing the worker. The seed-002 Host-tier rules kvsim already had (TS-L2-1, -3, -4, -5;
their entries in ``spec/rules/cache_l2.py`` say how each reads there) judge the jobs; this rule judges the
manager's own answers. The checker is the tier judge's (sim.peers.judges.host_judge.HostTierJudge, named by dotted path:
the catalogue never imports sim).
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

transition_rule(
    "PEER-23", "The Host tier answers lookups with what it holds: published keys hit, nothing is lost, only idle "
    "keys are evicted",
    'cache concepts L154: "Indices are pool-scoped: one index serves both the Device and Host tiers of its group"; '
    'L112: "An op is acknowledged only by its copy\'s completion event ... It never acknowledges or publishes a '
    'successful copy" (a failed one); L108: "A pinned op\'s sources stay cached and unevictable until the ACK"; '
    'L189: "later unrelated keys LRU-evict older prompts"; vllm/v1/kv_offload/cpu/manager.py '
    'CPUOffloadingManager.lookup ("if not chunk.is_ready: return LookupResult.HIT_PENDING"), complete_store, '
    'prepare_store ("cache-policy removes only idle chunks")',
    "kvsim.sim.peers.judges.host_judge.HostTierJudge._lookup",
    decisions="The judge keeps every Host chunk's key and whether its store completed, from the jobs the connector "
              "issues and the completions the driver (playing vLLM's worker) reports. Every lookup the manager "
              "answers while scheduling is judged against that state: HIT only for a key whose store completed and "
              "no eviction removed (an acknowledgement publishes it; nothing is published before), HIT_PENDING only "
              "for a key whose store is in flight, MISS never for a key the tier holds ('nothing lost'). Every "
              "eviction the manager makes (prepare_store's evicted keys) must name a key the tier holds whose store "
              "completed; an eviction of a chunk a load in flight reads is TS-L2-1's. The order in which idle keys "
              "are evicted (vLLM's LRU or ARC policy, with request-scoped recency) is not judged: only that the "
              "evicted key was idle.",
    scope="cache",
    tests=("tests/peers/test_host_judge.py::test_legal_run_keeps_every_rule",
           "tests/peers/test_host_judge.py::test_a_hit_on_a_key_whose_store_is_in_flight_fires_peer_23",
           "tests/peers/test_host_judge.py::test_a_miss_on_a_key_the_tier_holds_fires_peer_23",
           "tests/peers/test_host_judge.py::test_an_eviction_of_a_key_the_tier_does_not_hold_fires_peer_23"),
    context=("chunk", "expected", "key", "result"))
