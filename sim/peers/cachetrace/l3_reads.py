"""What an L3 prefetch may read, judged from a scheduler's plans (rules TS-L2-13, TS-L2-14).

Cache concepts L189: "A later Host miss that is known to exist in L3 allocates a Host page, batch_get_intos it, then
runs the ordinary H2D load"; "Cross-instance reuse probes batch_exists before submit_requests"; "Immediately before
next_execution_plan, the event loop re-probes prefix hashes of waiting requests ... so a queued hit cannot survive
deletion, eviction, or a lost object"; "Only pages whose replica-converged batch_get_into missed stay unread: a
later batch_exists hit must not re-register them and retry the same prefetch".

On the released wheel the probe is a plan's ``StorageQueryOp`` (answered per key: the object exists) and the
prefetch a ``StorageGetOp`` (answered per key: read into its Host page). So:

* TS-L2-13: every key a get names was found by a query answered before the get was issued, and no later
  answer since found it missing (a query, or a get failing to read it) -- a get of a key never known to exist, or
  known lost, reads what nothing promised. A put of the key is no such answer: the seed's probe, not this
  instance's own backup, is what makes a hit known ("re-probes prefix hashes ... so a queued hit cannot survive
  deletion, eviction, or a lost object"; another instance's flush or the store's eviction may have removed it).
* TS-L2-14: a key whose get failed (left unread) is not fetched again by a later get, unless a put of that key
  succeeded in between. A put that merely skipped an existing unreadable object keeps it unread (L189: "a
  create-only skip of an unreadable object keeps the blacklist"); cachetrace/1 does not say whether a put
  created its object, so any successful put re-admits the key -- the lenient reading.

Groups, content hashes and offsets make the key, as in the plans. This module knows cachetrace/1 records, never a
scheduler's API.
"""

from __future__ import annotations

from kvsim.sim.peers.cachetrace.view import Findings
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import stated

__all__ = ["RULES", "L3Reads"]

RULES: dict[str, tuple[str, str]] = stated(("TS-L2-13", "TS-L2-14"), "tokenspeed")  # from the catalogue

Key = tuple[int, str, int]


class L3Reads:
    def __init__(self, contract: Findings) -> None:
        self.c = contract
        self.found: set[Key] = set()      # keys the latest answered query found
        self.unread: dict[Key, int] = {}  # key -> the get that failed to read it
        self.ever_failed: set[Key] = set()  # keys some get failed to read (TS-L2-14's premise when fetched again)
        self.ops: dict[int, tuple[str, list[Key]]] = {}
        self.exercised = {r: 0 for r in RULES}
        self.stats = {"gets_judged": 0, "keys_judged": 0}

    @staticmethod
    def _keys(op: ct.CacheOp) -> list[Key]:
        n = len(op.keys)
        groups = op.groups or [0] * n
        offsets = op.offsets or [0] * n
        return [(groups[i], op.keys[i], offsets[i]) for i in range(n)]

    def plan(self, rec: ct.Plan, line: int) -> None:
        for op in rec.cache:
            if op.kind not in ("StorageQueryOp", "StorageGetOp", "StoragePutOp") or not op.op_ids:
                continue
            keys = self._keys(op)
            self.ops[op.op_ids[0]] = (op.kind, keys)
            if op.kind != "StorageGetOp":
                continue
            self.stats["gets_judged"] += 1
            self.exercised["TS-L2-13"] += 1
            unknown = [k for k in keys if k not in self.found]
            if unknown:
                g, h, off = unknown[0]
                self.c.find("TS-L2-13", line, f"L3 get {op.op_ids[0]} reads {len(unknown)} of its {len(keys)} keys "
                            f"that no answered query found to exist (first: group {g}, {h[:12]}.. offset {off})",
                            op_id=op.op_ids[0])
            again = [k for k in keys if k in self.unread]
            if self.unread or any(k in self.ever_failed for k in keys):
                self.exercised["TS-L2-14"] += 1
            if again:
                g, h, off = again[0]
                self.c.find("TS-L2-14", line, f"L3 get {op.op_ids[0]} fetches again {len(again)} keys whose get "
                            f"{self.unread[again[0]]} failed, with no put of them since (first: group {g}, "
                            f"{h[:12]}.. offset {off})", op_id=op.op_ids[0])
            self.stats["keys_judged"] += len(keys)

    def done(self, sd: ct.StorageDone) -> None:
        """An L3 op's per-key outcome."""
        kind, keys = self.ops.pop(sd.op, ("", []))
        for k, ok in zip(keys, sd.success, strict=False):
            if kind == "StorageQueryOp":
                if ok:
                    self.found.add(k)
                else:
                    self.found.discard(k)
            elif kind == "StorageGetOp":
                if ok:
                    self.unread.pop(k, None)
                else:
                    self.unread[k] = sd.op
                    self.ever_failed.add(k)
                    self.found.discard(k)
            elif kind == "StoragePutOp" and ok:  # re-admits an unread key (TS-L2-14); known only once queried
                self.unread.pop(k, None)

    def cleared(self) -> None:
        """An accepted ClearCache: what the store holds is no longer known."""
        self.found.clear()
