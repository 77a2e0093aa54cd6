"""Inputs read once, as streams, and outputs written whole.

An input is a file, ``-`` for standard input, ``/dev/stdin`` or a process substitution (``<(...)``).

A pipe can be read only once and has no size, so nothing that reads an input may stat, seek or reopen it:
a command opens each input once (`open_source`), may look at its first line without consuming it
(`Source.first_line`, to tell a cachetrace/1 from a kvtrace/1), and reads on; the SHA-256 that reports
carry and the byte count that progress bars show are taken from the same pass (`Source.sha256`,
`Source.consumed`). Standard input is named ``<stdin>`` in error lines and reports alike.

An output (a report, a recording) is written the way careful Unix tools write one (`atomic_path`,
`atomic_output`, `write_atomic`; `output_target` says which way, `guard_outputs` refuses an output that is an
input):

- a regular file, or a path that does not exist yet, is written under a temporary sibling name and renamed into
  place only when complete, so an interrupted run never leaves a truncated file that looks whole; the file
  keeps its permission bits, and a read-only file is refused (EACCES), never replaced;
- a symbolic link to a regular file writes its target the same way; the link stays a link;
- anything else -- ``-`` (standard output), ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, a character or
  block device (``/dev/null``, ``/dev/full``, a terminal), a FIFO, a socket, or a link to one of these -- is
  opened where it is and written through (streamed), never replaced by a regular file;
- a path that is one of the run's inputs (the same device and inode, or the same resolved path) is refused
  before any work starts (`guard_outputs`).

Temporary names are ``.NAME.PID.N.part`` beside the destination; those still open are listed in `PENDING`, so
that a second Ctrl-C, which stops at once, can remove them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import itertools
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

__all__ = ["STDIN", "STDIN_LABEL", "Source", "label", "open_source", "open_text", "atomic_path", "atomic_output",
           "write_atomic", "Target", "output_target", "guard_outputs", "OutputClash", "PENDING", "STDOUT"]

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

STDOUT: list[Any] = []
"""The real standard output while a command writes a report to ``-`` and prints its console on stderr (set by
the command line; empty otherwise: ``-`` is then `sys.stdout` itself)."""

PENDING: set[str] = set()
"""Temporary files being written now (removed by an interrupted run that has to stop at once)."""

_serial = itertools.count()
_FD_LINKS = ("/dev/fd/", "/proc/self/fd/")
_STD_NAMES = {STDIN: 1, "/dev/stdout": 1, "/dev/stderr": 2}


class OutputClash(OSError):
    """An output that names one of the run's inputs."""


@dataclass(frozen=True)
class Target:
    """Where an output goes. ``kind``: "file" (a regular file or a new path, written by temporary sibling and
    rename; ``path`` is the file actually renamed over, a symbolic link's target), "stream" (a device, FIFO,
    socket or a link to one: opened in place and written through) or "fd" (``-``, ``/dev/stdout``,
    ``/dev/stderr``, ``/dev/fd/N``: the process's own descriptor ``fd``, written through)."""

    kind: str
    path: str
    fd: int = -1


def output_target(path: str | os.PathLike) -> Target:
    """How `path` is written (see the module docstring). Raises OSError for a folder or an unwritable file."""
    text = os.fspath(path)
    fd = _descriptor(text)
    if fd is not None:
        return Target("fd", text, fd)
    try:
        st = os.stat(text)  # follows links: what the path names in the end
    except FileNotFoundError:
        # a new file; a dangling link writes (creates) its target, leaving the link in place
        real = os.path.realpath(text) if os.path.islink(text) else text
        return Target("file", real)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", text)
    if not stat.S_ISREG(st.st_mode):
        return Target("stream", text)
    real = os.path.realpath(text) if os.path.islink(text) else text
    if not os.access(real, os.W_OK):
        raise PermissionError(errno.EACCES, "Permission denied", text)
    return Target("file", real)


def _descriptor(text: str) -> int | None:
    """The process's own descriptor a path names, directly or through symbolic links (``/dev/stdout`` ->
    ``/proc/self/fd/1``): written through that descriptor (its offset shared with the console's output),
    never reopened or renamed over, whatever file it is."""
    hops = 0
    while True:
        if text in _STD_NAMES:
            return _STD_NAMES[text]
        for prefix in _FD_LINKS:
            if text.startswith(prefix) and text[len(prefix):].isdigit():
                return int(text[len(prefix):])
        if hops > 40 or not os.path.islink(text):
            return None
        try:
            link = os.readlink(text)
        except OSError:
            return None
        text = link if os.path.isabs(link) else os.path.join(os.path.dirname(text), link)
        hops += 1


