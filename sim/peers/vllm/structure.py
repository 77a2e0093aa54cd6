"""PEER-14 and PEER-15 on vLLM: its pool's own structures as its driver's ledger reads them after every step
(``sim/peers/vllm/ledger.py``), judged against each other and against kvsim's view of the live block tables.

What vLLM's own asserts and raises rely on (vllm/v1/core/kv_cache_utils.py ``FreeKVCacheBlockQueue``,
vllm/v1/core/block_pool.py ``BlockPool``): the free queue is a doubly linked list between two sentinels whose
real blocks always have both neighbours, each pointing back ("the fake head and tail are NEVER got popped, so we
could safely assume each real blocks in the queue has prev and next blocks"); a block is in it exactly when its
``ref_cnt`` is 0 (``touch``: "ref_cnt=0 means this block is in the free list"; ``get_new_blocks`` asserts
``block.ref_cnt == 0`` of every block the queue hands out); ``ref_cnt`` counts the requests holding the block
(``touch`` adds one per hit, ``free_blocks`` takes one per release), so it equals the number of live tables
naming it; a block with a hash is in the cached-block map under it. A broken one of these is reported at the
step it broke -- before vLLM trips over it steps later (PEER-11) or a table or event shows it -- naming the
block and the vLLM call that last changed it. Eviction happens only as the queue's head is handed out
(``get_new_blocks`` → ``_maybe_evict_cached_block``): a block whose hash is removed without being handed out
(outside ``reset_prefix_cache``) is evicted beyond what any allocation needed (PEER-15).
"""

from __future__ import annotations

__all__ = ["check"]

Found = tuple[str, str, dict, str]  # (rule, message, context, frame aspect: "block" or "queue")


def check(msg: dict, holders: dict[int, int], block_size: int) -> list[Found]:
    """The PEER-14 / PEER-15 findings of one step (or crash) message; ``holders`` maps each block the live
    requests' tables name to how many name it, after the step. A crash message comes from inside a step whose
    tables the judge never saw, and a hybrid model's other groups are named by tables kept apart: there the
    blocks' reference counts are not compared with the tables, only the structure itself is judged."""
    out: list[Found] = []
    facts = msg.get("ledger") or {}
    # a crash message comes from inside a step whose tables the judge never saw; a hybrid model's blocks of its
    # other KV cache groups (``groups``) are named by tables the judge keeps apart: neither compares ref_cnt
    whole = "crash" not in msg and "groups" not in msg
    for row in facts.get("blocks", ()):
        b, ref, queued, links = row[:4]
        want = holders.get(b, 0)
        if not links:
            out.append(_links(row))
        if ref < 0:
            out.append(("PEER-14", f"block {b} has ref_cnt {ref}", {"block": b, "ref_cnt": ref, "check": "negative"},
                        "block"))
        elif queued and ref > 0:
            out.append(("PEER-14", f"block {b} is in vLLM's free queue with ref_cnt {ref}: the queue can hand it out "
                        f"while {want} live table(s) name it", {"block": b, "ref_cnt": ref, "named": want,
                                                                "check": "queued_referenced"}, "block"))
        elif not queued and ref == 0:
            out.append(("PEER-14", f"block {b} has ref_cnt 0 but is not in vLLM's free queue: lost to the pool",
                        {"block": b, "check": "lost"}, "block"))
        if whole and ref >= 0 and ref != want:
            out.append(("PEER-14", f"block {b} has ref_cnt {ref}; the live requests' tables name it {want} times",
                        {"block": b, "ref_cnt": ref, "named": want, "check": "ref_cnt"}, "block"))
    if facts and not facts.get("ends_ok", True):
        out.append(("PEER-14", "vLLM's free-queue sentinels are broken: the head's first block or the tail's last "
                    "does not point back at them", {"check": "ends"}, "queue"))
    for b, fid in (facts.get("evictions") or {}).get("stray", ()):
        out.append(("PEER-15", f"block {b}'s cached hash was removed (an eviction) though vLLM did not hand the block "
                    "out: its free queue evicts only the blocks an allocation pops from its head",
                    {"block": b, "check": "stray_eviction", "frame_id": fid}, "block"))
    walk = msg.get("walk")
    if walk:
        out += _walk(walk, holders if whole else None)
    return out


def _links(row: list) -> Found:
    """A block whose free-queue neighbours do not point back at it, naming the neighbour that does not (its own
    last queue operation is where the link went stale)."""
    b = row[0]
    ctx: dict = {"block": b, "check": "links"}
    if len(row) < 11:
        return ("PEER-14", f"block {b}'s free-queue links are broken: a neighbour does not point back at it", ctx,
                "queue")
    prev, prev_ok, nxt, nxt_ok = row[7:11]
    side = [(n, what) for n, ok, what in ((prev, prev_ok, "previous"), (nxt, nxt_ok, "next")) if not ok]
    n, what = side[0] if side else (prev, "previous")
    shown = {-1: "a sentinel", -2: "nothing"}.get(n, f"block {n}")
    if n >= 0:
        ctx["neighbour"] = n
    return ("PEER-14", f"block {b}'s free-queue links are broken: its {what} link names {shown}, which does not "
            "point back at it", ctx, "queue")


def _walk(walk: dict, holders: dict[int, int] | None) -> list[Found]:
    """The whole queue and map, read every probe: what the per-step rows cannot see (blocks no call touched)."""
    out: list[Found] = []
    if "error" in walk:
        return [("PEER-14", f"vLLM's free queue cannot be walked: {walk['error']}", {"check": "walk"}, "queue")]
    for b in walk.get("asym", ()):
        out.append(("PEER-14", f"block {b} follows a block in vLLM's free queue that it does not point back at",
                    {"block": b, "check": "links"}, "queue"))
    for b in walk.get("twice", ()):
        out.append(("PEER-14", f"block {b} is reached twice walking vLLM's free queue from its head: a cycle",
                    {"block": b, "check": "cycle"}, "queue"))
    if not walk.get("queue_ended", True) and not walk.get("twice"):
        out.append(("PEER-14", f"walking vLLM's free queue from its head ends after {walk['queue_walk']} blocks "
                    "without reaching its tail", {"check": "dangling"}, "queue"))
    lost = walk.get("lost") or []
    if lost:
        more = walk.get("lost_n", len(lost)) - len(lost)
        out.append(("PEER-14", f"{walk.get('lost_n', len(lost))} blocks with ref_cnt 0 are not in vLLM's free queue "
                    f"(lost to the pool): {', '.join(map(str, lost))}" + (f" and {more} more" if more > 0 else ""),
                    {"block": lost[0], "blocks": lost, "check": "queue_lost"}, "block"))
    for b in walk.get("unmapped", ()):
        out.append(("PEER-14", f"block {b} carries a hash that vLLM's cached-block map does not hold for it",
                    {"block": b, "check": "unmapped"}, "block"))
    refs = walk.get("refs")
    if refs is not None and holders is not None:
        have = dict(zip(refs[::2], refs[1::2], strict=True))
        off = sorted(b for b in set(have) | set(holders) if have.get(b, 0) != holders.get(b, 0))
        for b in off[:8]:
            out.append(("PEER-14", f"block {b} has ref_cnt {have.get(b, 0)}; the live requests' tables name it "
                        f"{holders.get(b, 0)} times", {"block": b, "ref_cnt": have.get(b, 0),
                                                       "named": holders.get(b, 0), "check": "ref_cnt"}, "block"))
    return out
