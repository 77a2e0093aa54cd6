"""PEER-14 and PEER-15 on SGLang: its radix tree and page allocator as its driver's ledger reads them
(``sim/peers/sglang/ledger.py``, the whole structure every ``probe_every`` steps and when SGLang raised), and the
amount each ``evict`` call frees.

What SGLang's own code relies on (sglang/srt/mem_cache/radix_cache.py, allocator/paged.py): every KV page is in
exactly one place -- the allocator's free pages (``free_page_ids``: "Free exactly these pages; no page twice";
``_debug_check_no_duplicate_pages``), a tree node's ``value`` (the tree "takes one ref in memory pool"), or a
running request's row past the tree-owned part (``cache_protected_len``); ``_delete_leaf`` asserts the node is
its parent's child under its key (``child_key``) and ``dec_lock_ref`` that the walk reaches the root; a node's
value is as long as its key; ``lock_ref`` counts holders, never below zero; ``evict`` draws only from
``evictable_leaves``. A page owned twice is in use after a free (or freed twice); one owned by nobody leaked. A
broken one of these is reported at the step it broke, naming the page or node and the SGLang call that last
changed it (PEER-14). ``RadixCache.evict(num_tokens)`` pops leaves "while num_evicted < num_tokens": it frees at
least what it was asked when the tree can, and stops at the first leaf that reaches it -- what it freed less its
largest victim is under the request (PEER-15: an eviction that frees far more than asked throws away what the
policy keeps).
"""

from __future__ import annotations

__all__ = ["check"]

Found = tuple[str, str, dict, str]


def check(msg: dict, holders: dict[int, int], block_size: int) -> list[Found]:
    """The PEER-14 / PEER-15 findings of one step (or crash) message (``holders``, kvsim's live tables, is not
    needed: ownership is read from the engine's structures and the driver's rows)."""
    out: list[Found] = []
    for k, ev in enumerate(msg.get("evictions") or ()):
        out += _amount(k, ev, block_size)
    walk = msg.get("walk")
    if not walk:
        return out
    if "error" in walk:
        return out + [("PEER-14", f"SGLang's tree and allocator cannot be read: {walk['error']}",
                       {"check": "tree_walk"}, "block")]
    for node in walk.get("bad_links", ()):
        out.append(("PEER-14", f"tree node {node} is not linked both ways: its parent field or its key in its "
                    "parent's children disagrees with where the tree holds it", {"node": node, "check": "tree_links"},
                    "node"))
    for node in walk.get("bad_len", ()):
        out.append(("PEER-14", f"tree node {node}'s value is not as long as its key (or was dropped)",
                    {"node": node, "check": "tree_value"}, "node"))
    for node in walk.get("negative", ()):
        out.append(("PEER-14", f"tree node {node} has a negative lock_ref", {"node": node, "check": "tree_negative"},
                    "node"))
    for node in walk.get("listed_off_tree", ()):
        out.append(("PEER-14", f"evictable_leaves lists node {node}, which is no longer in the tree",
                    {"node": node, "check": "stale_leaf"}, "node"))
    for page, free, tree, rows in walk.get("double", ()):
        where = [f"{n}x {what}" for n, what in ((free, "free in the allocator"), (tree, "in the radix tree"),
                                                  (rows, "private to a running request")) if n]
        out.append(("PEER-14", f"page {page} is owned {free + tree + rows} times ({', '.join(where)}): a page is "
                    "free, in the tree or private to one request, never two at once",
                    {"block": page, "in_free": free, "in_tree": tree, "in_rows": rows, "check": "owned_twice"},
                    "block"))
    lost = walk.get("lost") or []
    if lost:
        more = walk.get("lost_n", len(lost)) - len(lost)
        out.append(("PEER-14", f"{walk.get('lost_n', len(lost))} pages are neither free, in the tree nor in a running "
                    f"request's row (leaked): {', '.join(map(str, lost))}" + (f" and {more} more" if more > 0 else ""),
                    {"block": lost[0], "blocks": lost, "check": "leaked"}, "block"))
    return out


def _amount(k: int, ev: dict, ps: int) -> list[Found]:
    """One evict call: the nodes it removed (from the tree the driver read before it) against what it was asked."""
    nodes, gone = ev["nodes"], ev["evicted"]
    freed = [nodes[i][4] * ps for i in gone]
    total = sum(freed)
    need = ev["need"]
    victim = nodes[gone[0]][5] if gone and len(nodes[gone[0]]) > 5 else None
    ctx = {"call": k + 1, "need": need, "freed": total, "check": "amount"}
    if victim is not None:
        ctx["node"] = victim
    if freed and total - max(freed) >= need:
        return [("PEER-15", f"evict call {k + 1} of the step was asked for {need} tokens and freed {total} "
                 f"({len(gone)} nodes): it went on after it had enough (less its largest victim it had already freed "
                 f"{total - max(freed)})", ctx, "node")]
    if total < need:
        kids = [0] * len(nodes)
        for row in nodes:
            if row[0] >= 0:
                kids[row[0]] += 1
        kept = [i for i in range(len(nodes)) if i not in set(gone) and kids[i] == 0 and nodes[i][1] == 0]
        if kept:
            return [("PEER-15", f"evict call {k + 1} of the step was asked for {need} tokens and freed {total} while "
                     f"{len(kept)} unlocked leaves stayed", ctx, "node")]
    return []
