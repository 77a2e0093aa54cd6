"""Named faults injected into a live peer run's records, so each TS-L2 rule (and TS-ADM-2, TS-TBL-1, TS-POOL-4,
EV-7) can be shown firing on what a real scheduler's plans would look like if it broke that rule (``kvsim peer
tokenspeed --inject-fault NAME``).

A fault perturbs the recorded plan, answer, ClearCache record or KV-event batch once, at the first place it
applies, before the judge sees it (it may read the submissions); the scheduler itself is driven unchanged. ``get(name)``
returns a fresh fault; ``NAMES`` lists them with the rule each breaks.
"""

from __future__ import annotations

from kvsim.sim.trace import cachetrace as ct

__all__ = ["NAMES", "Fault", "get"]

_SPARE_ID = 1 << 40  # op ids a fault invents lie far above any the scheduler issues


class Fault:
    """Identity on every record; subclasses perturb one."""

    name = ""
    rule = ""
    why = ""

    def __init__(self, config: ct.Config) -> None:
        self.config = config
        self.groups = [g.id for g in config.groups]
        self.fired = False
        self.extra_done: list[int] = []

    def submit(self, rec: ct.Submit) -> None:
        """A request handed to the scheduler (faults that need its prompt or budget keep it; one may perturb it in
        place)."""

    def plan(self, rec: ct.Plan) -> ct.Plan:
        if not self.fired and self._plan(rec):
            self.fired = True
        return rec

    def result(self, res: ct.Result) -> ct.Result:
        if self.extra_done:
            res.done = list(res.done) + self.extra_done
            self.extra_done = []
        return res

    def clear(self, rec: ct.Clear) -> ct.Clear:
        return rec

    def kv(self, rec: ct.KvEvents) -> ct.KvEvents:
        """A batch of KV events the scheduler drained (faults on the event stream perturb one)."""
        return rec

    def _plan(self, rec: ct.Plan) -> bool:
        return False

    def _full_group(self) -> str | None:
        return next((g.id for g in self.config.groups if g.attn_kind == "full"), None)


def _write_backs(rec: ct.Plan, pinned: bool | None = True) -> list[ct.CacheOp]:
    return [op for op in rec.cache if op.kind == "WriteBackOp" and op.pages and
            (pinned is None or (op.pinned is not False) == pinned)]


class ZeroPinnedSource(Fault):
    name, rule = "zero-pinned-source", "TS-L2-1"
    why = "the plan that issues a pinned write-back also zeroes its first source"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in _write_backs(rec):
            src = op.pages[0][0]
            rec.zero = dict(rec.zero)
            key = self.groups[op.groups[0] if op.groups else 0]
            rec.zero[key] = list(rec.zero.get(key, [])) + [src]
            return True
        return False


class UnpinnedStore(Fault):
    name, rule = "unpinned-store", "TS-L2-2"
    why = "a pinned write-back outside any retraction is marked unpinned"

    def _plan(self, rec: ct.Plan) -> bool:
        if any(op.kind == "SnapshotOp" for op in rec.cache):
            return False
        for op in _write_backs(rec):
            op.pinned = False
            return True
        return False


class RepeatTransfer(Fault):
    name, rule = "repeat-transfer", "TS-L2-3"
    why = "a write-back lists its first (group, source, destination) twice"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in _write_backs(rec, None):
            op.pages = list(op.pages) + [op.pages[0]]
            for name in ("groups", "keys", "offsets"):
                v = getattr(op, name)
                if v:
                    setattr(op, name, list(v) + [v[0]])
            return True
        return False


class StoreKeyTwice(Fault):
    name, rule = "store-key-twice", "TS-L2-4"
    why = "a second write-back of the same plan stores a keyed page's key again, to another Host page"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in _write_backs(rec):
            for k, key in enumerate(op.keys):
                if key:
                    dst = op.pages[k][1] + 1 if op.pages[k][1] + 1 < self.config.num_host_pages else 1
                    twin = ct.CacheOp("WriteBackOp", [_SPARE_ID], [(op.pages[k][0], dst)],
                                      groups=[op.groups[k]] if op.groups else [], keys=[key],
                                      offsets=[op.offsets[k]] if op.offsets else [], pinned=True)
                    rec.cache = list(rec.cache) + [twin]
                    self.extra_done.append(_SPARE_ID)
                    return True
        return False


