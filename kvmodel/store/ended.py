"""A bounded record of ended handles, so a stale reference can say what it refers to.

TRACE-2 ("a reference to an unknown or ended sequence, unit, checkpoint or transfer") is decided by
liveness; this record only improves the message ("has ended" versus "was never launched") and tells a
double release (CKPT-2) from an unknown checkpoint. It keeps the most recent `limit` ids so memory stays
constant in trace length; an id older than that is reported as unknown.
"""

from __future__ import annotations


class EndedHandles:
    __slots__ = ("_ids", "limit")

    def __init__(self, limit: int = 65536):
        self._ids: dict[str, str] = {}
        self.limit = limit

    def add(self, handle: str, how: str = "ended") -> None:
        ids = self._ids
        ids.pop(handle, None)
        ids[handle] = how
        if len(ids) > self.limit:
            del ids[next(iter(ids))]

    def discard(self, handle: str) -> None:
        self._ids.pop(handle, None)

    def get(self, handle: str) -> str | None:
        return self._ids.get(handle)

    def __contains__(self, handle: str) -> bool:
        return handle in self._ids

    def snapshot(self) -> tuple:
        return tuple(self._ids.items())
