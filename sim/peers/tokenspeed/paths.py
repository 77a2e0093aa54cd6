"""The TokenSpeed engine paths a run can exercise, counted from the plans, answers and KV events the adapter
records (``count``): each is a path where a cache bug hides, and a PASS says which never ran."""

from __future__ import annotations

from kvsim.sim.trace import cachetrace as ct

__all__ = ["PATHS", "REACH", "count"]

PATHS: dict[str, str] = {
    "prefix_hit": "first extends that start on a prefix hit",
    "whole_prompt_hit": "whole-prompt hits: every whole page short of the prompt's last token was cached",
    "eviction": "cached blocks removed (BlockRemoved events)",
    "preemption": "preemptions, TokenSpeed's retractions (SnapshotOp: a running request's image set aside)",
    "write_back": "write-backs to the Host tier (WriteBackOp)",
    "load_back": "loads from the Host tier (LoadBackOp, RestoreOp)",
    "clear_cache": "ClearCache accepted",
}

# what reaches each path the plain run does not take (the options of `kvsim peer tokenspeed`)
REACH: dict[str, str] = {
    "preemption": "--snapshot-pages N --max-retracted K --force-retraction N",
    "write_back": "--host-pages N",
    "load_back": "--host-pages N with a bounded --pages (or --l3)",
    "clear_cache": "--clear-every N",
}


def count(n: dict[str, int], rec: ct.Plan, prompt: dict[str, int], seen: set[str], p: int) -> None:
    """Add one plan's paths to ``n``: first extends (requests not in ``seen``) with their hits, cache ops."""
    b = rec.batch
    for k in range(b.extends):
        rid = b.requests[k]
        if rid in seen:
            continue
        seen.add(rid)
        hit = b.prefix_lengths[k]
        if hit:
            n["prefix_hit"] += 1
            if hit >= (prompt[rid] - 1) // p * p:  # a published tail may reach past the last whole page
                n["whole_prompt_hit"] += 1
    for op in rec.cache:
        if op.kind == "SnapshotOp":
            n["preemption"] += 1
        elif op.kind == "WriteBackOp":
            n["write_back"] += 1
        elif op.kind in ("LoadBackOp", "RestoreOp"):
            n["load_back"] += 1


def count_events(n: dict[str, int], events: list[ct.KvEvent]) -> None:
    n["eviction"] += sum(len(e.block_hashes) for e in events if isinstance(e, ct.BlockRemoved))
