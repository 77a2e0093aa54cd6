"""``--kv-groups SPEC``: the cache groups a vLLM or SGLang run is built with (seed 002's cache groups).

A SPEC is a comma-separated list of groups, each ``KIND:BLOCK[:WINDOW]``:

* ``full:B`` -- a full-history group (seed 002 L18: "Retention is full_history or sliding_window"), blocks of
  B tokens;
* ``sliding:B:W`` -- a sliding-window history group of window W tokens (L81: "SWA and Mamba-at-window-2 slide
  out whole pages");
* ``mamba:B`` -- a snapshot-state group whose blocks each hold one state snapshot every B tokens (L19:
  "checkpoint_granularity -- the state family ... retention is always full_history").

At least one full group is required: it is the prefix-closed group the others settle within (L185: "Prefix-closed
groups match first; non-closed groups (SWA, Mamba) match only within the boundary the closed groups settled"),
and kvsim's per-request checks (PEER-5 ... PEER-8) read the first full group's table. The identity grain of the
run (seed 002's prefix_granularity, vLLM's scheduler block size) is the least common multiple of the block sizes;
the hash unit (vLLM's hash_block_size) is their greatest common divisor. This module knows the notation only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GroupSpec", "KvGroupsError", "parse_kv_groups", "hash_unit", "identity_grain", "primary_group",
           "describe"]

KINDS = ("full", "sliding", "mamba")


class KvGroupsError(ValueError):
    """A SPEC that cannot be built; ``str()`` is one line naming the item."""


@dataclass(frozen=True)
class GroupSpec:
    kind: str            # full | sliding | mamba
    block_size: int      # tokens per block-table slot (seed 002's block_granularity)
    window: int = 0      # sliding: the window in tokens

    def as_wire(self) -> dict:
        return {"kind": self.kind, "block_size": self.block_size, "window": self.window}

    def label(self) -> str:
        return f"{self.kind}:{self.block_size}" + (f":{self.window}" if self.kind == "sliding" else "")


def parse_kv_groups(spec: str) -> list[GroupSpec]:
    """The groups of ``spec`` in order; KvGroupsError on anything malformed."""
    out: list[GroupSpec] = []
    for n, item in enumerate(spec.split(","), start=1):
        parts = item.strip().split(":")
        kind = parts[0]
        if kind not in KINDS:
            raise KvGroupsError(f"group {n} ({item.strip()!r}): kind must be one of {', '.join(KINDS)}")
        want = 3 if kind == "sliding" else 2
        if len(parts) != want:
            shape = "sliding:BLOCK:WINDOW" if kind == "sliding" else f"{kind}:BLOCK"
            raise KvGroupsError(f"group {n} ({item.strip()!r}): expected {shape}")
        nums = []
        for p in parts[1:]:
            if not p.isdigit() or int(p) <= 0:
                raise KvGroupsError(f"group {n} ({item.strip()!r}): {p!r} is not a positive integer")
            nums.append(int(p))
        out.append(GroupSpec(kind, nums[0], nums[1] if kind == "sliding" else 0))
    if not any(g.kind == "full" for g in out):
        raise KvGroupsError("at least one full group is needed (the prefix-closed group the others settle within)")
    if len(out) > 8:
        raise KvGroupsError(f"{len(out)} groups: at most 8")
    return out


def hash_unit(groups: list[GroupSpec]) -> int:
    """Tokens per content key: the greatest common divisor of the block sizes (vLLM's hash_block_size)."""
    return math.gcd(*(g.block_size for g in groups))


def identity_grain(groups: list[GroupSpec]) -> int:
    """The least common multiple of the block sizes (vLLM's scheduler block size)."""
    return math.lcm(*(g.block_size for g in groups))


def primary_group(groups: list[GroupSpec]) -> int:
    """The first full group: its table is the one PEER-5 ... PEER-8 read."""
    return next(i for i, g in enumerate(groups) if g.kind == "full")


def describe(groups: list[GroupSpec]) -> str:
    return ",".join(g.label() for g in groups)
