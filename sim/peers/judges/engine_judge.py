"""Judging what a real paged-cache scheduler (vLLM's Scheduler, SGLang's RadixCache) decided, step by step.

A driver reports, per engine step, the block tables it handed out (new requests with their prefix hit and block ids,
running requests' added blocks, resumed requests' new tables), the tokens it scheduled and produced, finished and
preempted requests, its prefix-cache statistics, its pool's cached-block count and the KV-event batches it published
(judged by ``sim.peers.judges.events.EventChecker``: EV-1 ... EV-7). This judge keeps what the decisions imply --
which live request names which block, and which content (a chain of interned (parent, tokens) keys at the engine's
block size, ``Contents``) each block last received -- and checks the rules of ``RULES`` (``engine_rules``: seed
citations there, readings in ``DECISIONS``), restating for block-table engines what the TS-PFX and PEER rules say of
TokenSpeed:

* PEER-5 capacity (cache concepts: "its capacity belongs to the global empty-parent FIFO rather than any
  group"; a pool of N blocks minus the reserved null block): every block id lies in [1, num_blocks) and the
  blocks live requests name never outnumber the usable blocks.
* PEER-6 whole-block hits (prefix_granularity "defines the identity boundary of cached prefixes: two requests
  share cache only at multiples of this many tokens"): a prefix hit is a multiple of the block size and
  leaves the prompt's last token to compute.
* PEER-7 hits bounded by the trace and the stream ("the FIFO data plane orders any hitter's forward after
  the writer"; research/kv-events.md: a router "gets requests routed for hits that are not there" when the
  stream and the cache disagree): every block a hit names holds exactly that prefix block's content, written
  by an earlier step or by this step's forward (vLLM writes every layer's KV of a batch before its
  attention), and that content is live in the engine's own event stream once the step's batches are in.
* PEER-8 no aliasing ("may replace one with the key's existing canonical block"): a block handed out fresh
  is named by no other live request, and no request computes into a block another live request already
  named.
* PEER-9 reported statistics agree with the decisions and the stream: the scheduler's prefix-cache stats
  (queried tokens, hit tokens, requests) equal the hits it handed out, and the blocks its pool holds under a
  hash equal the live blocks of its event stream (a router's view must match the engine's cache); and the
  deep counters the driver reads from the engine's own structures agree with each other and with the live
  tables (``probe_check``: ``sim.peers.vllm.counters``, ``sim.peers.sglang.counters``).
* PEER-11 the engine completes every call ("The scheduler asserts both when batching a plan's ops"): an
  exception the engine raised while stepping (``crashed``) is a finding naming the exception, the innermost
  engine frame, the step and the request; the run ends there with every earlier finding kept.

The engine paths the driver saw taken are summed in ``paths`` (``sim.peers.judges.path_coverage`` reports them).

The trace's own bound (every request's longest whole-block prefix seen in an earlier prompt) is reported
beside the hit ratio. This module knows driver step messages and events, never an engine's API.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvsim.sim.peers.judges.engine_rules import DECISIONS, RULES
from kvsim.sim.peers.judges.event_log import batch_events
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.trace import cachetrace as ct

__all__ = ["RULES", "DECISIONS", "EngineJudge", "Finding", "batch_events"]


@dataclass
class Finding:
    rule: str
    line: int
    step: int
    message: str
    context: dict = field(default_factory=dict)

    def as_dict(self, trace: str) -> dict:
        return {"rule": self.rule, "trace": trace, "event": self.step, "line": self.line, "op": "step",
                "message": self.message, "context": self.context}


class Contents:
    """Content keys: block i of a token sequence is the pair (key of block i-1, its tokens as int64 bytes),
    interned to a small int. Exact (no hash collision can alias two prefixes) and cheap to look up, so the
    judge can name the content of every block the engine computes and every block its stream announces."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: dict[tuple[int, bytes], int] = {}

    def key(self, parent: int, raw: bytes) -> int:
        ids = self.ids
        k = ids.get((parent, raw))
        if k is None:
            k = ids[(parent, raw)] = len(ids) + 1
        return k

    def find(self, parent: int, raw: bytes) -> int | None:
        return self.ids.get((parent, raw))


