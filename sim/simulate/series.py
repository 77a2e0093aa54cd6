"""Bounded time series for the simulation's plots: one point per engine iteration until the cap, then every
other point is dropped and the stride doubles (deterministic; memory stays constant in trace length)."""

from __future__ import annotations

MAX_POINTS = 2048
FIELDS = ("time", "allocated", "reserved", "capacity", "hit_ratio", "host_bytes_out", "host_bytes_in",
          "lanes", "queued")


class Series:
    __slots__ = ("cols", "stride", "_n")

    def __init__(self) -> None:
        self.cols: dict[str, list] = {f: [] for f in FIELDS}
        self.stride = 1
        self._n = 0

    def record(self, *values) -> None:
        """One point (values in FIELDS order); kept when the iteration count hits the stride."""
        n = self._n
        self._n = n + 1
        if n % self.stride:
            return
        for col, v in zip(self.cols.values(), values, strict=True):
            col.append(v)
        if len(self.cols["time"]) >= MAX_POINTS:
            for name, col in self.cols.items():
                self.cols[name] = col[::2]
            self.stride *= 2

    def as_dict(self) -> dict:
        return {name: list(col) for name, col in self.cols.items()}
