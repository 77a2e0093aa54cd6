"""Reading and writing kvtrace/1 files: a streaming, validating decoder and a deterministic writer.

Reading streams: the file is read in fixed-size binary chunks, hashed (SHA-256) in the same pass, split into
lines and decoded one line at a time by reused msgspec decoders, so memory stays constant in trace length.
Every malformed input -- bad bytes, bad JSON, a wrong type, an unknown op, a missing header -- raises
``TraceInputError`` whose text is one line ``"<path>:<line>: <reason>"``; nothing else escapes
(DESIGN: "Malformed input never produces a traceback").

This module knows the kvtrace/1 line shapes (from ``sim.trace.records``) and nothing of what events mean: it never
checks store rules, ids, or ordering between events.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Iterator
from typing import IO, Any, BinaryIO

import msgspec

from kvsim.sim.files import STDIN, label, open_source
from kvsim.sim.trace.records import EVENT_TYPES, FORMAT, Event, Header

__all__ = [
    "TraceInputError", "TraceReader", "TraceWriter", "open_trace", "decode_event", "decode_header",
    "encode_line", "event_from_builtins", "header_from_builtins", "to_builtins",
    "CHUNK_BYTES", "MAX_LINE_BYTES",
]

CHUNK_BYTES = 1 << 20
"""Bytes read (and hashed) per read call."""
MAX_LINE_BYTES = 64 << 20
"""A longer line is an input error; it bounds the memory one line can take."""
_MAX_REASON = 240

_EVENT_DECODER = msgspec.json.Decoder(Event)
_HEADER_DECODER = msgspec.json.Decoder(Header)
_ANY_DECODER = msgspec.json.Decoder()
_ENCODER = msgspec.json.Encoder(order="deterministic")


class TraceInputError(Exception):
    """Malformed kvtrace/1 input.  ``str()`` is exactly one line: ``"<path>:<line>: <reason>"``.

    ``line`` is the 1-based file line; 0 means the error is not tied to a line (the file cannot be read)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = _one_line(str(path), 4096)
        self.line = line
        self.reason = _one_line(reason, _MAX_REASON)
        super().__init__(f"{self.path}:{self.line}: {self.reason}")


# ----------------------------------------------------------------------------------------- reasons

def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split()) if ("\n" in text or "\r" in text) else text
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_LONE_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")
_AT = re.compile(r" - at `([^`]*)`(?: in `([^`]*)`)?$")


def _validation_reason(msg: str) -> str:
    """Rephrase a msgspec.ValidationError message: ``expected int, got str at $.tokens``."""
    where = ""
    m = _AT.search(msg)
    if m:
        msg = msg[: m.start()]
        path = m.group(2) or m.group(1)
        where = f" at {path}" + (" (a key)" if m.group(2) else "")
    if m and m.group(1) == "$.op":
        if msg.startswith("Invalid value "):
            return f"unknown op {msg[len('Invalid value '):]}"
        return "op must be a string naming an event"
    if msg.startswith("Object missing required field `"):
        return f"missing field '{msg[31:-1]}'{where}"
    if msg.startswith("Object contains unknown field `"):
        return f"unknown field '{msg[31:-1]}'{where}"
    if re.fullmatch(r"Expected `int` (<= 9223372036854775807|>= 0|>= -1)", msg):
        return f"integer out of range (integers are JSON integers in [0, 2^63)){where}"
    if msg in ("Integer value out of range", "Number out of range"):
        return f"{msg.split()[0].lower()} out of range{where}"
    msg = msg.replace("`", "")
    return (msg[:1].lower() + msg[1:]) + where


def _reason(raw: bytes, exc: BaseException) -> str:
    """One-line reason for a line that failed to decode."""
    if isinstance(exc, msgspec.ValidationError):  # a subclass of DecodeError: test it first
        return _validation_reason(str(exc))
    if isinstance(exc, (msgspec.DecodeError, UnicodeDecodeError)):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            return f"not UTF-8 (byte {bad.start})"
        if isinstance(exc, UnicodeDecodeError):  # the whole-line check above normally catches these first
            return f"not UTF-8: {exc.reason}"
        msg = str(exc)
        if msg == "Input data was truncated":
            if _LONE_HIGH_SURROGATE.search(raw):  # msgspec reports these as truncation
                return "not JSON: unpaired UTF-16 surrogate escape"
            return "not JSON: truncated line"
        return "not JSON: " + msg.removeprefix("JSON is malformed: ")
    if isinstance(exc, RecursionError):
        return "not JSON: nesting too deep"
    return f"cannot decode: {type(exc).__name__}: {exc}"


