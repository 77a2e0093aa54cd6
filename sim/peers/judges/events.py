"""KV-event streams (vLLM, SGLang, TokenSpeed): reading subscriber logs and judging the stream.

Engines publish batches of ``BlockStored`` (block hashes, parent hash, token ids, block size),
``BlockRemoved`` (block hashes) and ``AllBlocksCleared``; a KV-aware router rebuilds the engine's cache
from them, so every inconsistency leaves the router routing for hits that are not there. The cache
concepts (seed 002) make a cached prefix's identity its hash at multiples of prefix_granularity (l.13: "two
requests share cache only at multiples of this many tokens") and say the scheduler "folds [cache mutations]
into one externally visible prefix event" (l.193), hashed by "a second, independent block-hash
implementation for external KV events" (l.309). The rules (their catalogue entries in spec.rules.kv_events;
``CATALOGUE`` as this judge's report states them):

* EV-1 a removal names a live block (never a block never stored, or already removed);
* EV-2 a store names no block that is already live (no double store without a removal);
* EV-3 a store's parent hash resolves to a live block (no orphans), and a partial tail is never a parent;
* EV-4 token counts agree with the block size;
* EV-5 ``AllBlocksCleared`` empties everything: a later event may not name a block it dropped;
* EV-6 live blocks never exceed the given capacity (per medium and group);
* EV-7 where the hashing scheme is known, every hash recomputes from its parent and tokens
  (``sim.peers.judges.block_hash``);
* EV-8 sequence numbers are contiguous: a batch lost and not replayed is a finding.

Live blocks are keyed by medium, ``group_idx`` where events carry it (a hybrid vLLM model publishes one
copy of each hash per cache group) and the batch's data-parallel rank (each rank has its own cache; its
``AllBlocksCleared`` empties that rank only). Engine presets (``PRESETS``) fix block size, hash scheme, tail
policy, per-group keys and the engine-documented allowances (the rules' entries say why each is allowed).

Library use (the peer drivers feed events as they come)::

    checker = EventChecker(preset=PRESETS["vllm"])        # or EventChecker(block_size=16, hash_scheme=...)
    for seq, events in stream:                            # events: parsed with parse_batch / parse_event,
        checker.sequence(seq, line=seq)                   # or any objects with the same fields
        checker.batch(events, line=seq)
        for f in checker.drain():                         # findings since the last drain, in order
            print(f.rule, f.line, f.message)
    summary = checker.summary()                           # counters; checker.counts per rule

The rule table and the presets are ``event_rules``; reading logs and parsing batches (array, native, object
or single-event lines, or a cachetrace/1 file's ``kv`` lines) is ``event_log``. This module is the checker and
the KV-event judge's public face: it re-exports both. It knows events, not schedulers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvsim.sim.peers.judges import block_hash as bh
from kvsim.sim.peers.judges import event_shapes as es
from kvsim.sim.peers.judges.block_hash import fnv1a64, fnv1a64_many
from kvsim.sim.peers.judges.event_log import EventLogError, parse_batch, parse_event, read_event_log, read_event_log_seq
from kvsim.sim.peers.judges.event_rules import CATALOGUE, PRESETS, RULES, Preset

__all__ = ["RULES", "CATALOGUE", "PRESETS", "Preset", "EventChecker", "EventLogError", "Finding",
           "read_event_log", "read_event_log_seq", "parse_batch", "parse_event", "fnv1a64", "fnv1a64_many",
           "HASH_SCHEMES"]

HASH_SCHEMES = bh.SCHEMES


@dataclass
class Finding:
    rule: str
    line: int
    message: str
    context: dict = field(default_factory=dict)

    def as_dict(self, trace: str) -> dict:
        return {"rule": self.rule, "trace": trace, "event": self.line, "line": self.line, "op": "kv",
                "message": self.message, "context": self.context}


def _short(h: Any) -> str:
    s = h.hex() if isinstance(h, bytes) else str(h)
    return s if len(s) <= 24 else s[:12] + "..." + s[-8:]


class _Live:
    __slots__ = ("copies", "full", "digest")

    def __init__(self, full: bool, digest: Any) -> None:
        self.copies, self.full, self.digest = 1, full, digest


_AUTO = ("fnv1a64", "sha256", "vllm-sha256", "vllm-sha256-cbor", "sglang-sha256")
_PENDING_ROOTS = 8  # root blocks tried before a stream's scheme is given up on


class EventChecker:
    """Feed it events in order (``batch(events, line)``, ``sequence(seq, line)``); findings come out.

    ``findings`` holds every finding (the first ``max_findings`` when one is given; ``counts`` counts them all);
    ``drain()`` returns those found since its last call. ``notes`` says what the checker guessed (a block size learned
    from a store, a hash scheme recognised) -- the flags a user would pass to pin them.

    ``preset`` (``PRESETS[engine]``) supplies whatever is not given explicitly; ``hash_scheme`` ``"auto"``
    adopts the one scheme the stream's first root blocks recompute under; ``duplicate_copies`` /
    ``reuse_reports`` are vLLM's allowances (the EV-2 entry).
    """

    def __init__(self, block_size: int | None = None, hash_scheme: str | None = None, capacity: int | None = None,
                 partial_tails: bool = False, max_findings: int | None = None, *, preset: Preset | None = None,
                 group_keys: bool = True, duplicate_copies: bool = False, reuse_reports: bool = False,
                 hash_seed: str = bh.VLLM_NONE_HASH_SEED, hash_block_size: int | None = None,
                 folded_groups: bool = False, capacities: dict[str, int] | None = None) -> None:
        self._candidates: tuple[str, ...] = _AUTO
        self._fallback: str | None = None
        self._pending: list[tuple] = []  # root blocks no candidate scheme reproduced, judged once one is adopted
        if preset is not None:
            block_size = block_size if block_size is not None else preset.block_size
            if hash_scheme is None and preset.alt_schemes:
                hash_scheme, self._fallback = "auto", preset.hash_scheme
                self._candidates = (preset.hash_scheme, *preset.alt_schemes)
            hash_scheme = preset.hash_scheme if hash_scheme is None else hash_scheme
            partial_tails = partial_tails or preset.partial_tails
            group_keys, duplicate_copies, reuse_reports = (preset.group_keys, preset.duplicate_copies,
                                                           preset.reuse_reports)
        hash_scheme = hash_scheme or "none"
        if hash_scheme not in HASH_SCHEMES + ("auto",):
            raise ValueError(f"hash scheme must be one of {HASH_SCHEMES}")
        self.block_size, self.capacity, self.partial_tails = block_size, capacity, partial_tails
        self.preset = preset
        self.group_keys, self.duplicate_copies, self.reuse_reports = group_keys, duplicate_copies, reuse_reports
        self.capacities = dict(capacities or {})  # a medium's own capacity (a Host tier's chunks), else capacity
        self.sparse_stores = preset is not None and preset.sparse_stores
        self.forward_parents = preset is not None and preset.forward_parents
        self._later: dict[Any, int] = {}  # hash -> index of its last store in the current batch
        self._at = 0                      # the index of the event being judged in its batch
        self._seed, self._hash_block_size = hash_seed, hash_block_size
        self._hbs_pinned = hash_block_size is not None
        self.scheme = hash_scheme
        self._scheme = None if hash_scheme == "auto" else bh.scheme(hash_scheme, seed=hash_seed,
                                                                      hash_block_size=hash_block_size)
        self.live: dict[Any, dict[Any, _Live]] = {}   # (medium, group) -> hash -> live block
        self._sizes: dict[Any, tuple[int, int]] = {}  # (medium, group) -> (block size, line that set it)
        self._copies: dict[Any, int] = {}  # (medium, group) -> live blocks, copies counted
        self.cleared: set = set()
        self.findings: list[Finding] = []
        self._drained = 0
        self.notes: list[str] = []
        self.warnings: list[str] = []  # said even under a preset: the preset's assumption did not hold
        self.max_findings = max_findings
        self.counts = {r: 0 for r in RULES}
        # batches in which each rule's premise held (a removal, a store, a clear or a store/removal after one, a
        # hash recomputed, a sequence number): counted in batches like `checked`, so exercised <= checked
        self.exercised = {r: 0 for r in RULES}
        self._sequenced_batch = False
        self._deferred: list[tuple] = []  # (line, hash, parent, tokens): fnv1a64 is recomputed in bulk
        self._seq: int | None = None
        self.grouped = False  # a store named a cache group (group_idx)
        self.stats = {"batches": 0, "stored": 0, "removed": 0, "cleared": 0, "cleared_empty": 0, "peak_live": 0,
                      "partial_blocks": 0, "recomputed": 0, "unverifiable": 0, "copies": 0, "reuse_reports": 0,
                      "sequence_gaps": 0, "partial_entries": 0, "sparse_stores": 0, "placeholders": 0,
                      "forward_parents": 0}
        self._described: set[Any] = set()  # media whose stores carried their tokens (vLLM's self-describing events)
        self.unverifiable_reasons: dict[str, int] = {}
        # EV-3's entry: with a published non-prefix-closed group folded into each prefix event, a store under a
        # parent the stream does not hold is the fold's designed orphan -- one router-compatibility hazard per
        # stream, every later orphan a consequence counted apart (sim.recovery's bookkeeping, for events)
        self.folded_groups = folded_groups
        self.hazards: list[Finding] = []
        self.consequences: list[dict] = []  # the consequences (the first max_findings when given), each with `of`
        self.consequence_count = 0

    # -- findings ----------------------------------------------------------------------------------------------
    on_finding: Any = None  # called with (rule, line, message, context) of every finding: a peer run's recovery

    def _find(self, rule: str, line: int, message: str, **ctx: Any) -> None:
        self.counts[rule] += 1
        if self.max_findings is None or len(self.findings) < self.max_findings:
            self.findings.append(Finding(rule, line, message, ctx))
        if self.on_finding is not None:
            self.on_finding(rule, line, message, ctx)

    def _fold_orphan(self, line: int, parent: Any) -> None:
        """A store under a parent the stream does not hold, where the engine folds a sliding-window or state
        group's residency into its events (EV-3's entry): the first is the cause, reported once as a
        router-compatibility hazard; every later one is its consequence, counted apart."""
        self.stats["fold_orphans"] = self.stats.get("fold_orphans", 0) + 1
        if not self.hazards:
            self.hazards.append(Finding("EV-3", line, f"store under parent {_short(parent)}, which the stream does "
                                        "not hold: the fold announces a prefix page only while every group holds "
                                        "it, so a page the sliding-window group dropped is never announced (a "
                                        "router that drops orphan stores loses this chain)",
                                        {"parent": parent}))
            return
        self.consequence_count += 1
        if self.max_findings is None or len(self.consequences) < self.max_findings:
            self.consequences.append({"rule": "EV-3", "event": line, "line": line, "op": "kv", "of": 1,
                                      "entity": f"parent {_short(parent)}",
                                      "message": f"store under parent {_short(parent)}, which the stream does not "
                                                 "hold (the same fold)"})

    def drain(self) -> list[Finding]:
        """Findings added since the last drain (deferred hashes recomputed first), in line order."""
        self._flush_deferred()
        new = self.findings[self._drained:]
        self._drained = len(self.findings)
        return sorted(new, key=lambda f: f.line)

    def _unverifiable(self, reason: str) -> None:
        self.stats["unverifiable"] += 1
        self.unverifiable_reasons[reason] = self.unverifiable_reasons.get(reason, 0) + 1

    # -- the stream --------------------------------------------------------------------------------------------
    def sequence(self, seq: int, line: int) -> None:
        """A batch's sequence number (EV-8): the first one seen starts the count."""
        if self._seq is not None:
            if seq > self._seq + 1:
                lost = seq - self._seq - 1
                self.stats["sequence_gaps"] += 1
                self._find("EV-8", line, f"sequence numbers {self._seq + 1}..{seq - 1} missing ({lost} "
                           f"batch{'es' if lost > 1 else ''} lost, not replayed)", first=self._seq + 1, last=seq - 1)
            elif seq <= self._seq:
                self._find("EV-8", line, f"sequence number {seq} after {self._seq} (a publisher restart or a "
                           f"repeated batch)", seq=seq, previous=self._seq)
        self._seq = seq
        self._sequenced_batch = True

    @property
    def sequenced(self) -> bool:
        """Whether the stream carried sequence numbers (EV-8 applies)."""
        return self._seq is not None

    def batch(self, events: list, line: int) -> None:
        self.stats["batches"] += 1
        stored = removed = cleared = False
        after_clear = bool(self.cleared)
        recomputed = self.stats["recomputed"] + len(self._deferred)
        if self.forward_parents:
            self._later = {h: i for i, ev in enumerate(events) if type(ev).__name__ == "BlockStored"
                           for h in ev.block_hashes}
        for self._at, ev in enumerate(events):
            name = type(ev).__name__
            if name == "BlockStored":
                stored = True
                self._stored(ev, line)
            elif name == "BlockRemoved":
                removed = True
                self._removed(ev, line)
            elif name == "AllBlocksCleared":
                cleared = True
                self.stats["cleared"] += 1
                rank = getattr(ev, "dp_rank", None)  # a rank's clear empties that rank's cache only
                keys = [k for k in self.live if rank is None or (len(k) > 2 and k[2] == rank)]
                if not any(self.live[k] for k in keys):
                    self.stats["cleared_empty"] += 1
                for k in keys:
                    self.cleared.update(self.live.pop(k))
                    self._copies.pop(k, None)
            else:
                raise TypeError(f"not a KV event: {name}")
        ex = self.exercised
        ex["EV-1"] += removed
        if stored:
            ex["EV-2"] += 1
            ex["EV-3"] += 1
            ex["EV-4"] += 1
            ex["EV-6"] += self.capacity is not None
        ex["EV-7"] += self.stats["recomputed"] + len(self._deferred) > recomputed
        ex["EV-5"] += cleared or (after_clear and (stored or removed))
        ex["EV-8"] += self._sequenced_batch
        self._sequenced_batch = False

    def _where(self, ev: Any) -> Any:
        group = getattr(ev, "group_idx", None) if self.group_keys else None
        rank = getattr(ev, "dp_rank", None)
        return (ev.medium, group) if rank is None else (ev.medium, group, rank)

    def _lookup(self, where: Any, h: Any) -> _Live | None:
        blk = self.live.get(where, {}).get(h)
        if blk is None:
            blk = next((m[h] for m in self.live.values() if h in m), None)
        return blk

    def _size(self, where: Any, bs: int, line: int) -> None:
        if self.block_size is not None:
            if bs != self.block_size:
                self._find("EV-4", line, f"block_size {bs}, expected {self.block_size}", block_size=bs)
            return
        known = self._sizes.get(where)
        if known is None:
            self._sizes[where] = (bs, line)
            self._narrowest(line)
            medium, group = where[:2]
            at = "" if where == (None, None) else f" ({medium or 'no medium'}" + (
                f", group {group}" if group is not None else "") + (f", rank {where[2]})" if len(where) > 2 else ")")
            self.notes.append(f"block size {bs} learned from line {line}{at}; --block-size pins it")
        elif (bs < known[0] and self._hash_block_size and bs % self._hash_block_size == 0
              and known[0] % self._hash_block_size == 0):
            self.stats["partial_entries"] += 1  # vLLM's partial prefix entry inside a wider block (cache_partial_block)
        elif bs != known[0]:
            self._find("EV-4", line, f"block_size {bs}, but line {known[1]} declared {known[0]} for this medium "
                       f"and group", block_size=bs, expected=known[0])

    def _stored(self, ev: Any, line: int) -> None:
        where = self._where(ev)
        if where[1] is not None:
            self.grouped = True  # vLLM's stores name their cache group
        live = self.live.setdefault(where, {})
        bs = ev.block_size
        if bs == 0:
            self._placeholder(ev, live, where, line)
            return
        if ev.medium is not None:
            self._described.add(ev.medium)
        if bs != self.block_size:
            self._size(where, bs, line)
        hashes = ev.block_hashes
        n, ntok = len(hashes), len(ev.token_ids)
        full_tokens = n * bs
        sparse = self.sparse_stores and es.is_sparse(n, ntok, bs)
        if ntok != full_tokens and not sparse and not (self.partial_tails and n and (n - 1) * bs < ntok < full_tokens):
            self._find("EV-4", line, f"{n} blocks of {bs} tokens carry {ntok} token ids", blocks=n, tokens=ntok)
        parent = ev.parent_block_hash
        parent_blk = None
        if parent is not None:
            parent_blk = self._lookup(where, parent)
            if parent_blk is None and parent in self.cleared:
                self._find("EV-5", line, f"store under parent {_short(parent)}, which AllBlocksCleared dropped",
                           parent=parent)
            elif parent_blk is None and self.folded_groups:
                self._fold_orphan(line, parent)
            elif parent_blk is None and self._later.get(parent, -1) > self._at:
                self.stats["forward_parents"] += 1  # vLLM: its parent's store comes later in this batch
            elif parent_blk is None:
                self._find("EV-3", line, f"store under parent {_short(parent)}, which is not a live block",
                           parent=parent)
            elif not parent_blk.full:
                self._find("EV-3", line, f"store under parent {_short(parent)}, a partial tail block", parent=parent)
        if (self.reuse_reports and parent is None and n >= 2 and ntok == full_tokens
                and all(h in live for h in hashes)):
            self.stats["reuse_reports"] += 1  # vLLM's kv_cache_report_mode="full": changes nothing (EV-2 entry)
            return
        if self.scheme == "auto" and n and ntok >= bs and not sparse:
            self._recognise(ev, hashes[0], parent, line)
        prev_value, prev = parent, self._parent_digest(parent, parent_blk)
        scheme = self._scheme
        digests = self._sparse_digests(ev, prev_value, prev, line) if sparse else None
        n_new = 0  # copies added (a double store outside the vLLM preset replaces, adding none)
        for j, h in enumerate(hashes):
            is_full = (j + 1) * bs <= ntok
            if not is_full:
                self.stats["partial_blocks"] += 1
            digest = None
            if digests is not None:
                digest = digests[j]
            elif scheme is not None:
                toks = ev.token_ids[j * bs:(j + 1) * bs]
                digest = self._recompute(h, prev_value, prev, toks, self._block(ev, j, prev_value), line)
            blk = live.get(h)
            if blk is not None:
                if self.duplicate_copies:
                    blk.copies += 1
                    n_new += 1
                    self.stats["copies"] += 1
                else:
                    self._find("EV-2", line, f"block {_short(h)} stored again while live", block=h)
                blk.full = is_full
                if digest is not None:
                    blk.digest = digest
            else:
                live[h] = _Live(is_full, digest)
                n_new += 1
            self.cleared.discard(h)
            self.stats["stored"] += 1
            prev_value, prev = h, digest
        size = self._copies[where] = self._copies.get(where, 0) + n_new
        if size > self.stats["peak_live"]:
            self.stats["peak_live"] = size
        cap = self.capacities.get(ev.medium, self.capacity)
        if cap is not None and size > cap:
            self._find("EV-6", line, f"{size} live blocks exceed the capacity {cap}", live=size,
                       capacity=cap, medium=ev.medium)

    def _removed(self, ev: Any, line: int) -> None:
        where = self._where(ev)
        live = self.live.setdefault(where, {})
        for h in ev.block_hashes:
            blk = live.get(h)
            if blk is not None:
                blk.copies -= 1
                self._copies[where] -= 1
                if blk.copies <= 0:
                    del live[h]
                self.stats["removed"] += 1
            elif h in self.cleared:
                self._find("EV-5", line, f"removal of block {_short(h)}, which AllBlocksCleared already dropped",
                           block=h)
            else:
                self._find("EV-1", line, f"removal of block {_short(h)}, which is not live", block=h)

    # -- hashes ------------------------------------------------------------------------------------------------
    def _parent_digest(self, parent: Any, blk: _Live | None) -> Any:
        if parent is None or self._scheme is None:
            return None
        if self._scheme.chain_from_event:
            try:
                return self._scheme.event_digest(parent)
            except bh.Unverifiable:
                return None
        return blk.digest if blk is not None else None

    @staticmethod
    def _block(ev: Any, j: int, parent: Any) -> dict:
        """What a scheme may need of block ``j`` of a store beyond its tokens."""
        extra = getattr(ev, "extra_keys", None)
        lookahead = getattr(ev, "lookahead_token_ids", None)
        return {"extra_keys": extra[j] if extra is not None and j < len(extra) else None,
                "lookahead": lookahead[j] if lookahead is not None and j < len(lookahead) else None,
                "lora_name": getattr(ev, "lora_name", None), "cache_salt": getattr(ev, "cache_salt", None),
                "first": parent is None}

    def _recognise(self, ev: Any, first: Any, parent: Any, line: int) -> None:
        """Without --hash: adopt the one scheme the stream's first recomputable block recomputes under (a
        root block; or any block under a scheme whose parent digest is the event's parent value)."""
        bs = ev.block_size
        toks = ev.token_ids[:bs]
        block = self._block(ev, 0, parent)
        hits, tried = [], False
        # vLLM hashes a group's wider blocks in hash blocks of the narrowest group: try the divisors too
        sizes = [self._hash_block_size] if self._hash_block_size else [None] + [
            bs // k for k in range(2, bs + 1) if bs % k == 0]
        for hbs in sizes:
            for name in self._candidates:
                if hbs is not None and not name.startswith("vllm"):
                    continue
                s = bh.scheme(name, seed=self._seed, hash_block_size=hbs)
                if s is None or (parent is not None and not s.chain_from_event):
                    continue
                tried = True
                try:
                    prior = None if parent is None else s.event_digest(parent)
                    if s.carried(first, s.digest(prior, toks, block)):
                        hits.append((name, s))
                except (bh.Unverifiable, TypeError, ValueError, OverflowError):
                    continue
            if hits:
                break
        if not tried:
            return  # wait for a root block
        if not hits and len(self._pending) < _PENDING_ROOTS:
            # a tampered or odd first block must not decide the scheme: try the next root blocks, and judge
            # this one once a scheme is recognised
            self._pending.append((self._where(ev), first, toks, block, line))
            return
        self._adopt(hits, bs, line)

    def _adopt(self, hits: list, bs: int, line: int | None) -> None:
        if len(hits) == 1 and hits[0][0].startswith("vllm") and self._hash_block_size is None:
            hbs = getattr(hits[0][1], "hash_block_size", None)
            if hbs:
                self._hash_block_size = hbs
                self.notes.append(f"hash block size {hbs} recognised at line {line} (blocks of {bs} hash as "
                                  f"{bs // hbs} chained hash blocks); --hash-block-size {hbs} pins it")
        if len(hits) == 1:
            self.scheme, self._scheme = hits[0]
            engine = next((e for e, p in PRESETS.items() if self.scheme in (p.hash_scheme, *p.alt_schemes)), None)
            self.notes.append(f"hash scheme {self.scheme} recognised at line {line} (its first block recomputes "
                              f"under it); --hash {self.scheme} pins it"
                              + (f", --engine {engine} presets it" if engine and self.preset is None else ""))
        elif self._fallback is not None:
            self.scheme = self._fallback
            self._scheme = bh.scheme(self.scheme, seed=self._seed, hash_block_size=self._hash_block_size)
            self.warnings.append(f"{self._tried_lines(line)} recompute under none of {', '.join(self._candidates)}: "
                                 f"judged under {self.scheme} (--hash-seed if the engine ran with PYTHONHASHSEED)")
        else:
            self.scheme = "none"
            self.notes.append(f"hashes not recomputed: {self._tried_lines(line)} recompute under no known scheme; "
                              f"--hash or --engine names one")
        self._narrowest(line)
        pending, self._pending = self._pending, []
        if self._scheme is None:
            return
        for where, h, toks, block, at in pending:  # the root blocks tried before the scheme was known
            want = self._recompute(h, None, None, toks, block, at)
            blk = self.live.get(where, {}).get(h)
            if blk is not None and want is not None and blk.digest is None:
                blk.digest = want

    def _narrowest(self, line: int | None) -> None:
        """vLLM hashes every group in hash blocks of its narrowest group's size: once groups of two sizes are
        seen (and --hash-block-size was not given), the narrowest is the hash block size."""
        s = self._scheme
        if self._hbs_pinned or not isinstance(s, bh.VllmSha256) or len({v[0] for v in self._sizes.values()}) < 2:
            return
        narrowest = min(v[0] for v in self._sizes.values())
        if s.hash_block_size is None or narrowest < s.hash_block_size:
            s.hash_block_size = self._hash_block_size = narrowest
            self.notes.append(f"hash block size {narrowest} taken from the narrowest group"
                              + (f" (line {line})" if line is not None else "") + f"; --hash-block-size {narrowest} "
                              f"pins it")

    def _tried_lines(self, line: int | None) -> str:
        lines = sorted({p[4] for p in self._pending} | ({line} if line is not None else set()))
        return f"the root block{'s' if len(lines) > 1 else ''} at line{'s' if len(lines) > 1 else ''} " + \
            ", ".join(map(str, lines))

    def _recompute(self, h: Any, parent_value: Any, parent: Any, toks: list, block: dict, line: int) -> Any:
        s = self._scheme
        if s is None:  # only called once a scheme is known
            return None
        if s.name == "fnv1a64" and isinstance(h, int) and (parent_value is None or isinstance(parent_value, int)):
            self._deferred.append((line, h, parent_value, toks))
            if len(self._deferred) >= 4096:
                self._flush_deferred()
            return h & ((1 << 64) - 1)
        if parent_value is not None and parent is None:
            self._unverifiable("the parent's digest was never seen")
            return None
        try:
            want = s.digest(parent, toks, block)
        except bh.Unverifiable as exc:
            self._unverifiable(str(exc))
            return None
        except (ValueError, TypeError, OverflowError) as exc:
            self._find("EV-7", line, f"block {_short(h)} cannot be recomputed under {s.name}: {exc}", block=h)
            return None
        self.stats["recomputed"] += 1
        if not s.carried(h, want):
            self._find("EV-7", line, f"block {_short(h)} does not recompute under {s.name} (expected "
                       f"{s.show(want)})", block=h, expected=s.show(want))
            return None  # the engine's digest is unknown: its children are not judged against ours
        return want

    def _placeholder(self, ev: Any, live: dict, where: Any, line: int) -> None:
        """A placeholder store (EV-4's entry, ``event_shapes``): its hashes become live, with no digest."""
        self.stats["placeholders"] += 1
        if es.lost_placeholder(ev, self._described):
            self._find("EV-4", line, f"a placeholder store (block size 0, no token ids) of full-attention block "
                       f"{_short(ev.block_hashes[0]) if ev.block_hashes else '?'} in a {ev.medium} stream whose "
                       "stores carry their tokens: its payload was lost", blocks=len(ev.block_hashes),
                       medium=ev.medium)
        for h in ev.block_hashes:
            blk = live.get(h)
            if blk is not None:
                blk.copies += 1
                self.stats["copies"] += 1
            else:
                live[h] = _Live(True, None)
            self.stats["stored"] += 1
        self._copies[where] = self._copies.get(where, 0) + len(ev.block_hashes)

    def _sparse_digests(self, ev: Any, parent_value: Any, prev: Any, line: int) -> list:
        """A sparse store (EV-4's entry, ``event_shapes``): the digest of each block it names."""
        self.stats["sparse_stores"] += 1
        out, why, unmatched = es.sparse_digests(self._scheme, ev, parent_value, prev)
        if why is not None:
            self._unverifiable(why)
        self.stats["recomputed"] += sum(d is not None for d in out)
        if unmatched is not None and self._scheme is not None:
            self._find("EV-7", line, f"block {_short(unmatched)} of a sparse store is the chain digest of none of the "
                       f"blocks its tokens cover under {self._scheme.name}", block=unmatched)
        return out

    def flush(self) -> None:
        """End of the stream: root blocks kept for scheme recognition are judged under the preset's scheme
        (or none), deferred FNV-1a hashes are recomputed. summary() calls it."""
        if self.scheme == "auto" and self._pending:  # no later root block to recognise a scheme from
            self._adopt([], 0, None)
        elif self.scheme == "auto":  # never a block to recognise a scheme from
            self.scheme = self._fallback or "none"
            self.notes.append("hashes not recomputed: no root block to recognise the scheme from; --hash or "
                              "--engine names it")
        self._flush_deferred()

    def _flush_deferred(self) -> None:
        batch, self._deferred = self._deferred, []
        if not batch:
            return
        try:
            wants: list = fnv1a64_many([b[2] for b in batch], [b[3] for b in batch])
        except (OverflowError, ValueError, TypeError):
            wants = [None] * len(batch)
        for (line, h, parent, toks), want in zip(batch, wants, strict=True):
            if want is None:
                try:
                    want = fnv1a64(parent, toks)
                except (OverflowError, ValueError, TypeError) as exc:
                    self._find("EV-7", line, f"block {_short(h)} cannot be recomputed under fnv1a64: {exc}", block=h)
                    continue
            self.stats["recomputed"] += 1
            if (h & ((1 << 64) - 1)) != want:
                self._find("EV-7", line, f"block {_short(h)} does not recompute under fnv1a64 (expected "
                           f"{_short(want)})", block=h, expected=want)
        head = self.findings[:self._drained]
        self.findings = head + sorted(self.findings[self._drained:], key=lambda f: f.line)

    def summary(self) -> dict:
        self.flush()
        s: dict[str, Any] = dict(self.stats)
        s["live_at_end"] = sum(b.copies for m in self.live.values() for b in m.values())
        s["hash_scheme"] = self.scheme
        if self.unverifiable_reasons:
            s["unverifiable_reasons"] = dict(sorted(self.unverifiable_reasons.items()))
        s["violations_by_rule"] = {k: v for k, v in self.counts.items() if v}
        if self.folded_groups:
            s["folded_groups"] = True
            s["hazards"] = len(self.hazards)
            s["consequences"] = self.consequence_count
        return s
