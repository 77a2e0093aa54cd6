"""Shrinking a failing engine run to a minimal one that fails the same way: fewest requests, shortest prompts
and outputs, the smallest pool.

The search is greedy and deterministic (delta debugging's complement removal, then per-request halving), over
``Case``s: the requests (ids, token prompts, output lengths, arrival steps) and the pool in usable blocks. Each
candidate is one trial run of the engine (``fails`` says whether its roots still hold the target rule), so
the budget is counted in trials. Passes, repeated while any of them shrinks the case:

1. requests: the shortest prefix of the workload that still fails (a bug usually shows early), then removal of
   halves, quarters ... single requests (ddmin);
2. arrivals: every request submitted at once, else the arrival steps kept;
3. outputs: each request's output cut to one token, else halved while it still fails;
4. prompts: each request's prompt cut from its end, by halves of what is left;
5. the pool: the fewest usable blocks (never below what the largest request needs) that still fail.

Knows nothing of engines: the caller's ``fails`` runs the trial.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from kvsim.sim.peers.workload import Request

__all__ = ["Case", "Shrinker", "size"]


@dataclass(frozen=True)
class Case:
    requests: tuple[Request, ...]
    blocks: int  # usable blocks of the pool


def size(case: Case) -> tuple[int, int, int, int]:
    """(requests, prompt tokens, output tokens, blocks): what the shrinker drives down, in that order."""
    return (len(case.requests), sum(len(r.tokens) for r in case.requests),
            sum(r.max_new_tokens for r in case.requests), case.blocks)


class Shrinker:
    """``fails(case)`` runs one trial; ``budget`` trials at most; ``need(case)``: the fewest blocks the case's
    largest request fits in; ``progress(trials, case)`` after each trial."""

    def __init__(self, fails: Callable[[Case], bool], budget: int, need: Callable[[Case], int],
                 progress: Callable[[int, Case], None] | None = None) -> None:
        self.fails = fails
        self.budget = budget
        self.need = need
        self.progress = progress
        self.trials = 0
        self.best = Case((), 0)  # the smallest failing case so far (``run`` starts it at the case it is given)

    def _try(self, case: Case) -> bool:
        """Whether ``case`` still fails (one trial); the smallest failing case so far is kept in ``best``."""
        if self.trials >= self.budget or not case.requests:
            return False
        self.trials += 1
        bad = self.fails(case)
        if bad and size(case) < size(self.best):
            self.best = case
        if self.progress is not None:
            self.progress(self.trials, self.best)
        return bad

    def run(self, case: Case) -> Case:
        """The smallest failing case found from ``case`` (itself assumed failing) within the budget."""
        self.best = case
        while self.trials < self.budget:
            before = size(self.best)
            self._prefix()
            self._ddmin()
            self._arrivals()
            self._outputs()
            self._prompts()
            self._pool()
            if size(self.best) == before:
                break
        return self.best

    # -- passes ------------------------------------------------------------------------------------------------
    def _with(self, reqs: list[Request], blocks: int | None = None) -> Case:
        c = Case(tuple(reqs), self.best.blocks if blocks is None else blocks)
        return dataclasses.replace(c, blocks=max(c.blocks, self.need(c)))

    def _prefix(self) -> None:
        """The shortest failing prefix, by bisection over its length (the whole case fails)."""
        reqs = list(self.best.requests)
        lo, hi = 0, len(reqs)  # prefixes of length hi fail; of length lo: not known to
        while hi - lo > 1 and self.trials < self.budget:
            mid = (lo + hi) // 2
            if self._try(self._with(reqs[:mid])):
                hi = mid
            else:
                lo = mid
        if hi < len(reqs):
            cand = self._with(reqs[:hi])
            if size(cand) <= size(self.best):
                self.best = cand

    def _ddmin(self) -> None:
        """Remove chunks of requests, halving the chunk size down to one request."""
        n = max(1, len(self.best.requests) // 2)
        while n >= 1 and self.trials < self.budget:
            reqs = list(self.best.requests)
            i = 0
            removed = False
            while i < len(reqs) and self.trials < self.budget:
                rest = reqs[:i] + reqs[i + n:]
                if rest and self._try(self._with(rest)):
                    reqs = rest
                    self.best = self._with(reqs)
                    removed = True
                else:
                    i += n
            if not removed:
                n //= 2

    def _arrivals(self) -> None:
        reqs = list(self.best.requests)
        if any(r.arrival_step for r in reqs):
            cand = [dataclasses.replace(r, arrival_step=0) for r in reqs]
            if self._try(self._with(cand)):
                self.best = self._with(cand)

    def _outputs(self) -> None:
        for k in range(len(self.best.requests)):
            while self.trials < self.budget:
                reqs = list(self.best.requests)
                r = reqs[k]
                if r.max_new_tokens <= 1:
                    break
                shorter = 1 if r.max_new_tokens <= 2 else r.max_new_tokens // 2
                ones = [dataclasses.replace(r, max_new_tokens=1)] if shorter != 1 else []
                done = False
                for cand_r in ones + [dataclasses.replace(r, max_new_tokens=shorter)]:
                    reqs[k] = cand_r
                    if self._try(self._with(reqs)):
                        self.best = self._with(reqs)
                        done = True
                        break
                if not done or self.best.requests[k].max_new_tokens <= 1:
                    break

    def _prompts(self) -> None:
        for k in range(len(self.best.requests)):
            cut = len(self.best.requests[k].tokens) // 2
            while cut >= 1 and self.trials < self.budget:
                reqs = list(self.best.requests)
                r = reqs[k]
                if len(r.tokens) - cut < 1:
                    cut //= 2
                    continue
                reqs[k] = dataclasses.replace(r, tokens=r.tokens[:len(r.tokens) - cut])
                if self._try(self._with(reqs)):
                    self.best = self._with(reqs)
                else:
                    cut //= 2

    def _pool(self) -> None:
        """The fewest usable blocks that still fail, by bisection between the largest request's need and now."""
        lo, hi = self.need(self.best) - 1, self.best.blocks  # hi fails; lo cannot hold the largest request
        while hi - lo > 1 and self.trials < self.budget:
            mid = (lo + hi) // 2
            if self._try(self._with(list(self.best.requests), mid)):
                hi = mid
            else:
                lo = mid
        if hi < self.best.blocks:
            self.best = self._with(list(self.best.requests), hi)