def _identity(path: str) -> tuple[str, tuple[int, int] | None]:
    """(resolved path, (device, inode) when it exists) of a path; ``-`` is standard input's descriptor."""
    if path == STDIN:
        try:
            st = os.fstat(0)
        except OSError:
            return "<stdin>", None
        return "<stdin>", ((st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None)
    try:
        st = os.stat(path)
        ident = (st.st_dev, st.st_ino)
    except OSError:
        ident = None
    return os.path.realpath(path), ident


def guard_outputs(outputs: list[str], inputs: list[str]) -> None:
    """Refuse (OutputClash, naming both) an output path that is one of the run's inputs: the same device and
    inode, or the same resolved path. Outputs written through (devices, FIFOs, standard output) never
    destroy a file and are let through; so are the ones standard input came from when that is a pipe."""
    seen = {}
    for path in inputs:
        real, ident = _identity(os.fspath(path))
        seen[real] = path
        if ident is not None:
            seen[ident] = path  # type: ignore[index]
    for out in outputs:
        text = os.fspath(out)
        try:
            target = output_target(text)
        except OSError:
            continue  # the writer says why, naming the path
        if target.kind != "file":
            continue
        real, ident = _identity(target.path)
        clash = seen.get(real) if real in seen else seen.get(ident) if ident is not None else None  # type: ignore
        if clash is not None:
            raise OutputClash(errno.EEXIST, f"is also an input of this run ({label(clash)}): refusing to overwrite "
                                            "it; write the output elsewhere", text)


def _temporary_name(path: str) -> str:
    """``.NAME.PID.N.part`` beside the destination (the same file system, so the rename is atomic)."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{os.getpid()}.{next(_serial)}.part")


def _open_through(target: Target) -> BinaryIO:
    """A binary file that writes `target` in place (never truncating or replacing what the path names)."""
    if target.kind == "fd":
        fd = target.fd
        if fd == 1 and STDOUT:
            fd = STDOUT[0].fileno()
        for stream in (sys.stdout, sys.stderr, *STDOUT):  # what was printed before comes first
            with contextlib.suppress(Exception):
                stream.flush()
        return os.fdopen(os.dup(fd), "wb")
    return os.fdopen(os.open(target.path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0)), "wb")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A path to write the output to (for writers that open a file by name). For a regular file: a temporary
    name in the destination's folder, renamed to the destination (os.replace) only when the block completes,
    removed when it raises (Ctrl-C included); a reader never sees a truncated file under the final name. For
    anything written through (a device, FIFO, ``-``): a temporary file elsewhere, copied through to the
    destination when the block completes. Raises OSError when the destination cannot be written."""
    final = os.fspath(path)
    target = output_target(final)
    if target.kind == "file":
        tmp = _temporary_name(target.path)
    else:
        fd, tmp = tempfile.mkstemp(prefix=".kvsim-", suffix=".part")
        os.close(fd)
    PENDING.add(tmp)
    try:
        try:
            yield tmp
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        try:
            if target.kind == "file":
                _keep_mode(tmp, target.path)
                os.replace(tmp, target.path)
            else:
                with open(tmp, "rb") as src, _open_through(target) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        finally:
            with contextlib.suppress(OSError):
                if target.kind != "file" or os.path.exists(tmp):
                    os.unlink(tmp)
    finally:
        PENDING.discard(tmp)


def _keep_mode(tmp: str, final: str) -> None:
    """The replaced file's permission bits carry over to its new content."""
    with contextlib.suppress(OSError):
        os.chmod(tmp, stat.S_IMODE(os.stat(final).st_mode))


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write whole: a regular file is written under a temporary name and renamed into place
    when complete; a device, FIFO or ``-`` is written through as the block writes."""
    target = output_target(path)
    if target.kind == "file":
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            yield f
        return
    with _open_through(target) as f:
        yield f


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write a whole output (UTF-8 for text): by temporary sibling and rename, or through (see
    `atomic_output`). Raises OSError."""
    with atomic_output(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
