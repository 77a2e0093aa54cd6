"""Reading KV-event logs, and parsing one event or batch from the engines' wire forms into the events
``events.EventChecker`` judges.

Log lines: a batch in array form ``[ts, [event, ...], dp_rank]`` with array events (``["BlockStored",
hashes, parent, token_ids, block_size, lora_id, medium]``), the engines' native form (the same batch
whose events are objects tagged by ``type``, as vLLM >= 0.33 and SGLang publish them: unknown fields are
ignored, known ones used), a batch object ``{"ts": .., "events": [...], "seq": n?}`` (``type`` or ``kind``
names an event), a single event object, or a cachetrace/1 file (its ``kv`` lines). A line that is none of
these is an ``EventLogError`` naming its file and line. This module knows events, not schedulers.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from kvsim.sim.files import label, open_source
from kvsim.sim.trace import cachetrace as ct

__all__ = ["EventLogError", "BlockStored", "BlockRemoved", "AllBlocksCleared", "parse_event", "parse_batch",
           "read_event_log", "read_event_log_seq", "batch_events"]


class EventLogError(Exception):
    """A log line that is not an event batch; ``str()`` is ``path:line: reason``."""



# -- parsing ------------------------------------------------------------------------------------------------

class BlockStored(msgspec.Struct, kw_only=True):
    """A store as the engines publish it; fields kvsim does not use are ignored."""
    block_hashes: list[Any]
    parent_block_hash: Any = None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    lookahead_token_ids: list[list[int]] | None = None
    cache_salt: str | None = None
    dp_rank: int | None = None  # the batch's data-parallel rank (each rank has its own cache)


class BlockRemoved(msgspec.Struct, kw_only=True):
    block_hashes: list[Any]
    medium: str | None = None
    group_idx: int | None = None
    dp_rank: int | None = None


class AllBlocksCleared(msgspec.Struct, kw_only=True):
    dp_rank: int | None = None


_EVENT_TYPES: dict[str, type] = {"BlockStored": BlockStored, "BlockRemoved": BlockRemoved,
                                 "AllBlocksCleared": AllBlocksCleared}
_ARRAY_FIELDS = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                                 "medium"),
                 "BlockRemoved": ("block_hashes", "medium"), "AllBlocksCleared": ()}


def _check_hashes(ev: Any) -> None:
    if isinstance(ev, AllBlocksCleared):
        return
    for h in list(ev.block_hashes) + ([ev.parent_block_hash] if isinstance(ev, BlockStored) else []):
        if h is not None and not isinstance(h, (int, str, bytes)):
            raise ValueError(f"a block hash is an integer, a string or bytes, not {type(h).__name__}")
    if isinstance(ev, BlockStored):
        if ev.block_size < 1 and not (ev.block_size == 0 and not ev.token_ids):  # 0 and no tokens: a placeholder
            raise ValueError(f"block_size {ev.block_size} must be at least 1")


def parse_event(obj: Any) -> Any:
    """One event from its decoded JSON / msgpack value (an array or an object tagged by type or kind)."""
    if isinstance(obj, list):
        if not obj or obj[0] not in _EVENT_TYPES:
            raise ValueError(f"unknown event {str(obj[:1])[:40]}")
        names = _ARRAY_FIELDS[obj[0]]
        if len(obj) - 1 > len(names):
            raise ValueError(f"{obj[0]} has {len(obj) - 1} fields, at most {len(names)}")
        obj = {"type": obj[0], **dict(zip(names, obj[1:], strict=False))}
    if not isinstance(obj, dict):
        raise ValueError("an event is an array or an object")
    obj = dict(obj)
    kind = obj.pop("type", None) or obj.pop("kind", None)
    obj.pop("kind", None)
    if kind not in _EVENT_TYPES:
        raise ValueError(f"unknown event type {str(kind)[:40]}")
    ev: Any = msgspec.convert(obj, _EVENT_TYPES[kind])
    _check_hashes(ev)
    return ev


def _ranked(events: list, rank: Any) -> list:
    if rank is not None:
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise ValueError(f"the data-parallel rank must be an integer, not {str(rank)[:20]}")
        for ev in events:
            ev.dp_rank = rank
    return events


def parse_batch(obj: Any) -> tuple[list, str, int | None]:
    """A decoded batch: its events, its form (``array`` / ``native`` / ``object`` / ``event``), its ``seq``."""
    if isinstance(obj, list):
        if len(obj) >= 2 and isinstance(obj[1], list) and not isinstance(obj[0], str):
            events = _ranked([parse_event(e) for e in obj[1]], obj[2] if len(obj) > 2 else None)
            native = any(isinstance(e, dict) for e in obj[1])
            return events, "native" if native else "array", None
        raise ValueError("an array line must be [ts, [event, ...], dp_rank]")
    if isinstance(obj, dict):
        if "events" in obj:
            if not isinstance(obj["events"], list):
                raise ValueError("'events' must be an array")
            seq = obj.get("seq")
            if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq < 0):
                raise ValueError("'seq' must be a non-negative integer")
            rank = next((obj[k] for k in ("data_parallel_rank", "attn_dp_rank", "dp_rank") if k in obj), None)
            return _ranked([parse_event(e) for e in obj["events"]], rank), "object", seq
        return [parse_event(obj)], "event", None
    raise ValueError("a line must be an event batch (array or object)")


# -- reading logs -------------------------------------------------------------------------------------------

_ANY = msgspec.json.Decoder()
_FORM_NAMES = {"native": "native (object events)", "array": "array", "object": "object", "event": "event"}


def read_event_log(path: str | Path, stream: Any = None) -> tuple[str, Iterator[tuple[int, list]]]:
    """The log's form (``array``, ``native``, ``object``, ``event``, ``cachetrace/1``, or ``empty`` when it
    holds no batch) and its (line, events) batches. The form is that of the first batch; a cachetrace/1 file
    yields its ``kv`` lines. ``path`` ``-`` reads standard input; ``stream`` is the input already opened (a
    `sim.files.Source`, read once, as a stream), which ``path`` names."""
    form, lines = read_event_log_seq(path, stream)
    return form, ((n, events) for n, events, _ in lines)


def read_event_log_seq(path: str | Path, stream: Any = None) -> tuple[str, Iterator[tuple[int, list, int | None]]]:
    """As ``read_event_log``, with each batch's sequence number (``seq`` of an object batch, else None)."""
    if stream is None:
        try:
            stream = open_source(path)
        except OSError as exc:
            raise EventLogError(f"{label(path)}:0: cannot read: {exc.strerror or exc}") from None
    path = stream.name if stream.name else label(path)
    if ct.is_cachetrace_header(stream.first_line()):
        _, lines = ct.read_cachetrace(path, stream)

        def from_trace() -> Iterator[tuple[int, list, int | None]]:
            try:
                for n, rec in lines:
                    if isinstance(rec, ct.KvEvents):
                        yield n, rec.events, None
            except ct.CacheTraceInputError as exc:
                raise EventLogError(str(exc)) from None
        return "cachetrace/1", from_trace()
    f = io.BufferedReader(stream)

    def lines_of() -> Iterator[tuple[int, list, str, int | None]]:
        with f:
            for n, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    events, form, seq = parse_batch(_ANY.decode(raw))
                except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
                    raise EventLogError(f"{path}:{n}: {' '.join(str(exc).split())[:200]}") from None
                yield n, events, form, seq

    it = lines_of()
    first = next(it, None)

    def rest() -> Iterator[tuple[int, list, int | None]]:
        if first is None:
            return
        yield first[0], first[1], first[3]
        for n, events, _, seq in it:
            yield n, events, seq
    return ("empty" if first is None else first[2]), rest()


_FIELDS = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"),
           "BlockRemoved": ("block_hashes", "medium"), "AllBlocksCleared": ()}


def batch_events(batch: Any) -> list[ct.KvEvent]:
    """The events of one wire batch ``[ts, [event, ...], dp_rank]`` (object or array events); fields kvsim does
    not know (``lora_name``, ``extra_keys``, ``group_idx`` ...) are ignored."""
    raw = batch[1] if isinstance(batch, list) else batch["events"]
    out: list[ct.KvEvent] = []
    for e in raw:
        if isinstance(e, list):
            e = {"type": e[0], **dict(zip(_FIELDS.get(e[0], ()), e[1:], strict=False))}
        kind = e.get("type") or e.get("kind")
        if kind == "BlockStored":
            out.append(ct.BlockStored(list(e["block_hashes"]), e.get("parent_block_hash"), list(e["token_ids"]),
                                      int(e["block_size"]), e.get("lora_id"), e.get("medium")))
        elif kind == "BlockRemoved":
            out.append(ct.BlockRemoved(list(e["block_hashes"]), e.get("medium")))
        elif kind == "AllBlocksCleared":
            out.append(ct.AllBlocksCleared())
        else:
            raise ValueError(f"unknown event type {str(kind)[:40]}")
    return out