class KeyedHostLoad(Fault):
    name, rule = "keyed-host-load", "TS-L2-5"
    why = "a Host-only load-back carries a content key"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in rec.cache:
            if op.kind == "LoadBackOp" and op.pages:
                op.keys = ["ab" * 32] + list(op.keys[1:]) if op.keys else ["ab" * 32] + [""] * (len(op.pages) - 1)
                return True
        return False


class WrongKey(Fault):
    name, rule = "wrong-key", "TS-L2-6"
    why = "a keyed write-back names another page's hash"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in _write_backs(rec):
            for k, key in enumerate(op.keys):
                if key:
                    op.keys = list(op.keys)
                    op.keys[k] = "cd" * 32
                    return True
        return False


class ReplayableWriteBack(Fault):
    name, rule = "replayable-write-back", "TS-L2-7"
    why = "a write-back moves a page of the replayable group (the run needs one: --swa-replayable)"

    def _plan(self, rec: ct.Plan) -> bool:
        rep = [i for i, g in enumerate(self.config.groups) if g.replayable]
        if not rep:
            return False
        for op in _write_backs(rec):
            if op.groups:
                op.groups = [rep[0]] + list(op.groups[1:])
                return True
        return False


class AcceptClear(Fault):
    name, rule = "accept-clear", "TS-L2-8"
    why = "a ClearCache the scheduler refused (write-backs in flight) is recorded as accepted"

    def clear(self, rec: ct.Clear) -> ct.Clear:
        if not self.fired and not rec.accepted:
            self.fired = True
            return ct.Clear(rec.plan, True)
        return rec


class DecodeStream(Fault):
    name, rule = "decode-stream", "TS-L2-9"
    why = ("a decoding request's newest full-attention page, completed during decode, is streamed to Host "
           "(the fault adds a pinned write-back of it to a spare Host page)")

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.rows: dict[str, list[int]] = {}
        self.prefill: dict[str, int] = {}
        self.computed: dict[str, int] = {}

    def _plan(self, rec: ct.Plan) -> bool:
        g0 = self.config.groups[0]
        rows = (rec.tables or {}).get(g0.id, {})
        self.rows.update(rows)
        b = rec.batch
        for k in range(b.extends, len(b.requests)):
            rid = b.requests[k]
            row = self.rows.get(rid, [])
            done = self.computed.get(rid, 0) // g0.block_granularity
            if done and done * g0.block_granularity > self.prefill.get(rid, 1 << 62) and done <= len(row):
                blk = row[done - 1]
                if blk > 0:
                    rec.cache = list(rec.cache) + [ct.CacheOp("WriteBackOp", [_SPARE_ID], [(blk, 1)], groups=[0],
                                                              pinned=True)]
                    self.extra_done.append(_SPARE_ID)
                    return True
        for k, rid in enumerate(b.requests):
            if k < b.extends:
                self.prefill[rid] = b.prefill_lengths[k] if k < len(b.prefill_lengths) else 1 << 62
                self.computed[rid] = b.prefix_lengths[k] + b.input_lengths[k]
            else:
                self.computed[rid] = self.computed.get(rid, 0) + b.input_lengths[k]
        return False


class FailedLoadPublished(Fault):
    name, rule = "failed-load-published", "TS-L2-10"
    why = "a load-back is acknowledged as failed (an L3 prefetch miss), yet its destination stays in a table"

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.target: int | None = None

    def _plan(self, rec: ct.Plan) -> bool:
        for op in rec.cache:
            if op.kind == "LoadBackOp" and op.pages:
                self.target = op.op_ids[0]
                return True
        return False

    def result(self, res: ct.Result) -> ct.Result:
        res = super().result(res)
        if self.target is not None and self.target in res.done:
            res.failed = list(res.failed) + [self.target]
            self.target = None
        return res


class FailedGetLoaded(Fault):
    name, rule = "failed-get-loaded", "TS-L2-10"
    why = ("an L3 get's first key is recorded as failed while the scheduler, told it succeeded, loads that Host "
           "page into Device (the run needs L3 gets: --l3 and a Host tier small enough to evict)")

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.gets: set[int] = set()

    def _plan(self, rec: ct.Plan) -> bool:
        self.gets.update(op.op_ids[0] for op in rec.cache if op.kind == "StorageGetOp" and op.op_ids and op.keys)
        return False

    def result(self, res: ct.Result) -> ct.Result:
        res = super().result(res)
        for k, sd in enumerate(res.storage):
            if not self.fired and sd.op in self.gets and sd.success and all(sd.success):
                self.fired = True
                res.storage = list(res.storage)
                res.storage[k] = ct.StorageDone(sd.op, [False] + list(sd.success[1:]), list(sd.object_failures))
        return res


