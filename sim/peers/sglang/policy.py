"""PEER-13: SGLang's radix cache evicts unlocked leaves, least recently accessed first.

SGLang's own statement of the policy (sglang/srt/mem_cache/radix_cache.py, ``RadixCache.evict``): the heap is
built from ``evictable_leaves`` -- nodes with no live child and ``lock_ref == 0`` (``_update_leaf_status``) --
keyed by ``eviction_strategy.get_priority(node)``, which for the default ``eviction_policy="lru"``
(cache_init_params.py) is ``LRUStrategy``: ``node.last_access_time`` (evict_policy.py). Each pop frees the
leaf's pages and deletes it; a parent left without children and unlocked is pushed in turn. ``last_access_time``
is refreshed by ``match_prefix`` and ``insert`` along the path they walk. SGLang's docs call this "LRU eviction
of the radix tree's leaves" (docs/advanced_features/server_arguments: ``--radix-eviction-policy lru``). Seed
002 L199 states the cache's side: "select eviction candidates ... using one policy: LRU access epoch"; L38:
eviction asks what is "held only by the cache".

The driver reads the tree before each ``evict`` call (every node's parent, lock count, the order of its
``last_access_time`` and its pages) and which nodes the call removed; that is data, not a verdict. This module
replays the policy on it: starting from the unlocked leaves, it peels the least recently accessed leaf (ties:
any of them), pushing a parent once its last child is gone. Every removed node must be peeled before any node
the call kept: a removed node that is locked, or that still had a kept child, or that was chosen while an
unlocked leaf with an older access stayed, is a violation.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from kvsim.spec.catalogue import get

if TYPE_CHECKING:
    from kvsim.sim.peers.judges.engine_judge import EngineJudge

RULE = "PEER-13"
# its title, seed clause and decisions as the engine judge's report lists them: from its catalogue entry
# (spec.rules.peer_policy)
RULES = {RULE: get(RULE).stated("engine")[:2]}
DECISIONS = {RULE: get(RULE).stated("engine")[2]}


def judge_eviction(ev: dict) -> str | None:
    """None when the removed nodes are what SGLang's LRU peeling allows; else why not (one line)."""
    nodes = ev["nodes"]
    removed = set(ev["evicted"])
    if not removed:
        return None
    kids = [0] * len(nodes)
    for parent, *_ in nodes:
        if parent >= 0:
            kids[parent] += 1
    heap = [(n[2], i) for i, n in enumerate(nodes) if kids[i] == 0 and n[1] == 0]
    heapq.heapify(heap)
    left = set(removed)
    while left:
        if not heap:
            i = min(left)
            why = "locked" if nodes[i][1] else "not a leaf: a child it kept"
            return f"evicts the node at page {nodes[i][3]} ({nodes[i][4]} pages), which is {why}"
        rank = heap[0][0]
        tied = []
        while heap and heap[0][0] == rank:
            tied.append(heapq.heappop(heap)[1])
        pick = [i for i in tied if i in left]
        if not pick:
            j = min(left, key=lambda i: (nodes[i][2], i))
            if nodes[j][1] or kids[j]:
                why = "locked" if nodes[j][1] else "not a leaf: a child it kept"
                return f"evicts the node at page {nodes[j][3]} ({nodes[j][4]} pages), which is {why}"
            c = tied[0]
            return (f"evicts the node at page {nodes[j][3]} ({nodes[j][4]} pages, access order {nodes[j][2]}) while "
                    f"the unlocked leaf at page {nodes[c][3]} ({nodes[c][4]} pages, access order {nodes[c][2]}), "
                    "accessed earlier, stays")
        i = pick[0]
        for t in tied:
            if t != i:
                heapq.heappush(heap, (rank, t))
        left.discard(i)
        parent = nodes[i][0]
        if parent >= 0:
            kids[parent] -= 1
            if kids[parent] == 0 and nodes[parent][1] == 0:
                heapq.heappush(heap, (nodes[parent][2], parent))
    return None


class LruLeaves:
    """The PEER-13 checker: fed each step message by ``EngineJudge``."""

    __slots__ = ()
    RULES = RULES
    DECISIONS = DECISIONS

    def before(self, judge: EngineJudge, msg: dict, line: int) -> None:
        for k, ev in enumerate(msg.get("evictions", ())):
            judge.premise[RULE] += 1
            why = judge_eviction(ev)
            if why is not None:
                judge.find(RULE, line, f"evict call {k + 1} of the step (for {ev['need']} tokens) {why}",
                           call=k + 1, need=ev["need"])

    def after(self, judge: EngineJudge, msg: dict) -> None:
        """Nothing to do after the forward: the driver's snapshots carry what the policy needs."""


def checker(usable: int) -> Any:
    """The PEER-13 checker (the pool size plays no part)."""
    return LruLeaves()
