"""The reference engine with vLLM's free queue: the engine the `judge-policy` machine drives for PEER-12 and vLLM's
PEER-9 deep counters.

Written from vLLM's own statement of the policy (vllm/v1/core/kv_cache_utils.py ``FreeKVCacheBlockQueue``, read as
documentation, never imported): free blocks sit in one queue and new blocks are taken from its head
(``popleft``); a block taken while it carries a hash (a full block some forward computed) is evicted
(``_maybe_evict_cached_block``: one ``BlockRemoved``); a finished request's blocks are freed in reverse table order
("so that the tail blocks are freed first"), each whose ``ref_cnt`` drops to 0 appended to the queue's tail when it
carries a hash ("FIFO reuse of cached blocks for LRU eviction behavior") or prepended when it does not ("LIFO reuse
of non-cached blocks"); a hit ``touch``es its blocks, taking those with ``ref_cnt == 0`` out of the queue. Every
full block carries a hash and is published (``BlockStored``), a second block with the same content too -- a second
copy. The queue's length is kept in a counter of its own (``num_free_blocks``), and every step reports the deep
counters a driver reads from vLLM's structures (``probe``: the queue walked from its head, the counter, the blocks
in the queue with ``ref_cnt > 0``, the sum of ``ref_cnt``).

``POLICY_FAULTS`` are bugs of that queue and its counters; each fires once at its first occasion from step
``fault_step`` and records (rule, step) in ``fired``. Imports nothing of kvsim but its sibling reference engine.
"""

from __future__ import annotations

from collections import OrderedDict

from .refengine import RefEngine, Req, fnv1a64

# queue / counter bug -> the rule the engine judge must report at the step it shows
POLICY_FAULTS = {
    "evict-out-of-order": "PEER-12",   # a cached block freed later is evicted before the queue's head
    "evict-before-empty": "PEER-12",   # a cached block evicted while a block without content is free
    "head-first-free": "PEER-12",      # a finished request's blocks freed in table order, not reversed
    "touch-keeps-in-queue": "PEER-9",  # a hit on a free-queue block left in it (PEER-8 when taken fresh again)
    "free-count-drift": "PEER-9",      # num_free_blocks not incremented for one freed block
    "lost-from-queue": "PEER-9",       # a freed cached block counted free but never linked into the queue
    "ref-sum-drift": "PEER-9",         # a hit's block gets ref_cnt += 2
}

# what a bug may also break in the step it shows: a touched block taken fresh again is aliased, its hit names it and the
# eviction that took it publishes under a removed parent
SAME_STEP = {"touch-keeps-in-queue": {"PEER-7", "PEER-9", "EV-1", "EV-2", "EV-3"}}


