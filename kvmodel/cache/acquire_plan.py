"""The token-free records that cross from GroupGeometry to the allocator: demands in, AcquirePlan out.

Cache concepts: "PlanAcquire(table, demand) turns a token demand into a token-free AcquirePlan — block
counts plus the bookkeeping values the manager stores verbatim; the manager executes the plan without
deriving anything." A demand is one of two shapes in different reference frames: DenseGrowth appends
tokens relative to the table's current fill; SparseSuffix names an absolute token extent and the first
slot to materialize, leaving the slots below as null holes. A snapshot-state group's forward is a third,
Checkpoints: "Logical width does not imply dense physical residency" -- only its aligned internal and final
continuation checkpoints (and its reserve) are materialized, the slots between stay null holes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DenseGrowth:
    num_tokens: int  # tokens appended after the table's current fill
    reserve_tokens: int = 0  # tokens beyond them that count toward blocks but stay available


@dataclass(frozen=True)
class SparseSuffix:
    extent_tokens: int  # absolute token extent of the request after this round
    first_slot: int  # the first block-table slot to materialize; slots below stay null holes
    reserve_tokens: int = 0


@dataclass(frozen=True)
class Checkpoints:
    before_tokens: int  # absolute tokens the state already summarizes (the forward's input checkpoint)
    extent_tokens: int  # absolute extent after this round (the final continuation checkpoint)
    prefix_granularity: int  # the identity grain that selects the aligned internal checkpoint
    reserve_tokens: int = 0
    promotion_tokens: int = 0  # a promotion boundary to materialize too (0: none)


@dataclass(frozen=True)
class AcquirePlan:
    num_blocks: int  # blocks to acquire from the pool
    first_slot: int  # slot index of the first acquired block; slots in [len(table), first_slot) are holes
    num_slots_after: int  # table length in slots once executed
    available_tokens_after: int  # tokens: stored verbatim by the table, never derived by the allocator
    slots: tuple[int, ...] = ()  # when given: the absolute slots the acquired blocks fill (all else holes)
