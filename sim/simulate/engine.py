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
  freed. A request that cannot fit in an empty store is rejected.
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
from dataclasses import asdict, dataclass, field

from kvsim.sim.replay import InternalError, TraceReplay
from kvsim.sim.simulate.inject import FaultPlan, Injector
from kvsim.sim.simulate.mtp import SpeculativeRounds
from kvsim.sim.simulate.prefix import P, PrefixIndex, page_keys
from kvsim.sim.simulate.series import Series
from kvsim.sim.trace import records as kt
from kvsim.sim.trace.stream import TraceInputError, TraceWriter

MAIN = "main"
MTP = "mtp"
ADMISSION = ("evict", "wait")


def _in_use(page) -> bool:
    """Some running request references the page (page.active_refs > 0), asked from the newest holder back:
    a shared prefix lists hundreds of retained checkpoints before the lanes that forked it last."""
    for h in reversed(page.holders):
        if h.active:
            return True
    return False


@dataclass(frozen=True)
class Timing:
    """Virtual seconds per engine iteration: base + prefill tokens · per_token + decoding lanes · per_lane."""
    base: float = 0.008
    per_token: float = 2.0e-5
    per_lane: float = 1.0e-4


@dataclass(frozen=True)
class SimConfig:
    """The simulated engine: store configuration (written to the trace header) and scheduler knobs.

    Capacity: `pages` (explicit kv_capacity = pages · 64 tokens), else `hbm_bytes` (automatic: the store
    model resolves M from free Device bytes with its own capacity curve), else M_max = C · L (unbounded
    for any workload that fits C lanes)."""
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

    def header(self, source: str, meta: dict | None = None) -> kt.Header:
        cap = None
        if self.pages is not None:
            cap = kt.KVCapacity(tokens=self.pages * P)
        elif self.hbm_bytes is not None:
            cap = kt.KVCapacity(auto=kt.AutoCapacity(free_bytes=self.hbm_bytes, headroom_bytes=0))
        return kt.Header(format="kvtrace/1", config=kt.Config(
            max_context=self.max_context, max_concurrency=self.concurrency, page_size=P, kv_profile=self.profile,
            backend=kt.BackendMTP(draft_window=self.draft_window) if self.backend == "mtp" else kt.BackendOff(),
            model=kt.Model(full_attention_layers=self.layers, kv_heads=self.kv_heads, head_dim=256),
            kv_capacity=cap, host_arena_bytes=self.host_bytes, prefill_chunk=self.prefill_chunk),
            meta={"source": source, "simulation": {k: v for k, v in asdict(self).items() if k != "timing"}
                  | {"timing": asdict(self.timing)}} | (meta or {}))


class Ckpt:
    """A retained checkpoint as the scheduler tracks it: its indexed page keys, frontier and kind
    ("prompt": a request's whole prompt; "split": a prefix cut from a longer checkpoint at a match)."""
    __slots__ = ("cid", "keys", "frontier", "kind")

    def __init__(self, cid: str, keys: list, frontier: int, kind: str = "prompt"):
        self.cid, self.keys, self.frontier, self.kind = cid, keys, frontier, kind


class Lane:
    """A running sequence: its committed frontier, the frontier it stops at, and its mapped pages."""
    __slots__ = ("seq", "rid", "frontier", "end", "mapped", "prompt", "output", "keys", "own")

    def __init__(self, seq, rid, frontier, end, mapped, prompt=0, output=0, keys=None):
        self.seq, self.rid, self.frontier, self.end, self.mapped = seq, rid, frontier, end, mapped
        self.prompt, self.output, self.keys = prompt, output, keys
        self.own = 0  # pages a decoding lane returns when it finishes (its private tail copy and output)


@dataclass
class SimResult:
    stats: dict
    series: dict
    trace: object  # sim.replay.TraceResult
    header: kt.Header


