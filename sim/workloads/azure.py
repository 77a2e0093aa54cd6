"""Streaming loader for the Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).

Timestamps (``2023-11-16 18:15:46.6805900``, 7 fractional digits) become seconds since the first row.
The rows carry no prefix information, so every prompt block gets a fresh id (nothing is shared): they
give arrival and length mixes and capacity pressure.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import UTC, datetime

from kvsim.sim.workloads.request import Request, WorkloadInputError, blocks_for

HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
FRESH_ID_BASE = 1 << 48
"""Fresh block ids start here, far from any id a Mooncake trace uses."""


def _seconds(text: str) -> float:
    day, _, frac = text.strip().partition(".")
    t = datetime.strptime(day, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def iter_azure(path, limit: int | None = None) -> Iterator[Request]:
    """Requests of an Azure trace CSV in file order (at most `limit`)."""
    path = str(path)
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise WorkloadInputError(path, 0, f"cannot read: {exc.strerror or exc}") from None
    with f:
        rows = csv.reader(f)
        head = next(rows, None)
        if head is None or [h.strip() for h in head] != HEADER:
            raise WorkloadInputError(path, 1, f"expected the header {','.join(HEADER)}")
        t0 = last = None
        next_id = FRESH_ID_BASE
        rid = 0
        for row in rows:
            line = rows.line_num
            if limit is not None and rid >= limit:
                return
            if not row or not "".join(row).strip():
                continue
            try:
                if len(row) != 3:
                    raise ValueError(f"{len(row)} fields")
                t = _seconds(row[0])
                prompt, output = int(row[1]), int(row[2])
                if prompt < 0 or output < 0:
                    raise ValueError("negative token count")
            except ValueError as exc:
                raise WorkloadInputError(path, line, f"not an Azure trace row: {exc}") from None
            if t0 is None:
                t0 = last = t
            if t < last:
                raise WorkloadInputError(path, line, "timestamp goes back")
            last = t
            n = blocks_for(prompt)
            yield Request(rid, round(t - t0, 6), prompt, output, tuple(range(next_id, next_id + n)))
            next_id += n
            rid += 1
