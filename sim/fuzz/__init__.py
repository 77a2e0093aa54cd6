"""Stateful fuzz campaigns against the abstract oracle (kvtrace/1 in, counterexamples out).

Public entry point, for `kvsim fuzz` and for a self-check that runs in a subprocess with a mutated copy of
the `kvsim` package first on `sys.path`:

    from kvsim.sim.fuzz.campaign import run_campaign
    result = run_campaign(machine="store", budget_s=10.0, seed=0, profile="ci",
                          database=None, found_dir=Path("reports/found"))

- `machine`: "store", "host" or "lockstep" (names in `MACHINES`).
- `budget_s`: wall-clock budget in seconds; the campaign stops at the first failure or when it runs out.
- `seed`: one integer; every draw of the campaign derives from it.
- `profile`: "ci" or "deep" (Hypothesis settings profiles registered in `sim/fuzz/profiles.py`).
- `database`: None, a directory path, or "redis://host:port".
- Returns a `CampaignResult` (msgspec Struct; `.to_json()` gives the plain dict) with `machine`, `seed`,
  `examples`, `steps`, `seconds`, `failures` (each: `rule` — the catalogue rule id, or "ORACLE-<what>" when
  the refinement check against the oracle fails, or "CRASH" for an exception inside the model — `message`,
  `trace` — the path of the written kvtrace/1 counterexample — and `steps`), `coverage` (rule -> times its
  premise held) and `blind_spots` (rules whose premise never held).  `result.failed` is true when a failure
  was found; `result.failures[0].rule` is the rule that caught it.

The machines (RuleBasedStateMachines) live in `sim/fuzz/machines/`; `tests/fuzz/` runs them as ordinary
pytest tests, and HypoFuzz runs those tests unchanged.
"""
