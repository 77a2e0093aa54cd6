"""Inputs read once, as streams, and outputs written whole.

An input is a file, ``-`` for standard input, ``/dev/stdin`` or a process substitution (``<(...)``).

A pipe can be read only once and has no size, so nothing that reads an input may stat, seek or reopen it:
a command opens each input once (`open_source`), may look at its first line without consuming it
(`Source.first_line`, to tell a cachetrace/1 from a kvtrace/1), and reads on; the SHA-256 that reports
carry and the byte count that progress bars show are taken from the same pass (`Source.sha256`,
`Source.consumed`). Standard input is named ``<stdin>`` in error lines and reports alike.

An output (a report, a recording) is written under a temporary name in its own folder and renamed into place
only when complete (`atomic_path`, `atomic_output`, `write_atomic`), so an interrupted run never leaves a
truncated file that looks whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import os
import stat
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

__all__ = ["STDIN", "STDIN_LABEL", "Source", "label", "open_source", "open_text", "atomic_path", "atomic_output",
           "write_atomic"]

STDIN = "-"
"""The command-line name of standard input."""
STDIN_LABEL = "<stdin>"
"""How standard input is named in error lines and reports."""

_stdin_taken = False


def label(path: str | os.PathLike) -> str:
    """The name an input goes by in messages and reports: ``<stdin>`` for ``-``, the path otherwise."""
    text = os.fspath(path)
    return STDIN_LABEL if text == STDIN else text


class Source(io.RawIOBase):
    """A binary input opened once. Reads are hashed (SHA-256) and counted as they happen; `first_line`
    peeks at line 1 without consuming it. ``size`` is the byte size of a regular file (None for a pipe)."""

    def __init__(self, path: str, raw: BinaryIO, size: int | None) -> None:
        super().__init__()
        self.path = path
        self.name = label(path)
        self.size = size
        self.consumed = 0
        """Bytes handed to the reader so far."""
        self._raw = raw
        self._read1 = getattr(raw, "read1", raw.read)
        self._hash = hashlib.sha256()
        self._pending = b""  # bytes peeked at but not yet read
        self._eof = False

    def readable(self) -> bool:
        return True

    def _pull(self, n: int) -> bytes:
        # read1: what the pipe holds now (at least a byte, unless at the end), never waiting for n bytes
        data = self._read1(n)
        if data:
            self._hash.update(data)
        else:
            self._eof = True
        return data

    def first_line(self, limit: int = 1 << 16) -> bytes:
        """Line 1 (with its newline, at most ``limit`` bytes), left in place for the reader."""
        while b"\n" not in self._pending and len(self._pending) < limit and not self._eof:
            self._pending += self._pull(1 << 16)
        end = self._pending.find(b"\n")
        return self._pending[: end + 1 if end >= 0 else limit]

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._pending:
            n = min(len(view), len(self._pending))
            view[:n] = self._pending[:n]
            self._pending = self._pending[n:]
        else:
            data = self._pull(len(view))
            n = len(data)
            view[:n] = data
        self.consumed += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        if self._pending:
            data, self._pending = self._pending[:size], self._pending[size:]
        else:
            data = self._pull(size)
        self.consumed += len(data)
        return data

    def readall(self) -> bytes:
        parts = [self._pending]
        self._pending = b""
        while chunk := self._pull(1 << 20):
            parts.append(chunk)
        data = b"".join(parts)
        self.consumed += len(data)
        return data

    def sha256(self) -> str:
        """Hex SHA-256 of the whole input: what is left is read (and hashed) first."""
        while not self._eof and not self.closed:
            self._pending = b""
            self._pull(1 << 20)
        return self._hash.hexdigest()

    def close(self) -> None:
        if not self.closed:
            if self._raw is not getattr(sys.stdin, "buffer", None):
                self._raw.close()
        super().close()


def open_source(path: str | os.PathLike) -> Source:
    """Open an input once (``-``: standard input, which can be opened only once). Raises OSError."""
    global _stdin_taken
    text = os.fspath(path)
    if text == STDIN:
        if _stdin_taken:
            raise OSError(f"standard input ('{STDIN}') can be read only once")
        _stdin_taken = True
        raw: BinaryIO = sys.stdin.buffer
    else:
        raw = open(text, "rb")  # noqa: SIM115 - the Source owns it
    try:
        st = os.fstat(raw.fileno())
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError, io.UnsupportedOperation):
        size = None
    return Source(text, raw, size)


def open_text(source: Source) -> io.TextIOWrapper:
    """The source as UTF-8 text (universal newlines left to the caller: ``newline=''``, as csv wants)."""
    return io.TextIOWrapper(io.BufferedReader(source), encoding="utf-8", newline="")


# ----------------------------------------------------------------------------------------- outputs

_serial = itertools.count()


def _temporary_name(path: str) -> str:
    """``.NAME.PID.N.part`` beside the destination (the same file system, so the rename is atomic)."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{os.getpid()}.{next(_serial)}.part")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary name in the destination's folder to write to; renamed to ``path`` (os.replace) only when
    the block completes, removed when it raises (Ctrl-C included). A reader never sees a truncated file
    under the final name. Raises OSError when the folder cannot be written."""
    final = os.fspath(path)
    tmp = _temporary_name(final)
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:
        os.replace(tmp, final)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write whole: written under a temporary name, renamed into place when complete."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        yield f


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write a whole file atomically (UTF-8 for text). Raises OSError."""
    with atomic_output(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
