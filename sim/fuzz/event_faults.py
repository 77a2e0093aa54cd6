"""Single faults planted in a legal KV-event stream, each with the findings a correct checker must report.

A stream is a list of batches ``(seq, [event, ...])`` (events as the engines publish them: objects tagged by
``type``), batch k on log line k + 1. A fault takes the clean stream and a pick (which occurrence) and returns
the faulty stream, the findings it implies as ``(rule, line)`` pairs, and the rules its consequences may add
from the fault's line on (a mangled hash leaves its children orphaned); with none, the implied findings are all
there is. They follow from the rules' statements (research/kv-events.md; seed 002 l.193 "one externally
visible prefix event" and l.309 "a second, independent block-hash implementation for external KV events"): a
removal names a live block (EV-1), a live block is never stored again (EV-2), a parent is live and full
(EV-3), a store carries blocks x block_size tokens (EV-4), nothing AllBlocksCleared dropped is named again
(EV-5), a hash recomputes from its parent and tokens (EV-7; under ``sglang-sha256`` a block whose parent
digest is unknown is unverifiable, under ``fnv1a64`` the parent's event value is the chain), sequence numbers
are contiguous (EV-8).

Liveness is recomputed here from the events (the set of live hashes, in the stream's own order): this
module imports nothing from the checkers it feeds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

Batch = tuple[int, list]
# the faulty stream, the findings it implies, and the rules a checker may also report from the fault's line
# on (its consequences; empty: the implied findings are all there is)
Result = tuple[list[Batch], list[tuple[str, int]], frozenset]
EXACT: frozenset = frozenset()

_FOREIGN = 0x5EED_0000_0000_0001  # a hash no stream of the reference engine stores


def _flat(batches: list[Batch]) -> list[tuple[int, int, dict]]:
    return [(k, e, ev) for k, (_s, evs) in enumerate(batches) for e, ev in enumerate(evs)]


def _state_before(batches: list[Batch], k: int, e: int) -> tuple[set, set, set]:
    """(live, removed, cleared) hashes before event e of batch k."""
    live: set = set()
    removed: set = set()
    cleared: set = set()
    for kk, ee, ev in _flat(batches):
        if (kk, ee) >= (k, e):
            break
        t = ev["type"]
        if t == "BlockStored":
            for h in ev["block_hashes"]:
                live.add(h)
                cleared.discard(h)
                removed.discard(h)
        elif t == "BlockRemoved":
            for h in ev["block_hashes"]:
                live.discard(h)
                removed.add(h)
        else:
            cleared |= live
            live = set()
    return live, removed, cleared


def _next_restore(batches: list[Batch], k: int, e: int, h) -> int | None:
    """The line of the first store of h after (k, e), unless an AllBlocksCleared comes first (None)."""
    for kk, ee, ev in _flat(batches):
        if (kk, ee) <= (k, e):
            continue
        if ev["type"] == "AllBlocksCleared":
            return None
        if ev["type"] == "BlockStored" and h in ev["block_hashes"]:
            return kk + 1
    return None


def _of(batches: list[Batch], kind: str) -> list[tuple[int, int, dict]]:
    return [x for x in _flat(batches) if x[2]["type"] == kind]


def _removal(h) -> dict:
    return {"type": "BlockRemoved", "block_hashes": [h], "medium": "GPU"}


def duplicate_removal(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A removal published twice (EV-1 at its batch)."""
    cands = _of(b, "BlockRemoved")
    if not cands:
        return None
    k, e, ev = cands[pick % len(cands)]
    b[k][1].insert(e + 1, _removal(ev["block_hashes"][0]))
    return b, [("EV-1", k + 1)], EXACT


