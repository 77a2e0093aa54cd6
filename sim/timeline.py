"""Pool occupancy over the event index, bounded in memory for arbitrarily long traces.

Points are recorded when an event changed a pool's counters; when the buffer reaches its cap every
other point is dropped and the sampling stride doubles (deterministic: the same trace gives the same
points). Events that carry a violation are always recorded so the plot can mark them.
"""

from __future__ import annotations

MAX_POINTS = 4096


class Timeline:
    __slots__ = ("pools", "event", "series", "stride", "capacity")

    def __init__(self, pools: dict) -> None:
        self.pools = list(pools)
        self.capacity = {name: p.capacity for name, p in pools.items()}
        self.event: list[int] = []
        # per pool: allocated, reserved, available
        self.series: dict[str, tuple[list[int], ...]] = {name: ([], [], []) for name in self.pools}
        self.stride = 1

    def record(self, index: int, pools: dict, force: bool = False) -> None:
        if not force and index % self.stride:
            return
        self.event.append(index)
        for name in self.pools:
            p = pools[name]
            a, r, v = self.series[name]
            a.append(p.allocated)
            r.append(p.reserved)
            v.append(p.capacity - p.allocated - p.reserved)
        if len(self.event) >= MAX_POINTS:
            self._halve()

    def _halve(self) -> None:
        keep = list(range(0, len(self.event) - 1, 2)) + [len(self.event) - 1]
        self.event = [self.event[i] for i in keep]
        for name in self.pools:
            self.series[name] = tuple([s[i] for i in keep] for s in self.series[name])
        self.stride *= 2

    def as_dict(self) -> dict:
        return {"event": list(self.event),
                "pools": {name: {"capacity": self.capacity[name], "allocated": list(a), "reserved": list(r),
                                 "available": list(v)} for name, (a, r, v) in self.series.items()}}
