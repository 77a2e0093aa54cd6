"""Request workloads for the scheduler simulation: real traces (Mooncake JSONL, Azure LLM inference CSV),
a seeded synthetic generator, and the token content of a request's prompt blocks.

Every loader yields `Request` records in arrival order and streams its file (constant memory in trace
length). This package knows request shapes only: nothing of the store model, the scheduler or kvtrace/1.
"""

from kvsim.sim.workloads.open import EXCERPTS, open_workload
from kvsim.sim.workloads.request import BLOCK_TOKENS, Request, WorkloadInputError

__all__ = ["BLOCK_TOKENS", "Request", "WorkloadInputError", "EXCERPTS", "open_workload"]