def removal_of_removed(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A later batch names a block removed earlier and not stored since (EV-1)."""
    cands = []
    for k in range(len(b)):
        live, removed, _cleared = _state_before(b, k, len(b[k][1]))
        cands += [(k, h) for h in sorted(removed - live)]
    if not cands:
        return None
    k, h = cands[pick % len(cands)]
    b[k][1].append(_removal(h))
    return b, [("EV-1", k + 1)], EXACT


def removal_never_stored(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A removal of a block the stream never stored (EV-1)."""
    if not b:
        return None
    k = pick % len(b)
    b[k][1].append(_removal(_FOREIGN))
    return b, [("EV-1", k + 1)], EXACT


def drop_removal(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A removal lost: the block's next store (if no clear comes first) is a double store (EV-2)."""
    cands = _of(b, "BlockRemoved")
    if not cands:
        return None
    k, e, ev = cands[pick % len(cands)]
    h = ev["block_hashes"][0]
    at = _next_restore(b, k, e, h)
    del b[k][1][e]
    return b, [] if at is None else [("EV-2", at)], EXACT


def removal_before_store(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A removal published before the store it undoes: EV-1 there (EV-5 if a clear had dropped the hash),
    and the block's next store after the removal's true place is a double store (EV-2)."""
    cands = []
    for k, e, ev in _of(b, "BlockRemoved"):
        h = ev["block_hashes"][0]
        stores = [(kk, ee) for kk, ee, s in _of(b, "BlockStored") if (kk, ee) < (k, e) and h in s["block_hashes"]]
        if stores:
            cands.append((k, e, h, stores[-1]))
    if not cands:
        return None
    k, e, h, (ks, es) = cands[pick % len(cands)]
    _live, _removed, cleared = _state_before(b, ks, es)
    first = ("EV-5" if h in cleared else "EV-1", ks + 1)
    at = _next_restore(b, k, e, h)
    ev = b[k][1].pop(e)
    b[ks][1].insert(es, ev)
    return b, [first] + ([] if at is None else [("EV-2", at)]), EXACT


def repeat_seq(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A batch numbered like the one before it; numbering goes on from there (EV-8 once)."""
    if len(b) < 2:
        return None
    k = 1 + pick % (len(b) - 1)
    b[k:] = [(s - 1, evs) for s, evs in b[k:]]
    return b, [("EV-8", k + 1)], EXACT


def skip_seq(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A batch lost: the numbering jumps by one (EV-8 once)."""
    if len(b) < 2:
        return None
    k = 1 + pick % (len(b) - 1)
    b[k:] = [(s + 1, evs) for s, evs in b[k:]]
    return b, [("EV-8", k + 1)], EXACT


def wrong_parent(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A store names another live block as its parent: its hash does not recompute (EV-7)."""
    cands = []
    for k, e, ev in _of(b, "BlockStored"):
        if ev["parent_block_hash"] is None:
            continue
        live, _r, _c = _state_before(b, k, e)
        others = sorted(live - {ev["parent_block_hash"]} - set(ev["block_hashes"]))
        if others:
            cands.append((k, e, others))
    if not cands:
        return None
    k, e, others = cands[pick % len(cands)]
    b[k][1][e]["parent_block_hash"] = others[(pick // 7) % len(others)]
    return b, [("EV-7", k + 1)], EXACT


def orphan_parent(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A store names a parent never stored (EV-3; under fnv1a64 the hash chains from the named parent's value,
    so it does not recompute either: EV-7)."""
    cands = [x for x in _of(b, "BlockStored") if x[2]["parent_block_hash"] is not None]
    if not cands:
        return None
    k, e, ev = cands[pick % len(cands)]
    ev["parent_block_hash"] = _FOREIGN
    return b, [("EV-3", k + 1)] + ([("EV-7", k + 1)] if scheme == "fnv1a64" else []), EXACT


def wrong_token(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """One token of a store differs from what was hashed (EV-7)."""
    cands = _of(b, "BlockStored")
    if not cands:
        return None
    k, e, ev = cands[pick % len(cands)]
    toks = ev["token_ids"]
    j = (pick // 5) % len(toks)
    toks[j] = toks[j] + 7
    return b, [("EV-7", k + 1)], EXACT


def wrong_hash(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A store carries a hash that is not its block's (EV-7; its children then name a parent the stream does not
    hold, its removal a block not live: consequences, EV-5 where a ClearCache had dropped the true hash)."""
    cands = _of(b, "BlockStored")
    if not cands:
        return None
    k, e, ev = cands[pick % len(cands)]
    ev["block_hashes"][0] ^= 1
    return b, [("EV-7", k + 1)], frozenset({"EV-1", "EV-3", "EV-5", "EV-6"})


def duplicate_store(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A store published twice: every block of it stored again while live (EV-2 per block)."""
    cands = _of(b, "BlockStored")
    if not cands:
        return None
    k, e, ev = cands[pick % len(cands)]
    b[k][1].insert(e + 1, copy.deepcopy(ev))
    return b, [("EV-2", k + 1)] * len(ev["block_hashes"]), EXACT


def short_tokens(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A store one token short: the count disagrees with the block size (EV-4) and the last block's hash does
    not recompute from what it carries (EV-7); its children name a partial parent (consequences)."""
    cands = _of(b, "BlockStored")
    if not cands:
        return None
    k, e, ev = cands[pick % len(cands)]
    ev["token_ids"].pop()
    return b, [("EV-4", k + 1), ("EV-7", k + 1)], frozenset({"EV-3"})


def removal_after_clear(b: list[Batch], pick: int, scheme: str) -> Result | None:
    """A removal of a block AllBlocksCleared already dropped, before any store of it again (EV-5)."""
    cands = []
    for k in range(len(b)):
        _live, _removed, cleared = _state_before(b, k, len(b[k][1]))
        cands += [(k, h) for h in sorted(cleared)]
    if not cands:
        return None
    k, h = cands[pick % len(cands)]
    b[k][1].append(_removal(h))
    return b, [("EV-5", k + 1)], EXACT


STREAM_FAULTS: dict[str, Callable[[list[Batch], int, str], Result | None]] = {
    "duplicate-removal": duplicate_removal, "removal-of-removed": removal_of_removed,
    "removal-never-stored": removal_never_stored, "drop-removal": drop_removal,
    "removal-before-store": removal_before_store, "repeat-seq": repeat_seq, "skip-seq": skip_seq,
    "wrong-parent": wrong_parent, "orphan-parent": orphan_parent, "wrong-token": wrong_token,
    "wrong-hash": wrong_hash, "duplicate-store": duplicate_store, "short-tokens": short_tokens,
    "removal-after-clear": removal_after_clear,
}
# faults that leave a live block the checker cannot see removed: no capacity given (EV-6 would count it)
UNCOUNTED = frozenset({"drop-removal", "removal-before-store"})


def plant(batches: list[Batch], fault: str, pick: int, scheme: str) -> Result | None:
    """The faulty stream (a deep copy), the findings it implies, the rules its consequences may add; None
    when the stream has no occasion for the fault."""
    return STREAM_FAULTS[fault](copy.deepcopy(batches), pick, scheme)
