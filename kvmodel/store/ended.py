"""A bounded record of ended handles, so a stale reference can say what it refers to.

TRACE-2 ("a reference to an unknown or ended sequence, unit, checkpoint or transfer") is decided by
liveness; this record only improves the message ("has ended" versus "was never launched") and tells a
double release (CKPT-2) from an unknown checkpoint. It keeps the most recent `limit` ids (oldest dropped
first) so memory stays constant in trace length; an id older than that is reported as unknown.
A dict subclass, so lookups stay C-level on the replay's hot path.
"""

from __future__ import annotations


class EndedHandles(dict):
    __slots__ = ("limit",)

    def __init__(self, limit: int = 65536):
        super().__init__()
        self.limit = limit

    def add(self, handle: str, how: str = "ended") -> None:
        self[handle] = how  # a re-ended id keeps its first position: eviction order is approximate
        if len(self) > self.limit:
            del self[next(iter(self))]

    def discard(self, handle: str) -> None:
        self.pop(handle, None)

    def snapshot(self) -> tuple:
        return tuple(self.items())
