"""A bounded record of ended handles, so a stale reference can say what it refers to.

TRACE-2 ("a reference to an unknown or ended sequence, unit, checkpoint or transfer") is decided by
liveness; this record only improves the message ("has ended" versus "was never launched") and tells a
double release (CKPT-2) from an unknown checkpoint. It keeps the most recent `limit` ids (oldest dropped
first) so memory stays constant in trace length; an id older than that is reported as unknown.
An OrderedDict: lookups stay C-level on the replay's hot path and dropping the oldest id is O(1) (a plain
dict that keeps deleting its first key degrades, as its table fills with deleted slots).
"""

from __future__ import annotations

from collections import OrderedDict


class EndedHandles(OrderedDict):
    __slots__ = ("limit",)

    def __init__(self, limit: int = 65536) -> None:
        super().__init__()
        self.limit = limit

    def add(self, handle: str, how: str = "ended") -> None:
        self[handle] = how  # a re-ended id keeps its first position: eviction order is approximate
        if len(self) > self.limit:
            self.popitem(last=False)

    def discard(self, handle: str) -> None:
        self.pop(handle, None)

    def snapshot(self) -> tuple:
        return tuple(self.items())
