"""What a fuzzing campaign has seen so far: examples, steps, machine-rule counts, catalogue coverage,
reachability (sim.fuzz.reach).

One process-wide record (`RUN`), reset by a campaign before it starts and filled by the machines as
they run (Hypothesis creates a fresh machine per example, so the totals cannot live on a machine).
`found_dir` is where the final, shrunk failing run is written (default reports/found); `last_failure`
describes it.

Oracle branches, for every machine: an oracle names its decision points once (`declare`, at import) and
counts each time a run takes one (`reached("oracle:branch")`); a campaign reports the counts of the branches
its machine declared (`RUN.branches`, zero for a blind spot), so what a run never exercised shows without a
coverage tool.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvsim.kvmodel.store.coverage import Coverage
from kvsim.sim.fuzz.reach import Reach


def default_found_dir() -> Path:
    """reports/found (the reports folder is overridable with KVSIM_REPORTS, as for every command)."""
    return Path(os.environ.get("KVSIM_REPORTS", "reports")) / "found"


DECLARED: dict[str, None] = {}  # every oracle branch name, in declaration order


def declare(names) -> None:
    """Name an oracle's branches (their prefix before the first ':' is the oracle's)."""
    for n in names:
        DECLARED[n] = None


def reached(name: str) -> None:
    """Count one visit of an oracle branch in the running campaign."""
    RUN.branches[name] = RUN.branches.get(name, 0) + 1


class CampaignStats:
    def __init__(self) -> None:
        self.reset()

    def reset(self, found_dir=None) -> None:
        found_dir = default_found_dir() if found_dir is None else found_dir
        self.examples = 0
        self.steps = 0
        self.rules: dict[str, int] = {}
        self.coverage = Coverage()
        self.branches: dict[str, int] = {}  # oracle branch -> visits (sim.fuzz.stats.reached)
        self.reach = Reach()  # the states the contract allows that the run built (sim.fuzz.reach)
        self.found_dir = found_dir
        self.last_failure: dict | None = None


RUN = CampaignStats()
