"""Per-request latency in virtual time, and its summary: what a capacity buys a user of the engine.

For every served request (times in the simulation's virtual seconds, `sim.simulate.timing`):

* queueing delay = admission (its prefill starts) - arrival;
* TTFT (time to first token) = end of the iteration that completes its prefill - arrival (the prefill's last
  forward pass yields the first token);
* TPOT (time per output token) = (completion - first token) / output tokens, for requests with output;
* end-to-end = completion (its last decode iteration) - arrival.

Summaries give the mean and the p50/p90/p99 (linear interpolation between order statistics, as NumPy's
default), and throughput over the makespan (first arrival to last completion): requests/s, output tokens/s
and prompt + output tokens/s. Rejected requests have no latency; they are counted apart.
"""

from __future__ import annotations

import numpy as np

METRICS = ("queue", "ttft", "tpot", "e2e")
WINDOWS = 40
"""Served requests are cut into this many equal groups in arrival order for the over-time curves."""
QUANTILES = (50, 90, 99)
LATENCY_KEYS = tuple(f"{m}_{q}" for m in METRICS for q in ("mean", *(f"p{p}" for p in QUANTILES)))
THROUGHPUT_KEYS = ("throughput_rps", "output_tokens_per_s", "tokens_per_s", "makespan_s")


class Latencies:
    """Per-request times, appended as requests complete (four float arrays, grown in chunks)."""

    __slots__ = ("_cols", "_n", "first_arrival", "last_finish", "tokens")

    def __init__(self) -> None:
        self._cols = {m: np.zeros(1024) for m in (*METRICS, "arrival")}
        self._n = {m: 0 for m in (*METRICS, "arrival")}
        self.first_arrival: float | None = None
        self.last_finish = 0.0
        self.tokens = 0  # prompt + output tokens of the served requests

    def _add(self, metric: str, value: float) -> None:
        col, n = self._cols[metric], self._n[metric]
        if n == len(col):
            col = self._cols[metric] = np.concatenate([col, np.zeros(len(col))])
        col[n] = value
        self._n[metric] = n + 1

    def arrived(self, t: float) -> None:
        if self.first_arrival is None or t < self.first_arrival:
            self.first_arrival = t

    def served(self, arrival: float, admitted: float, first: float, finish: float, prompt: int,
               output: int) -> None:
        """One request completed: its arrival, admission, first-token and completion times."""
        self._add("arrival", arrival)
        self._add("queue", admitted - arrival)
        self._add("ttft", first - arrival)
        self._add("e2e", finish - arrival)
        if output > 0:
            self._add("tpot", (finish - first) / output)
        self.tokens += prompt + output
        if finish > self.last_finish:
            self.last_finish = finish

    def values(self, metric: str) -> np.ndarray:
        return self._cols[metric][: self._n[metric]]

    def summary(self, requests: int, output_tokens: int) -> dict:
        """Mean and p50/p90/p99 of every metric (seconds, rounded to the microsecond) and the throughput."""
        out: dict = {}
        for m in METRICS:
            v = self.values(m)
            out[f"{m}_mean"] = round(float(v.mean()), 6) if len(v) else 0.0
            qs = np.percentile(v, QUANTILES) if len(v) else [0.0] * len(QUANTILES)
            for p, q in zip(QUANTILES, qs, strict=True):
                out[f"{m}_p{p}"] = round(float(q), 6)
        span = self.last_finish - (self.first_arrival or 0.0)
        out["makespan_s"] = round(span, 6)
        out["throughput_rps"] = round(requests / span, 6) if span > 0 else 0.0
        out["output_tokens_per_s"] = round(output_tokens / span, 3) if span > 0 else 0.0
        out["tokens_per_s"] = round(self.tokens / span, 3) if span > 0 else 0.0
        return out

    def curves(self) -> dict:
        """For the plots: each metric at the percentiles 0..100 (its distribution), and TTFT p50/p99 over
        arrival time (WINDOWS equal groups of served requests in arrival order; x = their mean arrival)."""
        pct = list(range(101))
        out: dict = {"percentiles": pct}
        for m in METRICS:
            v = self.values(m)
            out[m] = [round(float(x), 6) for x in np.percentile(v, pct)] if len(v) else []
        arrival, ttft = self.values("arrival"), self.values("ttft")
        order = np.argsort(arrival, kind="stable")
        groups = [g for g in np.array_split(order, min(WINDOWS, len(order))) if len(g)] if len(order) else []
        out["window_arrival"] = [round(float(arrival[g].mean()), 6) for g in groups]
        out["window_ttft_p50"] = [round(float(np.percentile(ttft[g], 50)), 6) for g in groups]
        out["window_ttft_p99"] = [round(float(np.percentile(ttft[g], 99)), 6) for g in groups]
        return out
