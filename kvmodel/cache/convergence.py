"""Convergence: per-group matches settled to one common prefix boundary.

Cache concepts: "ProbePrefix is a read-only lookup of prefix hits per group ... converged to the common
prefix length across the matched groups"; "Prefix-closed groups match first; non-closed groups (SWA,
Mamba) match only within the boundary the closed groups settled". The bound only shrinks and is rounded
down to prefix_granularity; a window group left above the bound is re-matched under it until nothing
changes, so the result is the greatest boundary every group supports. A replayable group is "not matched
at all: it never constrains the boundary and never claims a hit". Pure: reads predicates, returns a
frozen record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvsim.kvmodel.cache.matchers import FullAttnMatcher, GroupProbe, SwaMatcher


@dataclass(frozen=True)
class GroupMatch:
    """One group's matching inputs: its matcher, block_granularity (tokens), cached(slot) predicate."""

    matcher: FullAttnMatcher | SwaMatcher
    block_granularity: int
    cached: Callable[[int], bool]
    replayable: bool = False


@dataclass(frozen=True)
class ConvergedProbe:
    hit_tokens: int  # the common boundary, a multiple of prefix_granularity
    probes: tuple[GroupProbe, ...]  # per group, trimmed to the boundary (replayable: empty)
    closed_tokens: int = 0  # the boundary the prefix-closed groups settled before the window groups shrank it


def match_order(groups: Sequence[GroupMatch]) -> list[int]:
    """Prefix-closed groups first, then window groups, each by group index; replayable groups left out."""
    live = [i for i, g in enumerate(groups) if not g.replayable]
    return [i for i in live if g_closed(groups[i])] + [i for i in live if not g_closed(groups[i])]


def g_closed(g: GroupMatch) -> bool:
    return g.matcher.prefix_closed


def converge(groups: Sequence[GroupMatch], bound_tokens: int, prefix_granularity: int) -> ConvergedProbe:
    def align(t: int) -> int:
        return t - t % prefix_granularity

    probes: list[GroupProbe] = [GroupProbe(0, ()) for _ in groups]

    def match(i: int, bound: int) -> int:
        g = groups[i]
        probes[i] = g.matcher.probe(g.cached, 0, bound // g.block_granularity)
        return probes[i].end * g.block_granularity

    order = match_order(groups)
    bound = align(max(bound_tokens, 0))
    closed = bound
    for i in order:
        bound = min(bound, align(match(i, bound)))
        if g_closed(groups[i]):
            closed = bound
    changed = True
    while changed:
        changed = False
        for i in order:
            g = groups[i]
            if g_closed(g) or probes[i].end * g.block_granularity <= bound:
                continue
            bound = min(bound, align(match(i, bound)))
            changed = True
    trimmed = tuple(GroupProbe(p.begin, p.hits[:max(bound // g.block_granularity - p.begin, 0)])
                    for p, g in zip(probes, groups))
    return ConvergedProbe(bound, trimmed, closed)
