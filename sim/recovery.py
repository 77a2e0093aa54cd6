"""Error recovery during replay: one cause, one finding.

A fact the contract forbids is reported and, unless the engine's claim is adopted (`sim.replay`'s
`_adopt`), not applied: the model and the engine then disagree about every entity the event names, and
every later event on those entities would fail again (mostly TRACE-2: a sequence the model never activated,
a unit it never launched). Those later failures are *consequences* of the first finding, not new
violations. This module keeps that bookkeeping:

- every root-cause violation gets a number (`id`, 1-based within its trace);
- the entities of an unapplied event (sequence, checkpoint, unit, transfer, and the pools whose counters it
  would have moved) are marked *desynchronized* by that finding;
- a later event whose finding names a desynchronized entity is a consequence: it is counted, the first one
  per entity is kept with its details (``of``: the finding it follows from), and its own entities are
  marked in turn (its effect is missing too);
- a sequence activated again, a unit launched again, a checkpoint retained again or a transfer reserved again
  under the same id starts synchronized (a new incarnation).

Observations change nothing in the model: a rejected one marks only its own observation (the next report of
the same pool, row or checkpoint that still disagrees is the same finding), never the entity it reads.
State findings after an applied event are consequences only when the same rule fires again on an entity
it already named. Pure bookkeeping: it knows nothing of the model or of report formats.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvsim.kvmodel.store import Finding

# facts whose effect on the pools' counters is lost when they are not applied: later counter reports of those
# pools disagree because of the first finding
_MOVES_COUNTERS = frozenset({"activate", "map", "grow", "cow", "truncate", "finish", "release", "offload",
                             "drop_device", "drop_host", "xfer", "launch", "complete", "fail"})
_CONTEXT_KINDS = ("seq", "ckpt", "unit", "xfer")

Key = tuple


def event_keys(ev, op: str, pools: Iterable[str]) -> tuple[list[Key], list[Key]]:
    """(keys looked up, keys marked) for one event: the entities it names. An observation is looked up under
    the entity it reads and its own observation key, and marks only the latter."""
    if op == "observe":
        own: Key
        if ev.ckpt is not None:
            own = ("observe", "ckpt", ev.ckpt, ev.pool)
            return [("ckpt", ev.ckpt), own], [own]
        if ev.seq is not None:
            own = ("observe", "seq", ev.seq, ev.pool)
            return [("seq", ev.seq), own], [own]
        own = ("observe", "pool", ev.pool)
        return [own], [own]
    keys: list[Key] = []
    if op == "launch":
        keys.append(("unit", ev.unit))
        keys.extend(("seq", r.seq) for r in ev.rows)
    elif op == "complete":
        keys.append(("unit", ev.unit))
        keys.extend(("seq", c.seq) for c in ev.commit)
    elif op == "fail":
        keys.append(("unit", ev.unit))
    elif op == "xfer":
        keys += [("xfer", ev.xfer), ("ckpt", ev.ckpt)]
    elif op in ("release", "offload", "drop_device", "drop_host"):
        keys.append(("ckpt", ev.ckpt))
    else:  # activate, map, grow, cow, truncate, finish
        keys.append(("seq", ev.seq))
        src = getattr(ev, "from_", None) or getattr(ev, "retain", None)
        if src is not None:
            keys.append(("ckpt", src))
    marked = list(keys)
    if op in _MOVES_COUNTERS:
        marked.extend(("observe", "pool", p) for p in pools)
    return keys, marked


def finding_keys(f: Finding) -> list[Key]:
    """The entities a finding's context names."""
    ctx = f.context
    return [(k, ctx[k]) for k in _CONTEXT_KINDS if k in ctx and isinstance(ctx[k], str)]


@dataclass
class Recovery:
    """Desynchronized entities of one trace and the consequences seen on them."""

    marks: dict = field(default_factory=dict)  # key -> number of the finding that desynchronized it
    repeats: dict = field(default_factory=dict)  # (rule, key) -> number of the state finding that named it
    first: list = field(default_factory=list)  # the first consequence per (finding, entity), in event order
    seen: set = field(default_factory=set)
    suppressed: int = 0  # every consequence finding, listed or not
    per_finding: dict = field(default_factory=dict)  # finding number -> consequences counted

    def cause(self, lookup: list[Key], findings: list[Finding]) -> tuple[int | None, Key | None]:
        """The finding these findings follow from (the earliest one marking an entity they name), if any."""
        best: tuple[int | None, Key | None] = (None, None)
        marks = self.marks
        for k in lookup:
            n = marks.get(k)
            if n is not None and (best[0] is None or n < best[0]):
                best = (n, k)
        for f in findings:
            for k in finding_keys(f):
                n = marks.get(k)
                if n is None:
                    n = self.repeats.get((f.rule, k))
                if n is not None and (best[0] is None or n < best[0]):
                    best = (n, k)
        return best

    def mark(self, keys: Iterable[Key], n: int) -> None:
        marks = self.marks
        for k in keys:
            if k not in marks:
                marks[k] = n

    def remember_state(self, f: Finding, n: int) -> None:
        """A state finding on an applied event: the same rule on the same entity later is this finding again."""
        for k in finding_keys(f):
            self.repeats.setdefault((f.rule, k), n)

    def renew(self, key: Key) -> None:
        """A new incarnation of an id (activated, launched, reserved again): synchronized from here on."""
        self.marks.pop(key, None)

    def consequence(self, of: int, key: Key, findings: list[Finding], where: dict) -> None:
        """Count these findings as consequences of finding `of`; keep the first one per entity."""
        self.suppressed += len(findings)
        self.per_finding[of] = self.per_finding.get(of, 0) + len(findings)
        if (of, key) in self.seen:
            return
        self.seen.add((of, key))
        f = findings[0]
        self.first.append({**where, "rule": f.rule, "message": f.message, "of": of,
                           "entity": " ".join(map(str, key))})


__all__ = ["Recovery", "event_keys", "finding_keys"]
