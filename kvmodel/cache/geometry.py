"""GroupGeometry: the one conversion point between a group's tokens and its blocks.

Cache concepts: "The conversion between the two lives in the coordinator's GroupGeometry"; PlanAcquire
returns a token-free AcquirePlan, and "ExpiredBlocksAt(spec, num_computed_tokens) is the retention policy
(full attention never expires; SWA and Mamba-at-window-2 slide out whole pages)". DESIGN §5: expired =
max(0, computed − W + 1) // block_granularity. Everything here is a pure function of the spec and its
arguments; it mutates nothing and knows no pool.
"""

from __future__ import annotations

from kvsim.kvmodel.cache.acquire_plan import AcquirePlan, Checkpoints, DenseGrowth, SparseSuffix
from kvsim.kvmodel.cache.group_spec import CacheGroupSpec


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GroupGeometry:
    """Token arithmetic of one group (its block_granularity and retention window)."""

    __slots__ = ("spec", "block_granularity")

    def __init__(self, spec: CacheGroupSpec) -> None:
        self.spec = spec
        self.block_granularity = spec.block_granularity

    def slots_for_tokens(self, num_tokens: int) -> int:
        """Block-table slots covering the first num_tokens tokens (ceil)."""
        return _ceil_div(max(num_tokens, 0), self.block_granularity)

    def whole_slots(self, num_tokens: int) -> int:
        """Slots wholly inside the first num_tokens tokens (floor)."""
        return max(num_tokens, 0) // self.block_granularity

    def tokens_of_slots(self, num_slots: int) -> int:
        return num_slots * self.block_granularity

    def blocks_needed_for(self, available_tokens: int, num_tokens: int) -> int:
        """Blocks to append so num_tokens more tokens fit after a tail with available_tokens free."""
        return self.slots_for_tokens(num_tokens - available_tokens) if num_tokens > available_tokens else 0

    def plan_acquire(self, num_slots: int, available_tokens: int, demand: DenseGrowth | SparseSuffix) -> AcquirePlan:
        """The AcquirePlan for a table of num_slots slots with available_tokens free at its tail."""
        bg = self.block_granularity
        if isinstance(demand, DenseGrowth):
            if demand.num_tokens < 0 or demand.reserve_tokens < 0:
                raise ValueError("a dense demand is non-negative")
            nb = self.blocks_needed_for(available_tokens, demand.num_tokens + demand.reserve_tokens)
            return AcquirePlan(nb, num_slots, num_slots + nb, available_tokens + nb * bg - demand.num_tokens)
        if isinstance(demand, SparseSuffix):
            end_tokens = demand.extent_tokens + demand.reserve_tokens
            if demand.first_slot < 0 or end_tokens <= 0:
                raise ValueError("a sparse demand names a first slot >= 0 and a positive extent")
            slots_after = max(num_slots, self.slots_for_tokens(end_tokens))
            first = max(demand.first_slot, num_slots)
            nb = max(slots_after - first, 0)
            return AcquirePlan(nb, first, slots_after, slots_after * bg - demand.extent_tokens)
        raise TypeError(f"unknown demand {demand!r}")

    def checkpoint_slots(self, demand: Checkpoints) -> list[int]:
        """The slots a state group's forward over [before, extent) materializes (cache concepts L74, L82): the
        last internal reusable checkpoint floor(extent / P) * P when strictly between before and extent, at slot
        (checkpoint - 1) / bg; the final continuation checkpoint, slot (extent - 1) / bg; and the slot the
        reserve ends in. The input checkpoint (slot (before - 1) / bg) is already held."""
        bg, p = self.block_granularity, demand.prefix_granularity
        before, after = demand.before_tokens, demand.extent_tokens
        want = {(after - 1) // bg} if after > 0 else set()
        aligned = after // p * p
        if before < aligned < after:
            want.add((aligned - 1) // bg)
        if demand.reserve_tokens > 0:
            want.add((after + demand.reserve_tokens - 1) // bg)
        if before < demand.promotion_tokens < after:  # "cuts chunks ... at the promotion boundary"
            want.add((demand.promotion_tokens - 1) // bg)
        return sorted(want)

    def plan_checkpoints(self, num_slots: int, holes: frozenset[int], demand: Checkpoints) -> AcquirePlan:
        """The sparse AcquirePlan of a state group: acquire only the checkpoint slots not yet materialized
        (beyond the table or null holes in it); the table keeps absolute slot positions."""
        if demand.extent_tokens < demand.before_tokens or demand.before_tokens < 0 or demand.reserve_tokens < 0:
            raise ValueError("a checkpoint demand covers a non-negative, non-shrinking extent")
        bg = self.block_granularity
        slots = tuple(s for s in self.checkpoint_slots(demand) if s >= num_slots or s in holes)
        after = max(num_slots, self.slots_for_tokens(demand.extent_tokens + demand.reserve_tokens))
        return AcquirePlan(len(slots), slots[0] if slots else num_slots, after,
                           after * bg - demand.extent_tokens, slots)

    def expired_blocks_at(self, num_computed_tokens: int) -> int:
        """Leading slots whose tokens no later query reads: whole pages only; full history never expires."""
        w = self.spec.window_tokens
        if w is None:
            return 0
        return max(0, num_computed_tokens - w + 1) // self.block_granularity

    def slots_per_page(self, prefix_granularity: int) -> int:
        """Slots one prefix page spans: P / bg (bg divides P)."""
        return prefix_granularity // self.block_granularity

    def replay_first_slot(self, hit_tokens: int) -> int:
        """A replayable group's first materialized slot: the replay window's first token,
        hit − sliding_window_tokens (clamped at 0), as a slot."""
        window = self.spec.sliding_window_tokens or 0  # replayable groups are sliding: the window is set
        return max(hit_tokens - window, 0) // self.block_granularity

    def lookback_slots(self) -> int:
        """Cached slots a resumable boundary needs behind it: ceil((W − 1) / bg); 0 for full history."""
        w = self.spec.window_tokens
        return 0 if w is None else _ceil_div(w - 1, self.block_granularity)
