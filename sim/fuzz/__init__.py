"""Stateful fuzzing against an abstract oracle, with replayable kvtrace/1 counterexamples.

Modules: `oracle` (the abstract specification: content lists, distinct-page accounting; never imports the
model), `view` (the narrow read interface through which the oracle sees the model), `refine` (the
refinement check, as `observe` events), `driver` (the model driven through kvtrace/1, counterexamples
written and replayed), `machines` / `physical` (the RuleBasedStateMachines `store`, `host`, `lockstep`),
`cache_oracle` / `cache_machine` (the cache-concepts model against a naive oracle of seed 002: the machines
`cache`, `cache-host`), `simulation` / `sim_reference` (the machine `simulate`: `kvsim simulate`'s engine
against an independent reference of its policy), `judges` (`judge-events`, `judge-engine`: the KV-event and
engine judges against `refengine`, a reference engine, with single faults from `event_faults` or its own bug
list), `recovery_machine` (`recovery`, ids used again after their end among its episodes), the judges' own
machines, each against a reference that imports nothing of kvsim: `contract_machine` (`judge-contract`:
TokenSpeed's cachetrace/1 contract judge against `ts_reference` / `ts_host` with the bugs of `ts_faults`),
`policy_machine` (`judge-policy`: PEER-12/13 and the deep counters against `ref_queue` and `ref_radix`),
`crash_machine` (`judge-crash`: PEER-11's classification against `crash_reference`), `hash_machine`
(`judge-hash`: EV-7's block hashes against `hash_reference`), `capacity_machine` (`capacity`: the store's
capacity formula against `capacity_reference`); `campaign` (runs within a budget), `profiles` (Hypothesis
settings `ci` and `deep`), `database` (directory or Redis example database), `stats` (what a campaign saw).

Entry point for `kvsim fuzz`, and for a self-check that runs it in a subprocess with a mutated copy of
the `kvsim` package first on `sys.path` (the machines import the model through `kvsim.kvmodel...` at call
time, so the copy is what they drive):

    from kvsim.sim.fuzz.campaign import run_campaign
    result = run_campaign("store", budget_s=10.0, seed=0, profile="ci", database=None,
                          found_dir="reports/found")

- `machine`: a name of `campaign.MACHINES` ("store", "host", "lockstep", "capacity", "cache", "cache-host",
  "simulate", "judge-events", "judge-engine", "judge-contract", "judge-crash", "judge-policy", "judge-hash",
  "recovery").
- `budget_s`: seconds; rounds of examples run until it is spent or a failure is found (shrinking a failure
  is limited to a quarter of the budget, at least 10 s).
- `seed`: one integer; every draw of the campaign derives from it. `profile`: "ci" or "deep".
- `database`: None, a directory path, "redis://host:port", or a Hypothesis ExampleDatabase.
- `found_dir`: where the shrunk failing run is written as `<machine>-<hash>.jsonl` (None: reports/found).
- Returns a `CampaignResult` (`.to_json()` gives a plain dict): `machine`, `seed`, `profile`, `budget_s`,
  `examples`, `steps`, `rounds`, `seconds`, `failures`, `rules` (machine rule -> times it ran),
  `coverage` (catalogue rule -> {checked, exercised, violated}), `blind_spots` (catalogue rules whose
  premise never held), `branches` (oracle branch -> visits, zero for one never reached: `stats.reached`).
  `result.failed` is true when a failure was found; each failure is a dict:
  `rule` (the first rule `kvsim replay` reports on the written trace; "INTERNAL" for a crash inside the
  model; "ORACLE-<kind>" when the difference cannot be stated in kvtrace/1, e.g. replica validity),
  `kind` (violation | outcome | accepted | changed | refinement | content | audit | crash | physical |
  reference: the simulator and its reference disagree, "ORACLE-reference"; its `trace` is then a Mooncake
  workload and `command` the `kvsim simulate` line that serves it),
  `message`, `trace` (path of the counterexample), `reproduced` (replay reports `rule` on it), `steps`,
  `replay` (what replay said); a cache machine's failure names no trace but `log`, its step log.
"""