def frame(tokens: Any) -> bytes:
    """Token ids as int64 little-endian bytes (lists or NumPy arrays)."""
    if isinstance(tokens, np.ndarray):
        return tokens.astype("<i8", copy=False).tobytes()
    return array("q", tokens).tobytes()


class _Req:
    """One request as the judge sees it: tokens (prompt, then what it produced), block table, frontier."""

    __slots__ = ("tokens", "prompt", "generated", "keys", "framed", "table", "computed", "seen", "hit")

    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = tokens
        self.prompt = len(tokens)
        self.generated: list[int] = []
        self.keys: list[int] = []
        self.framed = frame(tokens)
        self.table: list[int] = []
        self.computed = 0
        self.seen = False
        self.hit = 0

    def key(self, i: int, bs: int, contents: Contents) -> int | None:
        """The content key of block ``i`` (None while its tokens are not all known)."""
        keys = self.keys
        if i < len(keys):
            return keys[i]
        n = self.prompt
        while len(keys) <= i:
            j = len(keys)
            lo, hi = j * bs, (j + 1) * bs
            if hi > n + len(self.generated):
                return None
            if hi <= n:
                raw = self.framed[lo * 8:hi * 8]
            else:
                raw = self.framed[lo * 8:n * 8] + frame(self.generated[max(lo - n, 0):hi - n])
            keys.append(contents.key(keys[-1] if keys else 0, raw))
        return keys[i]


