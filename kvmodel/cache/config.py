"""CacheConfig: the one configuration gate (prefix_granularity, the group specs, packing, parents).

Cache concepts: "SchedulerConfig::Validate() is the single configuration gate"; "CacheGroupSpec.
block_granularity is required and explicit: a positive divisor of prefix_granularity". The packing vector
(cache_blocks_per_lcm_block per group) is the layout's answer, supplied beside the specs, never on them.
num_parents counts usable LCM parents (the null block is outside them).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.kvmodel.cache.group_spec import CacheConfigError, CacheGroupSpec


@dataclass(frozen=True)
class CacheConfig:
    prefix_granularity: int  # tokens: the identity grain P
    groups: tuple[CacheGroupSpec, ...]
    packing: tuple[int, ...]  # blocks: cache_blocks_per_lcm_block per group, by group index
    num_parents: int  # blocks: usable LCM parents (ids 1..num_parents)
    num_host_pages: int = 0  # Host (L2) pages, the null page 0 included; below 2: no Host tier

    def __post_init__(self) -> None:
        p = self.prefix_granularity
        if not isinstance(p, int) or p <= 0:
            raise CacheConfigError(f"prefix_granularity must be a positive integer, not {p!r}")
        if not self.groups:
            raise CacheConfigError("at least one cache group is required")
        if len(self.packing) != len(self.groups):
            raise CacheConfigError(f"packing has {len(self.packing)} entries for {len(self.groups)} groups")
        ids = [g.group_id for g in self.groups]
        if len(set(ids)) != len(ids):
            raise CacheConfigError(f"group ids repeat: {ids}")
        for g, k in zip(self.groups, self.packing):
            if p % g.block_granularity:
                raise CacheConfigError(f"group {g.group_id!r}: block_granularity {g.block_granularity} is not a "
                                       f"positive divisor of prefix_granularity {p}")
            if not isinstance(k, int) or k <= 0:
                raise CacheConfigError(f"group {g.group_id!r}: cache_blocks_per_lcm_block must be positive")
        if not isinstance(self.num_parents, int) or self.num_parents < 0:
            raise CacheConfigError("num_parents must be a non-negative integer")
        if not isinstance(self.num_host_pages, int) or self.num_host_pages < 0:
            raise CacheConfigError("num_host_pages must be a non-negative integer")