class UnclampedHostPrefix(Fault):
    name, rule = "unclamped-host-prefix", "TS-L2-11"
    why = ("a load-back serving a first extend's hit drops its last page, handed out zeroed instead, while the "
           "hit is not shortened (a group short of Host pages leaving the hit between grains)")

    def _plan(self, rec: ct.Plan) -> bool:
        b = rec.batch
        first: set[str] = {rid for k, rid in enumerate(b.requests) if k < b.extends and b.prefix_lengths[k] > 0}
        for op in rec.cache:
            if op.kind != "LoadBackOp" or len(op.pages) < 2:
                continue
            k = len(op.pages) - 1
            gi = op.groups[k] if op.groups else 0
            g = self.groups[gi]
            dst = op.pages[k][1]
            if not any(dst in row for rid, row in rec.tables.get(g, {}).items() if rid in first):
                continue
            op.pages = list(op.pages[:k])
            for name in ("groups", "keys", "offsets", "tiers"):
                v = getattr(op, name)
                if v:
                    setattr(op, name, list(v[:k]))
            rec.zero = dict(rec.zero)
            rec.zero[g] = list(rec.zero.get(g, [])) + [dst]
            return True
        return False


class SkipStore(Fault):
    name, rule = "skip-store", "TS-L2-12"
    why = ("the first write-back of several keyed pages leaves its first keyed page out (a whole page, never "
           "stored: a partial tail is last)")

    def _plan(self, rec: ct.Plan) -> bool:
        for op in _write_backs(rec):
            keyed = [k for k, key in enumerate(op.keys) if key]
            if len(op.pages) >= 2 and keyed:
                k = keyed[0]
                for name in ("pages", "groups", "keys", "offsets"):
                    v = getattr(op, name)
                    if v:
                        setattr(op, name, list(v[:k]) + list(v[k + 1:]))
                return True
        return False


class ReplayableHit(Fault):
    name, rule = "replayable-hit", "TS-PFX-3"
    why = ("a request admitted with a prefix hit names, below its replay window, the page its full-attention row "
           "hits at that slot, in the replayable group too (the run needs one: --swa-replayable)")

    def _plan(self, rec: ct.Plan) -> bool:
        rep = [g.id for g in self.config.groups if g.replayable]
        full = next((g.id for g in self.config.groups if g.attn_kind == "full"), None)
        b = rec.batch
        if not rep or full is None:
            return False
        for k in range(b.extends):
            rid = b.requests[k]
            row, hit_row = (rec.tables or {}).get(rep[0], {}).get(rid), (rec.tables or {}).get(full, {}).get(rid)
            if row and hit_row and b.prefix_lengths[k] > 0 and row[0] == 0:
                rec.tables = {g: dict(rows) for g, rows in rec.tables.items()}
                rec.tables[rep[0]][rid] = [hit_row[0]] + list(row[1:])
                return True
        return False


