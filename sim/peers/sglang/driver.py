"""kvsim's driver for SGLang's real radix cache, run as a script by the engine venv's python (never imported by
kvsim).

It imports only SGLang (with what it ships: torch, msgspec) and the standard library. SGLang's Scheduler class
needs model workers, so this driver plays the scheduler's part around the real cache objects -- the calls
``sglang.srt.managers.scheduler`` and ``sglang.srt.mem_cache.common`` make, in their order:

* submission: every request before the first step, or, where kvsim gives a request an ``arrive`` step, before
  that step (at once when nothing is queued or running);
* admission (FCFS, at most ``max_num_seqs`` running, ``max_num_batched_tokens`` per step): ``match_prefix`` on
  the prompt less its last token (``adjust_max_prefix_ids``), ``lock`` of the matched node, then the pages of
  the first chunk from the allocator (``PagedTokenToKVPoolAllocator`` on CPU tensors; ``TokenToKVPoolAllocator``
  at page size 1), evicting from the tree (``evict``) when the allocator runs short. A request is admitted only
  when its whole remaining prompt and output fit beside what running requests still need (SGLang's
  PrefillAdder with a new-token ratio of 1), so no running request is ever retracted;
* after each prefill chunk, the radix cache's own ``checkpoint`` sequence (``cache_unfinished_req``):
  ``insert`` of the page-aligned computed tokens, free of the duplicate pages the insert exposed, re-match,
  adoption of the tree's pages into the request's row, ``unlock`` of the old node and ``lock`` of the new;
* one token per decode step, a page from the allocator when the row's last page is full;
* at finish (``release_kv_cache``): the same checkpoint over prompt and output, free of the pages the tree did
  not take, ``unlock``.

Per step it writes one JSON line on stdout: the tables (page ids) handed out, each ``evict`` call with the
tree as it stood before (parent, lock count, access order, pages of every node) and the nodes it removed (for
PEER-13), the pages swapped to the tree's canonical copies, tokens scheduled and produced, finished requests,
the tree's sizes, the free pages, and the cache's KV events taken after the step (SGLang's wire form
``[ts, [event, ...]]``, ``ts`` = step). Anything SGLang prints goes to stderr.

Two more things ride on each step line, read from SGLang's own structures in this process:

* ``paths``: how often this step took each engine path a cache bug hides in (``PATHS``), counted at the
  driver's own calls and by thin wrappers around ``RadixCache._split_node`` / ``_delete_leaf`` / ``reset``
  (class-level, in this process only). This driver never retracts a request, so retraction is not a path here;
* ``probe`` (every ``probe_every`` steps and at the last): the tree walked from its root -- the tokens of
  unlocked and locked nodes against ``evictable_size_`` / ``protected_size_``, every node's ``lock_ref`` against
  the locks this driver holds at or below it, and the evictable leaves found against the tree's own
  ``evictable_leaves`` set; kvsim turns a disagreement into PEER-9.

With ``clear_at_end`` the run ends, once every request has finished, with SGLang's flush: ``reset()`` of the
tree and ``clear()`` of the allocator, reported as one more step with ``cleared``.

When SGLang raises while stepping, the driver writes ``{"crash": ...}`` (type, message, the innermost frame
inside the sglang package relative to site-packages, the step and the request being processed); an
exception raised in this script's own code is ``{"bug": ...}``, except ``EngineFault``: an engine answer the
driver cannot go on from (the allocator short after eviction, a checkpoint the tree does not hold), reported
as a crash of the engine.
"""

import json
import os
import sys
import time
import traceback
import zlib
from array import array
from typing import Any

import ledger  # noqa: E402 -- a sibling script module (sim/peers/sglang/ledger.py), found through sys.path[0]


