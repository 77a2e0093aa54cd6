"""Which vLLM frame last changed each block and request, and the state of the blocks a step touched: run inside
the vLLM driver's process (imported by ``driver.py`` as a sibling script module; never imported by kvsim).

Thin wrappers, installed once per process on the classes (never an edit of vLLM's files), record per block the
last pool call that handled it (``BlockPool.get_new_blocks``, ``touch``, ``free_blocks``, ``cache_full_blocks``,
``_maybe_evict_cached_block``, ``reset_prefix_cache``) -- the function that was called (file:line of its
``def``, whatever module it was defined in: a patched-in function names its own file) and the engine line that
called it -- and the last free-queue operation (``FreeKVCacheBlockQueue.popleft*``, ``remove``, ``append*``,
``prepend_n``) with the pool line that called it and that line's caller. Per request: the last
``KVCacheManager`` call made for it. A frame is interned once and sent once as text
(``vllm/v1/core/block_pool.py:816 in free_blocks``); steps carry frame ids.

At the end of each step ``take`` reports every block changed in it (and every block whose free-queue neighbour
changed) as it stands: ``[block, ref_cnt, queued, links_ok, hashed, pool frame, queue frame]`` (a block whose
links are broken adds ``prev, prev points back, next, next points back``, -1 a sentinel, -2 none) -- the facts the
engine's own asserts rely on (``get_new_blocks`` asserts ``ref_cnt == 0`` of what the queue hands out; ``remove``
raises on a block without neighbours) -- and the step's evictions: blocks the queue handed out, blocks whose
hash was removed, and evictions of blocks the step did not hand out. kvsim judges them (PEER-14, PEER-15);
this module only reads. ``walk`` is the whole free queue and cached-block map, read every ``probe_every``
steps and when the engine raised.
"""

import os
import sys
import time
from typing import Any

