"""The Host tier and L3 of the reference TokenSpeed scheduler (``ts_reference.TsRef`` mixes it in), written from seed
002 L187-L189: what falls due is written back keyed and pinned in the next plan and acknowledged in its answer
(keys already on Host skipped: "a store skips keys already in flight"; a full Host tier reuses its least recently
written acknowledged page); with L3, waiting requests' page keys are probed (``StorageQueryOp``, answered in the same
answer) and keys an answered query found are prefetched (``StorageGetOp``) into fresh Host pages in a later plan --
"A later Host miss that is known to exist in L3 allocates a Host page, batch_get_intos it" -- and a key whose get
failed is never fetched again ("a later batch_exists hit must not re-register them and retry the same prefetch").
Imports nothing of kvsim.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any


class HostTierRef:
    """The reference's Host tier and L3 (state and helpers live on the scheduler it is mixed into)."""

    rng: random.Random
    p: int
    bg: int
    l3: bool
    fault: str | None
    due: list[tuple[int, int, bytes, int]]
    stored: dict[int, set[tuple[bytes, int]]]
    content: dict[int, tuple[bytes, int]]
    host_free: deque[int]
    host_used: dict[int, tuple[int, tuple[bytes, int]]]
    lost: tuple[int, bytes] | None
    op_id: int
    l3_id: int
    remote: set[tuple[bytes, int]]
    found: set[tuple[bytes, int]]
    once_found: set[tuple[bytes, int]]
    missing: set[tuple[bytes, int]]
    unread: set[tuple[bytes, int]]
    fetched: set[tuple[bytes, int]]
    waiting: Any
    running: dict[str, Any]

    def _fire(self, name: str, line: int | None = None) -> bool:  # pragma: no cover - the scheduler's
        raise NotImplementedError

    def _write_backs(self, pins: set, cache: list, done: list) -> None:
        """Keyed, pinned write-backs of what fell due, acknowledged in this plan's answer; with no free Host page
        the least recently written acknowledged one is reused (the Host tier is a cache too)."""
        due, self.due = self.due, []
        for gi, blk, d, off in due:
            if (d, off) in self.stored[gi] or (self.lost and gi == 1 and d == self.lost[1]):
                continue
            if gi == 0 and self.content.get(blk) != (d, off):
                continue
            if not self.host_free and not self.host_used:
                continue
            hp = self._host_page()
            self.host_used[hp] = (gi, (d, off))
            self.op_id += 1
            cache.append({"kind": "WriteBackOp", "op_ids": [self.op_id], "pages": [[blk, hp]], "groups": [gi],
                          "keys": [d.hex()], "offsets": [off], "pinned": True})
            pins.add(blk)
            done.append(self.op_id)
            self.stored[gi].add((d, off))

    def _l3(self, cache: list, storage: list) -> None:
        """Prefetch keys an answered query found (a failed one never again); probe the waiting requests' keys."""
        if not self.l3:
            return
        # a prefetch now and then (a found key may wait, be probed again and be found lost)
        get = sorted(k for k in self.found if k not in self.fetched)[:1] if self.rng.random() < 0.5 else []
        lost = sorted(self.missing & self.once_found)  # found by one answered query, missing by a later one
        bad = {"get-unqueried": self._unqueried(), "get-missing": lost[:1],
               "get-retry": sorted(self.unread)[:1]}.get(self.fault or "", [])
        room = len(self.host_free) + len(self.host_used)
        if bad and len(get) + len(bad) <= room and self._fire(self.fault or ""):
            get = bad + [k for k in get if k not in bad]
        if get and len(get) <= room:
            self.l3_id += 1
            pages = [self._host_page() for _ in get]
            cache.append({"kind": "StorageGetOp", "op_ids": [self.l3_id], "keys": [d.hex() for d, _ in get],
                          "groups": [0] * len(get), "offsets": [o for _, o in get], "host_blocks": pages})
            ok = [k in self.remote and self.rng.random() < 0.75 for k in get]
            for key, good in zip(get, ok):
                self.found.discard(key)
                (self.fetched if good else self.unread).add(key)
            storage.append({"op": self.l3_id, "success": ok})
        keys = []
        for r in self.waiting:
            for i in range((len(r.prompt) - 1) // self.p):
                for j in range(self.p // self.bg):
                    key = (r.digest(i, self.p), j)
                    if key not in self.fetched and key not in self.unread and key not in keys:
                        keys.append(key)
        known = self.found | self.missing
        keys = ([k for k in keys if k not in known] + [k for k in keys if k in known and self.rng.random() < 0.5])[:4]
        if keys:
            for key in keys:  # an object another instance held may be gone by now
                if key in self.remote and self.rng.random() < 0.3:
                    self.remote.discard(key)
            self.l3_id += 1
            cache.append({"kind": "StorageQueryOp", "op_ids": [self.l3_id], "keys": [d.hex() for d, _ in keys],
                          "groups": [0] * len(keys), "offsets": [o for _, o in keys]})
            ok = [k in self.remote for k in keys]
            for key, good in zip(keys, ok):
                if good:
                    self.once_found.add(key)
                (self.found if good else self.missing).add(key)
                (self.missing if good else self.found).discard(key)
            storage.append({"op": self.l3_id, "success": ok})

    def _host_page(self) -> int:
        """A free Host page, else the least recently written acknowledged one (its key leaves the Host tier)."""
        if self.host_free:
            return self.host_free.popleft()
        hp, (g_old, key_old) = next(iter(self.host_used.items()))
        del self.host_used[hp]
        self.stored[g_old].discard(key_old)
        return hp

    def _unqueried(self) -> list:
        seen = self.found | self.missing | self.unread | self.fetched
        for r in (*self.waiting, *self.running.values()):
            for i in range(len(r.prompt) // self.p):
                key = (r.digest(i, self.p), 0)
                if key not in seen:
                    return [key]
        return []
