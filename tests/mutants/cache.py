"""Seeded bugs of the cache-concepts model (kvmodel/cache) and its Host tier, for `kvsim selfcheck`.

Same record format as tests/mutants/catalogue.py (which concatenates this list): name, the bug class, the
file (relative to the package root), the exact old text (once in the file), the new text, and the machine
expected to kill it (`cache` or `cache-host`, sim.fuzz.cache_machine). Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="host-evicts-newest-first", machine="cache-host",
         bug="Host-tier eviction takes the most recently used entries first (a reversed LRU sort), so the "
             "hot prefixes leave Host and the cold ones stay",
         file="kvmodel/cache/host_tier.py",
         old="for k, e in idx.host_entries()), key=lambda x: x[:3])",
         new="for k, e in idx.host_entries()), key=lambda x: x[:3], reverse=True)"),
    dict(name="minimise-restores-oldest-first", machine="cache",
         bug="the admission planner's minimising pass restores the oldest victim first instead of walking the "
             "selection in reverse, so a younger entry is evicted while an older one stays",
         file="kvmodel/cache/admission.py",
         old="        for c in reversed(chosen):  # restore newest first",
         new="        for c in chosen:  # restore newest first"),
    dict(name="finish-queues-oldest-checkpoint", machine="cache-host",
         bug="a finishing request queues its oldest state checkpoint for Host instead of its newest",
         file="kvmodel/cache/coordinator.py",
         old="for key in keys[-1:] if geo.spec.family == STATE else keys:",
         new="for key in keys[:1] if geo.spec.family == STATE else keys:"),
    dict(name="eviction-tier-before-lru", machine="cache",
         bug="eviction candidates ordered by tier before the LRU access epoch: a recently used closed-prefix "
             "page goes before an old window entry",
         file="kvmodel/cache/admission.py",
         old="return (self.epoch, self.tier, self.rank, self.group, self.parent, self.child)",
         new="return (self.tier, self.epoch, self.rank, self.group, self.parent, self.child)"),
    dict(name="hit-does-not-refresh-lru", machine="cache",
         bug="a prefix hit does not refresh its entry's access epoch, so the LRU evicts a page just reused",
         file="kvmodel/cache/prefix_index.py",
         old="            e = self._by_key[k]\n            e.last_access_epoch = max(e.last_access_epoch, epoch)\n",
         new="            e = self._by_key[k]\n"),
    dict(name="emptied-parent-keeps-a-hole", machine="cache",
         bug="free-count slip: a parent whose last child is released returns to the FIFO but leaves one phantom "
             "hole in its group's free-slot count",
         file="kvmodel/cache/block_pool.py",
         old="            self._free[group] -= len(occ)",
         new="            self._free[group] -= len(occ) - 1"),
    dict(name="ack-keeps-store-pin", machine="cache-host",
         bug="pin count leak: a write-back's ACK registers the Host copy but never drops the store ticket, so "
             "the Device source stays pinned (unevictable) forever",
         file="kvmodel/cache/host_tier.py",
         old="            self.refs.drop(t.group, t.device_block)",
         new="            pass"),
    dict(name="clear-checks-queue-not-flight", machine="cache-host",
         bug="ClearCache with stores in flight: the clearable probe looks at the store queue instead of the "
             "stores in flight, so a clear is accepted while a write-back is unacknowledged",
         file="kvmodel/cache/host_tier.py",
         old="        return not self.in_flight",
         new="        return not self.pending"),
    dict(name="store-repeats-key-in-flight", machine="cache-host",
         bug="a store does not skip keys already in flight, so one key is written back twice at once",
         file="kvmodel/cache/host_tier.py",
         old="            if key in flying or idx.host_contains(key) or entry is None:",
         new="            if idx.host_contains(key) or entry is None:"),
    dict(name="window-lookback-floored", machine="cache",
         bug="a sliding window's resumable boundary needs floor((W - 1) / bg) cached slots instead of the ceiling, "
             "so a prefix hit resumes with part of the window missing",
         file="kvmodel/cache/geometry.py",
         old="return 0 if w is None else _ceil_div(w - 1, self.block_granularity)",
         new="return 0 if w is None else (w - 1) // self.block_granularity"),
]
