"""The `cache` and `cache-host` fuzz machines (sim.fuzz.cache_machine) as pytest state machines: random
request lifecycles over random cache groups and pool sizes, every step judged by the naive cache oracle
(sim.fuzz.cache_oracle) and every TS-* state rule. `kvsim fuzz --machine cache` runs the same machines
within a time budget; this runs a fixed, derandomized handful of examples."""

from __future__ import annotations

from kvsim.sim.fuzz.cache_machine import CacheHostMachine, CacheMachine
from kvsim.sim.fuzz.profiles import profile_settings

TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = profile_settings("ci", max_examples=40, stateful_step_count=30)

TestCacheHostMachine = CacheHostMachine.TestCase
TestCacheHostMachine.settings = profile_settings("ci", max_examples=30, stateful_step_count=40)
