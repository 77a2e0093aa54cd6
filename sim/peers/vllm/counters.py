"""PEER-9 on vLLM's deep counters: what its driver reads from the block pool's own structures (``probe`` in
``sim/peers/vllm/driver.py``) against kvsim's view of the live block tables.

vLLM's pool keeps a doubly linked free queue (``FreeKVCacheBlockQueue``: free blocks, evictable cached blocks
among them, eviction from the head) with a separate ``num_free_blocks`` counter, and a ``ref_cnt`` on every
block counting the requests whose table holds it (``BlockPool.touch`` / ``free_blocks``). Three facts follow
from its own docs and code, and each is a place a bug hides before it reaches a table or an event
(seed 002 l.193: the scheduler "keeps no residency counters of its own" beyond what the event carries; l.38:
leak checks ask the index):

* the queue walked from its head holds exactly ``num_free_blocks`` blocks (a list and a counter that drift
  apart are a lost or doubly freed block);
* no block in the free queue has ``ref_cnt > 0`` (a referenced block there can be evicted and handed to
  another request while its owner still reads it);
* ``ref_cnt`` summed over the pool (the null block aside) equals the number of (live request, block) names in
  the tables the scheduler handed out, as kvsim tracked them from the step decisions.
"""

from __future__ import annotations

__all__ = ["check"]


def check(probe: dict, named: dict[int, int]) -> list[tuple[str, dict]]:
    """The PEER-9 findings (message, context) of one probe; ``named`` maps each block live requests name to
    how many of them name it."""
    out: list[tuple[str, dict]] = []
    walk, count = probe["free_walk"], probe["free_count"]
    if probe.get("free_list_broken"):
        out.append((f"vLLM's free queue is broken: walking it from the head ends after {walk} blocks without "
                    f"reaching its tail (num_free_blocks {count})", {"free_walk": walk, "free_count": count}))
    elif walk != count:
        out.append((f"vLLM's free queue walked from its head holds {walk} blocks, its num_free_blocks counter says "
                    f"{count}", {"free_walk": walk, "free_count": count}))
    if probe["free_referenced"]:
        ids = probe.get("free_referenced_ids") or []
        out.append((f"{probe['free_referenced']} blocks in vLLM's free queue have ref_cnt > 0 (first: "
                    f"{', '.join(map(str, ids))})", {"free_referenced": probe["free_referenced"], "blocks": ids}))
    want = sum(named.values())
    if probe["ref_sum"] != want:
        out.append((f"ref_cnt summed over vLLM's pool is {probe['ref_sum']}; the live requests' tables name blocks "
                    f"{want} times", {"ref_sum": probe["ref_sum"], "named": want}))
    return out