class Simulation:
    """One simulation run; `run(requests)` drives it to the end and returns a SimResult."""

    def __init__(self, config: SimConfig, source: str = "simulate", record=None, progress=None,
                 audit_every: int | None = None, faults: FaultPlan | None = None):
        if config.concurrency < 2:
            raise ValueError("the scheduler needs at least 2 execution rows (a prefill and a decode)")
        if config.admission not in ADMISSION:
            raise ValueError(f"admission policy {config.admission!r}: expected one of {', '.join(ADMISSION)}")
        self.config = config
        # every pool a unit writes and a truncate or eviction covers: Main, and MTP under the MTP backend
        self.pools = (MAIN, MTP) if config.backend == "mtp" else (MAIN,)
        self.spec = SpeculativeRounds(config) if config.backend == "mtp" else None
        self.path = os.fspath(record) if record else f"<simulate {source}>"
        self.header = config.header(source, None if faults is None else {"faults": faults.meta()})
        kw = {} if audit_every is None else {"audit_every": audit_every}
        self.rep = TraceReplay(self.path, self.header, **kw)
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
        self.s = dict(requests=0, rejected=0, prompt_tokens=0, prompt_blocks=0, reused_blocks=0,
                      reused_tokens=0, output_tokens=0, evictions=0, offloads=0, host_evictions=0,
                      restored_pages=0, forks=0, moves=0, splits=0, truncates=0, host_bytes_out=0,
                      host_bytes_in=0, iterations=0)

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

    def _activate(self, seq, prompt, budget, source=None, keep=True) -> bool:
        self._emit(kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=source, keep_source=keep))
        return seq in self.st.bundles

    # -- checkpoints ----------------------------------------------------------------------------
    def _space(self, cid):
        return self.st.checkpoints[cid].spaces[MAIN]

    def _ckpt_pages(self, cid) -> frozenset:
        """The checkpoint's logical pages in every pool (kept while it is activated from)."""
        spaces = self.st.checkpoints[cid].spaces
        return frozenset(p for pool in self.pools for p in spaces[pool].pages)

    def _restore_bytes(self, cid) -> int:
        """Bytes an activation from the checkpoint restores from Host, over every pool."""
        spaces = self.st.checkpoints[cid].spaces
        return sum(self.st.pools[pool].page_bytes * sum(1 for p in spaces[pool].pages if p.device < 0)
                   for pool in self.pools)

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

    def _host_room(self, sizes: list, protect) -> bool:
        """Make Host extents of these sizes fit together (the arena is checked on its geometry, not on free
        bytes), releasing least-recently-used checkpoints that hold Host replicas."""
        arena = self.st.arena
        while arena.plan([], sizes) is None:
            victim = next((cid for cid in self.host if cid not in protect), None)
            if victim is None:
                return False
            self._release(self.ckpts[victim])
            self.s["host_evictions"] += 1
        return True

    def _evict_one(self, cid: str, protect) -> None:
        """Evict one checkpoint from Device: offload and drop its droppable pages, or release it."""
        c = self.ckpts[cid]
        if not self.config.host_bytes:
            if c.keys and _in_use(self._space(cid).pages[len(c.keys) - 1]):
                # every full page is in use (a lane holding a page holds the prefix before it): the release
                # would free the copied partial tail only and take the prefix out of the index
                return
            self._release(c)
            self.s["evictions"] += 1
            return
        spaces = self.st.checkpoints[cid].spaces
        keep = self.keep
        plan = []  # per pool: (pool, droppable blocks, blocks without a current Host replica)
        for pool in self.pools:
            pages = spaces[pool].pages
            blocks = [b for b, p in enumerate(pages) if p.device >= 0 and not p.pins and p not in keep
                      and not _in_use(p)]
            if blocks:
                plan.append((pool, blocks, tuple(b for b in blocks if not pages[b].host_valid(pages[b].committed))))
        if not plan:
            return  # every Device page is in use by a running request: not evictable now
        sizes = [len(todo) * self.st.pools[pool].page_bytes for pool, _, todo in plan if todo]
        if sizes and not self._host_room(sizes, protect | {cid}):  # room for every pool's copies, or none
            self._release(c)
            self.s["evictions"] += 1
            return
        for pool, blocks, todo in plan:
            nbytes = len(todo) * self.st.pools[pool].page_bytes
            if todo:
                self._emit(kt.Offload(ckpt=cid, pool=pool, blocks=todo))
                self.s["host_bytes_out"] += nbytes
            self._emit(kt.DropDevice(ckpt=cid, pool=pool, blocks=tuple(blocks)))
        self.s["evictions"] += 1
        self.s["offloads"] += 1
        if all(p.device < 0 for pool in self.pools for p in spaces[pool].pages):
            del self.dev[cid]  # pages a running request still uses stay listed for a later eviction
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
                space = self._space(c.cid)
                restores = sum(1 for p in space.pages if p.device < 0)
                need += restores + 1 + max(0, len(space.pages) - m)
            protect = frozenset() if c is None else frozenset((c.cid,))
            self.keep = frozenset() if c is None else self._ckpt_pages(c.cid)  # its restores stay as counted
            ok = self._evict_for(need, protect, self.lane_pages if cfg.admission == "wait" else 0)
            self.keep = frozenset()
            if ok:
                break
            if self.prefill is not None or self.lanes:
                return False  # wait for running requests to free pages
            if c is None:
                s["rejected"] += 1
                return True  # cannot fit in an empty store
            c, m = None, 0  # the matched checkpoint itself is in the way: start from root
        rid = r.rid
        seq = f"p{rid}"
        s["prompt_tokens"] += n
        s["prompt_blocks"] += -(-n // P)
        s["reused_blocks"] += m
        s["reused_tokens"] += m * P
        if c is None:
            ok = self._activate(seq, n, o)
        else:
            # Move when the prompt's own checkpoint will hold every key of c: c is not needed again
            move = c.kind == "prompt" and depth == len(c.keys)
            s["restored_pages"] += restores
            s["host_bytes_in"] += restores * self.page_bytes if self.spec is None else self._restore_bytes(c.cid)
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
        self.prefill = Lane(seq, rid, m * P, n, m, n, o, keys)
        return True

    # -- completions ----------------------------------------------------------------------------
    def _prefill_done(self, pf: Lane) -> None:
        cid = f"k{pf.rid}"
        self._emit(kt.Finish(seq=pf.seq, retain=cid))
        c = Ckpt(cid, pf.keys, pf.prompt)
        self._retain(c)
        self.prefill = None
        if pf.output == 0:
            self.s["requests"] += 1
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
        lane = Lane(seq, pf.rid, pf.prompt, pf.prompt + pf.output, -(-pf.prompt // P))
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
        while True:
            while nxt is not None and nxt.arrival <= self.now:
                if nxt.prompt < 1 or nxt.prompt > cfg.max_context:
                    s["rejected"] += 1
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
            self.now += timing.base + chunk * timing.per_token + len(lanes) * timing.per_lane
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
                if self.progress is not None:
                    self.progress(1)
            if pf is not None:
                pf.frontier += chunk
                if pf.frontier >= pf.end:
                    self._prefill_done(pf)
                    self.blocked = False
                    if pf.output == 0 and self.progress is not None:
                        self.progress(1)
            pool = self.pool
            pt = s["prompt_tokens"]
            self.series.record(round(self.now, 6), pool.allocated, pool.reserved, pool.capacity,
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
        s = dict(self.s)
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
        if self.spec is not None:
            s.update(self.spec.stats())
            s["peak_mtp_pages"] = result.pools[MTP]["peak_allocated"]
            s["capacity_mtp_pages"] = self.st.pools[MTP].capacity
        if self.injector is not None:
            s.update(self.injector.stats(result.violations))
        return SimResult(s, self.series.as_dict(), result, self.header)


def simulate(requests, config: SimConfig, source: str = "simulate", record=None, progress=None) -> SimResult:
    """Run one simulation of `requests` under `config`."""
    return Simulation(config, source, record, progress).run(requests)
