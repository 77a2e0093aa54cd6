"""One serving request as the simulation sees it, and the error every workload loader raises.

A request is an arrival time, a prompt length, an output length and the prompt's block ids: block i
covers prompt tokens [512·i, 512·(i+1)) and equal ids at equal positions mean equal content (the Mooncake
convention, "one id per 512-token prompt block"). Loaders for traces without prefix information give every
block a fresh id, so nothing is shared.
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCK_TOKENS = 512
"""Tokens per hash id (Mooncake's block size)."""


@dataclass(frozen=True, slots=True)
class Request:
    rid: int  # 0-based position in the workload (arrival order)
    arrival: float  # seconds since the workload's start
    prompt: int  # prompt tokens
    output: int  # output tokens to generate
    hash_ids: tuple  # one id per BLOCK_TOKENS prompt tokens, len == ceil(prompt / BLOCK_TOKENS)


class WorkloadInputError(Exception):
    """A malformed workload: ``str()`` is one line ``"<path>:<line>: <reason>"`` (exit code 2)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path, self.line, self.reason = str(path), line, " ".join(str(reason).split())[:240]
        super().__init__(f"{self.path}:{self.line}: {self.reason}")


def blocks_for(prompt: int) -> int:
    """ceil(prompt / BLOCK_TOKENS): the hash ids a prompt of this length carries."""
    return -(-prompt // BLOCK_TOKENS)
