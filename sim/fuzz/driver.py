"""Driving the model through kvtrace/1 events, and writing what was driven as a replayable counterexample.

`Driver` feeds every event to a `TraceReplay` (the model with every rule of the catalogue checked after the
event, and the lockstep observer when asked), so a fuzzing run is a trace. It keeps the events as they are
to be recorded: a request is recorded with the result the oracle expects (granted or refused), so replay
judges the model's answer against it; a fact the model rightly rejected is dropped from the record (it
left the state as it was, so the rest of the trace replays the same).
`write_counterexample` writes header + recorded events + the observations the oracle disagreed with as
`<found>/<machine>-<hash>.jsonl`, replays it, and returns the first rule replay reports: the rule a
later `kvsim replay` on the file reproduces.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from kvsim.sim.files import write_atomic
from kvsim.sim.replay import InternalError, TraceReplay, replay_trace
from kvsim.sim.trace.stream import TraceInputError, encode_line


class Driver:
    def __init__(self, header, observer_factory=None) -> None:
        self.header = header
        self.replay = TraceReplay("<fuzz>", header, audit_every=1 << 62, observer_factory=observer_factory)
        self.st = self.replay.st
        self.recorded: list = []
        self.steps = 0

    def step(self, ev, record=None) -> list[dict]:
        """Apply `ev`; record `record` (default `ev`); return the violations replay reported for it."""
        out = self.replay.result.violations
        n = len(out)
        self.recorded.append(ev if record is None else record)
        self.steps += 1
        self.replay.step(len(self.recorded) - 1, len(self.recorded) + 1, ev)
        new = out[n:]
        return new

    def forget_last(self) -> None:
        """The last event was rightly rejected and changed nothing: leave it out of the record."""
        self.recorded.pop()

    def audit(self) -> list:
        self.st.reset_touched()
        return self.replay.checker.audit()

    def trace_bytes(self, extra=()) -> bytes:
        return b"".join(encode_line(r) for r in (self.header, *self.recorded, *extra))


@dataclass
class Counterexample:
    path: str
    rule: str  # the first rule replay reports on the file; "INTERNAL" for a crash; "" when it reports none
    message: str
    events: int


def write_counterexample(machine: str, data: bytes, found_dir, lockstep: bool = False) -> Counterexample:
    digest = hashlib.sha256(data).hexdigest()[:12]
    path = Path(found_dir) / f"{machine}-{digest}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)  # a counterexample appears whole or not at all
    factory = None
    if lockstep:
        from kvsim.sim.lockstep import lockstep_factory
        factory = lockstep_factory
    events = data.count(b"\n") - 1
    try:
        r = replay_trace(path, stop_at_first=True, observer_factory=factory)
    except InternalError as exc:
        return Counterexample(str(path), "INTERNAL", str(exc), events)
    except TraceInputError as exc:  # a bug of the writer, never of the model: say so instead of hiding it
        return Counterexample(str(path), "", f"the counterexample does not decode: {exc}", events)
    if not r.violations:
        return Counterexample(str(path), "", "replay reports no violation", events)
    v = r.violations[0]
    return Counterexample(str(path), v["rule"], f"event {v['event']} ({v['op']}): {v['message']}", events)