def warm_up(page_size: int) -> None:
    """SGLang's one-off start-up costs, paid before the first step so that no step's cost carries them (they are
    start-up, reported as ``import_s``): the module the scheduler imports per admission, and the native page-hash
    extension its tree loads at the first insert (compiled on a venv's first run: seconds to tens of seconds).
    A failure here is left for the run itself to meet and report where it happens."""
    try:
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams  # noqa: F401
        from sglang.srt.mem_cache.utils import get_hash_str
        get_hash_str([1] * page_size, None, page_size)
    except Exception:  # noqa: BLE001 -- the run meets it again, with its own classification
        pass


def use_standins() -> None:
    """scripts/install-engine leaves a torchvision stand-in in VENV/kvsim-standins (PyPI's torchvision does not
    load beside CPU torch; SGLang's model configs import it at module level). transformers is first asked, so
    it caches "torchvision absent" and never takes its torchvision paths; then the folder joins sys.path."""
    folder = os.path.join(sys.prefix, "kvsim-standins")
    if not os.path.isdir(folder):
        return
    from transformers.utils import import_utils
    import_utils.is_torchvision_available()
    sys.path.append(folder)


# the engine paths counted per step (names shared with kvsim's sim.peers.sglang.paths)
PATHS = ("hit_evictable", "whole_prompt_hit", "second_copy", "eviction", "eviction_next_to_locked", "node_split",
         "clear_cache")


class EngineFault(RuntimeError):
    """SGLang answered a call in a way the scheduler cannot go on from (its own code would fail next)."""


def crash_facts(exc: BaseException, package: str, where: dict) -> dict:
    """The exception as kvsim reports it: type, message, the innermost frame inside ``package`` (a path relative
    to the folder holding it, e.g. site-packages) or None when the driver's own code raised, the step and the
    request being processed, and the last frames."""
    root = os.path.dirname(package)
    tb = exc.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    engine = None
    node = None
    for t in reversed(frames):
        fn = t.tb_frame.f_code.co_filename
        if fn.startswith(package + os.sep):
            engine = f"{os.path.relpath(fn, root)}:{t.tb_lineno} in {t.tb_frame.f_code.co_name}"
            got = getattr(t.tb_frame.f_locals.get("node"), "id", None)
            node = got if isinstance(got, int) else None  # the node the innermost engine frame was handling
            break
    here = frames and os.path.dirname(os.path.abspath(frames[-1].tb_frame.f_code.co_filename)) == os.path.dirname(
        os.path.abspath(__file__))  # this script or a part of it (unified.py, hybrid.py)
    if isinstance(exc, EngineFault):
        t = frames[-1]
        engine = f"{os.path.basename(__file__)}:{t.tb_lineno} in {t.tb_frame.f_code.co_name} (the driver found it)"
    elif here:
        engine = None  # raised in this script's own code: the driver's bug, whatever called it
    tail = []
    for t in frames[-6:]:
        fn = t.tb_frame.f_code.co_filename
        shown = os.path.relpath(fn, root) if fn.startswith(package + os.sep) else os.path.basename(fn)
        tail.append(f"{shown}:{t.tb_lineno} in {t.tb_frame.f_code.co_name}")
    return {"type": type(exc).__name__, "message": " ".join(str(exc).split())[:300], "frame": engine,
            "step": where.get("step"), "request": where.get("request"), "phase": where.get("phase"),
            "traceback": tail, "node": node}


COUNTS: list = [None]   # the path counts of the trial running now (the wrappers are installed once per process)