class FlatReadmission(Fault):
    name, rule = "flat-readmission", "TS-ADM-2"
    why = ("a retracted request's readmission row is cut back to the headroom its previous admission secured "
           "(the run needs retraction and a request whose generation that headroom does not cover)")

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        g = next((g for g in config.groups if g.attn_kind == "full"), config.groups[0])
        self.group, self.bg = g.id, g.block_granularity
        self.budget: dict[str, tuple[int, int]] = {}   # request -> (prompt tokens, max_new_tokens)
        self.produced: dict[str, int] = {}
        self.secured: dict[str, int] = {}               # headroom its latest admission secured
        self.retracted: set[str] = set()
        self.batch: list[str] = []

    def submit(self, rec: ct.Submit) -> None:
        self.budget[rec.request] = (len(rec.tokens), rec.max_new_tokens)

    def _plan(self, rec: ct.Plan) -> bool:
        self.batch = list(rec.batch.requests)
        cut = False
        for rid, row in list((rec.tables or {}).get(self.group, {}).items()):
            if rid not in self.budget or (rid in self.secured and rid not in self.retracted):
                continue
            prompt, max_new = self.budget[rid]
            made = self.produced.get(rid, 0)
            tokens = prompt + made
            if rid in self.retracted and not cut:
                keep = (tokens + self.secured[rid]) // self.bg   # no more headroom than last time
                if -(-(tokens + 1) // self.bg) <= keep < len(row) and keep * self.bg - tokens < max_new - made:
                    rec.tables = {g: dict(rows) for g, rows in rec.tables.items()}
                    rec.tables[self.group][rid] = list(row[:keep])
                    cut = True
            self.retracted.discard(rid)
            self.secured[rid] = len(row) * self.bg - tokens
        for op in rec.cache:
            if op.kind == "SnapshotOp" and op.request is not None:
                self.retracted.add(op.request)
        return cut

    def result(self, res: ct.Result) -> ct.Result:
        res = super().result(res)
        for rid, toks in zip(self.batch, res.tokens):
            self.produced[rid] = self.produced.get(rid, 0) + len(toks)
        return res


class HitServedAsCopy(Fault):
    name, rule = "hit-served-as-copy", "TS-TBL-1"
    why = ("a first extend with a prefix hit of at least one page names, at its full-attention slot 0, a fresh copy "
           "of the published block instead of the block itself (seed 002 L154)")

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.seen: set[int] = set()  # every full-attention block id a record named so far: the fresh id avoids them

    def _plan(self, rec: ct.Plan) -> bool:
        g = self._full_group()
        if g is None:
            return False
        for row in rec.tables.get(g, {}).values():
            self.seen.update(row)
        self.seen.update(x for pair in rec.copy.get(g, []) for x in pair)
        self.seen.update(rec.zero.get(g, []))
        total = next(grp.total_pages for grp in self.config.groups if grp.id == g)
        b = rec.batch
        for k in range(b.extends):
            rid = b.requests[k]
            got = rec.tables.get(g, {}).get(rid)
            if b.prefix_lengths[k] < self.config.prefix_granularity or not got or got[0] <= 0:
                continue
            row = got
            fresh = next((x for x in range(total - 1, 0, -1) if x not in self.seen), None)
            if fresh is None:
                return False
            rec.tables = {name: dict(rows) for name, rows in rec.tables.items()}
            rec.tables[g][rid] = [fresh, *row[1:]]
            rec.copy = {**rec.copy, g: [*rec.copy.get(g, []), (row[0], fresh)]}
            return True
        return False


class FullRowHole(Fault):
    name, rule = "full-row-hole", "TS-POOL-4"
    why = "a live request's full-attention row loses its slot 0 to -1 while its later slots stay (seed 002 L165)"

    def _plan(self, rec: ct.Plan) -> bool:
        g = self._full_group()
        if g is None:
            return False
        b = rec.batch
        for rid in b.requests[b.extends:]:  # a decode: its request is live and its row already judged
            row = rec.tables.get(g, {}).get(rid)
            if row and len(row) > 1 and row[0] > 0 and row[1] > 0:
                rec.tables = {name: dict(rows) for name, rows in rec.tables.items()}
                rec.tables[g][rid] = [-1, *row[1:]]
                return True
        return False


def _state_groups(config: ct.Config) -> list[int]:
    return [i for i, g in enumerate(config.groups) if g.attn_kind == "mamba"]


class DecodeStateHit(Fault):
    name, rule = "decode-state-hit", "TS-ST-2"
    why = ("a request admitted with a prefix hit reads, as its input state, the block another request's decode "
           "is writing (the run needs --state-group and a decode running beside a state hit)")
    donor_role = "decode"

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.outputs: dict[str, tuple[int, int]] = {}  # request -> (block, boundary) its latest donor_role forward
        self.computed: dict[str, int] = {}                # wrote
        self.seen: set[str] = set()                       # requests past their first extend

    def _plan(self, rec: ct.Plan) -> bool:
        state = [self.config.groups[i].id for i in _state_groups(self.config)]
        if not state:
            return False
        rows = (rec.tables or {}).get(state[0], {})
        b = rec.batch
        for k in range(b.extends):
            rid, row = b.requests[k], rows.get(b.requests[k])
            donor = next((blk for d, (blk, at) in sorted(self.outputs.items())
                          if d != rid and at != b.prefix_lengths[k]), None)
            if rid not in self.seen and row and b.prefix_lengths[k] > 0 and row[0] > 0 and donor is not None:
                rec.tables = {g: dict(rs) for g, rs in rec.tables.items()}
                rec.tables[state[0]][rid] = [donor] + list(row[1:])
                return True
        self.seen.update(b.requests[:b.extends])
        ks = range(b.extends, len(b.requests)) if self.donor_role == "decode" else range(b.extends)
        for k, rid in enumerate(b.requests):
            at = (b.prefix_lengths[k] if k < b.extends else self.computed.get(rid, 0)) + b.input_lengths[k]
            self.computed[rid] = at
            row = rows.get(rid)
            if k in ks and row and len(row) > 1 and row[1] > 0:
                self.outputs[rid] = (row[1], at)
        return False

    def result(self, res: ct.Result) -> ct.Result:
        res = super().result(res)
        for rid in res.finish:
            self.outputs.pop(rid, None)
            self.computed.pop(rid, None)
            self.seen.discard(rid)
        return res


class ForeignStateHit(DecodeStateHit):
    name, rule = "foreign-state-hit", "TS-ST-1"
    why = ("a request admitted with a prefix hit reads, as its input state, the block another request's prefill "
           "wrote at another boundary (the run needs --state-group and a state hit)")
    donor_role = "extend"


class MisplacedCheckpoint(Fault):
    name, rule = "misplaced-checkpoint", "TS-ST-3"
    why = ("an extend's internal state checkpoint is moved one prefix page earlier than floor(after/P)*P (the run "
           "needs --state-group and chunked prefills that materialize one)")

    def _plan(self, rec: ct.Plan) -> bool:
        b = rec.batch
        p = self.config.prefix_granularity
        for k, ck in enumerate(b.checkpoint_lengths):
            if ck > p:
                b.checkpoint_lengths = list(b.checkpoint_lengths)
                b.checkpoint_lengths[k] = ck - p
                return True
        return False


class EventHash(Fault):
    name, rule = "event-hash", "EV-7"
    why = "the first BlockStored event's first block hash is off by one bit (its FNV-1a chain no longer recomputes)"

    def kv(self, rec: ct.KvEvents) -> ct.KvEvents:
        if self.fired:
            return rec
        for ev in rec.events:
            if isinstance(ev, ct.BlockStored) and ev.block_hashes and isinstance(ev.block_hashes[0], int):
                ev.block_hashes = [ev.block_hashes[0] ^ 1, *ev.block_hashes[1:]]
                self.fired = True
                break
        return rec


class SkipEndpoint(Fault):
    name, rule = "skip-endpoint", "TS-ST-4"
    why = ("the extend completing a prompt with a short final tail drops the internal checkpoint it materializes "
           "at the prompt's last aligned checkpoint (the run needs --state-group and chunked prefills)")

    def _plan(self, rec: ct.Plan) -> bool:
        b = rec.batch
        state = [self.config.groups[i].id for i in _state_groups(self.config)]
        for k, ck in enumerate(b.checkpoint_lengths):
            after = b.prefix_lengths[k] + b.input_lengths[k]
            if ck and k < len(b.prefill_lengths) and after == b.prefill_lengths[k]:
                b.checkpoint_lengths = list(b.checkpoint_lengths)
                b.checkpoint_lengths[k] = 0
                rid = b.requests[k]
                rec.tables = {g: dict(rs) for g, rs in rec.tables.items()}
                for g in state:
                    row = rec.tables.get(g, {}).get(rid)
                    if row is not None and len(row) > 2:
                        rec.tables[g][rid] = list(row[:2])
                return True
        return False


class UnkeyedStateStore(Fault):
    name, rule = "unkeyed-state-store", "TS-ST-5"
    why = ("every write-back of a state block drops its key, so no state checkpoint is ever indexed on Host (the run "
           "needs --state-group and --host-pages)")

    def plan(self, rec: ct.Plan) -> ct.Plan:
        state = _state_groups(self.config)
        for op in _write_backs(rec, None):
            if op.keys and op.groups and any(key and op.groups[k] in state for k, key in enumerate(op.keys)):
                op.keys = ["" if op.groups[k] in state else key for k, key in enumerate(op.keys)]
                self.fired = True
        return rec


class AdmitOverBound(Fault):
    name, rule = "admit-over-bound", "TS-ADM-3"
    why = ("a request the scheduler refused at submission (over the CapacityModel's single-request bound) is recorded "
           "as accepted (the run needs a refusal: a pool too small for one request)")

    def submit(self, rec: ct.Submit) -> None:
        if not self.fired and rec.refused is not None:
            rec.refused = None
            self.fired = True


class GaugeOff(Fault):
    name, rule = "gauge-off", "TS-POOL-5"
    why = "the first plan's page gauge reports one active parent more than the live tables name"

    def _plan(self, rec: ct.Plan) -> bool:
        if len(rec.gauge) == 2 and rec.batch.requests:
            rec.gauge = [rec.gauge[0], rec.gauge[1] + 1]
            return True
        return False


class UnqueriedGet(Fault):
    name, rule = "unqueried-get", "TS-L2-13"
    why = "an L3 get's first key is replaced by one no query found (the run needs L3 gets: --l3, a bounded pool)"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in rec.cache:
            if op.kind == "StorageGetOp" and op.keys:
                op.keys = ["ef" * 32] + list(op.keys[1:])
                return True
        return False


class RefetchFailedKey(Fault):
    name, rule = "refetch-failed-key", "TS-L2-14"
    why = ("a key an L3 get failed to read stays unread (the fault records its re-put as failed) and a later get names "
           "it again as its first key (the run needs L3 gets with misses: --l3 --l3-miss-rate)")

    def __init__(self, config: ct.Config) -> None:
        super().__init__(config)
        self.ops: dict[int, list[tuple[int, str, int]]] = {}
        self.failed: set[tuple[int, str, int]] = set()
        self.kept: tuple[int, str, int] | None = None

    def _plan(self, rec: ct.Plan) -> bool:
        for op in rec.cache:
            if op.kind not in ("StorageGetOp", "StoragePutOp") or not op.keys or not op.op_ids:
                continue
            if op.kind == "StorageGetOp" and self.kept is not None:
                g, key, off = self.kept
                op.keys = [key] + list(op.keys[1:])
                op.groups = [g] + list(op.groups[1:]) if op.groups else op.groups
                op.offsets = [off] + list(op.offsets[1:]) if op.offsets else op.offsets
                return True
            n = len(op.keys)
            self.ops[op.op_ids[0]] = list(zip(op.groups or [0] * n, op.keys, op.offsets or [0] * n, strict=True))
        return False

    def result(self, res: ct.Result) -> ct.Result:
        res = super().result(res)
        if self.fired:
            return res
        for k, sd in enumerate(res.storage):
            keys = self.ops.pop(sd.op, None)
            if not keys:
                continue
            flags = list(sd.success)
            for i, key in enumerate(keys):
                if i >= len(flags):
                    break
                if not flags[i]:
                    self.failed.add(key)
                elif key in self.failed and self.kept is None:  # a re-put of an unread key: recorded as failed
                    flags[i] = False
                    self.kept = key
            if flags != list(sd.success):
                res.storage = list(res.storage)
                res.storage[k] = ct.StorageDone(sd.op, flags, list(sd.object_failures))
        return res

_FAULTS: dict[str, type[Fault]] = {f.name: f for f in (ZeroPinnedSource, UnpinnedStore, RepeatTransfer,
                                                       StoreKeyTwice, KeyedHostLoad, WrongKey,
                                                       ReplayableWriteBack, AcceptClear, DecodeStream,
                                                       FailedLoadPublished, SkipStore,
                                                       ReplayableHit, FlatReadmission, FailedGetLoaded,
                                                       UnclampedHostPrefix, HitServedAsCopy, FullRowHole,
                                                       EventHash, ForeignStateHit, DecodeStateHit,
                                                       MisplacedCheckpoint, SkipEndpoint, UnkeyedStateStore,
                                                       AdmitOverBound, GaugeOff, UnqueriedGet, RefetchFailedKey)}
NAMES: dict[str, str] = {name: f.rule for name, f in _FAULTS.items()}
WHY: dict[str, str] = {name: f.why for name, f in _FAULTS.items()}


def get(name: str, config: ct.Config) -> Fault:
    """A fresh fault by name, for a run under ``config`` (``KeyError`` names the known ones)."""
    if name not in _FAULTS:
        raise KeyError(f"unknown fault {name!r} (known: {', '.join(sorted(_FAULTS))})")
    return _FAULTS[name](config)
