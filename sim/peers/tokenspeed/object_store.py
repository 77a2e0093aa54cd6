"""A simulated L3 object store: what the peer driver answers a scheduler's ``Storage*`` ops from.

The driver plays the runtime below the Host tier (cache concepts L189: "after D2H, the runtime
batch_put_froms each packed Host CacheBlock"; "A later Host miss that is known to exist in L3 allocates a
Host page, batch_get_intos it"). Objects are bytes-free records keyed by the scheduler's CacheKey (group,
content hash, page offset): a put stores its keys, a query answers whether each exists, a get reads each
existing key -- except that, with a miss rate, a seeded draw per key makes the read fail (the seed's "after
Admit allocates Host pages, batch_get_into can still miss"). A failed read is transient: the object stays,
so a later query finds it again. Knows nothing of schedulers.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence

__all__ = ["ObjectStore"]


class ObjectStore:
    def __init__(self, miss_rate: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= miss_rate <= 1.0:
            raise ValueError(f"miss rate {miss_rate} outside [0, 1]")
        self.miss_rate = miss_rate
        self.rng = random.Random(f"l3-misses:{seed}")
        self.objects: set[Hashable] = set()
        self.stats = {"puts": 0, "put_keys": 0, "queries": 0, "query_keys": 0, "query_hits": 0, "gets": 0,
                      "get_keys": 0, "get_missed": 0, "get_absent": 0}

    def put(self, keys: Sequence[Hashable]) -> list[bool]:
        self.stats["puts"] += 1
        self.stats["put_keys"] += len(keys)
        self.objects.update(keys)
        return [True] * len(keys)

    def query(self, keys: Sequence[Hashable]) -> list[bool]:
        self.stats["queries"] += 1
        self.stats["query_keys"] += len(keys)
        out = [k in self.objects for k in keys]
        self.stats["query_hits"] += sum(out)
        return out

    def get(self, keys: Sequence[Hashable]) -> list[bool]:
        """One seeded draw per key, whether or not it exists, so the draws do not depend on the store."""
        self.stats["gets"] += 1
        self.stats["get_keys"] += len(keys)
        out = []
        for k in keys:
            miss = self.rng.random() < self.miss_rate
            there = k in self.objects
            self.stats["get_absent"] += not there
            self.stats["get_missed"] += there and miss
            out.append(there and not miss)
        return out

    def answer(self, kind: str, keys: Sequence[Hashable]) -> list[bool]:
        """Per key, the outcome of a ``StoragePutOp`` / ``StorageQueryOp`` / ``StorageGetOp``."""
        if kind == "StoragePutOp":
            return self.put(keys)
        if kind == "StorageQueryOp":
            return self.query(keys)
        if kind == "StorageGetOp":
            return self.get(keys)
        raise ValueError(f"no answer for L3 op kind {kind!r}")
