"""The lockstep machine: the store machine with the physical pools (`sim.lockstep`) driven beside the model.

Small dimensions (one layer, two KV heads, contexts of two to four pages) under every profile. After every
unit the lockstep observer checks each active sequence's committed content bit-exact through its table
row and attention against the FP64 oracle (CONS-1..3); this machine adds the retained checkpoints: every
checkpoint page with a valid Device replica is read back through a table made of its pages and compared
bit-exact with the codec of its content keys (CONS-3). Pages that are Host-only are checked when an
activation restores them. This module may know both the model and the physical implementation.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant

from kvsim.gpu.content import expected_stored
from kvsim.gpu.planes import PagedKVLayerView
from kvsim.gpu.readback import read_view
from kvsim.kvmodel.store import PROFILES
from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.sim.fuzz.machines import StoreMachine, configs
from kvsim.sim.lockstep import Lockstep, committed_keys


def checkpoint_mismatch(lock: Lockstep, space) -> str | None:
    """Bit-exact comparison of a checkpoint space's Device-resident committed prefix; None when it matches."""
    pool = lock.pools[space.pool]
    ids, n = [], 0
    for b, page in enumerate(space.pages):
        cols = min(PAGE_SIZE, space.committed - b * PAGE_SIZE)
        if cols <= 0 or not page.device_valid(cols):
            break
        ids.append(page.device)
        n += cols
    if not n:
        return None
    keys = committed_keys(space)[:n]
    table = np.full(pool.logical_pages, -1, dtype=np.int32)
    table[:len(ids)] = ids
    for layer in range(pool.layers):
        planes = pool.planes[layer]
        view = PagedKVLayerView(planes["k_code"], planes["v_code"], planes.get("k_scale"), planes.get("v_scale"),
                                pool.backend.asarray(table), pool.head_dim, pool.kv_heads, pool.storage, pool.order)
        got = read_view(view, n)
        want = expected_stored(pool.profile, layer, keys, pool.kv_heads, pool.head_dim)
        for name, w in want.items():
            g = got[name].reshape(n, -1).view(np.uint8)
            bad = np.flatnonzero((g != w.reshape(n, -1).view(np.uint8)).any(axis=1))
            if bad.size:
                return f"layer {layer} {name}: position {int(bad[0])} differs"
    return None


class LockstepMachine(StoreMachine):
    name = "lockstep"
    lockstep = True
    config_strategy = configs(heads=2, profiles=st.sampled_from(PROFILES), contexts=st.sampled_from((128, 192, 256)),
                              host_pages=st.sampled_from((0, 2, 4)))

    @initialize(cfg=config_strategy)
    def setup(self, cfg) -> None:
        self.start(cfg)

    def observer_factory(self, cfg):
        def make(store):
            self.lock = Lockstep(store)
            return self.lock
        return make

    @invariant()
    def checkpoints_bit_exact(self) -> None:
        if self.driver is None or self.failed or not self.driver.recorded:
            return
        if self.driver.recorded[-1].op != "complete":
            return
        st_ = self.driver.st
        for ck in sorted(st_.checkpoints):
            for pool, space in st_.checkpoints[ck].spaces.items():
                st_.cov.check("CONS-3", exercised=bool(space.committed))
                bad = checkpoint_mismatch(self.lock, space)
                if bad:
                    self.fail("physical", f"checkpoint {ck} ({pool}): committed content is not bit-exact: {bad}")