def _explain_header(raw: bytes, exc: BaseException) -> str:
    """Line 1 failed to decode as a Header: say whether it is no header at all or a wrong format."""
    if isinstance(exc, msgspec.ValidationError):
        try:
            obj = _ANY_DECODER.decode(raw)
        except Exception:  # noqa: BLE001 - the original error explains it
            return _reason(raw, exc)
        if not isinstance(obj, dict) or "format" not in obj:
            return f"missing header: line 1 must be the {FORMAT} header"
        if obj["format"] != FORMAT:
            return f"unsupported format {_short_repr(obj['format'])} (expected '{FORMAT}')"
    return _reason(raw, exc)


def _explain_event(raw: bytes, exc: BaseException) -> str:
    if isinstance(exc, msgspec.ValidationError) and str(exc) == "Object missing required field `op`":
        try:
            obj = _ANY_DECODER.decode(raw)
        except Exception:  # noqa: BLE001
            obj = None
        if isinstance(obj, dict) and "format" in obj:
            return "unexpected header: only line 1 may be the header"
    return _reason(raw, exc)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _blank(raw: bytes) -> bool:
    return not raw.strip()


# ----------------------------------------------------------------------------------------- reading

class TraceReader:
    """A kvtrace/1 file opened for streaming: ``header`` is decoded on open; iterating yields
    ``(index, line, event)`` tuples (index = 0-based count of event lines, line = 1-based file line).

    Line 1 must be the header; later blank lines are skipped (they still count as file lines).
    ``sha256`` is the hex digest of the whole file (read to the end if iteration stopped early).
    ``path`` ``-`` reads standard input; ``stream``, when given, is the input already opened (read once, from
    where it stands; ``path`` then only names it). Use as a context manager, or call ``close()``."""

    def __init__(self, path: str | os.PathLike, stream: BinaryIO | None = None) -> None:
        self.path = label(path)
        self.events = 0
        """Event lines decoded so far."""
        self.lines = 0
        """File lines read so far."""
        self._hash = hashlib.sha256()
        self._digest: str | None = None
        self._iterating = False
        try:
            self._file: Any = stream if stream is not None else \
                open_source(path) if os.fspath(path) == STDIN else open(self.path, "rb")
        except OSError as exc:
            raise TraceInputError(self.path, 0, f"cannot read: {exc.strerror or exc}") from None
        self._lines = self._split()
        try:
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise

    # -- the single pass: chunks -> hash -> lines
    def _split(self) -> Iterator[bytes]:
        f, update, limit = self._file, self._hash.update, MAX_LINE_BYTES
        pending: list[bytes] = []
        pending_len = emitted = 0
        while True:
            if f.closed:
                raise RuntimeError("trace reader closed (or sha256 taken) before the end of the file")
            try:
                chunk = f.read(CHUNK_BYTES)
            except OSError as exc:
                raise TraceInputError(self.path, emitted + 1, f"cannot read: {exc.strerror or exc}") from None
            if not chunk:
                break
            update(chunk)
            parts = chunk.split(b"\n")
            tail = parts.pop()
            if parts:
                if pending:
                    parts[0] = b"".join(pending) + parts[0]
                    pending, pending_len = [], 0
                emitted += len(parts)
                yield from parts
            if tail:
                pending.append(tail)
                pending_len += len(tail)
                if pending_len > limit:
                    raise TraceInputError(self.path, emitted + 1, f"line longer than {limit} bytes")
        self._finish_hash()
        if pending:
            yield b"".join(pending)

    def _finish_hash(self) -> None:
        if self._digest is None:
            self._digest = self._hash.hexdigest()
            self.close()

    def _read_header(self) -> Header:
        raw = next(self._lines, None)
        if raw is None:
            raise TraceInputError(self.path, 1, f"empty file: line 1 must be the {FORMAT} header")
        self.lines = 1
        raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark some editors write
        if _blank(raw):
            raise TraceInputError(self.path, 1, f"missing header: line 1 must be the {FORMAT} header")
        try:
            return _HEADER_DECODER.decode(raw)
        except Exception as exc:  # noqa: BLE001 - every decode failure is an input error
            raise TraceInputError(self.path, 1, _explain_header(raw, exc)) from None

    def __iter__(self) -> Iterator[tuple[int, int, Event]]:
        if self._iterating:
            raise RuntimeError("a TraceReader can be iterated once")
        self._iterating = True
        return self._records()

    def _records(self) -> Iterator[tuple[int, int, Event]]:
        decode = _EVENT_DECODER.decode
        line, index = self.lines, self.events
        try:
            for raw in self._lines:
                line += 1
                try:
                    event = decode(raw)
                except Exception as exc:  # noqa: BLE001 - every decode failure is an input error
                    if _blank(raw):
                        continue
                    raise TraceInputError(self.path, line, _explain_event(raw, exc)) from None
                yield index, line, event
                index += 1
        finally:
            self.lines, self.events = line, index

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the whole file's bytes; hashes any part not yet read (without decoding it)."""
        if self._digest is None:
            f = self._file
            if f.closed:
                raise RuntimeError("trace reader closed before its sha256 was taken")
            try:
                for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
                    self._hash.update(chunk)
            except OSError as exc:
                raise TraceInputError(self.path, 0, f"cannot read: {exc.strerror or exc}") from None
            self._finish_hash()
        return self._digest  # type: ignore[return-value]

    def close(self) -> None:
        """Close the file (``sha256`` stays available only if it was already computed)."""
        self._file.close()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_trace(path: str | os.PathLike, stream: BinaryIO | None = None) -> TraceReader:
    """Open a kvtrace/1 file (``-``: standard input; or the already opened ``stream`` it names): returns a
    reader whose ``header`` is decoded and which iterates lazily over ``(index, line, event)``.  Raises
    ``TraceInputError`` for any malformed input."""
    return TraceReader(path, stream)


