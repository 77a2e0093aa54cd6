"""One cause, one finding, for real-engine runs: replay's recovery discipline (``sim.recovery``) applied to the
findings of ``kvsim peer vllm|sglang|tokenspeed``.

A bug in an engine's block manager shows again at every later step: a leaked reference keeps the pool's counters
off until the run ends, a block freed while in use breaks every table that names it, the judge's copy of a free
queue drifts from the engine's. Reported as they come, one planted ref-count leak gave 3,618 findings. Here:

- a finding becomes a **root** (numbered ``id``, 1-based) unless it follows from an earlier one; a root marks
  the *entities* it concerns (blocks, pages, radix nodes, requests, event hashes) and its *mechanism*;
- a later finding that names a marked entity, or has the mechanism of an earlier root, is a **consequence** of
  that root: counted (``suppressed``, per root), the first per (root, entity) listed with ``of`` (an engine crash,
  PEER-11, always), its own entities marked in turn (their state follows from the same cause); it is never a
  violation;
- a finding on unmarked entities with a new mechanism is a new root: a different cause;
- a finding that names the cause of a root found at the same step about the same request takes that root's
  place (``OUTRANKS``): with several cache groups a common hit raised beyond what a group can serve (PEER-20, seed
  002's common prefix every group must serve) also hits content the first group lacks (PEER-7), and the judge
  of the first group speaks first; the PEER-7 root becomes the first consequence of the PEER-20 one.

The mechanism is the rule, the check, the finding's message up to its first colon with every number and hash
blanked (``s#'s block # is ...``), and, where the driver's ledger knows it, the engine function that last
changed the finding's subject (``sim.peers.judges.frames.site``): the same check failing again where the same engine
function left a block is the same cause, however many blocks it reaches. Besides the entities a finding names,
a check reads and breaks whole structures (``entities``: the free queue, the radix tree, the pool, the event
stream): a broken queue explains every later statement about it, broken pool structures the pool-wide counters
and a later engine crash. Pure bookkeeping over finding objects (``rule``, ``line``,
``message``, ``context``); it knows nothing of engines or report formats.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["PeerRecovery", "Record", "entities", "mechanism"]

Key = tuple
_BLANK = re.compile(r"0x[0-9a-f]+|[0-9a-f]{12}\.\.\.[0-9a-f]{8}|[0-9a-f]{16,}|\d+")
_ENGINE_KEYS = (("block", "block"), ("blocks", "block"), ("ahead", "block"), ("neighbour", "block"),
                ("page", "block"), ("pages", "block"), ("node", "node"), ("nodes", "node"), ("request", "request"),
                ("requests", "request"), ("op_id", "op"))
_EVENT_KEYS = ("block", "parent", "hash", "hashes")
# rule -> the rules whose same-step root about the same request it explains (module docstring)
OUTRANKS = {"PEER-20": frozenset({"PEER-7"})}


def _ids(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, (int, str)) and not isinstance(v, bool)]
    return [value] if isinstance(value, (int, str)) and not isinstance(value, bool) else []


# What a finding's check depends on beyond the entities it names (looked up) and what a root's check breaks for
# later checks (marked): a broken free queue or radix tree explains every later statement about that structure,
# broken pool structures explain the pool-wide counters (PEER-9), the stream's capacity (EV-6) and an engine crash
# (PEER-11: the engine tripping over what was found broken), and a wrong event stream explains a hit found not
# live in it (PEER-7's stream check).
_QUEUE = frozenset({"links", "ends", "dangling", "cycle", "queue_lost", "lost", "queued_referenced", "walk"})
_TREE = frozenset({"tree_links", "tree_value", "tree_negative", "stale_leaf", "tree_walk"})
_PAGES = frozenset({"owned_twice", "leaked"})


def entities(f: Any) -> tuple[list[Key], list[Key]]:
    """(looked up, marked): the entities a finding's context names -- blocks (SGLang's pages too), nodes and
    requests for an engine finding (PEER-*, TS-*), event hashes for a KV-event finding (EV-*) -- and the
    structures its check reads or breaks (``_QUEUE`` ...)."""
    ctx = f.context or {}
    own: list[Key] = []
    rule = f.rule
    if rule.startswith("EV-"):
        for k in _EVENT_KEYS:
            own += [("hash", str(h)) for h in _ids(ctx.get(k))]
        return own + ([("pool",)] if rule == "EV-6" else []), own + [("stream",)]
    for k, kind in _ENGINE_KEYS:
        own += [(kind, v) for v in _ids(ctx.get(k))]
    check = ctx.get("check")
    lookup, mark = list(own), list(own)
    if rule in ("PEER-14", "PEER-15"):
        mark.append(("pool",))
        if check in _QUEUE:
            lookup.append(("queue",))
            mark.append(("queue",))
        elif check in _TREE:
            lookup.append(("tree",))
            mark.append(("tree",))
        elif check in _PAGES:
            lookup.append(("tree",))
    elif rule == "PEER-9":
        lookup.append(("pool",))
        mark.append(("pool",))
        if "event stream" in f.message:
            lookup.append(("stream",))
    elif rule == "PEER-11":
        lookup += [("pool",), ("queue",), ("tree",)]
    elif rule == "PEER-7" and "event stream" in f.message:
        lookup.append(("stream",))
    return lookup, mark


def mechanism(f: Any, place: str = "", base: str | None = None) -> Key:
    """The finding's mechanism: rule, its check, the message (``base`` where given) up to its first colon with the
    step prefix dropped and every number and hash blanked, the engine function that last changed its subject
    (``place``, may be empty), and for a crash the engine frame that raised."""
    text = f.message if base is None else base
    if text.startswith("step ") and ": " in text:
        text = text.split(": ", 1)[1]
    text = text.split(": ", 1)[0]
    ctx = f.context or {}
    return (f.rule, ctx.get("check"), _BLANK.sub("#", text)[:160], place,
            ctx.get("frame") if f.rule == "PEER-11" else None)


class Record:
    """One finding as the recovery files it: a root gets its ``id``; ``step`` is the engine step (None for a
    finding of the event stream, which names its line)."""

    __slots__ = ("rule", "line", "step", "message", "context", "op", "id", "frame")

    def __init__(self, rule: str, line: int, message: str, context: dict, step: int | None = None,
                 op: str = "step", frame: str | None = None) -> None:
        self.rule, self.line, self.step, self.message, self.context, self.op = rule, line, step, message, context, op
        self.id = 0
        self.frame = frame  # the engine frame that last changed the finding's subject, where known

    def as_dict(self, trace: str) -> dict:
        out = {"rule": self.rule, "trace": trace, "event": self.line if self.step is None else self.step,
               "line": self.line, "op": self.op, "message": self.message, "context": self.context, "id": self.id}
        if self.frame:
            out["engine_frame"] = self.frame
        return out


class PeerRecovery:
    """Roots and consequences of one peer run, in the order findings arrive (``add``)."""

    def __init__(self, max_listed: int = 1000) -> None:
        self.marks: dict[Key, int] = {}       # entity -> the root it follows from
        self.causes: dict[Key, int] = {}      # mechanism -> the root that first showed it
        self.roots: list[Record] = []         # root findings, in order (each given ``id``)
        self.first: list[dict] = []           # the first consequence per (root, entity or mechanism)
        self.seen: set[tuple] = set()
        self.suppressed = 0                   # every consequence, listed or not
        self.per_root: dict[int, int] = {}    # root id -> consequences counted
        self.rule_roots: dict[str, int] = {}  # rule -> roots
        self.max_listed = max_listed

    def add(self, f: Record, place: str = "", base: str | None = None) -> int | None:
        """File one finding: its root id when it is a new cause (``f.id`` set), None when it is a consequence.
        ``place``: the engine function that last changed its subject; ``base``: its message before the frame
        sentence was added (the mechanism reads it)."""
        lookup, marked = entities(f)
        mech = mechanism(f, place, base)
        of, via = self._cause(lookup, mech)
        if of is None:
            n = len(self.roots) + 1
            f.id = n
            self.roots.append(f)
            self.rule_roots[f.rule] = self.rule_roots.get(f.rule, 0) + 1
            self.causes[mech] = n
            self._mark(marked, n)
            return n
        if self._outranks(f, of):
            return self._promote(f, of, mech, marked)
        self.suppressed += 1
        self.per_root[of] = self.per_root.get(of, 0) + 1
        self._mark(marked, of)
        self.causes.setdefault(mech, of)
        if ((of, via) not in self.seen or f.rule == "PEER-11") and len(self.first) < self.max_listed:
            self.seen.add((of, via))
            entity = " ".join(map(str, via)) if via[0] != "mechanism" else "the same check, at the same place"
            self.first.append({"rule": f.rule, "event": f.line if f.step is None else f.step, "line": f.line,
                               "op": f.op, "message": f.message, "of": of, "entity": entity,
                               "context": dict(f.context or {}), **({"engine_frame": f.frame} if f.frame else {})})
        return None

    def _outranks(self, f: Record, of: int) -> bool:
        root = self.roots[of - 1]
        req = (f.context or {}).get("request")
        return (root.rule in OUTRANKS.get(f.rule, ()) and root.step is not None and root.step == f.step
                and req is not None and req == (root.context or {}).get("request"))

    def _promote(self, f: Record, of: int, mech: Key, marked: Iterable[Key]) -> int:
        """``f`` names the cause of root ``of`` (same step, same request): it becomes root ``of``, the old root
        that root's first consequence."""
        old = self.roots[of - 1]
        f.id, old.id = of, 0
        self.roots[of - 1] = f
        self.rule_roots[old.rule] -= 1
        if not self.rule_roots[old.rule]:
            del self.rule_roots[old.rule]
        self.rule_roots[f.rule] = self.rule_roots.get(f.rule, 0) + 1
        self.causes[mech] = of
        self._mark(marked, of)
        self.suppressed += 1
        self.per_root[of] = self.per_root.get(of, 0) + 1
        self.seen.add((of, ("request", (f.context or {}).get("request"))))
        self.first.insert(0, {"rule": old.rule, "event": old.line if old.step is None else old.step,
                              "line": old.line, "op": old.op, "message": old.message, "of": of,
                              "entity": f"request {(old.context or {}).get('request')}",
                              "context": dict(old.context or {}), **({"engine_frame": old.frame} if old.frame else {})})
        return of

    def _cause(self, ents: Iterable[Key], mech: Key) -> tuple[int | None, Key]:
        best: tuple[int | None, Key] = (None, ())
        for k in ents:
            n = self.marks.get(k)
            if n is not None and (best[0] is None or n < best[0]):
                best = (n, k)
        n = self.causes.get(mech)
        if n is not None and (best[0] is None or n < best[0]):
            best = (n, ("mechanism",) + mech[:1])
        return best

    def _mark(self, ents: Iterable[Key], n: int) -> None:
        marks = self.marks
        for k in ents:
            marks.setdefault(k, n)
