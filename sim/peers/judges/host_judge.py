"""Judging a real engine's Host tier (vLLM's CPUOffloadingManager behind its OffloadingConnector) step by step.

A driver run with ``--offload-blocks N`` adds an ``offload`` section to each step (``sim/peers/vllm/offload.py``):
the store and load jobs the connector issued (``[job, request, [[source, destination, key], ...]]``, a load also
``sync``), the jobs the driver -- playing the worker -- completed before this step's forward (``acks``:
``[job, ok]``), jobs flushed by the scheduler (``flushed``), the manager's evictions and lookups (``evicted``,
``lookups``: ``[key, HIT | HIT_PENDING | MISS]``) and the blocks held by requests waiting for a load (``held``).
``EngineJudge`` calls this plug-in before each step's forward (``before``: lookups, loads, evictions, stores,
completions, in the order vLLM's schedule and its worker make them) and
after it (``forward``: what the forward wrote), and counts the held blocks in its PEER-9 accounting (``held``).

It keeps every Host chunk's key, whether its store completed (the acknowledgement publishes it) and the content
its copy carried (the engine judge's content key of the source block when the copy completed), every job in flight
and what it pins, and checks the seed-002 Host-tier rules kvsim already judges on TokenSpeed (catalogue
``spec/rules/cache_l2.py``, whose entries say how each reads on vLLM) and one more:

* TS-L2-1 pinned until ACK: a store's GPU sources are not written by a forward from the step after it was issued
  until it completes; a load's GPU destinations are not written, nor its chunks evicted or stored into, before it
  completes;
* TS-L2-3 job hygiene: at least one transfer, ids in range, no (source, destination) twice in a step;
* TS-L2-4 a key is not stored while its store is in flight or while it is on the Host tier;
* TS-L2-5 a load reads chunks whose store completed under the load's key; the GPU blocks it fills hold that content
  (PEER-7 judges the hit that reads them);
* PEER-23 lookups answer the tier's state: HIT only for a key whose store completed and no eviction removed,
  HIT_PENDING only for one in flight, MISS never for a key the tier holds; evictions only of idle keys it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvsim.spec import catalogue

if TYPE_CHECKING:
    from kvsim.sim.peers.judges.engine_judge import EngineJudge

__all__ = ["HostTierJudge", "RULE_IDS"]

RULE_IDS = ("TS-L2-1", "TS-L2-3", "TS-L2-4", "TS-L2-5", "PEER-23")
PEER6_HOST = (" With a Host tier (vLLM's offloading connector), a hit served from it counts as the request's first "
              "computed tokens too: a whole-prompt Host hit that vLLM leaves at num_tokens - 1 "
              "(Scheduler._update_waiting_for_remote_kv: 'a full prompt hit re-computes that token'), inside a "
              "loaded block, is this rule's finding -- a divergence from seed 002 L13 that vLLM's local path does "
              "not make (it recomputes the whole last block), benign in effect: the forward rewrites that block's "
              "last slot with the KV it holds (sim/peers/samples/README.md, Host tier).")


@dataclass
class _Chunk:
    key: str
    job: int                      # the store that filled it
    ready: bool = False           # its store completed (acknowledged)
    content: int | None = None    # the content key its copy carried


@dataclass
class _Job:
    kind: str                     # store | load
    rid: str
    pairs: list                   # [source, destination, key]
    step: int
    sync: bool = False
    sources: set = field(default_factory=set)


class HostTierJudge:
    """The plug-in: built with the run's Host chunks and the pool's GPU block count."""

    def __init__(self, chunks: int, num_blocks: int) -> None:
        self.chunks = chunks
        self.num_blocks = num_blocks
        self.host: dict[int, _Chunk] = {}      # chunk -> what it holds
        self.keys: dict[str, int] = {}         # key -> the chunk holding it
        self.jobs: dict[int, _Job] = {}        # jobs in flight
        self.pinned: dict[int, set[int]] = {}  # GPU block -> stores reading it (in flight)
        self.filling: dict[int, int] = {}      # GPU block -> the load writing it
        self.reading: dict[int, int] = {}      # chunk -> loads in flight reading it
        self.held: dict[int, int] = {}         # GPU block -> names by requests waiting for a load
        self.stats = {"stores": 0, "loads": 0, "acks": 0, "failed_loads": 0, "evictions": 0, "lookups": 0}
        self._step = -1
        self.RULES = {rid: (catalogue.get(rid).title, catalogue.get(rid).clause) for rid in RULE_IDS}
        self.DECISIONS = {rid: catalogue.get(rid).decisions for rid in RULE_IDS}

    def attach(self, judge: EngineJudge) -> None:
        for rid, rule in self.RULES.items():
            judge.rules[rid] = rule
            judge.decisions[rid] = self.DECISIONS[rid]
            judge.counts.setdefault(rid, 0)
            judge.premise.setdefault(rid, 0)
        judge.decisions["PEER-6"] = judge.decisions["PEER-6"] + PEER6_HOST

    # -- before the forward ----------------------------------------------------------------------------------------
    def before(self, judge: EngineJudge, msg: dict, line: int) -> None:
        off = msg.get("offload")
        if off is None:
            return
        self._step = msg["step"]
        self.held = {}
        for _rid, blocks in off.get("held", ()):
            for b in blocks:
                if b:
                    self.held[b] = self.held.get(b, 0) + 1
        # vLLM's order within schedule(): lookups and loads while admitting, then the stores of
        # build_connector_meta (prepare_store evicts first); the worker's completions after it
        for key, result in off.get("lookups", ()):
            self._lookup(judge, line, key, result)
        seen: set[tuple[str, int, int]] = set()
        for job, rid, pairs, sync in off.get("loads", ()):
            self._load(judge, line, job, rid, pairs, sync, seen)
        for key in off.get("evicted", ()):
            self._evict(judge, line, key)
        for job, rid, pairs in off.get("stores", ()):
            self._store(judge, line, job, rid, pairs, seen)
        for job, ok in off.get("acks", ()):
            self._ack(judge, line, job, ok)
        if msg.get("cleared"):
            self.host.clear()
            self.keys.clear()

    def _find(self, judge: EngineJudge, rule: str, line: int, message: str, **ctx: Any) -> None:
        judge.find(rule, line, message, **ctx)

    def _lookup(self, judge: EngineJudge, line: int, key: str, result: str) -> None:
        judge.premise["PEER-23"] += 1
        self.stats["lookups"] += 1
        c = self.keys.get(key)
        chunk = self.host.get(c) if c is not None else None
        have = "MISS" if chunk is None else ("HIT" if chunk.ready else "HIT_PENDING")
        if result in ("HIT", "HIT_PENDING", "MISS") and result != have:
            why = {"MISS": "the tier does not hold it", "HIT": "its store completed",
                   "HIT_PENDING": "its store is in flight"}[have]
            self._find(judge, "PEER-23", line, f"the Host tier answers {result} for key {key}, but {why}",
                       key=key, result=result, expected=have)

    def _evict(self, judge: EngineJudge, line: int, key: str) -> None:
        judge.premise["PEER-23"] += 1
        self.stats["evictions"] += 1
        c = self.keys.pop(key, None)
        if c is None:
            self._find(judge, "PEER-23", line, f"the Host tier evicts key {key}, which it does not hold", key=key)
            return
        chunk = self.host.pop(c)
        if not chunk.ready:
            self._find(judge, "PEER-23", line, f"the Host tier evicts key {key} (chunk {c}) while its store is in "
                       "flight", key=key, chunk=c)
        judge.premise["TS-L2-1"] += 1
        if self.reading.get(c):
            self._find(judge, "TS-L2-1", line, f"the Host tier evicts chunk {c} (key {key}) while a load reads it",
                       key=key, chunk=c)

    def _hygiene(self, judge: EngineJudge, line: int, kind: str, job: int, pairs: list,
                 seen: set[tuple[str, int, int]]) -> None:
        judge.premise["TS-L2-3"] += 1
        if not pairs:
            self._find(judge, "TS-L2-3", line, f"{kind} job {job} carries no transfer", job=job)
        for src, dst, _key in pairs:
            gpu, chunk = (src, dst) if kind == "store" else (dst, src)
            if not 0 < gpu < self.num_blocks or not 0 <= chunk < self.chunks:
                self._find(judge, "TS-L2-3", line, f"{kind} job {job} names GPU block {gpu} / chunk {chunk}, outside "
                           f"[1, {self.num_blocks}) / [0, {self.chunks})", job=job, block=gpu, chunk=chunk)
            if (kind, src, dst) in seen:
                self._find(judge, "TS-L2-3", line, f"{kind} job {job} repeats the transfer {src} -> {dst} of this "
                           "step", job=job, source=src, destination=dst)
            seen.add((kind, src, dst))

    def _store(self, judge: EngineJudge, line: int, job: int, rid: str, pairs: list,
               seen: set[tuple[str, int, int]]) -> None:
        self.stats["stores"] += 1
        self._hygiene(judge, line, "store", job, pairs, seen)
        j = self.jobs[job] = _Job("store", rid, pairs, self._step)
        for blk, c, key in pairs:
            judge.premise["TS-L2-4"] += 1
            have = self.keys.get(key) if key else None
            if have is not None:
                state = "on the Host tier" if self.host[have].ready else "in flight"
                self._find(judge, "TS-L2-4", line, f"store job {job} stores key {key} into chunk {c}, while that key "
                           f"is {state} (chunk {have})", job=job, key=key, chunk=c, held=have)
            judge.premise["TS-L2-1"] += 1
            if self.reading.get(c):
                self._find(judge, "TS-L2-1", line, f"store job {job} writes chunk {c}, which a load in flight reads",
                           job=job, chunk=c)
            old = self.host.get(c)
            if old is not None:
                self._find(judge, "TS-L2-4", line, f"store job {job} writes chunk {c}, which still holds key "
                           f"{old.key} (never evicted)", job=job, chunk=c, key=old.key)
                self.keys.pop(old.key, None)
            self.host[c] = _Chunk(key, job)
            if key and have is None:  # a key stored twice keeps naming the chunk that held it first
                self.keys[key] = c
            self.pinned.setdefault(blk, set()).add(job)
            j.sources.add(blk)

    def _load(self, judge: EngineJudge, line: int, job: int, rid: str, pairs: list, sync: bool,
              seen: set[tuple[str, int, int]]) -> None:
        self.stats["loads"] += 1
        self._hygiene(judge, line, "load", job, pairs, seen)
        self.jobs[job] = _Job("load", rid, pairs, self._step, sync)
        for c, blk, key in pairs:
            judge.premise["TS-L2-5"] += 1
            chunk = self.host.get(c)
            if chunk is None or not chunk.ready or chunk.key != key:
                why = ("holds nothing" if chunk is None else "holds key " + chunk.key if chunk.key != key
                       else "was not acknowledged yet")
                self._find(judge, "TS-L2-5", line, f"load job {job} of {rid} reads chunk {c} for key {key}, which "
                           f"{why}", job=job, chunk=c, key=key, request=rid)
            self.reading[c] = self.reading.get(c, 0) + 1
            self.filling[blk] = job

    def _ack(self, judge: EngineJudge, line: int, job: int, ok: bool) -> None:
        j = self.jobs.pop(job, None)
        if j is None:
            return  # a job flushed by a reset, or one this run never saw issued
        self.stats["acks"] += 1
        if j.kind == "store":
            for blk, c, _key in j.pairs:
                chunk = self.host.get(c)
                if chunk is not None and chunk.job == job:
                    chunk.ready = ok
                    chunk.content = judge.content.get(blk)
                waiting = self.pinned.get(blk)
                if waiting is not None:
                    waiting.discard(job)
                    if not waiting:
                        del self.pinned[blk]
            return
        if not ok:
            self.stats["failed_loads"] += 1
        for c, blk, _key in j.pairs:
            left = self.reading.get(c, 0) - 1
            if left > 0:
                self.reading[c] = left
            else:
                self.reading.pop(c, None)
            if self.filling.get(blk) == job:
                del self.filling[blk]
            chunk = self.host.get(c)
            if ok and chunk is not None and chunk.content is not None:
                judge.content[blk] = chunk.content
            else:
                judge.content.pop(blk, None)  # a failed load leaves its destination without content

    # -- the forward -----------------------------------------------------------------------------------------------
    def forward(self, judge: EngineJudge, msg: dict, line: int) -> None:
        """What this step's forward wrote: no pinned store source (issued in an earlier step, in flight), no
        destination of a load in flight."""
        if msg.get("offload") is None or not (self.pinned or self.filling):
            return
        bs = judge.bs
        for rid, n in msg.get("scheduled", {}).items():
            r = judge.reqs[rid]
            end = r.computed
            for i in range((end - n) // bs, min((end - 1) // bs + 1, len(r.table))):
                blk = r.table[i]
                judge.premise["TS-L2-1"] += 1
                early = [j for j in self.pinned.get(blk, ()) if self.jobs[j].step < self._step]
                if early:
                    self._find(judge, "TS-L2-1", line, f"{rid}'s forward writes block {blk}, the source of store job "
                               f"{early[0]} (issued at step {self.jobs[early[0]].step}, not yet acknowledged)",
                               request=rid, block=blk, job=early[0])
                if blk in self.filling:
                    self._find(judge, "TS-L2-1", line, f"{rid}'s forward writes block {blk}, which load job "
                               f"{self.filling[blk]} is still filling", request=rid, block=blk,
                               job=self.filling[blk])

    def summary(self) -> dict:
        return {**self.stats, "chunks": self.chunks, "held_at_end": len(self.host), "in_flight_at_end": len(self.jobs)}
