"""One cause, one finding, for real-engine runs: replay's recovery discipline (``sim.recovery``) applied to the
findings of ``kvsim peer vllm|sglang|tokenspeed``.

A bug in an engine's block manager shows again at every later step: a leaked reference keeps the pool's counters
off until the run ends, a block freed while in use breaks every table that names it, the judge's copy of a free
queue drifts from the engine's. Reported as they come, one planted ref-count leak gave 3,618 findings. Here:

- a finding becomes a **root** (numbered ``id``, 1-based) unless it follows from an earlier one; a root marks
  the *entities* it concerns (blocks, pages, radix nodes, requests, event hashes) and its *mechanism*;
- a later finding that names a marked entity, or has the mechanism of an earlier root, is a **consequence** of
  that root: counted (``suppressed``, per root), the first per (root, entity) listed with ``of``, its own
  entities marked in turn (their state follows from the same cause); it is never a violation;
- a finding on unmarked entities with a new mechanism is a new root: a different cause.

The mechanism is the rule, the finding's message with every number and hash blanked (``s#'s block # is ...``),
and, where the driver's ledger knows it, the engine function that last changed the finding's subject
(``sim.peers.frames.site``): the same check failing again where the same engine function left a block is the
same cause, however many blocks it reaches. Pure bookkeeping over finding objects (``rule``, ``line``,
``message``, ``context``); it knows nothing of engines or report formats.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["PeerRecovery", "Record", "entities", "mechanism"]

Key = tuple
_BLANK = re.compile(r"0x[0-9a-f]+|[0-9a-f]{12}\.\.\.[0-9a-f]{8}|[0-9a-f]{16,}|\d+")
_ENGINE_KEYS = (("block", "block"), ("blocks", "block"), ("ahead", "block"), ("page", "block"), ("pages", "block"),
                ("node", "node"), ("nodes", "node"), ("request", "request"), ("requests", "request"))
_EVENT_KEYS = ("block", "parent", "hash", "hashes")


def _ids(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, (int, str)) and not isinstance(v, bool)]
    return [value] if isinstance(value, (int, str)) and not isinstance(value, bool) else []


def entities(f: Any) -> list[Key]:
    """The entities a finding's context names: blocks (SGLang's pages too), nodes and requests for an engine
    finding (PEER-*, TS-*); event hashes for a KV-event finding (EV-*)."""
    ctx = f.context or {}
    out: list[Key] = []
    if f.rule.startswith("EV-"):
        for k in _EVENT_KEYS:
            out += [("hash", str(h)) for h in _ids(ctx.get(k))]
        return out
    for k, kind in _ENGINE_KEYS:
        out += [(kind, v) for v in _ids(ctx.get(k))]
    return out


def mechanism(f: Any, place: str = "", base: str | None = None) -> Key:
    """The finding's mechanism: rule, message (``base`` where given) with the step prefix dropped and every
    number and hash blanked, and the engine function that last changed its subject (``place``, may be empty)."""
    text = f.message if base is None else base
    if text.startswith("step ") and ": " in text:
        text = text.split(": ", 1)[1]
    return (f.rule, _BLANK.sub("#", text)[:160], place)


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
        ents = entities(f)
        mech = mechanism(f, place, base)
        of, via = self._cause(ents, mech)
        if of is None:
            n = len(self.roots) + 1
            f.id = n
            self.roots.append(f)
            self.rule_roots[f.rule] = self.rule_roots.get(f.rule, 0) + 1
            self.causes[mech] = n
            self._mark(ents, n)
            return n
        self.suppressed += 1
        self.per_root[of] = self.per_root.get(of, 0) + 1
        self._mark(ents, of)
        self.causes.setdefault(mech, of)
        if (of, via) not in self.seen and len(self.first) < self.max_listed:
            self.seen.add((of, via))
            entity = " ".join(map(str, via)) if via[0] != "mechanism" else "the same check, at the same place"
            self.first.append({"rule": f.rule, "event": f.line if f.step is None else f.step, "line": f.line,
                               "op": f.op, "message": f.message, "of": of, "entity": entity,
                               "context": dict(f.context or {}), **({"engine_frame": f.frame} if f.frame else {})})
        return None

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
