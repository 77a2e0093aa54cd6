"""PEER-12: vLLM evicts cached blocks in its free queue's order -- least recently freed first, a finished
request's tail before its head.

vLLM's own statement of the policy (vllm/v1/core/kv_cache_utils.py, ``FreeKVCacheBlockQueue``): "When a block
is allocated and then freed, it will be appended back with the eviction order: 1. The least recent used block
is at the front (LRU). 2. If two blocks have the same last accessed time (allocated by the same sequence), the
one with more hash tokens (the tail of a block chain) is at the front. Note that we maintain this order by
reversing the block order when free blocks of a request." The reversal is
``single_type_kv_cache_manager.free``: ``free_blocks(reversed(...))`` ("Free blocks in reverse order so that
the tail blocks are freed first"); ``block_pool.free_blocks`` appends blocks that carry a hash to the queue's
tail ("FIFO reuse of cached blocks for LRU eviction behavior") and prepends blocks without one ("LIFO reuse of
non-cached blocks"); ``get_new_blocks`` takes ``popleft_n`` -- the head -- and a popped block that carries a
hash is evicted (``_maybe_evict_cached_block``: one BlockRemoved); ``touch`` takes a hit block out of the
queue. vLLM's docs (design/prefix_caching.md) say the same: "evict the block with the least recent access
time", ties broken by "the block at the end of the longest prefix".

This module keeps its own copy of that queue, from the step messages only (never from vLLM's structures): the
cached free blocks in the order they were freed (a step's preemptions, then its finishes; within one request's
release, its table reversed), the blocks free without content (never used, or freed before their block was
full). On every step that evicts -- a block handed out fresh while it held cached content -- the evicted set
must be what ``popleft`` allows: no block without content left free from before the step (those sit ahead of
every cached block), and no cached free block left behind that was freed strictly earlier (an earlier step's
release, or the same request's release with a smaller position). Blocks freed by different requests in one
step are not ordered against each other (vLLM frees them in its own iteration order). Seed 002 L36 ("the
global empty-parent FIFO") and L199 ("LRU access epoch") state the cache's side of the same policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvsim.spec.catalogue import get

if TYPE_CHECKING:
    from kvsim.sim.peers.judges.engine_judge import EngineJudge

RULE = "PEER-12"
# its title, seed clause and decisions as the engine judge's report lists them: from its catalogue entry
# (spec.rules.peer_policy)
RULES = {RULE: get(RULE).stated("engine")[:2]}
DECISIONS = {RULE: get(RULE).stated("engine")[2]}


class FreeQueue:
    """The policy's copy of vLLM's free queue, fed by ``EngineJudge`` at two points of each step."""

    __slots__ = ("cached", "empty", "epoch")
    RULES = RULES
    DECISIONS = DECISIONS

    def __init__(self, usable: int) -> None:
        # cached free block -> (release epoch, releasing request, position in its release, step, request id)
        self.cached: dict[int, tuple[int, int, int, int, str]] = {}
        self.empty: set[int] = set(range(1, usable + 1))  # free without content: block 0 is vLLM's null block
        self.epoch = 0

    # -- releases -----------------------------------------------------------------------------------------------
    def _release(self, judge: EngineJudge, rids: list[str], step: int, prepended: set[int] | None) -> None:
        """Requests giving their tables back (in reverse table order), as ``free_blocks`` does."""
        self.epoch += 1
        gone: dict[int, int] = {}
        for g, rid in enumerate(rids):
            r = judge.reqs.get(rid)
            if r is None:
                continue
            for pos, blk in enumerate(reversed(r.table)):
                gone[blk] = gone.get(blk, 0) + 1
                if judge.holders.get(blk, 0) - gone[blk] > 0:
                    continue
                if blk in judge.content:
                    self.cached[blk] = (self.epoch, g, pos, step, rid)
                else:
                    self.empty.add(blk)
                    if prepended is not None:
                        prepended.add(blk)  # prepended during the step: not ahead of this step's evictions

    # -- the step -----------------------------------------------------------------------------------------------
    def before(self, judge: EngineJudge, msg: dict, line: int) -> None:
        """At the start of a step, before the judge updates anything: preemptions, hits, allocations, and the
        check of this step's evictions."""
        step = msg["step"]
        prepended: set[int] = set()  # freed without content during this step: not ahead of its evictions
        pre = sorted(msg.get("preempted", ()))
        if pre:
            self._release(judge, pre, step, prepended)
        bs = judge.bs
        fresh: list[tuple[str, int, int]] = []
        for rid, resumed, blocks, computed in msg.get("cached", ()):
            if resumed:
                self._named(rid, list(blocks or ()), computed // bs, fresh)
            elif blocks:
                for i, blk in enumerate(blocks):
                    fresh.append((rid, -1 - i, blk))
        for rid, computed, blocks in msg.get("new", ()):
            self._named(rid, list(blocks), computed // bs, fresh)
        evicted: list[tuple[str, int, int, tuple]] = []
        for rid, slot, blk in fresh:
            was = self.cached.pop(blk, None)
            if was is not None:
                evicted.append((rid, slot, blk, was))
            else:
                self.empty.discard(blk)
        if evicted:
            judge.premise[RULE] += 1
            self._check(judge, evicted, prepended, line)

    def _named(self, rid: str, blocks: list[int], hit: int, fresh: list) -> None:
        for i, blk in enumerate(blocks):
            if i < hit:
                self.cached.pop(blk, None)  # touched: a hit takes the block out of the queue
            else:
                fresh.append((rid, i, blk))

    def _check(self, judge: EngineJudge, evicted: list, prepended: set[int], line: int) -> None:
        """Cost: the blocks still free without content (none, in a run that keeps the rule) and the cached
        blocks freed no later than the latest evicted one (what is left of its release, in such a run)."""
        evicted.sort(key=lambda e: e[3][:3], reverse=True)
        empty = next((b for b in self.empty if b not in prepended), None)  # free since before the step
        if empty is not None:
            rid, _slot, blk, (_ep, _g, _pos, st, owner) = evicted[0]
            judge.find(RULE, line, f"{rid} evicts block {blk} (cached, freed by {owner} at step {st}) while block "
                       f"{empty}, free without content, is ahead of every cached block in vLLM's free queue",
                       request=rid, block=blk, ahead=empty)
            return
        last = evicted[0][3][0]
        first: tuple | None = None
        nearest: dict[tuple[int, int], tuple] = {}  # (release, request) -> its first block left (nearest tail)
        for b, rank in self.cached.items():
            if rank[0] > last:
                break  # insertion order is release order: nothing later can be ahead
            if first is None:
                first = (b, *rank)
            nearest.setdefault(rank[:2], (b, *rank))
        for rid, _slot, blk, (ep, g, pos, st, owner) in evicted:
            ahead = first if first is not None and first[1] < ep else None
            why = "earlier"
            if ahead is None:
                near = nearest.get((ep, g))
                if near is not None and near[3] < pos:
                    ahead, why = near, f"by the same request, {pos - near[3]} block(s) nearer its tail"
            if ahead is not None:
                b, _ep2, _g2, _pos2, st2, owner2 = ahead
                judge.find(RULE, line, f"{rid} evicts block {blk} (freed by {owner} at step {st}) while block {b} "
                           f"(freed {why}, by {owner2} at step {st2}) stays cached: vLLM's free queue pops the least "
                           "recently freed block first, a request's tail before its head", request=rid, block=blk,
                           ahead=b)
                return

    def after(self, judge: EngineJudge, msg: dict) -> None:
        """After the step's forward, before its finished requests leave: their tables go back to the queue."""
        fin = sorted(msg.get("finished", ()))
        if fin:
            self._release(judge, fin, msg["step"], None)


def checker(usable: int) -> Any:
    """The PEER-12 checker for a pool of ``usable`` blocks (block 0 excluded)."""
    return FreeQueue(usable)
