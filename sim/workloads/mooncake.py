"""Streaming loader for the Mooncake trace format (FAST'25 release): JSON Lines of
``{"timestamp": ms, "input_length": n, "output_length": o, "hash_ids": [...]}``.

Each line is decoded by one reused msgspec decoder into a typed row and checked: non-negative integers,
len(hash_ids) == ceil(input_length / 512) (the format's own invariant), timestamps non-decreasing (the
simulation admits requests in file order). Any breach raises WorkloadInputError naming the line.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import Annotated

import msgspec

from kvsim.sim.files import label, open_source
from kvsim.sim.workloads.request import Request, WorkloadInputError, blocks_for, check_tokens

NonNeg = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class MooncakeRow(msgspec.Struct, forbid_unknown_fields=False, frozen=True):
    timestamp: NonNeg
    input_length: NonNeg
    output_length: NonNeg
    hash_ids: tuple[NonNeg, ...]


_DECODER = msgspec.json.Decoder(MooncakeRow)


def iter_mooncake(path, limit: int | None = None, stream=None) -> Iterator[Request]:
    """Requests of a Mooncake JSONL file in file order (at most `limit`); blank lines are skipped. ``path``
    ``-`` reads standard input; ``stream`` is the input already opened (read once), which ``path`` names."""
    arg = os.fspath(path)
    path = label(arg)
    last = 0
    rid = 0
    if stream is None:
        try:
            stream = open_source(arg)
        except OSError as exc:
            raise WorkloadInputError(path, 0, f"cannot read: {exc.strerror or exc}") from None
    with io.BufferedReader(stream) as f:
        for line, raw in enumerate(f, 1):
            if limit is not None and rid >= limit:
                return
            if not raw.strip():
                continue
            try:
                row = _DECODER.decode(raw)
            except msgspec.DecodeError as exc:
                raise WorkloadInputError(path, line, f"not a Mooncake row: {exc}") from None
            if len(row.hash_ids) != blocks_for(row.input_length):
                raise WorkloadInputError(path, line, f"{len(row.hash_ids)} hash_ids for input_length "
                                         f"{row.input_length} (expected ceil(input_length/512) = "
                                         f"{blocks_for(row.input_length)})")
            check_tokens(path, line, "output_length", row.output_length)
            if row.timestamp < last:
                raise WorkloadInputError(path, line, f"timestamp {row.timestamp} goes back (previous {last})")
            last = row.timestamp
            yield Request(rid, row.timestamp / 1000.0, row.input_length, row.output_length, row.hash_ids)
            rid += 1
