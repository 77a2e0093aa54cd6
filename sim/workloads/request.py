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
MAX_TOKENS = 1 << 28
"""The most prompt or output tokens one request may have (268,435,456: far beyond any model's context);
a larger count is a typo in the workload, refused at its line before any memory is spent on it."""


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


def check_tokens(path: str, line: int, what: str, n: int) -> None:
    """A token count beyond `MAX_TOKENS` is an input error naming the line (never a MemoryError)."""
    if n > MAX_TOKENS:
        raise WorkloadInputError(path, line, f"{what} {n} is beyond the {MAX_TOKENS:,} tokens a request may have")


def blocks_for(prompt: int) -> int:
    """ceil(prompt / BLOCK_TOKENS): the hash ids a prompt of this length carries."""
    return -(-prompt // BLOCK_TOKENS)
