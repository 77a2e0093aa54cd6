"""What a fuzzing campaign has seen so far: examples, steps, machine-rule counts, catalogue coverage.

One process-wide record (`RUN`), reset by a campaign before it starts and filled by the machines as
they run (Hypothesis creates a fresh machine per example, so the totals cannot live on a machine).
`found_dir` is where the final, shrunk failing run is written (None: nowhere); `last_failure` describes it.
"""

from __future__ import annotations

from kvsim.kvmodel.store.coverage import Coverage


class CampaignStats:
    def __init__(self):
        self.reset()

    def reset(self, found_dir=None) -> None:
        self.examples = 0
        self.steps = 0
        self.rules: dict[str, int] = {}
        self.coverage = Coverage()
        self.found_dir = found_dir
        self.last_failure: dict | None = None


RUN = CampaignStats()
