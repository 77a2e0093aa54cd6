"""A fuzzing campaign: run one machine (or all) in rounds until the time budget is spent or it fails.

Every round runs the machine under Hypothesis with a seed derived from the campaign's one seed (so the
same seed replays the same campaign), the profile's settings and the shared example database. A failure
stops the campaign: Hypothesis shrinks it, the machine writes the final run as a kvtrace/1
counterexample and the result names the rule replay reports on it. Coverage: how often each machine rule
ran, and the catalogue's checked / exercised / violated counters summed over every example; the blind
spots are the catalogue rules whose premise never held.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hypothesis.internal.conjecture import engine
from hypothesis.stateful import run_state_machine_as_test

from kvsim.sim.fuzz.database import open_database
from kvsim.sim.fuzz.profiles import profile_settings
from kvsim.sim.fuzz.reach import table
from kvsim.sim.fuzz.stats import RUN

ROUND_EXAMPLES = {"ci": 20, "deep": 40}


def machines() -> dict:
    from kvsim.sim.fuzz.cache_machine import CacheHostMachine, CacheMachine
    from kvsim.sim.fuzz.capacity_machine import CapacityMachine
    from kvsim.sim.fuzz.contract_machine import ContractMachine
    from kvsim.sim.fuzz.crash_machine import CrashMachine
    from kvsim.sim.fuzz.hash_machine import HashMachine
    from kvsim.sim.fuzz.judges import EngineJudgeMachine, EventsJudgeMachine
    from kvsim.sim.fuzz.machines import HostMachine, StoreMachine
    from kvsim.sim.fuzz.physical import LockstepMachine
    from kvsim.sim.fuzz.policy_machine import PolicyMachine
    from kvsim.sim.fuzz.recovery_machine import RecoveryMachine
    from kvsim.sim.fuzz.simulation import SimulateMachine
    return {"store": StoreMachine, "host": HostMachine, "lockstep": LockstepMachine, "capacity": CapacityMachine,
            "cache": CacheMachine,
            "cache-host": CacheHostMachine,
            "simulate": SimulateMachine,
            "judge-events": EventsJudgeMachine,
            "judge-engine": EngineJudgeMachine,
            "judge-contract": ContractMachine,
            "judge-crash": CrashMachine,
            "judge-policy": PolicyMachine,
            "judge-hash": HashMachine,
            "recovery": RecoveryMachine}


MACHINES = ("store", "host", "lockstep", "capacity",
            "cache",
            "cache-host",
            "simulate",
            "judge-events",
            "judge-engine",
            "judge-contract",
            "judge-crash",
            "judge-policy",
            "judge-hash",
            "recovery")


@dataclass
class CampaignResult:
    machine: str
    seed: int
    profile: str
    budget_s: float
    examples: int = 0
    steps: int = 0
    rounds: int = 0
    seconds: float = 0.0
    failures: list = field(default_factory=list)
    rules: dict = field(default_factory=dict)  # machine rule -> times it ran
    coverage: dict = field(default_factory=dict)  # catalogue rule -> {checked, exercised, violated}
    blind_spots: list = field(default_factory=list)  # catalogue rules whose premise never held
    reachability: dict = field(default_factory=dict)  # sim.fuzz.reach.table: targets, counts, blind spots
    branches: dict = field(default_factory=dict)  # oracle branch -> visits (sim.fuzz.stats.reached); 0: never

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def to_json(self) -> dict:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 3)
        return d


def _catalogue_ids() -> list[str]:
    """The store rules a store-model campaign can exercise: clauses no trace carries (no checker) and the
    cache concepts' TS-* rules (the `cache` machine's, over another model) are no blind spots here."""
    from kvsim.spec.catalogue import all_rules
    return [r.id for r in all_rules() if r.kind != "clause" and r.scope != "cache"]


def run_campaign(machine: str, budget_s: float, seed: int = 0, profile: str = "ci", database=None,
                 found_dir: str = "reports/found", progress=None, rounds: int | None = None) -> CampaignResult:
    """Fuzz `machine` for about `budget_s` seconds (a round never stops midway); see the package docstring.
    With `rounds`, exactly that many rounds whatever the time (the same runs on every machine: tests)."""
    cls = machines()[machine]
    db = open_database(database) if isinstance(database, (str, type(None))) else database
    cfg = profile_settings(profile, max_examples=ROUND_EXAMPLES[profile], database=db)
    result = CampaignResult(machine, seed, profile, budget_s)
    RUN.reset(None if found_dir is None else Path(found_dir))
    start = time.monotonic()
    r = 0
    # Hypothesis shrinks a failure for up to 300 s; a campaign gives it a quarter of its budget (at least 10 s)
    # so that `--budget` bounds the whole run. (A module constant read at each shrink: no public setting.)
    shrink_limit = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = max(10, min(shrink_limit, int(budget_s / 4)))
    try:
        while (r < rounds) if rounds is not None else (time.monotonic() - start < budget_s):
            cls._hypothesis_internal_use_seed = (seed * 1_000_003 + r) % (1 << 32)
            r += 1
            try:
                run_state_machine_as_test(cls, settings=cfg)
            except Exception as exc:  # noqa: BLE001 — FuzzFailure, Hypothesis' flaky report, or a machine crash
                f = RUN.last_failure or {"kind": type(exc).__name__, "rule": "", "reproduced": False,
                                         "trace": None, "message": (str(exc).splitlines() or [""])[0][:500]}
                result.failures.append(f)
                break
            finally:
                if progress is not None:
                    progress(time.monotonic() - start, RUN.examples, RUN.steps)
    finally:
        cls._hypothesis_internal_use_seed = None
        engine.MAX_SHRINKING_SECONDS = shrink_limit
    result.rounds = r
    result.seconds = time.monotonic() - start
    result.examples, result.steps = RUN.examples, RUN.steps
    result.rules = dict(sorted(RUN.rules.items()))
    cov = RUN.coverage
    ids = getattr(cls, "catalogue_ids", _catalogue_ids)()
    result.coverage = {rid: dict(zip(("checked", "exercised", "violated"), cov.counts(rid))) for rid in ids}
    result.blind_spots = [rid for rid, c in result.coverage.items() if not c["exercised"]]
    result.reachability = table(RUN.reach)
    result.branches = machine_branches(cls, RUN.branches)
    return result


def machine_branches(cls, seen: dict) -> dict:
    """The oracle branches a machine's run can reach (those its `oracles` prefixes name, default: every
    declared one) with their visit counts, zero included."""
    from kvsim.sim.fuzz.stats import DECLARED
    prefixes = getattr(cls, "oracles", None)
    names = [n for n in DECLARED if prefixes is None or n.split(":", 1)[0] in prefixes]
    return {n: seen.get(n, 0) for n in [*names, *sorted(set(seen) - set(names))]}
