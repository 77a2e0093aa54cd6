"""The store contract (seed 000) as an executable reference model.

`KVStore` holds the state; the transactions below check first (a typed `Refusal` for what a correct
store may refuse, a `ContractViolation` carrying rule ids for what the contract forbids; either leaves
the state exactly as it was) and then apply. This package knows nothing of traces, reports or GPUs.
"""

from __future__ import annotations

from kvsim.kvmodel.store import activation, mapping, observe, settle, transfers, units
from kvsim.kvmodel.store.capacity import (CapacityResolution, SequenceCapacityCurve, build_layout, capacity_curve, pool_pages,
                       resolve_automatic, resolve_capacity, resolve_explicit)
from kvsim.kvmodel.store.config import (PAGE_SIZE, PROFILES, BackendConfig, CapacityPolicy, GrowthConfig, ModelGeometry,
                     StoreConfig)
from kvsim.kvmodel.store.errors import ConfigError, ContractViolation, Finding, Refusal
from kvsim.kvmodel.store.planes import bytes_per_token_head, profile_planes
from kvsim.kvmodel.store.store import KVStore as _KVStore


class KVStore(_KVStore):
    """The model with its transactions as methods; each records what it touched for incremental checks.

    Touched entities accumulate until `spec.checking.Checker.incremental` consumes them (or
    `reset_touched` is called): a caller that checks after every operation sees exactly that operation's.
    """

    def _run(self, fn, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except ContractViolation as exc:
            for f in exc.findings:
                self.cov.violate(f.rule)
            raise

    def activate(self, seq, prompt, budget, source=None, keep_source=True, rows=None, pages=None):
        return self._run(activation.activate, seq, prompt, budget, source, keep_source, rows, pages)

    def map(self, seq, pool, tokens, pages=None):
        return self._run(mapping.ensure_mapped, seq, pool, tokens, pages)

    ensure_mapped_to_tokens = map

    def grow(self, seq, bounded_at=None):
        return self._run(mapping.grow, seq, bounded_at)

    def cow(self, seq, pool, block, page=None):
        return self._run(mapping.cow, seq, pool, block, page)

    def launch(self, unit, rows):
        try:
            return units.launch(self, unit, rows)
        except ContractViolation as exc:
            for f in exc.findings:
                self.cov.violate(f.rule)
            raise

    def complete(self, unit, commits):
        try:
            return units.complete(self, unit, commits)
        except ContractViolation as exc:
            for f in exc.findings:
                self.cov.violate(f.rule)
            raise

    def fail(self, unit):
        return self._run(units.fail, unit)

    def truncate(self, seq, pool, frontier):
        return self._run(settle.truncate, seq, pool, frontier)

    def finish(self, seq, retain=None, state_image=True):
        return self._run(settle.finish, seq, retain, state_image)

    def release(self, ckpt):
        return self._run(settle.release, ckpt)

    def offload(self, ckpt, pool, blocks):
        return self._run(transfers.offload, ckpt, pool, blocks)

    def drop_device(self, ckpt, pool, blocks):
        return self._run(transfers.drop_device, ckpt, pool, blocks)

    def drop_host(self, ckpt, pool, blocks):
        return self._run(transfers.drop_host, ckpt, pool, blocks)

    def xfer(self, xid, direction, ckpt, pool, blocks, phase):
        return self._run(transfers.xfer, xid, direction, ckpt, pool, blocks, phase)

    def observe_pool(self, pool, allocated=None, reserved=None, available=None):
        return self._run(observe.observe_pool, pool, allocated, reserved, available)

    def observe_row(self, seq, pool, table=None, frontier=None, content=None):
        return self._run(observe.observe_row, seq, pool, table, frontier, content)

    def observe_ckpt(self, ckpt, pool, frontier=None, content=None):
        return self._run(observe.observe_ckpt, ckpt, pool, frontier, content)


__all__ = ["KVStore", "StoreConfig", "BackendConfig", "CapacityPolicy", "GrowthConfig", "ModelGeometry",
           "ConfigError", "ContractViolation", "Finding", "Refusal", "PAGE_SIZE", "PROFILES",
           "SequenceCapacityCurve", "CapacityResolution", "resolve_capacity", "resolve_explicit",
           "resolve_automatic", "capacity_curve", "build_layout", "pool_pages", "bytes_per_token_head",
           "profile_planes"]