def decode_header(data: bytes | str, path: str = "<header>", line: int = 1) -> Header:
    """Decode one header line, raising ``TraceInputError`` (reported at ``path:line``) on bad input."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        return _HEADER_DECODER.decode(raw)
    except Exception as exc:  # noqa: BLE001
        raise TraceInputError(path, line, _explain_header(raw, exc)) from None


def decode_event(data: bytes | str, path: str = "<event>", line: int = 1) -> Event:
    """Decode one event line, raising ``TraceInputError`` (reported at ``path:line``) on bad input."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        return _EVENT_DECODER.decode(raw)
    except Exception as exc:  # noqa: BLE001
        raise TraceInputError(path, line, _explain_event(raw, exc)) from None


# ----------------------------------------------------------------------------------------- writing and builtins

def encode_line(record: Header | Event) -> bytes:
    """One deterministic JSON line (with its ``\\n``): Struct fields in declaration order, dict keys sorted,
    defaults omitted."""
    return _ENCODER.encode(record) + b"\n"


def to_builtins(record: Header | Event) -> Any:
    """The record as plain dicts/lists/str/int/bool, exactly as it would be written."""
    return msgspec.to_builtins(record, order="deterministic")


def event_from_builtins(obj: Any) -> Event:
    """Build and validate an event from plain data (``{"op": "map", "seq": "s0", ...}``).
    Raises ``ValueError`` with a one-line reason on bad data."""
    try:
        return msgspec.convert(obj, Event)
    except msgspec.ValidationError as exc:
        raise ValueError(_validation_reason(str(exc))) from None


def header_from_builtins(obj: Any) -> Header:
    """Build and validate a header from plain data.  Raises ``ValueError`` on bad data."""
    try:
        return msgspec.convert(obj, Header)
    except msgspec.ValidationError as exc:
        raise ValueError(_validation_reason(str(exc))) from None


class TraceWriter:
    """Writes a kvtrace/1 file: the header on construction, then one line per ``write(event)``.

    ``target`` is a path (opened, and closed by ``close()``) or an open binary or text stream (left open).
    With ``validate`` (the default) each line is decoded back before it is written, so anything written
    decodes -- Struct constructors do not check integer ranges; a bad event raises ``ValueError``."""

    def __init__(self, target: str | os.PathLike | IO[bytes] | IO[str], header: Header, *,
                 validate: bool = True) -> None:
        if not isinstance(header, Header):
            raise TypeError(f"header must be a sim.trace.records.Header, not {type(header).__name__}")
        self._owned = isinstance(target, (str, os.PathLike))
        self._stream: Any = open(target, "wb") if isinstance(target, (str, os.PathLike)) else target
        self._text = isinstance(self._stream, io.TextIOBase)
        self._validate = validate
        self.events = 0
        """Events written so far."""
        self._put(header, _HEADER_DECODER)

    def _put(self, record: Any, decoder: msgspec.json.Decoder) -> None:
        data = encode_line(record)
        if self._validate:
            try:
                decoder.decode(data)
            except msgspec.ValidationError as exc:
                raise ValueError(f"{type(record).__name__} would not decode: "
                                 f"{_validation_reason(str(exc))}") from None
        self._stream.write(data.decode("utf-8") if self._text else data)

    def write(self, event: Event) -> None:
        """Append one event line."""
        if not isinstance(event, EVENT_TYPES):
            raise TypeError(f"not a kvtrace/1 event: {type(event).__name__}")
        self._put(event, _EVENT_DECODER)
        self.events += 1

    def close(self) -> None:
        """Flush; close the file if this writer opened it."""
        if self._owned:
            self._stream.close()
        else:
            self._stream.flush()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
