"""Faults of the Host and L3 tiers (rules TS-L2-1 ... TS-L2-14): a plan's write-backs, loads, L3 gets and
ClearCache answers perturbed the way a scheduler breaking each rule would show them."""

from __future__ import annotations

from kvsim.sim.peers.tokenspeed.faults.base import Fault, write_backs
from kvsim.sim.trace import cachetrace as ct

__all__ = ["ZeroPinnedSource", "UnpinnedStore", "RepeatTransfer", "StoreKeyTwice", "KeyedHostLoad", "WrongKey",
           "ReplayableWriteBack", "AcceptClear", "DecodeStream", "FailedLoadPublished", "FailedGetLoaded",
           "UnclampedHostPrefix", "SkipStore", "UnqueriedGet", "RefetchFailedKey"]

_SPARE_ID = 1 << 40  # op ids a fault invents lie far above any the scheduler issues


class ZeroPinnedSource(Fault):
    name, rule = "zero-pinned-source", "TS-L2-1"
    why = "the plan that issues a pinned write-back also zeroes its first source"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in write_backs(rec):
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
        for op in write_backs(rec):
            op.pinned = False
            return True
        return False


class RepeatTransfer(Fault):
    name, rule = "repeat-transfer", "TS-L2-3"
    why = "a write-back lists its first (group, source, destination) twice"

    def _plan(self, rec: ct.Plan) -> bool:
        for op in write_backs(rec, None):
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
        for op in write_backs(rec):
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
        for op in write_backs(rec):
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
        for op in write_backs(rec):
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
        for op in write_backs(rec):
            keyed = [k for k, key in enumerate(op.keys) if key]
            if len(op.pages) >= 2 and keyed:
                k = keyed[0]
                for name in ("pages", "groups", "keys", "offsets"):
                    v = getattr(op, name)
                    if v:
                        setattr(op, name, list(v[:k]) + list(v[k + 1:]))
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
