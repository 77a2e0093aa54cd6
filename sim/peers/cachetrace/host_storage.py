"""The L3 ops of the Host tier (``StorageGetOp``, ``StoragePutOp``, ``StorageQueryOp``, ``StorageCancelOp``) and
their outcomes, judged like the L2 transfers: hygiene (TS-L2-3: keys, Host pages in range, a cancel names an op
in flight), Host pages a get fills or a put reads are not written back into before that op's completion (TS-L2-1),
a put reads an acknowledged Host page (TS-L2-5) under the key it holds (TS-L2-6), never one a failed get left
empty (TS-L2-10); every L3 op is answered once (PEER-3, on the L3 id namespace). A get's outcome, per object
key, fills its Host pages or leaves them empty; ``host_tier.HostTier`` (a ``StorageOps``) reads what it left.
"""

from __future__ import annotations

from kvsim.sim.peers.cachetrace.host_state import (
    STORAGE_CANCEL,
    STORAGE_GET,
    STORAGE_PUT,
    STORAGE_QUERY,
    HostPage,
    HostState,
    StorageOp,
)
from kvsim.sim.trace import cachetrace as ct

__all__ = ["StorageOps"]


class StorageOps(HostState):
    """The L3 half of the Host tier: ``HostTier`` hands it each plan's ``Storage*`` ops and each answer's outcomes."""

    def _storage_op(self, op: ct.CacheOp, line: int) -> None:
        """An L3 op of the plan: hygiene (TS-L2-3); a get takes its Host pages (their content is unknown until
        its outcome), a put reads acknowledged Host pages under the key they hold (TS-L2-5, TS-L2-6, and
        TS-L2-10 for a page a failed get left empty); both hold their pages until the outcome (TS-L2-1)."""
        self.stats["storage_ops"] += 1
        self.exercised["TS-L2-3"] += 1
        if op.kind == STORAGE_CANCEL:
            self.stats["storage_cancels"] += 1
            tgt = self.storage.get(op.cancels) if op.cancels is not None else None
            if tgt is None:
                self._find("TS-L2-3", line, f"L3 cancel names op {op.cancels}, which is no L3 op in flight",
                           op_id=op.cancels)
            else:
                tgt.cancelled = True
            return
        if len(op.op_ids) != 1:
            raise ValueError(f"{op.kind} carries {len(op.op_ids)} op ids (one expected)")
        oid = op.op_ids[0]
        if oid in self.storage_issued:  # PEER-3 on the L3 id namespace
            self._find("PEER-3", line, f"L3 op {oid} issued twice", op_id=oid)
        self.storage_issued.add(oid)
        n = len(op.keys)
        for name in ("groups", "offsets"):
            if len(getattr(op, name)) != n:
                raise ValueError(f"{op.kind} {oid} has {len(getattr(op, name))} {name} for {n} keys")
        paged = op.kind in (STORAGE_GET, STORAGE_PUT)
        if paged and len(op.host_blocks) != n:
            raise ValueError(f"{op.kind} {oid} has {len(op.host_blocks)} host_blocks for {n} keys")
        if not n:
            self._find("TS-L2-3", line, f"{op.kind} {oid} carries no object key (an op with nothing to move never "
                       "completes a copy)", op_id=oid)
        keys: list[tuple[str | None, str, int]] = []
        for gi, key, off in zip(op.groups, op.keys, op.offsets, strict=True):
            g = self.gids[gi] if gi < len(self.gids) else None
            if g is None:
                self._find("TS-L2-3", line, f"{op.kind} {oid} names cache group {gi}, beyond the "
                           f"{len(self.gids)} groups", op_id=oid)
            keys.append((g, key, off))
        sop = StorageOp(op.kind, self.c.current_plan, keys, list(op.host_blocks) if paged else [])
        self.storage[oid] = sop
        if op.kind == STORAGE_QUERY:
            self.stats["storage_queries"] += 1
            self.stats["query_keys"] += n
            return
        seen: set[int] = set()
        for (g, key, off), page in zip(keys, sop.pages, strict=True):
            if not self._host_id(page, line, f"{op.kind} Host page", oid):
                continue
            if page in seen:
                self._find("TS-L2-3", line, f"{op.kind} {oid} names Host page {page} twice", op_id=oid, page=page)
            seen.add(page)
            other = self.host_busy.get(page)
            if other is not None and other != oid:
                self._find("TS-L2-1", line, f"{op.kind} {oid} uses Host page {page} while L3 "
                           f"{self.storage[other].kind} {other}, which uses it, is incomplete", op_id=oid, page=page)
            self.host_busy[page] = oid
            if g is None:
                continue
            if op.kind == STORAGE_GET:
                self._get_into(oid, g, key, off, page, line)
            else:
                self._put_from(oid, g, key, off, page, line)
        if op.kind == STORAGE_GET:
            self.stats["storage_gets"] += 1
            self.stats["get_keys"] += n
        else:
            self.stats["storage_puts"] += 1
            self.stats["put_keys"] += n

    def _get_into(self, oid: int, g: str, key: str, off: int, page: int, line: int) -> None:
        pin = self.host_pins.get(page)
        if pin is not None:
            self._find("TS-L2-1", line, f"L3 get {oid} reads into Host page {page} while load {pin}, which reads "
                       "it, is unacknowledged", op_id=oid, page=page)
        try:
            digest = bytes.fromhex(key)
        except ValueError:
            raise ValueError(f"StorageGetOp {oid}: key {key!r} is not a hex content hash") from None
        for other in self.host.values():
            other.pop(page, None)
        for fh in self.failed_host.values():
            fh.pop(page, None)
        self.host[g][page] = HostPage((digest, off), None, oid, stored_as=key)
        self.l3_filled[page] = key

    def _put_from(self, oid: int, g: str, key: str, off: int, page: int, line: int) -> None:
        get = self.failed_host[g].get(page)
        hp = self.host[g].get(page)
        if get is not None:
            self.exercised["TS-L2-10"] += 1
            self._find("TS-L2-10", line, f"L3 put {oid} stores Host page {page} of {g} under key {key[:12]}.., but "
                       f"L3 get {get} failed to read that page: it publishes what was never fetched", op_id=oid,
                       group=g, page=page)
            return
        self.exercised["TS-L2-5"] += 1
        if hp is None or not hp.acked:
            self._find("TS-L2-5", line, f"L3 put {oid} reads Host page {page} of {g}, which "
                       + ("no write-back or get filled" if hp is None else f"op {hp.op} has not yet filled"),
                       op_id=oid, group=g, page=page)
            return
        self.exercised["TS-L2-6"] += 1
        want = hp.key
        if key != hp.stored_as and (want is None or want != (bytes.fromhex(key) if _hex(key) else b"", off)):
            self._find("TS-L2-6", line, f"L3 put {oid} stores Host page {page} of {g} under key {key[:12]}.. offset "
                       f"{off}, but the page holds "
                       + (f"key {want[0].hex()[:12]}.. offset {want[1]}" if want else "no completed prefix page"),
                       op_id=oid, group=g, page=page)

    def storage_done(self, sd: ct.StorageDone, line: int) -> None:
        """An L3 op's outcome, per object key: a get's read keys fill their Host pages (acknowledged, under
        that key), its failed ones leave them empty (TS-L2-10 watches them); every page it held is free."""
        sop = self.storage.pop(sd.op, None)
        if sop is None:
            self._find("PEER-3", line, f"L3 op {sd.op} answered " + (
                "twice" if sd.op in self.storage_issued else "but never issued"), op_id=sd.op)
            return
        if len(sd.success) != len(sop.keys):
            raise ValueError(f"storage outcome of {sop.kind} {sd.op} has {len(sd.success)} flags for "
                             f"{len(sop.keys)} keys")
        if sd.object_failures and len(sd.object_failures) != len(sop.keys):
            raise ValueError(f"storage outcome of {sop.kind} {sd.op} has {len(sd.object_failures)} object failures "
                             f"for {len(sop.keys)} keys")
        for page in sop.pages:
            if self.host_busy.get(page) == sd.op:
                del self.host_busy[page]
        if sop.kind == STORAGE_QUERY:
            self.stats["query_hits"] += sum(sd.success)
            return
        if sop.kind != STORAGE_GET:
            return
        for (g, key, off), page, ok in zip(sop.keys, sop.pages, sd.success, strict=True):
            if g is None:
                continue
            hp = self.host[g].get(page)
            mine = hp is not None and hp.op == sd.op
            if ok:
                if mine:
                    hp.acked = True  # type: ignore[union-attr]
                self.failed_keys.discard((g, key, off))
                continue
            self.stats["get_keys_failed"] += 1
            self.exercised["TS-L2-10"] += 1
            self.failed_keys.add((g, key, off))
            if mine:
                del self.host[g][page]
                self.failed_host[g][page] = sd.op
                self.l3_filled.pop(page, None)

    def finish(self, line: int) -> None:
        """End of the trace: every L3 op was answered (PEER-3: "an op that never completes a copy would hold
        its tickets forever")."""
        if self.storage:
            first = min(self.storage)
            self._find("PEER-3", line, f"{len(self.storage)} L3 ops never answered (first {first})", op_id=first)


def _hex(key: str) -> bool:
    try:
        bytes.fromhex(key)
    except ValueError:
        return False
    return True
