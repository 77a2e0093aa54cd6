"""The store contract (seed 000) as an executable reference model.

`KVStore` holds the state and offers the transactions as methods; each checks first (a typed `Refusal`
for what a correct store may refuse, a `ContractViolation` carrying rule ids for what the contract
forbids; either leaves the state exactly as it was) and then applies. This package knows nothing of traces, reports or
GPUs.
"""

from __future__ import annotations

from kvsim.kvmodel.store.capacity import (
                       CapacityResolution,
                       SequenceCapacityCurve,
                       build_layout,
                       capacity_curve,
                       pool_pages,
                       resolve_automatic,
                       resolve_capacity,
                       resolve_explicit,
)
from kvsim.kvmodel.store.config import (
                       PAGE_SIZE,
                       PROFILES,
                       BackendConfig,
                       CapacityPolicy,
                       GrowthConfig,
                       ModelGeometry,
                       StoreConfig,
)
from kvsim.kvmodel.store.errors import ConfigError, ContractViolation, Finding, Refusal
from kvsim.kvmodel.store.planes import bytes_per_token_head, profile_planes
from kvsim.kvmodel.store.store import KVStore

__all__ = ["KVStore", "StoreConfig", "BackendConfig", "CapacityPolicy", "GrowthConfig", "ModelGeometry",
           "ConfigError", "ContractViolation", "Finding", "Refusal", "PAGE_SIZE", "PROFILES",
           "SequenceCapacityCurve", "CapacityResolution", "resolve_capacity", "resolve_explicit",
           "resolve_automatic", "capacity_curve", "build_layout", "pool_pages", "bytes_per_token_head",
           "profile_planes"]
