"""The scheduler simulation: a deterministic engine loop in virtual time over the store model.

Every store operation is a kvtrace/1 event handed to `sim.replay.TraceReplay.step`, so the simulation is
checked exactly as `kvsim replay` checks a recorded trace (the same model, every rule after every event,
the periodic full audit); `record` writes the same events to a file that replays to the same verdict.

The loop, one engine iteration (one GPU unit) at a time:

* **Admission** (FIFO, one prefill at a time): the prefix index names the retained checkpoint holding the
  longest prefix of the prompt (m full pages, at most floor((prompt-1)/64): the last prompt token is always
  computed). The request's prefill sequence activates from it at the matched frontier: Move when the
  prompt's own checkpoint will hold every key of it ("not needed again"), Fork otherwise (a partial tail is
  copied, COW); a checkpoint frontier beyond 64·m is cut by a truncate. When the checkpoint holds full
  pages beyond the match, or its frontier exceeds the prompt (activation requires frontier <= prompt), a
  helper sequence activates from it, truncates to 64·m and retains a "split" checkpoint there (indexed: a
  shared prefix is cut once), which the request then Forks.
  Admission needs the pool's available pages to cover the activation, its restores and COW, the
  request's whole reservation (prompt + output) and one page for the decode continuation's tail copy.
  Under the default policy (`admission="evict"`, as vLLM and SGLang treat cached blocks: free capacity
  that holds reusable content) least-recently-used checkpoints are evicted until the pages are there
  (offloaded to Host when an arena is configured, released otherwise; the source checkpoint's pages are
  kept); the head waits for running requests only when evicting every evictable checkpoint is not
  enough. Under `admission="wait"` checkpoints are evicted only for what the decoding lanes will not
  return when they finish (the cache is kept, batches shrink). A waiting head is retried when pages were
  freed. A request alone in the store may do without the tail copy's page (its decode continuation then
  Moves the prompt's checkpoint); one that cannot fit even so is rejected, as is a prompt beyond
  max_context: the store is asked and refuses, and the stats explain why.
* **Chunked prefill**: at most `prefill_chunk` prompt tokens per iteration, pages mapped just ahead.
* **Decode rounds**: every decoding lane writes one token per iteration in the same unit, mapping a page
  when it crosses a page boundary.
* **Prefill done**: the prefill sequence finishes retaining the prompt's checkpoint (indexed at once, so
  the next admission can reuse it), and the decode sequence activates from it by Fork.
* **Decode done**: the decode sequence finishes without retaining (generated tokens carry no block ids).

Under the MTP backend (`SimConfig.backend = "mtp"`) every unit, map and truncate covers the Main and the
MTP pool, an eviction offloads and drops both pools' pages (Host room is made for both before either is
copied), and decode rounds are speculative (`sim.simulate.mtp`: K positions verified, the accepted ones
committed). Admission counts Main pages only: the MTP pool mirrors Main's pages page for page and holds
C·ceil((K-1)/P) pages more, which cover the one provisional lead page an active bundle may hold beyond
Main, so MTP availability never falls below Main's.
With a `FaultPlan` (`sim.simulate.inject`) fault episodes run between units when the store has their room;
they leave nothing held, so the background runs exactly as it would without them.

Virtual time advances per iteration by base + per prefill token + per decoding lane (`Timing`). Nothing
depends on wall-clock time or unseeded randomness: the same workload and configuration give the same
events, byte for byte.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kvsim.sim.replay import InternalError, TraceReplay
from kvsim.sim.simulate.inject import FaultPlan, Injector
from kvsim.sim.simulate.latency import Latencies
from kvsim.sim.simulate.mtp import SpeculativeRounds
from kvsim.sim.simulate.prefix import PAGES_PER_BLOCK, P, PrefixIndex, page_keys
from kvsim.sim.simulate.series import Series
from kvsim.sim.simulate.timing import Timing
from kvsim.sim.trace import records as kt
from kvsim.sim.trace.stream import TraceInputError, TraceWriter
from kvsim.sim.workloads.request import Request

MAIN: kt.Pool = "main"
MTP: kt.Pool = "mtp"
ADMISSION = ("evict", "wait")
HOST_EXTENTS = ("run", "checkpoint")
REJECTION_EXAMPLES = 20


def _in_use(page) -> bool:
    """Some running request references the page (page.active_refs > 0), asked from the newest holder back:
    a shared prefix lists hundreds of retained checkpoints before the lanes that forked it last."""
    for h in reversed(page.holders):
        if h.active:
            return True
    return False


@dataclass(frozen=True)
class SimConfig:
    """The simulated engine: store configuration (written to the trace header) and scheduler knobs.

    Capacity: `pages` (explicit kv_capacity = pages · 64 tokens), else `hbm_bytes` (automatic: the store
    model resolves M from free Device bytes with its own capacity curve), else M_max = C · L (the most the
    store allows at this concurrency: not unbounded, a long trace's cached prefixes can need more; see
    `unbounded_config`). `store_rows` raises the store's max_concurrency above the scheduler's
    `concurrency` (only so that M_max can hold an unbounded capacity; the scheduler still runs at most
    `concurrency` sequences). `host_extents`: "run" offloads a checkpoint as runs of consecutive pages, each
    one packed extent in logical order, so a fragmented arena still takes copies; "checkpoint" needs one
    extent per pool for the whole checkpoint (the earlier policy, kept for comparison)."""
    max_context: int = 131072
    concurrency: int = 256
    profile: str = "bf16"
    pages: int | None = 65536
    hbm_bytes: int | None = None
    host_bytes: int = 0
    layers: int = 16
    kv_heads: int = 4
    prefill_chunk: int = 8192
    admission: str = "evict"  # "evict": cached checkpoints give way to admissions; "wait": they wait
    backend: str = "off"  # "off" | "mtp": speculative decode rounds (sim.simulate.mtp)
    draft_window: int = 4  # MTP K
    accept_rate: float = 0.7  # MTP: each draft token is accepted with this probability (seeded draws)
    seed: int = 0  # the acceptance draws' seed
    timing: Timing = field(default_factory=Timing)
    host_extents: str = "run"  # "run" | "checkpoint": how an offload is cut into Host extents
    store_rows: int = 0  # the store's max_concurrency when above `concurrency` (unbounded capacity)
    unbounded: bool = False  # `pages` was sized to the workload: nothing is ever evicted

    def header(self, source: str, meta: dict | None = None) -> kt.Header:
        cap = None
        if self.pages is not None:
            cap = kt.KVCapacity(tokens=self.pages * P)
        elif self.hbm_bytes is not None:
            cap = kt.KVCapacity(auto=kt.AutoCapacity(free_bytes=self.hbm_bytes, headroom_bytes=0))
        return kt.Header(format="kvtrace/1", config=kt.Config(
            max_context=self.max_context, max_concurrency=max(self.concurrency, self.store_rows), page_size=P,
            kv_profile=self.profile,  # type: ignore[arg-type]  # a PROFILES name (SimConfig checks it)
            backend=kt.BackendMTP(draft_window=self.draft_window) if self.backend == "mtp" else kt.BackendOff(),
            model=kt.Model(full_attention_layers=self.layers, kv_heads=self.kv_heads, head_dim=256),
            kv_capacity=cap, host_arena_bytes=self.host_bytes, prefill_chunk=self.prefill_chunk),
            meta={"source": source, "simulation": {k: v for k, v in asdict(self).items() if k != "timing"}
                  | {"timing": asdict(self.timing)}} | (meta or {}))


class Ckpt:
    """A retained checkpoint as the scheduler tracks it: its indexed page keys, frontier and kind
    ("prompt": a request's whole prompt; "split": a prefix cut from a longer checkpoint at a match)."""
    __slots__ = ("cid", "keys", "frontier", "kind")

    def __init__(self, cid: str, keys: list, frontier: int, kind: str = "prompt") -> None:
        self.cid, self.keys, self.frontier, self.kind = cid, keys, frontier, kind


class Lane:
    """A running sequence: its committed frontier, the frontier it stops at, and its mapped pages; and its
    request's arrival, admission and first-token times (virtual seconds)."""
    __slots__ = ("seq", "rid", "frontier", "end", "mapped", "prompt", "output", "keys", "own", "arrival",
                 "admitted", "first")

    def __init__(self, seq, rid, frontier, end, mapped, prompt: int = 0, output: int = 0, keys=None) -> None:
        self.seq, self.rid, self.frontier, self.end, self.mapped = seq, rid, frontier, end, mapped
        self.prompt, self.output, self.keys = prompt, output, keys
        self.own = 0  # pages a decoding lane returns when it finishes (its private tail copy and output)
        self.arrival = self.admitted = self.first = 0.0


@dataclass
class SimResult:
    stats: dict
    series: dict
    trace: object  # sim.replay.TraceResult
    header: kt.Header


class Simulation:
    """One simulation run; `run(requests)` drives it to the end and returns a SimResult."""

    def __init__(self, config: SimConfig, source: str = "simulate", record=None, progress=None,
                 audit_every: int | None = None, faults: FaultPlan | None = None) -> None:
        if config.concurrency < 2:
            raise ValueError("the scheduler needs at least 2 execution rows (a prefill and a decode)")
        if config.admission not in ADMISSION:
            raise ValueError(f"admission policy {config.admission!r}: expected one of {', '.join(ADMISSION)}")
        if config.host_extents not in HOST_EXTENTS:
            raise ValueError(f"host extents {config.host_extents!r}: expected one of {', '.join(HOST_EXTENTS)}")
        self.config = config
        # every pool a unit writes and a truncate or eviction covers: Main, and MTP under the MTP backend
        self.pools: tuple[kt.Pool, ...] = (MAIN, MTP) if config.backend == "mtp" else (MAIN,)
        self.spec = SpeculativeRounds(config) if config.backend == "mtp" else None
        self.path = os.fspath(record) if record else f"<simulate {source}>"
        self.header = config.header(source, None if faults is None else {"faults": faults.meta()})
        kw: dict[str, Any] = {} if audit_every is None else {"audit_every": audit_every}
        self.rep = TraceReplay(self.path, self.header, recover=True, **kw)  # one cause, one finding (sim.recovery)
        self.st = self.rep.st
        self.pool = self.st.pools[MAIN]
        self.page_bytes = self.pool.page_bytes
        self.writer = TraceWriter(record, self.header, validate=False) if record else None
        self.progress = progress
        self.events = 0
        self.units = 0
        self.now = 0.0
        self.index = PrefixIndex()
        self.ckpts: OrderedDict[str, Ckpt] = OrderedDict()  # every retained prompt checkpoint, LRU first
        self.dev: OrderedDict[str, None] = OrderedDict()  # those that may hold droppable Device pages
        self.host: OrderedDict[str, None] = OrderedDict()  # those with Host replicas
        self.lanes: dict[str, Lane] = {}
        self.lane_pages = 0  # pages the decoding lanes return when they finish (their private pages)
        self.prefill: Lane | None = None
        self.blocked = False  # the queue's head waits for pages: retry when a request frees some
        self.keep: frozenset = frozenset()  # pages of the checkpoint being activated from: never dropped
        self.series = Series()
        self.injector = None if faults is None else Injector(self, faults)
        self.latency = Latencies()
        self.rejections: dict[str, int] = {}  # reason -> requests
        self.rejected_requests: list[dict] = []  # the first REJECTION_EXAMPLES, explained
        self.host_moved = 0  # Host link bytes not yet charged to an iteration (timing)
        self.host_fill_sum = 0.0  # Σ arena fill over iterations
        self.host_full: list[tuple[int, int]] = []  # (free arena bytes, bytes to copy) when a copy did not fit
        self.s = dict(requests=0, rejected=0, prompt_tokens=0, prompt_pages=0, reused_pages=0, reused_tokens=0,
                      workload_blocks=0, reused_workload_blocks=0, output_tokens=0, evictions=0,
                      checkpoints_evicted=0, pages_freed=0, offloads=0, offload_extents=0, host_evictions=0,
                      restored_pages=0, restored_pages_past_match=0, forks=0, moves=0, splits=0, truncates=0,
                      host_bytes_out=0, host_bytes_in=0, host_bytes_in_past_match=0, iterations=0)

    # -- events ---------------------------------------------------------------------------------
    def _emit(self, ev) -> None:
        i = self.events
        if self.writer is not None:
            self.writer.write(ev)
        try:
            self.rep.step(i, i + 2, ev)
        except (TraceInputError, InternalError):
            raise
        except Exception as exc:  # a crash inside the model or a checker, classified as replay does
            raise InternalError(self.path, i, i + 2, type(ev).__struct_config__.tag, exc) from exc
        self.events = i + 1

    def _activate(self, seq, prompt, budget, source=None, keep: bool = True) -> bool:
        self._emit(kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=source, keep_source=keep))
        return seq in self.st.bundles

    # -- checkpoints ----------------------------------------------------------------------------
    def _space(self, cid):
        return self.st.checkpoints[cid].spaces[MAIN]

    def _ckpt_pages(self, cid) -> frozenset:
        """The checkpoint's logical pages in every pool (kept while it is activated from)."""
        spaces = self.st.checkpoints[cid].spaces
        return frozenset(p for pool in self.pools for p in spaces[pool].pages)

    def _restores(self, cid: str, m: int) -> tuple[int, int, int, int]:
        """What an activation from the checkpoint restores from Host: (Main pages among the m matched ones,
        their bytes over every pool, Main pages past the match, their bytes over every pool)."""
        spaces = self.st.checkpoints[cid].spaces
        out = [0, 0, 0, 0]
        for pool in self.pools:
            stride = self.st.pools[pool].page_bytes
            for b, p in enumerate(spaces[pool].pages):
                if p.device < 0:
                    at = 0 if b < m else 2
                    if pool == MAIN:
                        out[at] += 1
                    out[at + 1] += stride
        return out[0], out[1], out[2], out[3]

    def _truncate(self, seq: str, frontier: int) -> None:
        """Cut the sequence to `frontier` in every pool (a bundle's pools hold the same committed prefix)."""
        for pool in self.pools:
            self._emit(kt.Truncate(seq=seq, pool=pool, frontier=frontier))

    def _forget(self, c: Ckpt) -> None:
        self.index.remove(c)
        del self.ckpts[c.cid]
        self.dev.pop(c.cid, None)
        self.host.pop(c.cid, None)

    def _touch(self, c: Ckpt) -> None:
        self.index.touch(c)
        self.ckpts.move_to_end(c.cid)
        self.dev[c.cid] = None
        self.dev.move_to_end(c.cid)
        if c.cid in self.host:
            self.host.move_to_end(c.cid)

    def _retain(self, c: Ckpt) -> None:
        self.ckpts[c.cid] = c
        self.dev[c.cid] = None
        self.index.register(c)

    def _release(self, c: Ckpt) -> None:
        self._emit(kt.Release(ckpt=c.cid))
        self._forget(c)

    def _host_release_lru(self, protect: frozenset | set) -> bool:
        """Release the least-recently-used checkpoint holding Host replicas (not in `protect`); False if none."""
        victim = next((cid for cid in self.host if cid not in protect), None)
        if victim is None:
            return False
        self._release(self.ckpts[victim])
        self.s["host_evictions"] += 1
        return True

    def _host_room(self, sizes: list, protect) -> bool:
        """Make Host extents of these sizes fit together (the arena is checked on its geometry, not on free
        bytes), releasing least-recently-used checkpoints that hold Host replicas."""
        arena = self.st.arena
        if arena.plan([], sizes) is None:
            self.host_full.append((arena.free_bytes, sum(sizes)))
            while arena.plan([], sizes) is None:
                if not self._host_release_lru(protect):
                    return False
        return True

    def _plan_runs(self, todo: list) -> list | None:
        """Cut each pool's blocks to copy into runs of consecutive blocks, each fitting one free extent:
        [(pool, run blocks)] in emission order, or None when the free extents cannot hold them all.

        Extents are visited from the lowest offset and filled with as many whole pages as they hold, so
        every run is exactly where the model's first fit places a copy of its size (a lower extent has less
        than one page stride left), and a fragmented arena still takes copies. Store contract: "Host replica
        使用 logical-order packed HostKVPageLayout ... variable-size extent只为实际 page count 付费" and
        "Host arena 是有界 variable-size allocator": each copy is one packed extent in logical order, and
        nothing asks a checkpoint's pages to share one."""
        free = [list(e) for e in self.st.arena.free_extents()]
        runs = []
        for pool, blocks in todo:
            stride = self.st.pools[pool].page_bytes
            i = 0
            for e in free:
                if i == len(blocks):
                    break
                k = min(len(blocks) - i, e[1] // stride)
                if k:
                    runs.append((pool, blocks[i:i + k]))
                    e[0] += k * stride
                    e[1] -= k * stride
                    i += k
            if i < len(blocks):
                return None
        return runs

    def _copy_plan(self, todo: list, protect: frozenset | set) -> list | None:
        """The Offload events of one eviction, [(pool, blocks)], after making Host room; None: no room."""
        if self.config.host_extents == "checkpoint":
            sizes = [len(b) * self.st.pools[pool].page_bytes for pool, b in todo]
            return todo if self._host_room(sizes, protect) else None
        runs = self._plan_runs(todo)
        if runs is None:
            need = sum(len(b) * self.st.pools[pool].page_bytes for pool, b in todo)
            self.host_full.append((self.st.arena.free_bytes, need))
            while runs is None:
                if not self._host_release_lru(protect):
                    return None
                runs = self._plan_runs(todo)
        return runs

    def _evict_one(self, cid: str, protect) -> None:
        """Evict one checkpoint from Device: offload and drop its droppable pages, or release it. Counts the
        event, the checkpoints that leave Device entirely and the Main pages that became available."""
        c = self.ckpts[cid]
        s = self.s
        before = self.pool.available
        if not self.config.host_bytes:
            if c.keys and _in_use(self._space(cid).pages[len(c.keys) - 1]):
                # every full page is in use (a lane holding a page holds the prefix before it): the release
                # would free the copied partial tail only and take the prefix out of the index
                return
            self._release(c)
            s["evictions"] += 1
            s["checkpoints_evicted"] += 1
            s["pages_freed"] += self.pool.available - before
            return
        spaces = self.st.checkpoints[cid].spaces
        keep = self.keep
        plan = []  # per pool: (pool, droppable blocks)
        todo = []  # per pool: (pool, blocks without a current Host replica)
        for pool in self.pools:
            pages = spaces[pool].pages
            blocks = [b for b, p in enumerate(pages) if p.device >= 0 and not p.pins and p not in keep
                      and not _in_use(p)]
            if blocks:
                plan.append((pool, blocks))
                copy = [b for b in blocks if not pages[b].host_valid(pages[b].committed)]
                if copy:
                    todo.append((pool, copy))
        if not plan:
            return  # every Device page is in use by a running request: not evictable now
        copies = self._copy_plan(todo, protect | {cid}) if todo else []
        if copies is None:  # room for every pool's copies, or none
            self._release(c)
            s["evictions"] += 1
            s["checkpoints_evicted"] += 1
            s["pages_freed"] += self.pool.available - before
            return
        for pool, blocks in copies:
            self._emit(kt.Offload(ckpt=cid, pool=pool, blocks=tuple(blocks)))
            nbytes = len(blocks) * self.st.pools[pool].page_bytes
            s["host_bytes_out"] += nbytes
            self.host_moved += nbytes
        s["offload_extents"] += len(copies)
        for pool, blocks in plan:
            self._emit(kt.DropDevice(ckpt=cid, pool=pool, blocks=tuple(blocks)))
        s["evictions"] += 1
        s["offloads"] += 1
        s["pages_freed"] += self.pool.available - before
        if all(p.device < 0 for pool in self.pools for p in spaces[pool].pages):
            del self.dev[cid]  # pages a running request still uses stay listed for a later eviction
            s["checkpoints_evicted"] += 1
        self.host[cid] = None
        self.host.move_to_end(cid)

    def _evict_for(self, need: int, protect: frozenset, pending: int = 0) -> bool:
        """Evict least-recently-used checkpoints (one pass) until `need` pages are available, or until the
        pages running requests will return (`pending`) cover the rest: cached prefixes are evicted only
        for what waiting cannot bring. True when `need` pages are available now."""
        pool = self.pool
        if pool.available + pending >= need:
            return pool.available >= need
        for cid in list(self.dev):
            if cid in protect or cid not in self.dev:
                continue
            self._evict_one(cid, protect)
            if pool.available + pending >= need:
                break
        return pool.available >= need

    # -- admission ------------------------------------------------------------------------------
    def _returning(self) -> int:
        """The Main pages the decoding lanes return when they finish (what `admission="wait"` counts on): their
        own pages (tail copy and output), and the prompt's full pages a lane holds alone once its prompt's
        checkpoint is gone (taken over by a later request's Move and cut at its match: the pages past the
        match are then the lane's only). README "Simulating workloads": `wait` "evicts only for what running
        requests will not return when they finish". While the checkpoint is retained it holds every full
        page of the lane, so only lanes whose checkpoint went are inspected."""
        n = self.lane_pages
        for lane in self.lanes.values():
            if f"k{lane.rid}" not in self.ckpts:
                space = self.st.space_of(lane.seq, MAIN)
                if space is not None:
                    n += sum(1 for p in space.pages[:lane.prompt // P] if len(p.holders) == 1)
        return n

    def _admit(self, r, keys: list) -> bool:
        """Start the prefill of the queue's head; False when it must wait (True also when rejected)."""
        cfg, s = self.config, self.s
        n = r.prompt
        o = min(r.output, cfg.max_context - n)
        c, depth = self.index.lookup(keys)
        m = min(depth, (n - 1) // P)
        if m == 0:
            c = None
        ent = -(-(n + o) // P)
        while True:
            need = ent - m + 1  # the reservation beyond the reused pages, and the decode tail's COW page
            if c is not None:
                # the activation from c restores every Host-only page of c (also past the match: a helper
                # cuts them afterwards or they stay with c) and copies c's partial tail
                space = self._space(c.cid)
                restores = sum(1 for p in space.pages if p.device < 0)
                need += restores + (1 if c.frontier % P else 0)
            protect = frozenset() if c is None else frozenset((c.cid,))
            self.keep = frozenset() if c is None else self._ckpt_pages(c.cid)  # its restores stay as counted
            ok = self._evict_for(need, protect, self._returning() if cfg.admission == "wait" else 0)
            self.keep = frozenset()
            if ok:
                break
            if self.prefill is not None or self.lanes:
                return False  # wait for running requests to free pages
            if c is None and need - 1 <= self.pool.available:
                break  # alone in the store: its decode continuation takes the prompt's checkpoint (Move), no tail copy
            if c is None:  # cannot fit in an empty store
                self._reject(r, o, f"needs {need:,} pages (prompt + output and the decode tail copy), "
                             f"{self.pool.available:,} available with nothing running or cached "
                             f"(capacity {self.pool.capacity:,})", "more pages than the store has")
                return True
            c, m = None, 0  # the matched checkpoint itself is in the way: start from root
        rid = r.rid
        seq = f"p{rid}"
        s["prompt_tokens"] += n
        s["prompt_pages"] += -(-n // P)
        s["reused_pages"] += m
        s["reused_tokens"] += m * P
        s["workload_blocks"] += len(r.hash_ids)
        s["reused_workload_blocks"] += m // PAGES_PER_BLOCK
        if c is None:
            ok = self._activate(seq, n, o)
        else:
            # Move when the prompt's own checkpoint will hold every key of c: c is not needed again
            move = c.kind == "prompt" and depth == len(c.keys)
            if restores:
                used, used_bytes, past, past_bytes = self._restores(c.cid, m)
                s["restored_pages"] += used
                s["host_bytes_in"] += used_bytes
                s["restored_pages_past_match"] += past
                s["host_bytes_in_past_match"] += past_bytes
                self.host_moved += used_bytes + past_bytes
            if move:
                self._forget(c)
            else:
                self._touch(c)
            if c.frontier > n or len(c.keys) > m:
                # c holds full pages beyond the match (or lies beyond the prompt, which an activation
                # forbids): a helper cuts c at the match and retains that prefix as a checkpoint of its own,
                # indexed for later requests sharing the same prefix
                helper, split = f"h{rid}", Ckpt(f"s{rid}", keys[:m], m * P, "split")
                self._activate(helper, c.frontier, 0, c.cid, keep=not move)
                self._truncate(helper, m * P)
                self._emit(kt.Finish(seq=helper, retain=split.cid))
                self._retain(split)
                s["splits"] += 1
                s["truncates"] += 1
                c, move = split, False
            ok = self._activate(seq, n, o, c.cid, keep=not move)
            s["moves" if move else "forks"] += 1
            if c.frontier > m * P:  # cut the checkpoint's partial tail (copied by the activation)
                self._truncate(seq, m * P)
                s["truncates"] += 1
        if not ok:
            raise RuntimeError(f"request {rid}: the store refused an activation the scheduler had room for")
        self.prefill = lane = Lane(seq, rid, m * P, n, m, n, o, keys)
        lane.arrival, lane.admitted = r.arrival, self.now
        return True

    def _reject(self, r: Request, output: int, why: str, kind: str) -> None:
        """Refuse a request and say why. Unless its prompt is empty, the store is asked to activate it from
        root first and refuses ("context" for a prompt beyond max_context, "capacity" for more pages than it
        has), so the report counts it among its refusals and a recorded trace shows it; the stats count
        rejections per `kind` and keep the first REJECTION_EXAMPLES with `why`."""
        self.s["rejected"] += 1
        self.rejections[kind] = self.rejections.get(kind, 0) + 1
        if len(self.rejected_requests) < REJECTION_EXAMPLES:
            self.rejected_requests.append({"request": r.rid, "prompt": r.prompt, "output": r.output, "reason": why})
        seq = f"x{r.rid}"
        if r.prompt > 0 and self._activate(seq, r.prompt, output):  # the store had room after all: give it back
            self._emit(kt.Finish(seq=seq))

    # -- completions ----------------------------------------------------------------------------
    def _prefill_done(self, pf: Lane) -> None:
        cid = f"k{pf.rid}"
        self._emit(kt.Finish(seq=pf.seq, retain=cid))
        c = Ckpt(cid, pf.keys, pf.prompt)
        self._retain(c)
        self.prefill = None
        pf.first = self.now  # the prefill's last iteration yields the first token
        if pf.output == 0:
            self.s["requests"] += 1
            self.latency.served(pf.arrival, pf.admitted, pf.first, self.now, pf.prompt, 0)
            return
        seq = f"d{pf.rid}"
        if not self._activate(seq, pf.prompt, pf.output, cid, True):
            self.keep = self._ckpt_pages(cid)
            self._evict_for(self.pool.available + 1, frozenset((cid,)))
            self.keep = frozenset()
            if not self._activate(seq, pf.prompt, pf.output, cid, True):
                self._forget(c)  # the prompt's checkpoint itself goes into the decode sequence
                if not self._activate(seq, pf.prompt, pf.output, cid, False):
                    raise RuntimeError(f"request {pf.rid}: the decode continuation could not be activated")
        lane = Lane(seq, pf.rid, pf.prompt, pf.prompt + pf.output, -(-pf.prompt // P), pf.prompt, pf.output)
        lane.arrival, lane.admitted, lane.first = pf.arrival, pf.admitted, pf.first
        lane.own = -(-(pf.prompt + pf.output) // P) - pf.prompt // P
        self.lane_pages += lane.own
        self.lanes[seq] = lane

    # -- the loop -------------------------------------------------------------------------------
    def run(self, requests) -> SimResult:
        cfg, s = self.config, self.s
        it = iter(requests)
        nxt = next(it, None)
        queue: list = []
        head = 0
        timing = cfg.timing
        chunk_max = cfg.prefill_chunk
        launch_row, commit_row = kt.LaunchRow, kt.CommitRow
        pools, spec, injector = self.pools, self.spec, self.injector
        arena = self.st.arena
        arena_bytes = arena.capacity
        while True:
            while nxt is not None and nxt.arrival <= self.now:
                self.latency.arrived(nxt.arrival)
                if nxt.prompt < 1:
                    self._reject(nxt, 0, "empty prompt: nothing to prefill", "empty prompt")
                elif nxt.prompt > cfg.max_context:
                    self._reject(nxt, 0, f"prompt of {nxt.prompt:,} tokens is longer than max_context "
                                 f"S = {cfg.max_context:,}", "longer than max_context")
                else:
                    queue.append((nxt, page_keys(nxt.hash_ids, nxt.prompt)))
                nxt = next(it, None)
            if self.prefill is None and head < len(queue) and len(self.lanes) + 2 <= cfg.concurrency \
                    and not self.blocked:
                self.blocked = not self._admit(*queue[head])
                if not self.blocked:
                    queue[head] = None
                    head += 1
                    if head > 4096:
                        del queue[:head]
                        head = 0
            pf, lanes = self.prefill, self.lanes
            if pf is None and not lanes:
                if head < len(queue):
                    continue  # admission either started or rejected the head; try the next one
                if nxt is None:
                    break
                self.now = max(self.now, nxt.arrival)
                continue
            rows, commits = [], []
            chunk = 0
            if pf is not None:
                chunk = min(chunk_max, pf.end - pf.frontier)
                b = pf.frontier + chunk
                need = -(-b // P)
                if need > pf.mapped:
                    for pool in pools:
                        self._emit(kt.Map(seq=pf.seq, pool=pool, tokens=b))
                    pf.mapped = need
                for pool in pools:
                    rows.append(launch_row(pf.seq, pool, (pf.frontier, b)))
                    commits.append(commit_row(pf.seq, pool, b))
            if spec is not None:
                spec.round(lanes, self._emit, rows, commits)  # speculative: K drafts, accepted ones committed
            else:
                for lane in lanes.values():
                    f = lane.frontier
                    if f >= lane.mapped * P:
                        self._emit(kt.Map(seq=lane.seq, pool=MAIN, tokens=f + 1))
                        lane.mapped += 1
                    rows.append(launch_row(lane.seq, MAIN, (f, f + 1)))
                    commits.append(commit_row(lane.seq, MAIN, f + 1))
            unit = f"u{self.units}"
            self.units += 1
            self._emit(kt.Launch(unit=unit, rows=tuple(rows)))
            self._emit(kt.Complete(unit=unit, commit=tuple(commits)))
            self.now += timing.iteration(chunk, len(lanes), self.host_moved)
            self.host_moved = 0
            if arena_bytes:
                self.host_fill_sum += 1.0 - arena.free_bytes / arena_bytes
            s["iterations"] += 1
            if spec is not None:
                done = spec.advance(lanes)
                s["output_tokens"] += spec.last_tokens
            else:
                done = []
                for lane in lanes.values():
                    f = lane.frontier = lane.frontier + 1
                    if f >= lane.end:
                        done.append(lane)
                s["output_tokens"] += len(lanes)
            for lane in done:
                self._emit(kt.Finish(seq=lane.seq))
                del lanes[lane.seq]
                self.lane_pages -= lane.own
                self.blocked = False
                s["requests"] += 1
                self.latency.served(lane.arrival, lane.admitted, lane.first, self.now, lane.prompt, lane.output)
                if self.progress is not None:
                    self.progress(1)
            if pf is not None:
                pf.frontier += chunk
                if pf.frontier >= pf.end:
                    self._prefill_done(pf)
                    self.blocked = False
                    if pf.output == 0 and self.progress is not None:
                        self.progress(1)
            main = self.pool
            pt = s["prompt_tokens"]
            self.series.record(round(self.now, 6), main.allocated, main.reserved, main.capacity,
                               s["reused_tokens"] / pt if pt else 0.0, s["host_bytes_out"], s["host_bytes_in"],
                               len(lanes), len(queue) - head)
            if injector is not None:
                injector.boundary()  # between units: a fault episode may run here
        if injector is not None:
            injector.drain()
        return self._finish()

    def _finish(self) -> SimResult:
        sha = ""
        if self.writer is not None:
            self.writer.close()
            h = hashlib.sha256()
            with open(self.path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            sha = h.hexdigest()
        result = self.rep.finish(self.events, sha)
        s: dict = dict(self.s)
        s["hit_ratio"] = round(s["reused_tokens"] / s["prompt_tokens"], 6) if s["prompt_tokens"] else 0.0
        s["peak_pages"] = result.pools[MAIN]["peak_allocated"]
        s["capacity_pages"] = self.pool.capacity
        s["page_bytes"] = self.page_bytes
        s["seconds"] = round(self.now, 6)
        s["events"] = self.events
        s["units"] = self.units
        s["violations"] = len(result.violations)
        s["refusals"] = len(result.refusals)
        s["checkpoints_left"] = len(self.ckpts)
        cfg = self.config
        s["capacity_mode"] = ("unbounded" if cfg.unbounded else "pages" if cfg.pages is not None
                              else "hbm" if cfg.hbm_bytes is not None else "max")
        s.update(self.latency.summary(s["requests"], s["output_tokens"]))
        arena = self.st.arena
        if arena.capacity:
            # fill: time-averaged over iterations, and at the moments a copy needed Host releases; fragmented:
            # those moments when the arena held at least the bytes to copy but no placement for them
            full = self.host_full
            frag = [free for free, need in full if free >= need]
            s["host_fill_mean"] = round(self.host_fill_sum / s["iterations"], 6) if s["iterations"] else 0.0
            s["host_full_events"] = len(full)
            s["host_fill_when_full"] = (round(1.0 - sum(f for f, _ in full) / len(full) / arena.capacity, 6)
                                        if full else 0.0)
            s["host_fragmented_events"] = len(frag)
            s["host_fragmented_bytes"] = sum(frag) // len(frag) if frag else 0
        s["rejections"] = dict(sorted(self.rejections.items()))
        s["rejected_requests"] = list(self.rejected_requests)
        if self.spec is not None:
            s.update(self.spec.stats())
            s["peak_mtp_pages"] = result.pools[MTP]["peak_allocated"]
            s["capacity_mtp_pages"] = self.st.pools[MTP].capacity
        if self.injector is not None:
            s.update(self.injector.stats(result.violations))
        series = self.series.as_dict()
        series["latency"] = self.latency.curves()
        return SimResult(s, series, result, self.header)


def simulate(requests, config: SimConfig, source: str = "simulate", record=None, progress=None) -> SimResult:
    """Run one simulation of `requests` under `config`."""
    return Simulation(config, source, record, progress).run(requests)


def unbounded_config(config: SimConfig, requests: Iterable[Request]) -> SimConfig:
    """`config` with a capacity no run of `requests` can exhaust, so that nothing is ever evicted: every page
    the scheduler allocates belongs to one request (its prompt and output, its decode tail copy, a split's
    tail copy), so Σ ceil((prompt + output)/64) + 2 over the requests it admits bounds the peak. The store's
    capacity is fixed at startup and at most C·L, so its max_concurrency (rows) rises to hold it while the
    scheduler still runs `config.concurrency` sequences; the report gives the bound as `capacity_pages`
    and what the run needed as `peak_pages`."""
    from kvsim.kvmodel.store import capacity_curve
    from kvsim.sim.trace.config import store_config
    s_max = config.max_context
    bound = 0
    for r in requests:
        if 1 <= r.prompt <= s_max:
            bound += -(-(r.prompt + min(r.output, s_max - r.prompt)) // P) + 2
    base = replace(config, pages=None, hbm_bytes=None)
    m_min = capacity_curve(store_config(base.header("unbounded").config)).m_min
    pages = max(bound, m_min)
    per_row = -(-s_max // P)
    return replace(config, pages=pages, hbm_bytes=None, store_rows=max(config.concurrency, -(-pages // per_row)),
                   unbounded=True)
