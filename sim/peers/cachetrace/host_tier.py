"""The Host (L2) tier of the observable contract: write-backs, load-backs, snapshots, restores, ClearCache.

``contract.Contract`` owns one ``HostTier`` (which reads it through ``view.HostTierView``); it hands over each
plan's cache ops before the plan's copies and zeroing run (the order the cache concepts give: "an unpinned op's
sources may be re-granted in the same plan, so it is launched first"), each answer's acknowledgements, and each
ClearCache record. The tier keeps, per group ("Indices are pool-scoped: one index serves both the Device and Host
tiers of its group"), what every Host page holds (the prefix key and last writer copied from its Device source) and
whether its write-back was acknowledged, plus every op in flight and what it pins. It checks the TS-L2-*
rules (catalogue: ``spec/rules/cache_l2.py``, where each cites its seed clause):

* TS-L2-1 pinned until ACK: a pinned write-back's Device sources, and a load-back's or restore's Host
  sources, are not re-granted (zeroed, copied into, loaded or restored into, written back into) nor written
  by a forward before the op's acknowledgement.
* TS-L2-2 unpinned stores: only a retraction's snapshot store leaves its sources unpinned; it is launched
  before any op of its plan that writes into those sources.
* TS-L2-3 op hygiene: at least one transfer per op; no (group, source, destination) twice in one plan;
  group, Device, Host and snapshot-slot ids within range.
* TS-L2-4 no key stored twice while its store is in flight.
* TS-L2-5 load provenance: a load's (or L2 restore's) Host source holds a write-back that was acknowledged
  (under the load's key when it names one); a Host-only load carries an empty key.
* TS-L2-6 write-back keys: a keyed write-back names its source page's chained prefix hash and offset.
* TS-L2-7 replayable groups never appear in a write-back, load-back or L2 restore (a retraction snapshot
  of their private rows goes to the snapshot pool).
* TS-L2-8 ClearCache is refused while a write-back is unacknowledged; once accepted, nothing cached
  survives it (a later hit on a page computed before it is PEER-4).
* TS-L2-9 write-back policy: a full-attention page completed during decode is not streamed to Host while
  its request still runs (it is queued only at finish or retraction); sliding-window pages may stream.
* TS-L2-10 L3 failures: a failed L3 prefetch copies nothing into Device and publishes nothing, and its
  tokens are recomputed. On the released wheel a prefetch is a ``StorageGetOp`` filling Host pages, answered
  per object key (cachetrace/1 result ``storage``): no load-back reads, and no ``StoragePutOp`` stores, a
  Host page whose get failed; a first extend's hit covers no slot whose key failed (its tokens are computed
  again). A load-back acknowledged unsuccessfully (result ``failed``, the seed's LoadBackDone(success=false))
  leaves its destinations without content: no later table names one as cached, no write-back keys it.
* TS-L2-11 Host prefix clamp: a first extend whose hit is served by this plan's Host loads leaves no slot
  below it without its content (a group short of Host pages mid-prefix must not leave hit_tokens between
  grains); that the hit is a multiple of prefix_granularity is TS-PFX-1's.

The L3 ops themselves are judged like the L2 ones, by ``host_storage.StorageOps`` (this class's base); what both
read and change -- the Host pages, the ops in flight, the tier's counters -- is ``host_state.HostState``.
"""

from __future__ import annotations

from typing import Any

from kvsim.kvmodel.cache.prefix_hash import page_digest
from kvsim.sim.peers.cachetrace.host_state import LOAD_BACK, RESTORE, SNAPSHOT, WRITE_BACK, HostPage, InFlight
from kvsim.sim.peers.cachetrace.host_storage import StorageOps
from kvsim.sim.peers.cachetrace.view import HostTierView
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import stated

__all__ = ["RULES", "HostTier"]

RULES: dict[str, tuple[str, str]] = stated([f"TS-L2-{i}" for i in range(1, 12)], "tokenspeed")  # from the catalogue