def count_paths(n: dict) -> None:
    """Wrap RadixCache's node split, leaf deletion and reset (class-level, once per process) to count them in
    ``n`` (the current trial's counts)."""
    from sglang.srt.mem_cache.radix_cache import RadixCache
    COUNTS[0] = n
    if getattr(RadixCache, "_kvsim_paths", False):
        return
    RadixCache._kvsim_paths = True
    split, delete, reset = RadixCache._split_node, RadixCache._delete_leaf, RadixCache.reset

    def split_counted(self: Any, key: Any, child: Any, split_len: int) -> Any:
        COUNTS[0]["node_split"] += 1
        return split(self, key, child, split_len)

    def delete_counted(self: Any, node: Any) -> None:
        COUNTS[0]["eviction"] += 1
        parent = node.parent
        if parent is not None and parent is not self.root_node and parent.lock_ref > 0:
            COUNTS[0]["eviction_next_to_locked"] += 1
        delete(self, node)

    def reset_counted(self: Any) -> None:
        if getattr(self, "root_node", None) is not None:  # the reset at construction is no ClearCache
            COUNTS[0]["clear_cache"] += 1
        reset(self)

    split_counted.__wrapped__ = split  # type: ignore[attr-defined]  # the ledger names the engine's function
    delete_counted.__wrapped__ = delete  # type: ignore[attr-defined]
    reset_counted.__wrapped__ = reset  # type: ignore[attr-defined]
    RadixCache._split_node = split_counted
    RadixCache._delete_leaf = delete_counted
    RadixCache.reset = reset_counted


def token(rid: str, pos: int, vocab: int) -> int:
    """A synthetic output token, deterministic in (request, position) -- the same formula as kvsim's peers."""
    return zlib.crc32(f"{rid}:{pos}".encode()) % vocab


class Req:
    __slots__ = ("id", "prompt", "max_new", "out", "row", "protected", "inserted", "lock", "node", "computed",
                 "need")

    def __init__(self, rid: str, tokens: list, max_new: int):
        self.id = rid
        self.prompt = array("q", tokens)
        self.max_new = max_new
        self.out: list = []
        self.row: Any = None     # torch int64 tensor: the request's KV slot per token (page-aligned allocation)
        self.protected = 0       # tokens of the row owned by the tree (SGLang's cache_protected_len)
        self.inserted = 0        # SGLang's cache_inserted_len
        self.lock: Any = None
        self.node: Any = None
        self.computed = 0
        self.need = 0            # tokens still to allocate until the request finishes (admission reservation)

    def fill(self) -> array:
        return self.prompt + array("q", self.out)


