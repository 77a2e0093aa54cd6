"""BlockTable: one request's slots in one group — CacheBlock ids by logical slot, 0 for a null hole.

Cache concepts: "row i of a request's table covers tokens [i * block_granularity, (i + 1) *
block_granularity)"; entry values are CacheBlock ids; retention punches leading slots to null holes, so
"the table never shrinks". The table is token-free: available_tokens is stored verbatim from an
AcquirePlan, never derived here. It knows nothing of who else holds its blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.kvmodel.cache.acquire_plan import AcquirePlan

NULL_BLOCK = 0


class BlockTable:
    __slots__ = ("ids", "available_tokens")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.available_tokens = 0  # tokens, stored verbatim from the last plan

    def __len__(self) -> int:
        return len(self.ids)

    def nonnull(self) -> list[int]:
        return [b for b in self.ids if b != NULL_BLOCK]

    def execute(self, plan: AcquirePlan, new_ids: Sequence[int]) -> None:
        """Append holes up to plan.first_slot, then the acquired blocks; store the bookkeeping verbatim."""
        if len(new_ids) != plan.num_blocks:
            raise ValueError(f"plan wants {plan.num_blocks} blocks, got {len(new_ids)}")
        if plan.slots:  # sparse checkpoints: absolute slot positions, holes between them
            self.ids.extend([NULL_BLOCK] * (plan.num_slots_after - len(self.ids)))
            for s, b in zip(plan.slots, new_ids, strict=True):
                if self.ids[s] != NULL_BLOCK:
                    raise ValueError(f"slot {s} already holds block {self.ids[s]}")
                self.ids[s] = b
            self.available_tokens = plan.available_tokens_after
            return
        self.ids.extend([NULL_BLOCK] * (plan.first_slot - len(self.ids)))
        self.ids.extend(new_ids)
        self.ids.extend([NULL_BLOCK] * (plan.num_slots_after - len(self.ids)))
        self.available_tokens = plan.available_tokens_after

    def punch(self, num_slots: int) -> list[int]:
        """Turn the first num_slots slots into null holes; return the blocks they held."""
        out = [b for b in self.ids[:num_slots] if b != NULL_BLOCK]
        for i in range(min(num_slots, len(self.ids))):
            self.ids[i] = NULL_BLOCK
        return out