class HostTier(StorageOps):
    """The L2 transfers and what the contract tells the Host tier (grants, writes, names, acknowledgements,
    ClearCache); the L3 ops are ``StorageOps``'."""

    def __init__(self, contract: HostTierView):
        super().__init__(contract)
        self._loaded_now: dict[str, list[int]] = {}          # Device pages this plan's loads fill
        self._unpinned_srcs: set[tuple[str, int]] = set()  # this plan's unpinned store sources
        self.exercised = {r: 0 for r in RULES}

    # -- helpers ----------------------------------------------------------------------------------------------
    def _pairs(self, op: ct.CacheOp, line: int) -> list[tuple[str | None, int, int, str, int]]:
        """(group id or None when out of range, src, dst, key, offset) per pair; malformed lists are input
        errors."""
        n = len(op.pages)
        for name in ("groups", "keys", "offsets"):
            v = getattr(op, name)
            if v and len(v) != n:
                raise ValueError(f"cache op {op.op_ids} has {len(v)} {name} for {n} page pairs")
        out = []
        for k, (src, dst) in enumerate(op.pages):
            gi = op.groups[k] if op.groups else 0
            g = self.gids[gi] if gi < len(self.gids) else None
            if g is None:
                self._find("TS-L2-3", line, f"{op.kind} {op.op_ids[0]} names cache group {gi}, beyond the "
                           f"{len(self.gids)} groups", op_id=op.op_ids[0])
            out.append((g, src, dst, op.keys[k] if op.keys else "", op.offsets[k] if op.offsets else 0))
        return out

    def _device_id(self, g: str, blk: int, line: int, what: str, oid: int) -> bool:
        total = self.c.groups[g].total_pages
        if 0 < blk < total:
            return True
        self._find("TS-L2-3", line, f"op {oid}: {what} {blk} outside {g}'s Device pages [1, {total})",
                   op_id=oid, group=g, block=blk)
        return False

    def _grant(self, g: str, blk: int, line: int, how: str) -> None:
        """A Device page is re-granted or overwritten: it must not be a pinned source in flight."""
        oid = self.device_pins.get((g, blk))
        if oid is not None:
            self._find("TS-L2-1", line, f"{g} page {blk} is {how} while write-back {oid}, which pins it as a "
                       "source, is unacknowledged", group=g, block=blk, op_id=oid)

    # -- a plan's ops, before its copies and zeroing ----------------------------------------------------------
    def ops(self, rec: ct.Plan, line: int) -> tuple[dict[str, list[int]], list[tuple[str, int, tuple]]]:
        """Apply the plan's cache ops; returns the Device pages they fill (per group) and the (group, page,
        key) of each filled page whose content carries a prefix key."""
        c = self.c
        filled: dict[str, list[int]] = {}
        keyed: list[tuple[str, int, tuple]] = []
        seen: set[tuple[str, str, int, int]] = set()
        written: dict[tuple[str, int], int] = {}     # Device page -> index of the first op writing it
        snapshots = {op.request for op in rec.cache if op.kind == SNAPSHOT and op.request is not None}
        self._unpinned_srcs = set()
        for idx, op in enumerate(rec.cache):
            if op.kind.startswith("Storage"):
                if c.config.enable_l3_storage is False:  # L189: "Existence and prefetch are skipped when L3 is unset"
                    self._find("TS-L2-3", line, f"{op.kind} {op.op_ids[0] if op.op_ids else -1} issued though the "
                               "configuration has no L3 tier", op_id=op.op_ids[0] if op.op_ids else -1)
                self._storage_op(op, line)
                continue
            oid = op.op_ids[0] if op.op_ids else -1
            fl = InFlight(op.kind, rec.plan)
            self.exercised["TS-L2-3"] += 1
            pairs = self._pairs(op, line)
            if op.kind == SNAPSHOT:
                self.stats["snapshots"] += 1
                self._snapshot(op, oid, line)
            elif op.kind == RESTORE and op.request is not None and op.slot is not None and not pairs:
                pass  # the request's image (snapshot slot -> pool index) is its transfer: every page was cached
            elif not pairs:
                self._find("TS-L2-3", line, f"{op.kind} {oid} carries no transfer (an op that never completes a "
                           "copy would hold its tickets forever)", op_id=oid)
            for k, (g, src, dst, key, off) in enumerate(pairs):
                if g is None:
                    continue
                if (op.kind, g, src, dst) in seen:
                    self._find("TS-L2-3", line, f"{op.kind} {oid} repeats ({g}, {src}, {dst}) within plan "
                               f"{rec.plan}", op_id=oid, group=g)
                    continue
                seen.add((op.kind, g, src, dst))
                tier = op.tiers[k] if k < len(op.tiers) else "L2"
                if op.kind == SNAPSHOT:  # a retracted request's private image, to the snapshot pool
                    self._device_id(g, src, line, "snapshot source", oid)
                    if not 0 < dst < max(self.snapshot_pages, 2):
                        self._find("TS-L2-3", line, f"snapshot {oid}: destination {dst} outside the snapshot pool "
                                   f"[1, {self.snapshot_pages})", op_id=oid, page=dst)
                    continue
                self.exercised["TS-L2-7"] += self.any_replayable
                if c.groups[g].replayable and tier == "L2":
                    self._find("TS-L2-7", line, f"{op.kind} {oid} moves page {src} -> {dst} of replayable group "
                               f"{g}", op_id=oid, group=g)
                if op.kind == WRITE_BACK:
                    self._write_back(op, oid, g, src, dst, key, off, fl, snapshots, written, line)
                elif op.kind in (LOAD_BACK, RESTORE):
                    self._load(op, oid, g, src, dst, key, tier, fl, filled, keyed, line)
                    written.setdefault((g, dst), idx)
            if op.kind == WRITE_BACK:
                self.stats["write_backs"] += 1
                if op.pinned is False:
                    self.stats["unpinned_stores"] += 1
                    self._unpinned_srcs.update((g, src) for g, src, _d, _k, _o in pairs if g is not None)
                    self._unpinned(op, oid, pairs, snapshots, written, line)
            elif op.kind == LOAD_BACK:
                self.stats["load_backs"] += 1
            elif op.kind == RESTORE:
                self.stats["restores"] += 1
            for oid2 in op.op_ids:
                self.inflight[oid2] = fl
        self._loaded_now = filled
        return filled, keyed

    def _write_back(self, op, oid, g, src, dst, key, off, fl, snapshots, written, line) -> None:
        c = self.c
        self.stats["pages_written_back"] += 1
        ok = self._device_id(g, src, line, "write-back source", oid)
        if self._host_id(dst, line, "write-back destination", oid):
            pin = self.host_pins.get(dst)
            if pin is not None:
                self._find("TS-L2-1", line, f"Host page {dst} is written back into while load {pin}, which "
                           "reads it, is unacknowledged", page=dst, op_id=pin)
            if self.host_busy:
                busy = self.host_busy.get(dst)
                if busy is not None:
                    self._find("TS-L2-1", line, f"Host page {dst} is written back into while L3 "
                               f"{self.storage[busy].kind} {busy}, which uses it, is incomplete", page=dst,
                               op_id=busy)
            if self.failed_host:
                for fh in self.failed_host.values():
                    fh.pop(dst, None)
        have = c.content[g].get(src) if ok else None
        if key and src in self.failed_dst[g]:
            self.exercised["TS-L2-10"] += 1
            self._find("TS-L2-10", line, f"write-back {oid} stores {g} page {src}, the destination of a failed L3 "
                       "prefetch, under a key (publishing what was never copied)", op_id=oid, group=g, block=src)
        if key and self.failed_keys:
            self.failed_keys.discard((g, key, off))  # the page was computed again and is stored afresh
        if key and not c.groups[g].replayable and g not in c.state.ids:  # a replayable page holds no key at all
            # (TS-L2-7 says so); a state block's key and provenance are TS-ST-1's
            self.exercised["TS-L2-6"] += 1
            want = (have[0].hex(), have[1]) if have is not None else None
            if want != (key, off) and not self._tail_key(g, src, key):
                self._find("TS-L2-6", line, f"write-back {oid} stores {g} page {src} under key {key[:12]}.. "
                           f"offset {off}, but the page holds "
                           + (f"key {want[0][:12]}.. offset {want[1]}" if want else "no completed prefix page"),
                           op_id=oid, group=g, block=src)
            k3 = (g, key, off)
            self.exercised["TS-L2-4"] += 1
            if k3 in self.keys_in_flight:
                self._find("TS-L2-4", line, f"write-back {oid} stores key {key[:12]}.. of {g} while write-back "
                           f"{self.keys_in_flight[k3]} of the same key is in flight", op_id=oid, group=g)
            else:
                self.keys_in_flight[k3] = oid
                fl.keys.append(k3)
        if op.pinned is not False:
            self.exercised["TS-L2-1"] += 1  # premise: a source pinned until the ACK
            self.device_pins[(g, src)] = oid
            fl.device_pins.append((g, src))
            self._policy(oid, g, src, line)
        for other in self.host.values():
            other.pop(dst, None)
        self.host[g][dst] = HostPage(have, c.writer[g].get(src), oid, stored_as=key)
        fl.host_dst.append((g, dst))

    def _tail_key(self, g: str, src: int, key: str) -> bool:
        """Whether ``key`` is the chained hash of a partial last page its source's last writer computed (the
        scheduler publishes a prompt's partial tail under the hash of the tokens it holds)."""
        c = self.c
        w = c.writer[g].get(src)
        if w is None:
            return False
        req, slot = w
        p = c.p
        page = slot * c.groups[g].block_granularity // p
        prev = req.digest(page - 1, p) if page else b""
        if prev is None:
            return False
        known = min(len(req.tokens) + len(req.generated), (page + 1) * p - 1, req.computed)
        return any(page_digest(prev, req.token_slice(page * p, n)).hex() == key for n in range(page * p + 1, known + 1))

    def _policy(self, oid: int, g: str, src: int, line: int) -> None:
        """TS-L2-9: a full-attention page completed during decode streams only once its request stops."""
        c = self.c
        grp = c.groups[g]
        if grp.attn_kind != "full":
            return
        w = c.writer[g].get(src)
        if w is None or c.content[g].get(src) is None:
            return
        req, slot = w
        end = (slot + 1) * grp.block_granularity
        if end <= req.prefill:
            return
        self.exercised["TS-L2-9"] += 1
        live = c.reqs.get(req.rid)
        if live is not None and live is req and req.rows:
            self._find("TS-L2-9", line, f"write-back {oid} streams {g} page {src} (slot {slot} of {req.rid}, "
                       "completed during decode) while the request still decodes", op_id=oid, group=g, block=src)

    def _unpinned(self, op, oid, pairs, snapshots, written, line) -> None:
        """TS-L2-2: an unpinned store belongs to a retraction's snapshot and is launched first."""
        c = self.c
        self.exercised["TS-L2-2"] += 1
        owners: set[tuple[str, int]] = set()
        for rid in snapshots:
            r = c.reqs.get(rid)
            if r is not None:  # its rows (state rows too), or (retracted again before it rejoined a batch) its image
                owners.update((g, b) for g, row in r.rows.items() for b in row if b > 0)
                owners.update((g, b) for g in c.state.ids for b in c.state.rows[g].get(rid, ()) if b > 0)
                owners.update((g, b) for g, blocks in r.image.items() for b in blocks)
        for g, src, _dst, _key, _off in pairs:
            if g is None:
                continue
            if (g, src) not in owners:
                self._find("TS-L2-2", line, f"write-back {oid} leaves {g} page {src} unpinned, but the page "
                           "belongs to no request this plan snapshots (only a retraction's snapshot store is "
                           "stream-ordered)", op_id=oid, group=g, block=src)
                return
            if (g, src) in written:
                self._find("TS-L2-2", line, f"unpinned write-back {oid} is launched after an op of the same plan "
                           f"that writes its source {g} page {src}", op_id=oid, group=g, block=src)
                return

    def _load(self, op, oid, g, src, dst, key, tier, fl, filled, keyed, line) -> None:
        c = self.c
        self.stats["pages_restored" if op.kind == RESTORE else "pages_loaded"] += 1
        if not self._device_id(g, dst, line, f"{op.kind} destination", oid):
            return
        self._grant(g, dst, line, "loaded into")
        filled.setdefault(g, []).append(dst)
        fl.device_dst.append((g, dst))
        if op.kind == RESTORE and op.request in c.reqs:
            c.reqs[op.request].image.setdefault(g, set()).add(dst)
        c.content[g].pop(dst, None)
        if tier == "snapshot":  # the snapshot pool is its own tier: its pages are the request's private image
            c.writer[g].pop(dst, None)
            return
        if not self._host_id(src, line, f"{op.kind} source", oid):
            return
        self.host_pins[src] = oid
        self.exercised["TS-L2-1"] += 1
        fl.host_pins.append(src)
        hp = self.host[g].get(src)
        get = self.failed_host[g].get(src)
        if get is not None:
            self.exercised["TS-L2-10"] += 1
            self._find("TS-L2-10", line, f"{op.kind} {oid} copies Host page {src} of {g} into Device page {dst}, but "
                       f"L3 get {get} failed to read that page: nothing was fetched", op_id=oid, group=g, page=src)
            self.failed_dst[g].add(dst)
            c.writer[g].pop(dst, None)
            return
        self.exercised["TS-L2-5"] += 1
        if key and op.kind == LOAD_BACK:
            if src not in self.l3_filled:
                self._find("TS-L2-5", line, f"{op.kind} {oid} is a Host-only load but carries key {key[:12]}.. "
                           "(only an L3 prefetch destination is keyed)", op_id=oid, group=g, page=src)
        elif hp is None:
            self._find("TS-L2-5", line, f"{op.kind} {oid} reads Host page {src} of {g}, which no write-back of "
                       f"{g} filled", op_id=oid, group=g, page=src)
        elif not hp.acked:
            self._find("TS-L2-5", line, f"{op.kind} {oid} reads Host page {src} before op {hp.op} that fills it "
                       "was acknowledged", op_id=oid, group=g, page=src)
        elif key and key != hp.stored_as:  # a restore re-registers what it restores under the stored key
            self._find("TS-L2-5", line, f"{op.kind} {oid} restores Host page {src} under key {key[:12]}.., which it "
                       f"was not written back with", op_id=oid, group=g, page=src)
        if hp is not None:
            if hp.writer is not None:
                c.writer[g][dst] = hp.writer
            else:
                c.writer[g].pop(dst, None)
            if hp.key is not None:
                keyed.append((g, dst, hp.key))
        else:
            c.writer[g].pop(dst, None)

    def _snapshot(self, op: ct.CacheOp, oid: int, line: int) -> None:
        c = self.c
        if op.request is None or op.request not in c.reqs:
            self._find("TS-L2-3", line, f"snapshot {oid} names no live request ({op.request!r})", op_id=oid)
        elif op.slot is not None and self.max_slot and not 0 < op.slot <= self.max_slot:
            self._find("TS-L2-3", line, f"snapshot {oid} uses slot {op.slot} outside [1, {self.max_slot}]",
                       op_id=oid)
        if op.request is not None and op.request in c.reqs:
            self.retracted.append(op.request)

    def hit(self, rid: str, r: Any, hit: int, fresh: dict[str, set[int]], line: int) -> None:
        """A request's first extend: when this plan's Host loads serve its hit, every slot below the hit's last
        whole prefix page holds that slot's content (TS-L2-11); a slot whose L3 get failed is recomputed, never
        covered (TS-L2-10). Device-hit slots (not fresh) are TS-TBL-1's; a hit off a multiple of P is
        TS-PFX-1's."""
        c = self.c
        p = c.p
        loaded = self._loaded_now
        served = False
        for g, row in r.rows.items():
            grp = c.groups[g]
            got = loaded.get(g)
            if grp.replayable or not got:
                continue
            bg = grp.block_granularity
            ids = set(got)
            if any(row[i] in ids for i in range(min(len(row), -(-hit // bg))) if row[i] > 0):
                served = True
                break
        if self.failed_keys:  # a first extend while a get's failed keys are outstanding: recomputed?
            self.exercised["TS-L2-10"] += 1
        elif not served:
            return
        if served:
            self.stats["host_served_hits"] += 1
            self.exercised["TS-L2-11"] += 1
        whole = hit // p * p
        for g, row in r.rows.items():
            grp = c.groups[g]
            if grp.replayable:
                continue
            bg = grp.block_granularity
            new = fresh.get(g, set())
            for i in range(min(len(row), whole // bg)):
                blk = row[i]
                if blk <= 0 or blk not in new:
                    continue
                d = r.digest(i * bg // p, p)
                want = (d, i % (p // bg) if bg < p else 0)
                if c.content[g].get(blk) == want:
                    continue
                if (d is not None and (g, d.hex(), want[1]) in self.failed_keys) or blk in self.failed_dst[g]:
                    self._find("TS-L2-10", line, f"{rid}'s hit of {hit} tokens covers its {g} slot {i} (block {blk}), "
                               "whose L3 prefetch failed: those tokens must be recomputed", request=rid, group=g,
                               slot=i, block=blk)
                elif served:
                    self._find("TS-L2-11", line, f"{rid}'s hit of {hit} tokens covers its {g} slot {i} (block {blk}), "
                               "which holds no content: the Host prefix was not clamped to what was loaded",
                               request=rid, group=g, slot=i, block=blk)
                else:
                    continue
                break

    # -- checks the contract calls ----------------------------------------------------------------------------
    def granted(self, g: str, pages, line: int, how: str) -> None:
        for blk in pages:
            self._grant(g, blk, line, how)
            if (g, blk) in self._unpinned_srcs:  # retract-and-grant: a snapshot's source re-granted at once
                self.stats["unpinned_regranted"] += 1

    def forward_write(self, g: str, blk: int, rid: str, slot: int, line: int) -> None:
        oid = self.device_pins.get((g, blk))
        if oid is not None:
            self._find("TS-L2-1", line, f"{rid} writes {g} slot {slot} into block {blk} while write-back {oid} "
                       "still copies it", request=rid, group=g, block=blk, op_id=oid)

    def named(self, g: str, blk: int, rid: str, slot: int, line: int) -> None:
        """A table names a block as cached content: a failed L3 destination must not be one."""
        if blk in self.failed_dst[g]:
            self.exercised["TS-L2-10"] += 1
            self._find("TS-L2-10", line, f"{rid}'s {g} slot {slot} names block {blk}, the destination of a "
                       "failed L3 prefetch", request=rid, group=g, block=blk)

    def acked(self, oid: int, failed: bool) -> None:
        fl = self.inflight.pop(oid, None)
        if fl is None:
            return
        if fl.plan != self.c.current_plan:
            self.stats["acks_held"] += 1
        for pin in fl.device_pins:
            if self.device_pins.get(pin) == oid:
                del self.device_pins[pin]
        for page in fl.host_pins:
            if self.host_pins.get(page) == oid:
                del self.host_pins[page]
        for k in fl.keys:
            if self.keys_in_flight.get(k) == oid:
                del self.keys_in_flight[k]
        for g, page in fl.host_dst:
            hp = self.host[g].get(page)
            if hp is not None and hp.op == oid:
                if failed:
                    del self.host[g][page]
                else:
                    hp.acked = True
        if failed:
            self.stats["failed_loads"] += 1
            for g, blk in fl.device_dst:
                self.failed_dst[g].add(blk)
                self.c.content[g].pop(blk, None)
                self.c.handed[g].discard(blk)  # nothing was loaded: naming it later is not taking a fresh page

    def fresh(self, g: str, blk: int) -> None:
        """A Device page handed out again: a failed prefetch's mark on it ends."""
        self.failed_dst[g].discard(blk)

    def clear(self, rec: ct.Clear, line: int) -> None:
        self.stats["clears"] += 1
        pending = sorted(oid for oid, fl in self.inflight.items() if fl.kind == WRITE_BACK)
        self.exercised["TS-L2-8"] += bool(pending)
        if not rec.accepted:
            return
        self.stats["clears_accepted"] += 1
        if pending:
            self._find("TS-L2-8", line, f"ClearCache accepted while {len(pending)} write-backs are "
                       f"unacknowledged (first {pending[0]})", op_id=pending[0])
        for g in self.host:
            self.host[g].clear()
            self.failed_host[g].clear()

    def take_retracted(self) -> list[str]:
        out, self.retracted = self.retracted, []
        return out
