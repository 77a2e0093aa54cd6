"""Judging every cache group of a hybrid vLLM / SGLang run: common hits, retention, state checkpoints, one pool.

A driver run with ``--kv-groups`` adds a ``groups`` section to each step: the table changes of every scheduled
request in every group as the step's forward reads them (``tables``: ``[group, request, first slot, blocks from
there]``, 0 the null block), the copy-on-write copies the forward runs first (``copies``: ``[source,
destination]``), the pool's free blocks (``free``) and hash entries (``cached_all``; per group at probe steps,
``cached``) and, at probe steps, the pool's deep counters (``probe``). ``EngineJudge`` keeps judging the first
full group's table as before (PEER-5 ... PEER-8) and hands every step to this plug-in, whose findings go through
the engine judge (``find``), so the report carries one set of rule counters.

The plug-in keeps, per request, its tokens, frontier and one table per group, and per block what a forward last
wrote there: for a history block the prefix key of its last token (``sim.peers.judges.engine_judge.Contents`` chained in
units of the smallest block size), for a state block the state after exactly t tokens of some prefix (the unit
key below t and the tokens past it). It checks, citing seed 002 (catalogue ``spec/rules/peer_hybrid.py``):

* PEER-20 ``hits``: a request's hit H is served by every group (full groups: every block below H; sliding
  groups: the window before H);
* PEER-21 ``retention``: full groups keep every block below the frontier, sliding groups the window the next
  queries read;
* PEER-22 ``states``: a state group reads (and hits) only the state a forward of an earlier step wrote after
  exactly that many tokens;
* PEER-8 across groups: a block is named by one group at a time, and a block a forward writes is no other live
  request's;
* PEER-9 per group: free blocks plus the blocks named in any group equal the usable pool; hash entries per group
  equal the live blocks of that group's event stream; the deep counters against every group's names.

The engine paths per group come in the step's ``paths`` (``gN.<path>``) and are summed by the engine judge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kvsim.sim.peers.judges.engine_judge import Contents, frame
from kvsim.sim.peers.judges.state_tags import StateTags
from kvsim.sim.peers.kv_groups import GroupSpec, hash_unit, primary_group
from kvsim.spec import catalogue

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvsim.sim.peers.judges.engine_judge import EngineJudge

__all__ = ["GroupJudge", "RULE_IDS"]

RULE_IDS = ("PEER-20", "PEER-21", "PEER-22", "PEER-24")
PEER9_GROUPS = (" With several cache groups (--kv-groups, one pool): free blocks plus the distinct blocks named by "
                "any group of a live request equal the usable pool; each group's hash entries equal the live blocks "
                "of that group's event stream (group_idx), their sum the pool's entries; the deep counters are read "
                "against every group's names.")
PEER8_GROUPS = (" With several cache groups: a block is named by one group at a time, and a block a forward writes "
                "(any group) is named by no other live request.")


class _GReq:
    """One request as the group judge sees it: tokens, frontier, and its table in every group."""

    __slots__ = ("prompt", "framed", "generated", "keys", "computed", "tables")

    def __init__(self, tokens: np.ndarray, groups: int) -> None:
        self.prompt = len(tokens)
        self.framed = frame(tokens)
        self.generated: list[int] = []
        self.keys: list[int] = []   # prefix key after (i + 1) * unit tokens
        self.computed = 0
        self.tables: list[list[int]] = [[] for _ in range(groups)]

    def raw(self, lo: int, hi: int) -> bytes:
        n = self.prompt
        if hi <= n:
            return self.framed[lo * 8:hi * 8]
        return self.framed[lo * 8:n * 8] + frame(self.generated[max(lo - n, 0):hi - n])

    def key(self, t: int, unit: int, contents: Contents) -> int | None:
        """The prefix key after ``t`` tokens (a multiple of ``unit``); 0 for t = 0; None while unknown."""
        if t == 0:
            return 0
        i = t // unit - 1
        keys = self.keys
        while len(keys) <= i:
            j = len(keys)
            if (j + 1) * unit > self.prompt + len(self.generated):
                return None
            keys.append(contents.key(keys[-1] if keys else 0, self.raw(j * unit, (j + 1) * unit)))
        return keys[i]

    def state(self, t: int, unit: int, contents: Contents) -> int | None:
        """The identity of the state after exactly ``t`` tokens: the unit key below t and the tokens past it."""
        base = t // unit * unit
        k = self.key(base, unit, contents)
        if k is None or t > self.prompt + len(self.generated):
            return None
        return k if t == base else contents.key(k, self.raw(base, t))


class GroupJudge:
    """The plug-in: built with the run's groups, the usable pool and the engine's deep-counter check."""

    def __init__(self, groups: list[GroupSpec], usable: int,
                 probe_check: Callable[[dict, dict[int, int]], list[tuple[str, dict]]] | None = None,
                 tag_states: bool = False) -> None:
        self.groups = groups
        self.unit = hash_unit(groups)
        self.main = primary_group(groups)
        self.usable = usable
        self.probe_check = probe_check
        self.contents = Contents()
        self.reqs: dict[str, _GReq] = {}
        self.holders: dict[int, int] = {}        # block -> (request, group, slot) names of live requests
        self.group_of: dict[int, int] = {}       # block -> the group naming it
        self.kv: dict[int, int] = {}             # history block -> prefix key after its last token
        self.kv_units: dict[int, tuple[int, ...]] = {}  # history block wider than a unit -> keys at each unit
        self.state: dict[int, tuple[int, int, int]] = {}  # state block -> (tokens t, state identity, step written)
        self.stream: list[dict[Any, int]] = [{} for _ in groups]  # per group: live event hash -> copies
        self._step = -1
        self._shared: dict[int, int] = {}        # blocks this step's hits named, and how many times
        kinds = [g.kind for i, g in enumerate(groups) if i != self.main]
        # a state group whose states travel by copy (SGLang): judged by its tags (state_tags), its table only the
        # slots a request holds
        self.tags = [StateTags(i, g.label()) for i, g in enumerate(groups) if g.kind == "mamba"] if tag_states else []
        applies = {"PEER-20": any(k != "mamba" for k in kinds), "PEER-21": True, "PEER-22": "mamba" in kinds,
                   "PEER-24": bool(self.tags)}
        self.RULES = {rid: (catalogue.get(rid).title, catalogue.get(rid).clause) for rid in RULE_IDS if applies[rid]}
        self.DECISIONS = {rid: catalogue.get(rid).decisions for rid in self.RULES}

    # -- wiring --------------------------------------------------------------------------------------------------
    def attach(self, judge: EngineJudge) -> None:
        """Add this plug-in's rules to the engine judge's and extend PEER-8's and PEER-9's readings."""
        for rid, rule in self.RULES.items():
            judge.rules[rid] = rule
            judge.decisions[rid] = self.DECISIONS[rid]
            judge.counts.setdefault(rid, 0)
            judge.premise.setdefault(rid, 0)
        judge.decisions["PEER-8"] = judge.decisions["PEER-8"] + PEER8_GROUPS
        judge.decisions["PEER-9"] = judge.decisions["PEER-9"] + PEER9_GROUPS

    def primary_events(self, batch: Any, evs: list) -> list:
        """The events of a wire batch that belong to the first full group (events without group_idx too): the
        engine judge's stream check of PEER-7 reads that group's view only."""
        raw = batch[1] if isinstance(batch, list) else batch["events"]
        main = self.main
        return [ev for ev, e in zip(evs, raw, strict=True)
                if (e.get("group_idx") if isinstance(e, dict) else None) in (None, main)]

    def submit(self, rid: str, tokens: np.ndarray) -> None:
        self.reqs[rid] = _GReq(tokens, len(self.groups))

    # -- one step ------------------------------------------------------------------------------------------------
    def step(self, judge: EngineJudge, msg: dict, line: int) -> None:
        sec = msg.get("groups")
        if sec is None:
            return
        self._step = msg["step"]
        self._shared = {}
        for rid in msg.get("preempted", ()):
            r = self.reqs[rid]
            self._drop(r)
            r.computed = 0
        first = {rid: computed for rid, computed, _b in msg.get("new", ())}
        for rid, resumed, _b, computed in msg.get("cached", ()):
            if resumed:
                first[rid] = computed
        for rid, c in first.items():
            self.reqs[rid].computed = c
        changes = sec.get("tables", ())
        for g, rid, start, blocks in changes:  # a step's releases come before its allocations (one pool)
            self._unname(judge, line, g, rid, start, blocks)
        for g, rid, start, blocks in changes:
            self._table(judge, line, g, rid, start, blocks)
        for src, dst in sec.get("copies", ()):
            self._copy(src, dst)
        scheduled = msg.get("scheduled", {})
        missing: list[tuple] = []
        for rid, n in scheduled.items():  # before the forward: the states it starts from
            r = self.reqs[rid]
            missing += self.states(judge, line, rid, r, r.computed, r.computed + n, rid in first)
        for tags in self.tags:
            tags.step(judge, line, self._step, sec, self._state_of)
        written: set[int] = set()
        for rid, n in scheduled.items():
            r = self.reqs[rid]
            self._forward(judge, line, rid, r, r.computed, r.computed + n, written)
        self._missing_states(judge, line, missing)
        # after it: history a same-step forward wrote is there (vLLM writes every layer's KV before attending)
        for rid, n in scheduled.items():
            r = self.reqs[rid]
            self.retention(judge, line, rid, r, r.computed, r.computed + n, rid in first)
        for rid, c in first.items():
            if c:
                self.hits(judge, line, rid, self.reqs[rid], c)
        for rid, n in scheduled.items():
            self.reqs[rid].computed += n
        for rid, tok in msg.get("tokens", {}).items():
            self.reqs[rid].generated.append(int(tok))
        after = sec.get("after", ())  # tables the result processing rewrote (checkpoints adopting the tree's copies)
        for g, rid, start, blocks in after:
            self._unname(judge, line, g, rid, start, blocks)
        for g, rid, start, blocks in after:
            self._table(judge, line, g, rid, start, blocks)
        self._events(judge, msg)
        for rid in msg.get("finished", ()):
            r = self.reqs.pop(rid)
            self._drop(r)
        self._account(judge, line, sec)

    # -- tables --------------------------------------------------------------------------------------------------
    def _unname(self, judge: EngineJudge, line: int, g: int, rid: str, start: int, blocks: list[int]) -> None:
        """Release the blocks a table change takes out of slots ``start`` on (their slots say 0 meanwhile); a
        full group's slot turning null is PEER-21's (full history never expires)."""
        t = self.reqs[rid].tables[g]
        full = self.groups[g].kind == "full"
        for i in range(start, len(t)):
            old = t[i]
            if old and (i - start >= len(blocks) or blocks[i - start] != old):
                self._release(old)
                t[i] = 0
                if full and i - start < len(blocks) and not blocks[i - start]:
                    judge.premise["PEER-21"] += 1
                    judge.find("PEER-21", line, f"{rid}'s group {g} ({self.groups[g].label()}) slot {i} turns null: "
                               "full history never expires", request=rid, group=g, slot=i, block=old)

    def _table(self, judge: EngineJudge, line: int, g: int, rid: str, start: int, blocks: list[int]) -> None:
        r = self.reqs[rid]
        t = r.tables[g]
        bs = self.groups[g].block_size
        for i in range(start, max(len(t), start + len(blocks))):
            old = t[i] if i < len(t) else 0
            new = blocks[i - start] if i - start < len(blocks) else 0
            if old == new:
                continue
            if new:
                judge.premise["PEER-8"] += 1
                other = self.group_of.get(new)
                if other is not None and other != g and self.holders.get(new):
                    judge.find("PEER-8", line, f"{rid}'s group {g} slot {i} names block {new}, which group {other} "
                               "of a live request names too (one pool: a block serves one group at a time)",
                               request=rid, group=g, slot=i, block=new, other_group=other)
                elif (i * bs >= r.computed or self._slots(g)) and self.holders.get(new):
                    judge.find("PEER-8", line, f"{rid} is handed block {new} fresh in group {g} slot {i} while "
                               "another live request names it", request=rid, group=g, slot=i, block=new)
                self.holders[new] = self.holders.get(new, 0) + 1
                self.group_of[new] = g
                if i * bs < r.computed and not self._slots(g):  # a hit: may share what a same-step forward computes
                    self._shared[new] = self._shared.get(new, 0) + 1
        del t[start:]
        t.extend(blocks)

    def _slots(self, g: int) -> bool:
        """Whether group ``g``'s table lists the state slots a request holds (a tag-judged state group)."""
        return bool(self.tags) and self.groups[g].kind == "mamba"

    def _state_of(self, rid: str, t: int) -> int | None:
        r = self.reqs.get(rid)
        return None if r is None else r.state(t, self.unit, self.contents)

    def _release(self, blk: int) -> None:
        left = self.holders[blk] - 1
        if left:
            self.holders[blk] = left
        else:
            del self.holders[blk]

    def _drop(self, r: _GReq) -> None:
        for t in r.tables:
            for blk in t:
                if blk:
                    self._release(blk)
            t.clear()

    def _copy(self, src: int, dst: int) -> None:
        """A copy-on-write: the destination holds what the source held (history content or a state)."""
        stores: tuple[dict[int, Any], ...] = (self.kv, self.kv_units, self.state)
        for store in stores:
            if src in store:
                store[dst] = store[src]
            else:
                store.pop(dst, None)

    # -- the forward ---------------------------------------------------------------------------------------------
    def _forward(self, judge: EngineJudge, line: int, rid: str, r: _GReq, c0: int, c1: int,
                 written: set[int]) -> None:
        unit, contents = self.unit, self.contents
        for g, spec in enumerate(self.groups):
            t = r.tables[g]
            bs = spec.block_size
            if spec.kind == "mamba":
                if self.tags:
                    continue
                i = (c1 - 1) // bs
                blk = t[i] if i < len(t) else 0
                if blk:
                    self._write_check(judge, line, rid, r, g, i, blk)
                    s = r.state(c1, unit, contents)
                    if s is None:
                        self.state.pop(blk, None)
                    else:
                        self.state[blk] = (c1, s, self._step)
                    self.kv.pop(blk, None)
                    written.add(blk)
                continue
            for i in range(c0 // bs, min((c1 - 1) // bs + 1, len(t))):
                blk = t[i]
                if not blk:
                    continue
                self._write_check(judge, line, rid, r, g, i, blk)
                written.add(blk)
                self.state.pop(blk, None)
                end = (i + 1) * bs
                if end <= c1:
                    k = r.key(end, unit, contents)
                    if k is None:
                        self.kv.pop(blk, None)
                    else:
                        self.kv[blk] = k
                    if bs > unit:
                        ks = tuple(r.key(i * bs + (j + 1) * unit, unit, contents) or 0 for j in range(bs // unit))
                        self.kv_units[blk] = ks
                else:
                    self.kv.pop(blk, None)
                    self.kv_units.pop(blk, None)

    def _write_check(self, judge: EngineJudge, line: int, rid: str, r: _GReq, g: int, i: int, blk: int) -> None:
        """PEER-8 across groups: the block a forward writes is named by this request's slot only."""
        if g == self.main:
            return  # the engine judge's own PEER-8 check covers the first full group
        if self.holders.get(blk, 0) - self._shared.get(blk, 0) > 1:
            judge.find("PEER-8", line, f"{rid} computes group {g} slot {i} into block {blk}, which another live "
                       "request names", request=rid, group=g, slot=i, block=blk)

    # -- PEER-20 -------------------------------------------------------------------------------------------------
    def _holds(self, r: _GReq, blk: int, bs: int, i: int, upto: int) -> bool:
        """Whether history block ``blk`` at slot ``i`` holds this request's prefix up to ``upto`` tokens (its end,
        or a unit boundary inside it for a partial hit)."""
        end = (i + 1) * bs
        if end <= upto:
            want = self.reqs_key(r, end)
            return want is not None and self.kv.get(blk) == want
        units = self.kv_units.get(blk)
        if units is None:
            return False
        j = (upto - i * bs) // self.unit - 1
        want = self.reqs_key(r, upto)
        return j >= 0 and want is not None and units[j] == want

    def reqs_key(self, r: _GReq, t: int) -> int | None:
        return r.key(t, self.unit, self.contents)

    def hits(self, judge: EngineJudge, line: int, rid: str, r: _GReq, hit: int) -> None:
        """PEER-20: every history group but the first full one serves hit ``hit`` (the state group: PEER-22)."""
        for g, spec in enumerate(self.groups):
            if g == self.main or spec.kind == "mamba":
                continue
            judge.premise["PEER-20"] += 1
            bs = spec.block_size
            t = r.tables[g]
            need = -(-hit // bs)
            if len(t) < need:
                judge.find("PEER-20", line, f"{rid} hits {hit} tokens but its group {g} ({spec.label()}) table names "
                           f"{len(t)} blocks: that group cannot serve the hit", request=rid, group=g, hit=hit)
                continue
            lo = max(0, hit - spec.window + 1) // bs if spec.kind == "sliding" else 0
            for i in range(need):
                blk = t[i]
                if not blk:
                    if i >= lo:
                        judge.find("PEER-20", line, f"{rid} hits {hit} tokens but its group {g} ({spec.label()}) "
                                   f"slot {i} is null: the window before the hit needs it", request=rid, group=g,
                                   slot=i, hit=hit)
                        return
                    continue
                if not self._holds(r, blk, bs, i, hit):
                    judge.find("PEER-20", line, f"{rid} hits {hit} tokens but its group {g} ({spec.label()}) slot {i} "
                               f"names block {blk}, which does not hold that prefix block", request=rid, group=g,
                               slot=i, block=blk, hit=hit)
                    return

    # -- PEER-21 -------------------------------------------------------------------------------------------------
    def retention(self, judge: EngineJudge, line: int, rid: str, r: _GReq, c0: int, c1: int, hit: bool) -> None:
        """PEER-21: the slots this forward reads and writes are there (full: all below c1; sliding: the window).
        What a hit's window slots hold is PEER-20's (``hit``: the request's first forward after it)."""
        for g, spec in enumerate(self.groups):
            if spec.kind == "mamba":
                continue
            judge.premise["PEER-21"] += 1
            t = r.tables[g]
            bs = spec.block_size
            need = -(-c1 // bs)
            if len(t) < need:
                judge.find("PEER-21", line, f"{rid} computes tokens [{c0}, {c1}) but its group {g} ({spec.label()}) "
                           f"table names {len(t)} blocks", request=rid, group=g, computed=c0, end=c1)
                continue
            # full groups: the slots written here (a slot turning null is caught when the table changes)
            lo = max(0, c0 - spec.window + 1) // bs if spec.kind == "sliding" and not hit else c0 // bs
            for i in range(lo, need):
                blk = t[i]
                if not blk:
                    what = "the window its queries read" if spec.kind == "sliding" else "full history never expires"
                    judge.find("PEER-21", line, f"{rid} computes tokens [{c0}, {c1}) but its group {g} "
                               f"({spec.label()}) slot {i} is null ({what})", request=rid, group=g, slot=i,
                               computed=c0, end=c1)
                    break
                if spec.kind == "sliding" and not hit and (i + 1) * bs <= c0 and not self._holds(r, blk, bs, i, c0):
                    judge.find("PEER-21", line, f"{rid} computes tokens [{c0}, {c1}) but its group {g} "
                               f"({spec.label()}) slot {i} names block {blk}, which no longer holds that window's "
                               "prefix block", request=rid, group=g, slot=i, block=blk, computed=c0)
                    break

    # -- PEER-22 -------------------------------------------------------------------------------------------------
    def states(self, judge: EngineJudge, line: int, rid: str, r: _GReq, c0: int, c1: int, hit: bool) -> list[tuple]:
        """PEER-22: a forward's input state is the state after exactly c0 tokens of this request, written by an
        earlier step; its output slot names a block. Returns the input states not there, judged once the step's
        forward ran (``_missing_states``: a state that same forward computes is told apart)."""
        missing: list[tuple] = []
        for g, spec in enumerate(self.groups):
            if spec.kind != "mamba" or self.tags:
                continue
            judge.premise["PEER-22"] += 1
            t = r.tables[g]
            bs = spec.block_size
            out = (c1 - 1) // bs
            if out >= len(t) or not t[out]:
                judge.find("PEER-22", line, f"{rid} computes tokens [{c0}, {c1}) but its group {g} ({spec.label()}) "
                           f"slot {out}, where the state after {c1} tokens goes, names no block", request=rid,
                           group=g, slot=out, end=c1)
            if c0 == 0:
                continue
            i = (c0 - 1) // bs
            blk = t[i] if i < len(t) else 0
            what = f"hits {c0} tokens" if hit else f"resumes its state after {c0} tokens"
            if not blk:
                judge.find("PEER-22", line, f"{rid} {what} but its group {g} ({spec.label()}) slot {i} is null: "
                           "the state it starts from is gone", request=rid, group=g, slot=i, computed=c0)
                continue
            want = r.state(c0, self.unit, self.contents)
            have = self.state.get(blk)
            if have is None or have[1] != want or have[0] != c0 or have[2] >= self._step:
                missing.append((rid, g, i, blk, c0, want, have, what))
        return missing

    def _missing_states(self, judge: EngineJudge, line: int, missing: list[tuple]) -> None:
        """The PEER-22 findings of ``states``, after the step's forward: an input state that forward wrote is a
        state read before it was computed."""
        for rid, g, i, blk, c0, want, have, what in missing:
            label = self.groups[g].label()
            now = self.state.get(blk)
            if now is not None and now[:2] == (c0, want) and now[2] == self._step:
                judge.find("PEER-22", line, f"{rid} {what} from group {g} ({label}) block {blk}, whose state this same "
                           "step computes (not written yet when the forward starts)", request=rid, group=g, slot=i,
                           block=blk, computed=c0)
                continue
            why = "holds no state" if have is None else f"holds a state after {have[0]} tokens" + (
                "" if have[0] != c0 else " of another prefix")
            judge.find("PEER-22", line, f"{rid} {what} from group {g} ({label}) slot {i}, block {blk}, which {why}",
                       request=rid, group=g, slot=i, block=blk, computed=c0)

    # -- PEER-9 per group ----------------------------------------------------------------------------------------
    def _events(self, judge: EngineJudge, msg: dict) -> None:
        """Each group's live hashes, from the step's batches (the events' own reader keeps group_idx)."""
        parse = judge.parse
        for batch in msg.get("batches", ()):
            for ev in (parse(batch) if parse else ()):
                name = type(ev).__name__
                if name == "AllBlocksCleared":
                    for live in self.stream:
                        live.clear()
                    continue
                g = getattr(ev, "group_idx", None) or 0
                if not 0 <= g < len(self.stream):
                    continue
                live = self.stream[g]
                if name == "BlockStored":
                    for h in ev.block_hashes:
                        live[h] = live.get(h, 0) + 1
                elif name == "BlockRemoved":
                    for h in ev.block_hashes:
                        n = live.get(h, 0) - 1
                        if n > 0:
                            live[h] = n
                        else:
                            live.pop(h, None)

    def _account(self, judge: EngineJudge, line: int, sec: dict) -> None:
        named = len(self.holders)
        for g, free_g, tree_only, usable in sec.get("pools", ()):  # one pool per group (SGLang)
            judge.premise["PEER-9"] += 1
            mine = sum(1 for blk, grp in self.group_of.items() if grp == g and blk in self.holders)
            if free_g + tree_only + mine != usable:
                judge.find("PEER-9", line, f"group {g} ({self.groups[g].label()})'s pool reports {free_g} free slots, "
                           f"the tree alone holds {tree_only} and live requests name {mine}: "
                           f"{free_g + tree_only + mine} of {usable} accounted", group=g, free=free_g,
                           tree_only=tree_only, named=mine, usable=usable)
        free = sec.get("free")
        if free is not None:
            judge.premise["PEER-9"] += 1
            if free + named != self.usable:
                judge.find("PEER-9", line, f"the pool reports {free} free blocks and live requests name {named} in "
                           f"all groups: {free + named} of {self.usable} usable blocks accounted", free=free,
                           named=named, usable=self.usable)
        cached = sec.get("cached")
        if cached is not None:
            judge.premise["PEER-9"] += 1
            for g, n in enumerate(cached):
                live = len(self.stream[g])
                if n != live:
                    judge.find("PEER-9", line, f"group {g} ({self.groups[g].label()}) holds {n} blocks under a hash, "
                               f"its event stream {live} live blocks", group=g, cached=n, stream=live)
        probe = sec.get("probe")
        if probe is not None and self.probe_check is not None:
            judge.premise["PEER-9"] += 1
            for message, ctx in self.probe_check(probe, self.holders):
                judge.find("PEER-9", line, message + " (all groups)", **ctx)
