"""Streaming loader for the Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).

Timestamps (``2023-11-16 18:15:46.6805900``, 7 fractional digits) become seconds since the first row.
The rows carry no prefix information, so every prompt block gets a fresh id (nothing is shared): they
give arrival and length mixes and capacity pressure.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from datetime import UTC, datetime

from kvsim.sim.files import label, open_source
from kvsim.sim.workloads.request import Request, WorkloadInputError, blocks_for, check_tokens

HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
FRESH_ID_BASE = 1 << 48
"""Fresh block ids start here, far from any id a Mooncake trace uses."""


def _seconds(text: str) -> float:
    day, _, frac = text.strip().partition(".")
    t = datetime.strptime(day, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def _count(text: str, what: str) -> int:
    t = text.strip()
    if not (t.isascii() and t.isdigit()):
        raise ValueError(f"{what} must be a whole number of tokens >= 0, got {text!r}")
    return int(t)


def _lines(path: str, f) -> Iterator[str]:
    """The file's lines decoded one at a time, so a byte that is not UTF-8 is reported at its own line."""
    for n, raw in enumerate(f, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WorkloadInputError(path, n, f"not UTF-8 (byte {exc.start} of the line): an Azure trace "
                                     "CSV is UTF-8 text") from None


def iter_azure(path, limit: int | None = None, stream=None) -> Iterator[Request]:
    """Requests of an Azure trace CSV in file order (at most `limit`). ``path`` ``-`` reads standard input;
    ``stream`` is the input already opened (read once), which ``path`` names."""
    arg = os.fspath(path)
    path = label(arg)
    if stream is None:
        try:
            stream = open_source(arg)
        except OSError as exc:
            raise WorkloadInputError(path, 0, f"cannot read: {exc.strerror or exc}") from None
    with io.BufferedReader(stream) as f:
        rows = csv.reader(_lines(path, f))
        head = next(rows, None)
        if head is None:
            raise WorkloadInputError(path, 1, f"no requests: empty file (expected the header {','.join(HEADER)})")
        if [h.strip().removeprefix("\ufeff") for h in head] != HEADER:
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
                prompt, output = _count(row[1], "ContextTokens"), _count(row[2], "GeneratedTokens")
            except ValueError as exc:
                raise WorkloadInputError(path, line, f"not an Azure trace row: {exc}") from None
            check_tokens(path, line, "ContextTokens", prompt)
            check_tokens(path, line, "GeneratedTokens", output)
            if t0 is None:
                t0 = last = t
            if last is not None and t < last:
                raise WorkloadInputError(path, line, "timestamp goes back")
            last = t
            n = blocks_for(prompt)
            yield Request(rid, round(t - t0, 6), prompt, output, tuple(range(next_id, next_id + n)))
            next_id += n
            rid += 1