HERE = {os.path.abspath(__file__), os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.py")}
NO_FRAME = -1


class Ledger:
    """The per-block / per-request last-change frames of one trial and the blocks touched since ``take``."""

    def __init__(self, root: str) -> None:
        self.root = root                      # the folder holding the vllm package (site-packages)
        self.ids: dict[tuple, int] = {}       # frame key -> id
        self.fresh: list[list] = []           # [id, text] of frames not yet sent
        self.block: dict[int, int] = {}       # block id -> frame id of the last pool call that handled it
        self.queue: dict[int, int] = {}       # block id -> frame id of the last free-queue operation on it
        self.req: dict[str, int] = {}         # request id -> frame id of the last KVCacheManager call for it
        self.dirty: set[int] = set()          # blocks a pool call or queue operation handled since ``take``
        self.near: set[int] = set()           # blocks whose free-queue neighbour changed since ``take``
        self.dirty_req: set[str] = set()
        self.popped: set[int] = set()         # blocks the free queue handed out since ``take``
        self.evicted: list[int] = []          # blocks whose cached hash was removed since ``take``
        self.stray: list[list] = []           # [block, frame] evictions of blocks not handed out
        self.published: list[list] = []       # [event hash, frame] of the BlockStored events built since ``take``
        self.changes = 0                      # pool calls and queue operations so far (the walk's trigger)
        self.clearing = False                 # inside reset_prefix_cache (its evictions are the ClearCache)
        self.cost = 0.0                       # seconds spent in this bookkeeping (a judge cost, not vLLM's)

    # -- frames ------------------------------------------------------------------------------------------------
    def _where(self, code: Any, line: int) -> str:
        fn = code.co_filename
        shown = os.path.relpath(fn, self.root) if fn.startswith(self.root + os.sep) else os.path.basename(fn)
        return f"{shown}:{line} in {code.co_name}"

    def frame(self, verb: str, func: Any, depth: int = 2) -> int:
        """The id of ``verb`` by ``func`` (a code object), called from the first caller frame outside kvsim's
        own files (``depth`` frames up from here)."""
        f: Any = sys._getframe(depth)
        while f is not None and f.f_code.co_filename in HERE:
            f = f.f_back
        key = (verb, func, None if f is None else f.f_code, 0 if f is None else f.f_lineno)
        fid = self.ids.get(key)
        if fid is None:
            fid = self.ids[key] = len(self.ids)
            text = f"{verb} by {self._where(func, func.co_firstlineno)}"
            if f is not None:
                text += f", called from {self._where(f.f_code, f.f_lineno)}"
            self.fresh.append([fid, text])
        return fid

    def queue_frame(self, verb: str, func: Any, depth: int = 2) -> int:
        """The id of a free-queue operation: the queue method (``func``), the line that asked for it and that
        line's caller."""
        f: Any = sys._getframe(depth)
        while f is not None and f.f_code.co_filename in HERE:
            f = f.f_back
        up: Any = f.f_back if f is not None else None
        while up is not None and up.f_code.co_filename in HERE:
            up = up.f_back
        key = (verb, func, None if f is None else f.f_code, 0 if f is None else f.f_lineno,
               None if up is None else up.f_code, 0 if up is None else up.f_lineno)
        fid = self.ids.get(key)
        if fid is None:
            fid = self.ids[key] = len(self.ids)
            text = f"{verb} by {self._where(func, func.co_firstlineno)}"
            if f is not None:
                text += f", called from {self._where(f.f_code, f.f_lineno)}"
            if up is not None:
                text += f" (from {self._where(up.f_code, up.f_lineno)})"
            self.fresh.append([fid, text])
        return fid

    # -- what a step touched -----------------------------------------------------------------------------------
    def take(self, pool: Any) -> dict:
        """The step's facts (see the module docstring), then a clean slate for the next step."""
        t0 = time.perf_counter()
        blocks = pool.blocks
        rows = []
        for b in sorted(self.dirty | self.near):
            if not 0 <= b < len(blocks):
                continue
            blk = blocks[b]
            if blk.is_null:
                continue
            prev, nxt = blk.prev_free_block, blk.next_free_block
            queued = prev is not None or nxt is not None
            links = (prev is None and nxt is None) or (prev is not None and nxt is not None
                                                       and prev.next_free_block is blk and nxt.prev_free_block is blk)
            row = [b, blk.ref_cnt, int(queued), int(links), int(blk.block_hash is not None),
                   self.block.get(b, NO_FRAME), self.queue.get(b, NO_FRAME)]
            if not links:  # which neighbour disagrees: its own last queue operation is likely the cause
                row += [-2 if prev is None else prev.block_id, int(prev is not None and prev.next_free_block is blk),
                        -2 if nxt is None else nxt.block_id, int(nxt is not None and nxt.prev_free_block is blk)]
            rows.append(row)
        q = pool.free_block_queue
        head, tail = q.fake_free_list_head, q.fake_free_list_tail
        first, last = head.next_free_block, tail.prev_free_block
        ends = (head.prev_free_block is None and tail.next_free_block is None and first is not None
                and last is not None and first.prev_free_block is head and last.next_free_block is tail)
        out: dict = {"blocks": rows, "requests": sorted([r, self.req[r]] for r in self.dirty_req if r in self.req),
                     "frames": self.fresh, "ends_ok": ends,
                     "evictions": {"handed": len(self.popped), "evicted": len(self.evicted), "stray": self.stray}}
        if self.published:
            out["hashes"] = self.published
        self.fresh, self.stray, self.evicted, self.published = [], [], [], []
        self.dirty, self.near, self.dirty_req, self.popped = set(), set(), set(), set()
        self.cost += time.perf_counter() - t0
        return out


CURRENT: list = [None]   # the ledger of the trial running now (wrappers are installed once per process)


def install() -> None:
    """Wrap vLLM's pool, free-queue and cache-manager methods (class-level, once per process)."""
    from vllm.v1.core import block_pool as bp
    from vllm.v1.core import kv_cache_manager as km
    from vllm.v1.core import kv_cache_utils as ku

    if getattr(bp.BlockPool, "_kvsim_ledger", False):
        return
    clock = time.perf_counter
    pool_cls, queue_cls, mgr_cls = bp.BlockPool, ku.FreeKVCacheBlockQueue, km.KVCacheManager

    def mark(led: Ledger, fid: int, blocks: Any) -> None:
        led.changes += 1
        for b in blocks:
            bid = b.block_id
            if bid >= 0:
                led.block[bid] = fid
                led.dirty.add(bid)

    def pool_call(name: str, verb: str, blocks_of: Any) -> None:
        orig = getattr(pool_cls, name)
        code = orig.__code__

        def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            led = CURRENT[0]
            if led is None:
                return orig(self, *args, **kw)
            t0 = clock()
            args, got = blocks_of(args, kw)
            t1 = clock()
            out = orig(self, *args, **kw)
            t2 = clock()
            handled = got(out)
            if handled:
                mark(led, led.frame(verb, code), handled)
            led.cost += (t1 - t0) + (clock() - t2)
            return out
        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        setattr(pool_cls, name, wrapper)

    def listed(args: tuple, kw: dict) -> tuple[tuple, Any]:
        """The first argument (an iterable of blocks) made a list, so both the call and the record see it."""
        if args:
            blocks = [b for b in args[0]]
            return (blocks, *args[1:]), lambda _out: blocks
        key = next(iter(kw))
        kw[key] = blocks = list(kw[key])
        return args, lambda _out: blocks

    def cached(args: tuple, kw: dict) -> tuple[tuple, Any]:
        names = ("request", "blocks", "num_cached_blocks", "num_full_blocks")
        given = dict(zip(names, args, strict=False)) | {k: v for k, v in kw.items() if k in names}
        blocks = given.get("blocks") or []
        lo, hi = given.get("num_cached_blocks", 0), given.get("num_full_blocks", len(blocks))
        return args, lambda _out: blocks[lo:hi]

    pool_call("get_new_blocks", "allocated", lambda a, k: (a, lambda out: out or ()))
    pool_call("touch", "touched (a prefix hit)", listed)
    pool_call("free_blocks", "freed", listed)
    pool_call("cache_full_blocks", "cached", cached)

    evict = pool_cls._maybe_evict_cached_block
    evict_code = evict.__code__

    def evict_watched(self: Any, block: Any) -> bool:
        led = CURRENT[0]
        done = evict(self, block)
        if done and led is not None:
            t0 = clock()
            fid = led.frame("evicted", evict_code)
            led.block[block.block_id] = fid
            led.dirty.add(block.block_id)
            led.evicted.append(block.block_id)
            if block.block_id not in led.popped and not led.clearing:
                led.stray.append([block.block_id, fid])
            led.cost += clock() - t0
        return done
    pool_cls._maybe_evict_cached_block = evict_watched

    def clearing(name: str) -> None:
        """Evictions inside ``name`` are no stray ones: reset_prefix_cache (ClearCache), evict_blocks (a KV
        connector's documented eviction of blocks it reports invalid)."""
        orig = getattr(pool_cls, name, None)
        if orig is None:
            return

        def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            led = CURRENT[0]
            if led is not None:
                led.clearing = True
            try:
                return orig(self, *args, **kw)
            finally:
                if led is not None:
                    led.clearing = False
        setattr(pool_cls, name, wrapper)

    clearing("reset_prefix_cache")
    clearing("evict_blocks")

    def queue_op(name: str, verb: str, kind: str) -> None:
        orig = getattr(queue_cls, name)
        code = orig.__code__
        nearby = f"re-linked (a free-queue neighbour {verb.split(' ', 1)[0]})"

        def wrapper(self: Any, *args: Any) -> Any:
            led = CURRENT[0]
            if led is None:
                return orig(self, *args)
            t0 = clock()
            head, tail = self.fake_free_list_head, self.fake_free_list_tail
            if kind == "many":
                args = (list(args[0]), *args[1:])
            around = []
            if name == "remove":
                around = [args[0].prev_free_block, args[0].next_free_block]
            elif name == "prepend_n":
                around = [head.next_free_block]
            elif kind != "pop":
                around = [tail.prev_free_block]
            t1 = clock()
            out = orig(self, *args)
            t2 = clock()
            if kind == "pop":
                blocks = out if isinstance(out, list) else [out]
                around = [head.next_free_block]
                led.popped.update(b.block_id for b in blocks)
            else:
                blocks = args[0] if kind == "many" else [args[0]]
            led.changes += 1
            moved = {b.block_id for b in blocks}
            side = [n.block_id for n in around if n is not None and n.block_id >= 0 and n.block_id not in moved]
            if side:  # their links changed too: the last operation on their links is this one
                fid = led.queue_frame(nearby, code)
                for b in side:
                    led.queue[b] = fid
                    led.near.add(b)
            if blocks:
                fid = led.queue_frame(verb, code)
                for b in blocks:
                    if b.block_id >= 0:
                        led.queue[b.block_id] = fid
                        led.dirty.add(b.block_id)
            led.cost += (t1 - t0) + (clock() - t2)
            return out
        setattr(queue_cls, name, wrapper)

    queue_op("popleft", "popped from the free queue's head", "pop")
    queue_op("popleft_n", "popped from the free queue's head", "pop")
    queue_op("remove", "taken out of the free queue", "one")
    queue_op("append", "appended to the free queue", "one")
    queue_op("append_n", "appended to the free queue", "many")
    queue_op("prepend_n", "prepended to the free queue", "many")

    build = getattr(pool_cls, "_build_block_stored_event", None)
    if build is not None:  # the event a router sees: which vLLM frame built each stored hash (and its parent)
        build_code = build.__code__

        def build_watched(self: Any, *args: Any, **kw: Any) -> Any:
            event = build(self, *args, **kw)
            led = CURRENT[0]
            if led is not None:
                t0 = clock()
                fid = led.frame("published (its BlockStored event built)", build_code)
                for h in getattr(event, "block_hashes", None) or ():
                    if isinstance(h, int):
                        led.published.append([h, fid])
                led.cost += clock() - t0
            return event
        pool_cls._build_block_stored_event = build_watched

    def request_call(name: str, verb: str) -> None:
        orig = getattr(mgr_cls, name)
        code = orig.__code__

        def wrapper(self: Any, request: Any, *args: Any, **kw: Any) -> Any:
            led = CURRENT[0]
            out = orig(self, request, *args, **kw)
            if led is not None:
                t0 = clock()
                rid = request.request_id
                led.req[rid] = led.frame(verb, code)
                led.dirty_req.add(rid)
                led.cost += clock() - t0
            return out
        setattr(mgr_cls, name, wrapper)

    request_call("get_computed_blocks", "looked up (prefix match)")
    request_call("allocate_slots", "given slots")
    request_call("free", "freed")
    request_call("cache_blocks", "cached")
    pool_cls._kvsim_ledger = True


def walk(pool: Any) -> dict:
    """The whole free queue and cached-block map, read from their own structures: blocks whose neighbours do not
    point back at them, a walk that does not end at the tail (a cycle or a dangling link), blocks walked twice,
    blocks with ``ref_cnt == 0`` the walk never reached (lost to the pool), blocks with a negative ``ref_cnt``,
    hashed blocks missing from the cached-block map or mapped under another hash, and every nonzero ``ref_cnt``
    (``refs``: flat ``[block, ref_cnt, ...]``). O(pool): every ``probe_every`` steps and when vLLM raised."""
    q = pool.free_block_queue
    head, tail = q.fake_free_list_head, q.fake_free_list_tail
    seen: set[int] = set()
    asym: list[int] = []
    twice: list[int] = []
    b = head.next_free_block
    prev = head
    limit = len(pool.blocks) + 2
    steps = 0
    while b is not None and b is not tail and steps <= limit:
        steps += 1
        if b.prev_free_block is not prev and len(asym) < 16:
            asym.append(b.block_id)
        if b.block_id in seen:
            twice.append(b.block_id)
            break
        seen.add(b.block_id)
        prev, b = b, b.next_free_block
    ended = b is tail and tail.prev_free_block is prev
    lost, negative, refs = [], [], []
    for blk in pool.blocks:
        if blk.is_null:
            continue
        r = blk.ref_cnt
        if r:
            refs += [blk.block_id, r]
        if r < 0:
            negative.append(blk.block_id)
        elif r == 0 and blk.block_id not in seen:
            lost.append(blk.block_id)
    unmapped: list[int] = []
    cache = pool.cached_block_hash_to_block
    for blk in pool.blocks:
        h = blk.block_hash
        if h is not None and not cache.contain(h, blk.block_id) and len(unmapped) < 16:
            unmapped.append(blk.block_id)
    return {"queue_walk": len(seen), "queue_count": q.num_free_blocks, "queue_ended": ended, "asym": asym,
            "twice": twice, "lost": lost[:16], "lost_n": len(lost), "negative": negative[:16], "refs": refs,
            "unmapped": unmapped}
