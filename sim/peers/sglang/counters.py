"""PEER-9 on SGLang's deep counters: what its driver reads from the radix tree's own structures (``probe`` in
``sim/peers/sglang/ledger.py``, run by the driver, the tree walked from its root), each against what should equal it.

SGLang's ``RadixCache`` keeps ``lock_ref`` on every node (``inc_lock_ref`` / ``dec_lock_ref`` walk from the
locked node to the root, so a node's count is the number of held locks at or below it), running totals
``evictable_size_`` (tokens of nodes with ``lock_ref == 0``) and ``protected_size_`` (``lock_ref > 0``), and the
set ``evictable_leaves`` that ``evict`` draws from (unlocked nodes with no live child, ``_update_leaf_status``).
A bug in any of them reaches a block table or an event only much later (an eviction of a locked prefix, a
leak), so they are compared directly (seed 002 l.193: the scheduler "keeps no residency counters of its own"
beyond what the event carries; l.38: leak checks ask the index):

* every node's ``lock_ref`` equals the locks the driver holds at or below it (the driver is the scheduler: it
  knows its locks), and no lock the driver holds names a node the walk did not reach;
* the tokens of unlocked and locked nodes found by the walk equal ``evictable_size_`` and ``protected_size_``
  (so evictable + protected = cached holds of the structure, not only of the counters);
* the unlocked leaves found by the walk are exactly ``evictable_leaves``.

A ``--kv-groups`` run drives SGLang's ``UnifiedRadixCache`` (``sim/peers/sglang/hybrid.py``), whose default tree
core is native (Rust: no Python node to walk). Its probe (``core`` set) holds, per component, the tree's own
``evictable`` and ``protected`` counters beside the values the tree hands back (``all_values_flatten``: full tokens;
their SWA peers still mapped; ``all_mamba_values_flatten``: Mamba slots): evictable + protected must equal what
the tree holds (``unified``).
"""

from __future__ import annotations

__all__ = ["check"]


def check(probe: dict, named: dict[int, int]) -> list[tuple[str, dict]]:
    """The PEER-9 findings (message, context) of one probe (``named``, kvsim's live tables, is not needed:
    SGLang's counters are checked against the tree itself and the driver's locks)."""
    if "core" in probe:
        return unified(probe)
    out: list[tuple[str, dict]] = []
    if probe["lock_mismatch"]:
        nodes = probe.get("lock_mismatch_nodes") or []
        shown = ", ".join(f"node {n} lock_ref {have} (held {want})" for n, have, want in nodes[:4])
        out.append((f"{probe['lock_mismatch']} of SGLang's {probe['nodes']} tree nodes have a lock_ref other than "
                    f"the locks held at or below them: {shown}", {"lock_mismatch": probe["lock_mismatch"],
                                                                 "nodes": nodes,
                                                                 **({"node": nodes[0][0]} if nodes else {})}))
    if probe.get("locks_off_tree"):
        out.append((f"{probe['locks_off_tree']} nodes the scheduler holds locks on are no longer in SGLang's tree",
                    {"locks_off_tree": probe["locks_off_tree"]}))
    for kind in ("evictable", "protected"):
        walked, counter = probe[f"{kind}_walk"], probe[kind]
        if walked != counter:
            out.append((f"SGLang's tree walked holds {walked} {kind} tokens, its {kind}_size_ counter says {counter}",
                        {"walked": walked, "counter": counter, "kind": kind}))
    if probe["leaves_differ"]:
        out.append((f"SGLang's evictable_leaves lists {probe['leaves_listed']} nodes, the tree walked has "
                    f"{probe['leaves_walk']} unlocked leaves ({probe['leaves_differ']} differ)",
                    {"listed": probe["leaves_listed"], "walked": probe["leaves_walk"]}))
    return out


UNITS = {"full": "tokens", "sliding": "SWA tokens", "mamba": "Mamba states"}


def unified(probe: dict) -> list[tuple[str, dict]]:
    """A unified cache's probe: per component, evictable + protected counters against the values the tree holds."""
    out: list[tuple[str, dict]] = []
    for kind, unit in UNITS.items():
        if kind not in probe:
            continue
        evictable, protected, held = probe[kind]
        if evictable + protected != held:
            out.append((f"SGLang's unified tree ({probe['core']}) counts {evictable} evictable and {protected} "
                        f"protected {unit} of its {kind} component, and holds {held}",
                        {"component": kind, "evictable": evictable, "protected": protected, "tree_holds": held}))
    return out