class Driver:
    def __init__(self, cfg: dict, where: dict):
        import sglang
        import torch
        from sglang.srt.mem_cache import radix_cache
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.radix_cache import RadixCache

        self.torch = torch
        self.ps = ps = cfg["block_size"]
        self.pages = cfg["num_blocks"] - 1   # page 0 is SGLang's padding slot
        self.max_seqs = cfg["max_num_seqs"]
        self.budget = cfg["max_num_batched_tokens"]
        self.vocab = cfg["vocab"]
        if ps == 1:
            from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
            self.alloc = TokenToKVPoolAllocator(self.pages, torch.float16, "cpu", None, False)
        else:
            from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
            self.alloc = PagedTokenToKVPoolAllocator(self.pages * ps, ps, torch.float16, "cpu", None, False)
        self.evictions: list = []   # this step's evict calls: the tree before, the nodes removed (PEER-13)
        self.observe_s = 0.0        # seconds spent reading the tree for them (not the engine's)
        self.paths = dict.fromkeys(PATHS, 0)
        count_paths(self.paths)
        # the ledger wraps after the path counters, so it names the engine's functions and their real callers
        ledger.install(type(self.alloc))
        radix_cache.TreeNode.counter = 0  # node ids count from 0 in every trial: the same run names the same nodes
        self.led = ledger.Ledger(os.path.dirname(os.path.dirname(os.path.abspath(sglang.__file__))), ps, where)
        ledger.CURRENT[0] = self.led
        self.tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=None,
                                               token_to_kv_pool_allocator=self.alloc, page_size=ps,
                                               enable_kv_cache_events=True))

    def snapshot(self) -> tuple[list, dict]:
        """The tree below the root as the eviction policy sees it: one ``[parent, lock_ref, access rank, first
        page, pages]`` per node (parent -1: the root; access rank: the order of ``last_access_time``, equal times
        equal ranks), and node object id -> index. Read before and after each ``evict`` call (PEER-13)."""
        nodes: list = []
        index: dict = {}
        times: list = []
        stack = [(c, -1) for c in self.tree.root_node.children.values()]
        while stack:
            node, parent = stack.pop()
            i = index[id(node)] = len(nodes)
            value = node.value
            nodes.append([parent, node.lock_ref, 0, int(value[0]) // self.ps if len(value) else -1,
                          len(value) // self.ps, node.id])
            times.append(node.last_access_time)
            stack.extend((c, i) for c in node.children.values())
        ranks = {t: r for r, t in enumerate(sorted(set(times)))}
        for row, t in zip(nodes, times):
            row[2] = ranks[t]
        return nodes, index

    # -- cache calls ---------------------------------------------------------------------------------------------
    def key(self, tokens: array) -> Any:
        from sglang.srt.mem_cache.radix_cache import RadixKey
        return RadixKey(tokens)

    def allocate(self, n_tokens: int) -> Any:
        """Pages for n_tokens (a whole number of pages), evicting from the tree when the allocator runs short."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams
        if n_tokens == 0:
            return self.torch.empty((0,), dtype=self.torch.int64)
        short = n_tokens - self.alloc.available_size()
        if short > 0:
            t0 = time.perf_counter()
            nodes, index = self.snapshot()
            self.observe_s += time.perf_counter() - t0
            self.tree.evict(EvictParams(num_tokens=short))
            t0 = time.perf_counter()
            _after, kept = self.snapshot()
            self.evictions.append({"need": short, "nodes": nodes,
                                   "evicted": sorted(i for k, i in index.items() if k not in kept)})
            self.observe_s += time.perf_counter() - t0
        got = self.alloc.alloc(n_tokens)
        if got is None:
            raise EngineFault(f"allocator cannot serve {n_tokens} tokens after eviction "
                               f"({self.alloc.available_size()} available)")
        return got.to(self.torch.int64)

    def grow(self, r: Req, upto: int) -> list:
        """Extend the row so it covers ``upto`` tokens; returns the new page ids."""
        have = 0 if r.row is None else len(r.row)
        if upto <= have:
            return []
        n = -(-(upto - have) // self.ps) * self.ps
        new = self.allocate(n)
        r.row = new if r.row is None else self.torch.cat((r.row, new))
        r.need -= n
        return (new[:: self.ps] // self.ps).tolist()

    def checkpoint(self, r: Req, upto: int) -> list | None:
        """The radix cache's checkpoint: insert, free duplicates, adopt the tree's pages. Returns the new page
        table when the row changed (pages swapped to the tree's copies), else None."""
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
        torch = self.torch
        key = self.key(r.fill()[:upto]).page_aligned(self.ps)
        klen = len(key)
        values = r.row[:klen].clone()
        res = self.tree.insert(InsertParams(key=key, value=values, inserted_len=r.inserted, priority=0))
        r.inserted = max(r.inserted, klen)
        dup = r.row[r.protected:res.prefix_len]
        if dup.numel():
            self.paths["second_copy"] += dup.numel() // self.ps  # the tree already held this content
            self.alloc.free(dup)
        node = self.tree.match_prefix(MatchPrefixParams(key=key)).last_device_node
        idx = self.tree.path_device_indices(node)
        if len(idx) != klen:
            raise EngineFault(f"checkpoint of {r.id}: the tree holds {len(idx)} of {klen} inserted tokens")
        before = r.row[r.protected:klen]
        swapped = not torch.equal(before, idx[r.protected:])
        r.row[r.protected:klen] = idx[r.protected:]
        r.protected = klen
        self.tree.unlock(r.lock)
        r.lock = self.tree.lock(node)
        r.node = node
        return (r.row[:: self.ps] // self.ps).tolist() if swapped else None

    def release(self, r: Req) -> list | None:
        """release_kv_cache with checkpoint: the tree keeps what it can key, the rest of the row is freed."""
        owned = len(r.prompt) + len(r.out) - 1   # the last produced token has no KV
        table = self.checkpoint(r, owned)
        rest = r.row[r.protected:]
        if rest.numel():
            self.alloc.free(rest)
        self.tree.unlock(r.lock)
        r.lock = None
        return table

    def take_paths(self) -> dict:
        """This step's path counts (only the paths taken), then zero."""
        out = {k: v for k, v in self.paths.items() if v}
        for k in out:
            self.paths[k] = 0
        return out

    def take_events(self, step: int) -> list:
        import msgspec
        evs = self.tree.take_events()
        if not evs:
            return []
        return [[step, [msgspec.to_builtins(e) for e in evs]]]


def read_trial() -> tuple[dict, list] | None:
    """The next trial on stdin: a config line, one line per request, the end mark; None at the end of input.
    Requests come back as ``(arrive, Req)`` in workload order."""
    line = sys.stdin.readline()
    if not line.strip():
        return None
    cfg = json.loads(line)
    given: list = []
    for line in iter(sys.stdin.readline, ""):
        msg = json.loads(line)
        if "end" in msg:
            break
        q = msg["request"]
        given.append((q.get("arrive", 0), Req(q["id"], q["tokens"], q["max_new_tokens"])))
    return cfg, given


def structure(d: "Driver", running: list) -> dict:
    """``ledger.walk`` of the tree and allocator as SGLang left them (the live rows' private slots included), or
    why they could not be read."""
    try:
        rows = [r.row[r.protected:] for r in running if r.row is not None]
        return ledger.walk(d.tree, d.alloc, rows, d.pages, d.ps)
    except Exception as exc:  # a structure too broken to read is itself the finding
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}


def run_trial(cfg: dict, given: list, trial: int, send: Any, where: dict, state: dict, import_s: float) -> None:
    """One run of the workload on a tree and allocator built afresh (SGLang imported once per process): hello,
    one line per step, done. ``state`` holds the driver and its running requests for the crash report."""
    import sglang

    where.update(step=None, request=None, phase="setup")
    d = Driver(cfg, where)
    state["driver"] = d
    every = max(1, int(cfg.get("probe_every", 1)))
    send({"hello": {"engine": f"sglang {sglang.__version__}", "block_size": d.ps, "num_blocks": cfg["num_blocks"],
                    "usable_blocks": d.pages, "hash_algo": "sha256", "import_s": round(import_s, 3),
                    "paths": list(PATHS), "probe_every": every, "trial": trial}})
    clock = time.perf_counter
    ps = d.ps
    running: list[Req] = []
    state["running"] = running
    arrivals = given[::-1]      # submitted before their step, at once when nothing is queued or running
    waiting: list[Req] = []    # the FCFS queue, next request last
    step = 0
    idle = 0
    pre_events = d.take_events(0)  # the cache's own reset (AllBlocksCleared) at construction
    walked = -1                    # the ledger's change count at the last structure walk
    while arrivals or waiting or running:
        while arrivals and (arrivals[-1][0] <= step or not (waiting or running)):
            waiting.insert(0, arrivals.pop()[1])
        where.update(step=step, phase="schedule", request=None)
        spent = d.led.cost
        t0 = clock()
        new, cached, tables, scheduled = [], [], [], {}
        budget = d.budget
        # 1. running requests: decode one token each, or the next prefill chunk
        for r in running:
            where["request"] = r.id
            if r.computed >= len(r.prompt):      # decoding: compute the last produced token
                n = 1
            else:
                n = min(len(r.prompt) - r.computed, budget)
                if n <= 0:
                    continue
                budget -= n
            pages = d.grow(r, r.computed + n)
            if pages:
                cached.append([r.id, False, pages, r.computed])
            scheduled[r.id] = n
        # 2. admission while budget and room remain (the match locked before the room is counted)
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        where["phase"] = "admission"
        while waiting and budget > 0 and len(running) < d.max_seqs:
            r = waiting[-1]
            where["request"] = r.id
            m = d.tree.match_prefix(MatchPrefixParams(key=d.key(r.prompt[: len(r.prompt) - 1])))
            hit = m.device_prefix_len
            free_hit = hit > 0 and m.last_device_node.lock_ref == 0  # matched pages nobody locked
            lock = d.tree.lock(m.last_device_node)
            total = -(-(len(r.prompt) + r.max_new) // ps) * ps
            room = d.alloc.available_size() + d.tree.evictable_size() - sum(x.need for x in running)
            if total - hit > room:
                d.tree.unlock(lock)
                break
            waiting.pop()
            d.paths["hit_evictable"] += hit // ps if free_hit else 0
            d.paths["whole_prompt_hit"] += 0 < hit == (len(r.prompt) - 1) // ps * ps
            r.lock, r.node = lock, m.last_device_node
            r.row = d.tree.path_device_indices(m.last_device_node)[:hit].clone()
            r.protected = r.inserted = hit
            r.computed = hit
            r.need = total - hit
            n = min(len(r.prompt) - hit, budget)
            budget -= n
            d.grow(r, hit + n)
            new.append([r.id, hit, (r.row[::ps] // ps).tolist()])
            scheduled[r.id] = n
            running.append(r)
        t1 = clock()
        # 3. the forward's results: tokens, checkpoints, finishes
        where["phase"] = "checkpoint"
        tokens, finished = {}, []
        t2 = clock()
        for r in list(running):
            if r.id not in scheduled:
                continue
            where["request"] = r.id
            r.computed += scheduled[r.id]
            if r.computed < len(r.prompt):       # an intermediate chunk: cache_unfinished_req
                table = d.checkpoint(r, r.computed)
                if table is not None:
                    tables.append([r.id, table])
                continue
            tok = token(r.id, len(r.out), d.vocab)
            r.out.append(tok)
            tokens[r.id] = tok
            if len(r.out) == r.max_new:
                where["phase"] = "release"
                table = d.release(r)
                if table is not None:
                    tables.append([r.id, table])
                running.remove(r)
                finished.append(r.id)
        t3 = clock()
        where.update(phase="report", request=None)
        inside = d.led.cost - spent  # the ledger's bookkeeping inside SGLang's calls: not SGLang's time
        batches = pre_events + d.take_events(step)
        pre_events = []
        t4 = clock()
        facts = d.led.take()
        msg = {"step": step, "engine_s": (t1 - t0) + (t3 - t2) - d.observe_s - inside, "new": new, "cached": cached,
               "evictions": d.evictions,
               "tables": tables, "scheduled": scheduled, "tokens": tokens, "finished": sorted(finished),
               "preempted": [], "stats": None,
               "free_blocks": (d.alloc.available_size() + d.tree.evictable_size()) // ps,
               "cached_blocks": d.tree.total_size() // ps,
               "tree": {"evictable": d.tree.evictable_size(), "protected": d.tree.protected_size(),
                        "total": d.tree.total_size()},
               "batches": batches, "paths": d.take_paths(), "ledger": facts}
        d.evictions, d.observe_s = [], 0.0
        if step % every == 0 or not (arrivals or waiting or running):
            msg["probe"] = ledger.probe(d.tree, [r.lock.node for r in running if r.lock is not None])
            if d.led.changes != walked:  # nothing SGLang did since the last walk: the same structure
                msg["walk"] = structure(d, running)
                walked = d.led.changes
        msg["probe_s"] = inside + clock() - t4
        send(msg)
        step += 1
        idle = 0 if scheduled else idle + 1
        if idle >= 64:
            send({"stalled": sorted([r.id for r in running] + [r.id for r in waiting]
                                    + [r.id for _a, r in arrivals])})
            break
    if cfg.get("clear_at_end") and not (arrivals or waiting or running):
        where.update(step=step, phase="flush_cache", request=None)
        spent = d.led.cost
        t0 = clock()
        d.tree.reset()      # SGLang's flush_cache: the tree, then the allocator
        d.alloc.clear()
        t1 = clock()
        inside = d.led.cost - spent
        t4 = clock()
        pr = ledger.probe(d.tree, [])
        send({"step": step, "engine_s": t1 - t0 - inside, "new": [], "cached": [], "tables": [], "scheduled": {},
              "tokens": {}, "finished": [], "preempted": [], "stats": None, "cleared": True,
              "free_blocks": (d.alloc.available_size() + d.tree.evictable_size()) // ps,
              "cached_blocks": d.tree.total_size() // ps,
              "tree": {"evictable": d.tree.evictable_size(), "protected": d.tree.protected_size(),
                       "total": d.tree.total_size()},
              "batches": d.take_events(step), "paths": d.take_paths(), "probe": pr, "ledger": d.led.take(),
              "walk": structure(d, []), "probe_s": inside + clock() - t4})
        step += 1
    send({"done": {"steps": step, "trial": trial}})


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1 << 20)
    os.dup2(2, 1)  # whatever the engine prints goes to stderr; stdout carries only the protocol

    def send(obj: Any) -> None:
        out.write(json.dumps(obj, separators=(",", ":")))
        out.write("\n")

    where: dict = {"step": None, "request": None, "phase": "setup"}  # what the driver is doing, for a crash
    package = ""
    state: dict = {}
    try:
        trial = read_trial()
        if not os.environ.get("TORCH_EXTENSIONS_DIR"):  # SGLang's hash extension: built once per venv
            os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(sys.prefix, "torch-extensions")
        t0 = time.perf_counter()
        use_standins()
        import sglang
        package = os.path.dirname(os.path.abspath(sglang.__file__))
        if trial is not None and trial[0].get("kv_groups"):  # SGLang's unified hybrid cache, driven by unified.py
            import importlib
            sibling = importlib.import_module  # unified.py, hybrid.py: sibling scripts, found through sys.path[0]
            unified = sibling("unified")
            n = 0
            while trial is not None:
                cfg = trial[0]
                rows = [(a, r.id, list(r.prompt), r.max_new) for a, r in trial[1]]
                unified.run(cfg, rows, send, where, lambda rid, pos, v=cfg["vocab"]: token(rid, pos, v), sibling,
                            t0 if n == 0 else time.perf_counter(), n)
                out.flush()
                n += 1
                trial = read_trial()
            return 0
        if trial is not None:  # one-off start-up costs (the hash extension), before any trial's first step
            warm_up(int(trial[0]["block_size"]))
        import_s = time.perf_counter() - t0
        n = 0
        while trial is not None:
            try:
                run_trial(trial[0], trial[1], n, send, where, state, import_s if n == 0 else 0.0)
            except Exception as exc:  # SGLang raised while stepping (a finding), or the driver broke
                if where["phase"] == "setup":
                    raise
                facts = crash_facts(exc, package, where)
                if not facts["frame"]:
                    raise
                traceback.print_exc()
                crash: dict = {"crash": facts}
                d = state.get("driver")
                if d is not None:  # the structures as the engine left them
                    crash["ledger"] = d.led.take()
                    crash["walk"] = structure(d, state.get("running") or [])
                send(crash)
            finally:
                ledger.CURRENT[0] = None
                state.clear()
            out.flush()
            n += 1
            trial = read_trial()
        out.flush()
        return 0
    except Exception as exc:  # the engine refused its setup, or the driver broke
        traceback.print_exc()
        if where["phase"] != "setup":
            facts = crash_facts(exc, package, where)
            send({"crash": facts} if facts["frame"] else {"bug": facts})
        else:
            send({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"})
        out.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main())