class VllmQueueRef(RefEngine):
    """RefEngine's request handling and step messages over vLLM's free queue (FNV-1a 64 event hashes)."""

    def __init__(self, block_size: int, num_blocks: int, lazy: bool = False, fault: str | None = None,
                 fault_step: int = 0) -> None:
        super().__init__(block_size, num_blocks, "fnv1a64", lazy)
        self.qfault, self.fault_step = fault, fault_step
        self.queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self.num_free = num_blocks - 1
        self.hash_of: dict[int, tuple] = {}             # block -> the prefix whose hash it carries
        self.copies: dict[tuple, list[int]] = {}        # prefix -> blocks carrying its hash (first: the oldest)
        self.hashes: dict[tuple, int] = {}              # prefix -> its event hash (a pure function of the prefix)
        self.freed_at: dict[int, int] = {}              # block -> the step it was last freed in
        self.rank: dict[int, int] = {}                  # head-first-free: the buggy release's block -> true position
        self.rank_step = -1                             # the step of that release
        self.kept: list[int] = []                       # touch-keeps-in-queue: the hit block left in the queue
        self.aliased = False                            # ... and taken fresh again in the same step
        self.taken: list[tuple[int, int]] = []          # head-first-free: blocks of that release taken this step
        self.popped: list[tuple[int, int]] = []         # (cached block this step took, the step it had been freed in)
        self.odd: list[tuple[int, int]] = []            # the same, for blocks a planted bug took out of order

    def _fire(self, name: str) -> bool:  # the queue's own bugs (RefEngine's list is not planted here)
        if self._try(name):
            self.fired.append((POLICY_FAULTS[name], self.step_no))
            return True
        return False

    def _try(self, name: str) -> bool:
        """The planted bug ``name`` acts now (a bug whose effect shows only later is recorded where it shows)."""
        return self.qfault == name and not self.fired and self.step_no >= self.fault_step

    # -- hashes and the cache
    def _hash(self, prefix: tuple) -> int:
        h = self.hashes.get(prefix)
        if h is None:
            parent = prefix[:-self.bs]
            h = self.hashes[prefix] = fnv1a64(self._hash(parent) if parent else None, list(prefix[-self.bs:]))
        return h

    def _match(self, r: Req) -> list[int]:
        out = []
        for i in range((r.prompt - 1) // self.bs):
            got = self.copies.get(tuple(r.tokens[:(i + 1) * self.bs]))
            if not got:
                break
            out.append(got[0])
        return out

    def _available(self, hit: list[int]) -> int:
        return len(self.queue) - sum(1 for b in hit if b in self.queue) - self.promised

    def _cache(self, r: Req, i: int, events: list) -> None:
        """Block i of r is full: it carries its prefix's hash and is published (a second copy too)."""
        prefix = tuple(r.tokens[:(i + 1) * self.bs])
        blk = r.table[i]
        if blk in self.hash_of:
            return
        self.hash_of[blk] = prefix
        self.copies.setdefault(prefix, []).append(blk)
        parent = prefix[:-self.bs]
        events.append({"type": "BlockStored", "block_hashes": [self._hash(prefix)],
                       "parent_block_hash": self._hash(parent) if parent else None,
                       "token_ids": list(prefix[-self.bs:]), "block_size": self.bs, "lora_id": None, "medium": "GPU"})

    def _uncache(self, blk: int, events: list) -> None:
        prefix = self.hash_of.pop(blk)
        self.copies[prefix].remove(blk)
        if not self.copies[prefix]:
            del self.copies[prefix]
        events.append({"type": "BlockRemoved", "block_hashes": [self._hash(prefix)], "medium": "GPU"})

    # -- the queue
    def _take(self, events: list, holder: Req, later: bool = False) -> int:
        """popleft: the queue's head (a block carrying a hash is evicted) -- unless a planted bug takes another."""
        blk = next(iter(self.queue))
        if blk in self.hash_of:
            freed = self.freed_at.get(blk, -1)
            later_ones = [b for b in self.queue if b in self.hash_of and self.freed_at.get(b, -1) > freed]
            if later_ones and self._try("evict-out-of-order"):
                blk = later_ones[-1]
                self.odd.append((blk, self.freed_at.get(blk, -1)))
        elif self.freed_at.get(blk, -1) < self.step_no and self._try("evict-before-empty"):
            cached = [b for b in self.queue if b in self.hash_of]
            if cached:
                blk = cached[0]
                self.odd.append((blk, self.freed_at.get(blk, -1)))
        del self.queue[blk]
        self.num_free -= 1
        if blk in self.kept:
            self.aliased = True
        if blk in self.rank:  # (a ClearCache since took its hash, not its place in the queue)
            self.taken.append((blk, self.freed_at.get(blk, -1)))
        if blk in self.hash_of:
            self.popped.append((blk, self.freed_at.get(blk, -1)))
            self._uncache(blk, events)
        self.refs[blk] += 1
        return blk

    def _touch(self, hit: list[int]) -> None:
        for blk in hit:
            if self.refs[blk] == 0 and blk in self.queue:
                if self._try("touch-keeps-in-queue") and not self.kept:
                    self.kept.append(blk)  # shown by this step's probe -- or, taken again, as an aliased block
                else:
                    del self.queue[blk]
                    self.num_free -= 1
            self.refs[blk] += 2 if self._fire("ref-sum-drift") else 1

    def _release(self, r: Req) -> None:
        order = list(reversed(r.table))
        if not self.rank and self._try("head-first-free"):  # it shows at the eviction it reorders (``_shows``)
            self.rank = {b: k for k, b in enumerate(order) if b in self.hash_of}  # the blocks freed as cached ones
            self.rank_step = self.step_no
            order.reverse()
        first: list[int] = []
        last: list[int] = []
        for blk in order:
            if not 0 < blk < self.num_blocks:
                continue
            self.refs[blk] -= 1
            if self.refs[blk] == 0:
                (last if blk in self.hash_of else first).append(blk)
        for blk in reversed(first):  # prepend_n: the first block freed ends at the head
            self.queue[blk] = None
            self.queue.move_to_end(blk, last=False)
        if last and self._fire("lost-from-queue"):
            last.pop()  # the bug: counted free, never linked into the queue
            self.num_free += 1
        for blk in last:
            self.queue[blk] = None
        for blk in first + last:
            self.freed_at[blk] = self.step_no
        self.num_free += len(first) + len(last)
        if first + last and self._fire("free-count-drift"):
            self.num_free -= 1
        r.table = []

    def clear(self) -> dict:
        """reset_prefix_cache with nothing running: every block loses its hash; the queue keeps its order."""
        if self.running:
            raise RuntimeError("ClearCache while requests run")
        self.hash_of.clear()
        self.copies.clear()
        return self._message({}, [{"type": "AllBlocksCleared"}])

    # -- the step message
    def step(self) -> dict:
        self.popped, self.odd, self.taken = [], [], []
        return super().step()

    def _shows(self) -> None:
        """Record a policy bug at the step whose evictions show it: a block evicted while a cached block freed in an
        earlier step stays, or (the same release) one nearer its tail stays; or while an empty block stays free."""
        if self.fired:
            return
        if self.kept:
            # taken fresh again while the hit holds it: an aliased block; else the probe shows it
            self.fired.append(("PEER-8" if self.aliased else "PEER-9", self.step_no))
            return
        if self.qfault not in ("evict-out-of-order", "evict-before-empty", "head-first-free"):
            return
        # what the step's allocations left in the queue (its finishes, freed this step, come after them)
        left = [(b, self.freed_at.get(b, -1)) for b in self.queue
                if b in self.hash_of and self.freed_at.get(b, -1) < self.step_no]
        if self.qfault == "head-first-free":
            mine = [self.rank[b] for b in self.queue if b in self.rank and self.freed_at.get(b) == self.rank_step]
            seen = any(at == self.rank_step and any(k < self.rank[b] for k in mine) for b, at in self.taken)
        elif self.qfault == "evict-out-of-order":
            seen = any(o_at < at for _b, at in self.odd for _o, o_at in left)
        else:
            seen = bool(self.odd) and any(b not in self.hash_of and self.freed_at.get(b, -1) < self.step_no
                                          for b in self.queue)
        if seen:
            self.fired.append((POLICY_FAULTS[self.qfault], self.step_no))

    def _message(self, msg: dict, events: list) -> dict:
        self._shows()
        out = super()._message(msg, events)
        out["free_blocks"] = self.num_free
        out["cached_blocks"] = len(self.copies)
        q = list(self.queue)
        referenced = [b for b in q if self.refs[b] > 0]
        out["probe"] = {"free_walk": len(q), "free_count": self.num_free, "free_referenced": len(referenced),
                        "free_referenced_ids": referenced[:8], "ref_sum": sum(self.refs.values()),
                        "free_list_broken": False}
        return out