class EngineJudge:
    """Feed it ``submit`` for every request, then every driver step message in order; ``findings`` collects
    what broke. ``events`` is the KV-event checker the step's batches go to (its findings stay its own)."""

    def __init__(self, block_size: int, num_blocks: int, events: EventChecker, reserved: int = 1,
                 max_findings: int | None = None, same_step_hits: bool = True,
                 parse: Callable[[Any], list] | None = None, policy: Any = None,
                 probe_check: Callable[[dict, dict[int, int]], list[tuple[str, dict]]] | None = None,
                 act: Any = None, groups: Any = None, tier: Any = None):
        self.bs = block_size
        self.num_blocks = num_blocks
        self.usable = num_blocks - reserved
        self.events = events
        self.same_step_hits = same_step_hits
        self.parse = parse  # the event checker's own reader of a wire batch (None: the judge's ``batch_events``)
        self.reqs: dict[str, _Req] = {}
        self.holders: dict[int, int] = {}       # block -> live requests naming it
        self.contents = Contents()
        self.content: dict[int, int] = {}       # block -> content key last computed into it
        self.stream: dict[Any, int] = {}        # live event hash -> content key (a router's view)
        self.stream_keys: dict[int, int] = {}   # content key -> live event hashes carrying it
        self.copies: dict[Any, int] = {}        # live hash stored more than once -> its copies (vLLM's preset)
        self.seen_keys: set[int] = set()        # prompt block keys submitted so far (the trace's bound)
        self.findings: list[Finding] = []
        self.max_findings = max_findings
        # the engine's own eviction-policy rule (sim.peers.ENGINE.policy): fed at the start of each step and
        # before its finished requests leave
        self.policy = policy
        self.rules = dict(RULES) | (policy.RULES if policy is not None else {})
        self.decisions = dict(DECISIONS) | (policy.DECISIONS if policy is not None else {})
        self.act = act  # frames, structure checks and recovery (sim.peers.judges.actionable) of a real engine's run
        if act is not None:
            self.rules |= act.rules
            self.decisions |= act.decisions
            events.on_finding = act.event_finding
        self.counts = {r: 0 for r in self.rules}
        self.premise = {r: 0 for r in self.rules}
        self.stats = {"requests": 0, "steps": 0, "prompt_tokens": 0, "hit_tokens": 0, "hits": 0, "bound_tokens": 0,
                      "preempted_hit_tokens": 0, "preemptions": 0, "scheduled_tokens": 0, "finished": 0,
                      "peak_live_blocks": 0, "reported_hit_tokens": 0, "reported_query_tokens": 0}
        self.probe_check = probe_check  # the engine's PEER-9 checks of its deep counters (sim.peers.ENGINE.counters)
        self.paths: dict[str, int] = {}   # engine paths the driver saw taken, summed over the run
        self.crash: dict | None = None    # the engine's exception (PEER-11), when it raised
        self._step = -1
        self._written: set[int] = set()    # blocks this step's forward completed
        self._added: dict[int, int] = {}   # blocks named anew in this step, and by how many slots
        self._start: dict[str, int] = {}   # requests whose table changed in this step: its length at the start
        # every cache group of a hybrid run (sim.peers.judges.group_judge.GroupJudge): fed each request and each step
        self.groups = groups
        if groups is not None:
            groups.attach(self)
        # a Host tier behind the engine (sim.peers.judges.host_judge.HostTierJudge): fed before and after each forward
        self.tier = tier
        if tier is not None:
            tier.attach(self)

    # -- findings ---------------------------------------------------------------------------------------------
    def _find(self, rule: str, line: int, message: str, **ctx: Any) -> None:
        self.counts[rule] += 1
        if self.act is not None:
            message = self.act.finding(rule, line, self._step, message, ctx)
        if self.max_findings is None or len(self.findings) < self.max_findings:
            self.findings.append(Finding(rule, line, self._step, f"step {self._step}: {message}", ctx))

    find = _find  # for the engine's policy checker

    # -- inputs -----------------------------------------------------------------------------------------------
    def submit(self, rid: str, tokens: np.ndarray) -> None:
        if rid in self.reqs:
            raise ValueError(f"request {rid!r} submitted twice")
        r = _Req(tokens)
        self.reqs[rid] = r
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += r.prompt
        bs = self.bs
        bound = 0
        for i in range((r.prompt - 1) // bs):
            if r.key(i, bs, self.contents) in self.seen_keys:
                bound += 1
            else:
                break
        self.stats["bound_tokens"] += bound * bs
        for i in range(r.prompt // bs):
            self.seen_keys.add(r.key(i, bs, self.contents))  # type: ignore[arg-type]
        if self.groups is not None:
            self.groups.submit(rid, tokens)

    def step(self, msg: dict, before: int, at: int | None = None) -> None:
        """One driver step: tables, writes, hits, events, then the engine's own statistics. Findings name ``at``,
        the step's line in its kvsim-peer/1 log (``sim.peers.peer_log``), or without it lines of an event log: a
        batch's (EV), the step's last batch's after ``before`` earlier ones (PEER), the step in the message."""
        self._step = msg["step"]
        line = before + len(msg.get("batches", ())) if at is None else at
        if self.act is not None:
            self.act.begin(msg)
        self.stats["steps"] += 1
        self.premise["PEER-11"] += 1  # the engine completed this step's calls
        bs = self.bs
        self._added, self._start, self._written = {}, {}, set()
        if self.policy is not None:
            self.policy.before(self, msg, line)
        # requests preempted by this step's scheduling gave their blocks back before anything was allocated
        for rid in msg.get("preempted", ()):
            self.stats["preemptions"] += 1
            r = self._req(rid)
            self._drop_table(r)
            r.computed = 0
        # tables a checkpoint swapped to the cache's copies before this step allocated (SGLang's chunked stash)
        for rid, table in msg.get("swaps", ()):
            self._swap(rid, self._req(rid), list(table), line)
        # (request, hit, resumed, tokens it had before this step produced one: a hit must leave the last to compute)
        hits: list[tuple[str, _Req, int, bool, int]] = []
        # in the scheduler's order: running requests' blocks, then the waiting queue, whose head holds the
        # requests preempted earlier (resumed first), then new ones -- a later one may hit what an earlier
        # one's allocation cached in this very step
        for rid, resumed, blocks, computed in msg.get("cached", ()):
            r = self._req(rid)
            if resumed:
                self._table(rid, r, list(blocks or ()), computed, line)
                r.computed = computed
                hits.append((rid, r, computed, True, r.prompt + len(r.generated)))
            elif blocks:
                self._append(rid, r, list(blocks), line)
        for rid, computed, blocks in msg.get("new", ()):
            r = self._req(rid)
            self._table(rid, r, list(blocks), computed, line)
            r.computed = computed
            hits.append((rid, r, computed, r.seen, r.prompt + len(r.generated)))
            r.seen = True
        if self.tier is not None:  # the Host tier's evictions, jobs and completions before the forward
            self.tier.before(self, msg, line)
        # this step's forward: every scheduled token written into its request's blocks
        for rid, n in msg.get("scheduled", {}).items():
            r = self._req(rid)
            start, end = r.computed, r.computed + n
            self.stats["scheduled_tokens"] += n
            mine = self._start.get(rid, len(r.table))  # slots below this named their block before the step
            for i in range(start // bs, min((end - 1) // bs + 1, len(r.table))):
                blk = r.table[i]
                others = self.holders.get(blk, 0) - self._added.get(blk, 0) - (i < mine)
                if others > 0:
                    self._find("PEER-8", line, f"{rid} computes block {i} into block {blk}, which another live "
                               "request named", request=rid, slot=i, block=blk)
                want = r.key(i, bs, self.contents) if (i + 1) * bs <= end else None
                if want is not None:
                    self.content[blk] = want
                    self._written.add(blk)
                else:
                    self.content.pop(blk, None)
            r.computed = end
        if self.tier is not None:
            self.tier.forward(self, msg, line)
        for rid, tok in msg.get("tokens", {}).items():
            self._req(rid).generated.append(int(tok))
        # tables rewritten after the forward: computed blocks swapped to the cache's canonical copies
        for rid, table in msg.get("tables", ()):
            self._swap(rid, self._req(rid), list(table), line)
        # events published during the step
        seqs = msg.get("seqs") or ()
        sequence = getattr(self.events, "sequence", None)
        for k, batch in enumerate(msg.get("batches", ())):
            evs = batch_events(batch)
            if self.groups is not None:  # the router's view of the first full group (the others: group_judge)
                evs = self.groups.primary_events(batch, evs)
            if sequence is not None and k < len(seqs):
                sequence(seqs[k], before + k + 1 if at is None else at)
            self.events.batch(self.parse(batch) if self.parse else evs, before + k + 1 if at is None else at)
            self._stream(evs)
        # prefix hits of the requests first scheduled (or resumed) in this step
        for rid, r, hit, again, known in hits:
            self._hit(rid, r, hit, again, known, line)
        self._stats(msg, line)
        if self.policy is not None:
            self.policy.after(self, msg)
        for rid in msg.get("finished", ()):
            self.stats["finished"] += 1
            r = self._req(rid)
            self._drop_table(r)
            del self.reqs[rid]
        if self.act is not None:  # the engine's structures as the step left them, before the counters they explain
            self.act.end(self, msg, line)
        for k, v in (msg.get("paths") or {}).items():
            self.paths[k] = self.paths.get(k, 0) + v
        probe = msg.get("probe")  # the deep counters name what they find off: before the pool-wide accounting
        if probe is not None and self.probe_check is not None:
            self.premise["PEER-9"] += 1
            for message, ctx in self.probe_check(probe, self._names()):
                self._find("PEER-9", line, message, **ctx)
        self._free(msg, line)
        if self.groups is not None:
            self.groups.step(self, msg, line)
        live = len(self.holders)
        if live > self.stats["peak_live_blocks"]:
            self.stats["peak_live_blocks"] = live
        self.premise["PEER-5"] += 1
        if live > self.usable:
            self._find("PEER-5", line, f"live requests name {live} blocks, the pool holds {self.usable}", live=live,
                       capacity=self.usable)

    def named(self) -> dict[int, int]:
        """Block -> its live holders: the tables and the Host loads waiting (what reference counts count)."""
        return self._names()

    def tables_changed(self) -> list[str]:
        """The requests whose block table the last step changed (named anew or added to)."""
        return list(self._start)

    # -- pieces -----------------------------------------------------------------------------------------------
    def _req(self, rid: str) -> _Req:
        r = self.reqs.get(rid)
        if r is None:
            raise ValueError(f"step {self._step} names request {rid!r}, which is not live")
        return r

    def _table(self, rid: str, r: _Req, table: list[int], fresh_from: int, line: int) -> None:
        """Adopt ``table`` as the request's block table; slots from ``fresh_from`` tokens on are fresh."""
        self._start.setdefault(rid, 0)
        self._drop_table(r)
        self._name(rid, r, table, 0, fresh_from, line)

    def _append(self, rid: str, r: _Req, blocks: list[int], line: int) -> None:
        """Blocks added at the end of a running request's table: all fresh."""
        self._start.setdefault(rid, len(r.table))
        n = len(r.table)
        r.table = r.table + blocks
        self._name(rid, r, r.table, n, n * self.bs, line)

    def _name(self, rid: str, r: _Req, table: list[int], first: int, fresh_from: int, line: int) -> None:
        bs, hold, added = self.bs, self.holders, self._added
        for i in range(first, len(table)):
            blk = table[i]
            if not 0 < blk < self.num_blocks:
                self._find("PEER-5", line, f"{rid}'s block {i} is block id {blk}, outside [1, {self.num_blocks})",
                           request=rid, slot=i, block=blk)
            if i * bs >= fresh_from:
                self.premise["PEER-8"] += 1
                if hold.get(blk, 0):
                    self._find("PEER-8", line, f"{rid} is handed block {blk} fresh at block {i} while another live "
                               "request names it", request=rid, slot=i, block=blk)
                self.content.pop(blk, None)
            hold[blk] = hold.get(blk, 0) + 1
            added[blk] = added.get(blk, 0) + 1
        r.table = table

    def _swap(self, rid: str, r: _Req, table: list[int], line: int) -> None:
        """A computed block replaced by another block must hold the same content (a shared canonical copy)."""
        bs = self.bs
        old = r.table
        for i, blk in enumerate(table):
            if i < len(old) and old[i] == blk:
                continue
            self.premise["PEER-8"] += 1
            want = r.key(i, bs, self.contents) if (i + 1) * bs <= r.computed else None
            if want is None or self.content.get(blk) != want:
                self._find("PEER-8", line, f"{rid}'s block {i} is swapped to block {blk}, which does not hold that "
                           "block's computed content", request=rid, slot=i, block=blk)
        self._start.setdefault(rid, 0)
        self._drop_table(r)
        self._name(rid, r, table, 0, 1 << 62, line)

    def _drop_table(self, r: _Req) -> None:
        hold = self.holders
        for blk in r.table:
            left = hold[blk] - 1
            if left:
                hold[blk] = left
            else:
                del hold[blk]
        r.table = []

    def _hit(self, rid: str, r: _Req, hit: int, again: bool, known: int, line: int) -> None:
        """``known``: the request's tokens when it was scheduled (before this step's sampled token)."""
        bs = self.bs
        if again:
            self.stats["preempted_hit_tokens"] += hit
        else:
            self.stats["hit_tokens"] += hit
            self.stats["hits"] += hit > 0
            r.hit = hit
        if not hit:
            return
        self.premise["PEER-6"] += 1
        self.premise["PEER-7"] += 1
        if hit % bs:
            self._find("PEER-6", line, f"{rid} hits {hit} tokens, not a multiple of the block size {bs}", request=rid,
                       hit=hit)
        if hit >= known:
            self._find("PEER-6", line, f"{rid} hits {hit} of its {known} tokens: the last token must be computed",
                       request=rid, hit=hit)
        for i in range(min(hit // bs, len(r.table))):
            want = r.key(i, bs, self.contents)
            blk = r.table[i]
            have = self.content.get(blk)
            if want is None or have != want:
                why = "holds no computed content" if have is None else "holds another prefix"
                self._find("PEER-7", line, f"{rid} hits block {i} through block {blk}, which {why}", request=rid,
                           slot=i, block=blk, hit=hit)
                return
            if not self.same_step_hits and blk in self._written:
                self._find("PEER-7", line, f"{rid} hits block {i} through block {blk}, which this step's own forward "
                           "computes (this engine publishes a block only after the forward that writes it)",
                           request=rid, slot=i, block=blk, hit=hit)
                return
            if want not in self.stream_keys:
                self._find("PEER-7", line, f"{rid} hits block {i} through block {blk}, whose content is not live "
                           "in the engine's event stream", request=rid, slot=i, block=blk, hit=hit)
                return
        if hit // bs > len(r.table):
            self._find("PEER-7", line, f"{rid} hits {hit} tokens but its table names {len(r.table)} blocks",
                       request=rid, hit=hit)

    def _stream(self, evs: list[ct.KvEvent]) -> None:
        """The router's view: live event hashes and the content key each carries (from its parent's and its
        tokens; a parent the stream does not know chains from nothing). Where the event checker allows
        duplicate copies (vLLM's preset: a hash stored again while live is a second block with that hash),
        a hash stays live until as many removals as stores have come, as in vLLM's own cached-block map."""
        stream, keys, contents, copies = self.stream, self.stream_keys, self.contents, self.copies
        counted = bool(getattr(self.events, "duplicate_copies", False))
        for ev in evs:
            if getattr(ev, "medium", None) not in (None, "GPU"):
                continue  # a Host tier's own events (medium CPU): the device view is the GPU's
            if isinstance(ev, ct.BlockStored):
                prev = stream.get(ev.parent_block_hash, -1) if ev.parent_block_hash is not None else 0
                bs = ev.block_size
                raw = frame(ev.token_ids)
                for j, h in enumerate(ev.block_hashes):
                    d = contents.key(prev, raw[j * bs * 8:(j + 1) * bs * 8])
                    old = stream.get(h)
                    if old is not None:
                        _dec(keys, old)
                        if counted:
                            copies[h] = copies.get(h, 1) + 1
                    stream[h] = d
                    keys[d] = keys.get(d, 0) + 1
                    prev = d
            elif isinstance(ev, ct.BlockRemoved):
                for h in ev.block_hashes:
                    if h in copies:
                        copies[h] -= 1
                        if copies[h] == 1:
                            del copies[h]
                    elif h in stream:
                        _dec(keys, stream.pop(h))
            else:
                stream.clear()
                keys.clear()
                copies.clear()

    def _stats(self, msg: dict, line: int) -> None:
        st = msg.get("stats")
        if st is not None:
            self.premise["PEER-9"] += 1
            self.stats["reported_hit_tokens"] += st["hits"]
            self.stats["reported_query_tokens"] += st["queries"]
            want_hits = sum(r.hit for rid, r, _h, again in self._new_of(msg) if not again)
            want_q = sum(r.prompt for _rid, r, _h, again in self._new_of(msg) if not again)
            want_n = sum(1 for *_x, again in self._new_of(msg) if not again)
            if (st["hits"], st["queries"], st["requests"]) != (want_hits, want_q, want_n):
                self._find("PEER-9", line, f"prefix-cache stats report {st['requests']} requests, {st['queries']} "
                           f"queried and {st['hits']} hit tokens; the step admitted {want_n} requests, "
                           f"{want_q} prompt tokens, {want_hits} hit tokens", reported=st,
                           observed={"requests": want_n, "queries": want_q, "hits": want_hits})
        tree = msg.get("tree")
        if tree is not None:
            self.premise["PEER-9"] += 1
            if tree["evictable"] + tree["protected"] != tree["total"]:
                self._find("PEER-9", line, f"the cache reports {tree['evictable']} evictable and {tree['protected']} "
                           f"protected of {tree['total']} cached tokens", **tree)
        cached = msg.get("cached_blocks")
        if cached is not None:
            self.premise["PEER-9"] += 1
            live = len(self.stream)
            if cached != live:
                self._find("PEER-9", line, f"the pool holds {cached} blocks under a hash, its event stream "
                           f"{live} live blocks", cached=cached, stream=live)

    def _free(self, msg: dict, line: int) -> None:
        """After the step's finishes and preemptions: free blocks plus blocks live requests name = the pool."""
        free = msg.get("free_blocks")
        if free is None:
            return
        self.premise["PEER-9"] += 1
        named = len(self._names())
        if free + named != self.usable:
            self._find("PEER-9", line, f"the pool reports {free} free blocks and live requests name {named}: "
                       f"{free + named} of {self.usable} usable blocks accounted", free=free, named=named,
                       usable=self.usable)

    def _names(self) -> dict[int, int]:
        """Block -> names by live requests: the tables, and the blocks requests waiting for a Host load hold."""
        held = self.tier.held if self.tier is not None else None
        if not held:
            return self.holders
        out = dict(self.holders)
        for blk, n in held.items():
            out[blk] = out.get(blk, 0) + n
        return out

    def _new_of(self, msg: dict) -> list[tuple[str, _Req, int, bool]]:
        out = []
        for rid, computed, _blocks in msg.get("new", ()):
            r = self.reqs.get(rid)
            if r is not None:
                out.append((rid, r, computed, False))
        return out

    def crashed(self, facts: dict, line: int, msg: dict | None = None) -> None:
        """PEER-11: the engine raised while stepping; the run ends here, every earlier finding stays (``msg``'s
        structures, as the engine left them, judged first)."""
        self.crash = facts
        self.premise["PEER-11"] += 1
        if facts.get("step") is not None:
            self._step = facts["step"]
        if self.act is not None and msg is not None:
            self.act.begin(msg)
            self.act.end(self, msg, line, crashed=True)
        rid = facts.get("request")
        frame = facts.get("frame") or "no engine frame"
        self._find("PEER-11", line, f"the engine raised {facts.get('type')}: {facts.get('message') or '(no message)'} "
                   f"at {frame}" + (f" while processing {rid}" if rid else "") +
                   (f" ({facts['phase']})" if facts.get("phase") else ""),
                   exception=facts.get("type"), frame=facts.get("frame"), request=rid,
                   traceback=list(facts.get("traceback") or ()),
                   **{k: facts[k] for k in ("block", "node") if facts.get(k) is not None})

    def finish(self) -> None:
        """End of the run (nothing to close: unfinished requests are the runner's to report)."""

    def summary(self) -> dict:
        s: dict[str, Any] = dict(self.stats)
        pt = s["prompt_tokens"] or 1
        s["hit_ratio"] = round(s["hit_tokens"] / pt, 6)
        s["trace_bound_ratio"] = round(s["bound_tokens"] / pt, 6)
        s["violations_by_rule"] = {k: v for k, v in self.counts.items() if v}
        return s


def _dec(keys: dict[int, int], d: int) -> None:
    keys[d] -= 1
    if not keys[d]:
        del keys[d]
