"""Faults of the KV-event stream (rule EV-7): a drained batch's block hash perturbed."""

from __future__ import annotations

from kvsim.sim.peers.tokenspeed.faults.base import Fault
from kvsim.sim.trace import cachetrace as ct

__all__ = ["EventHash"]


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
