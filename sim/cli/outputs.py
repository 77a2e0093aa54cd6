"""What every command's outputs share, kept light (no rich, no model) so that `sim.cli` can use it while it
starts: exit codes, input errors, the files written so far, writing an output, refusing an output that is an
input, ``-`` as standard output, and the plain progress lines of a long run when stderr is not a terminal.

How a path is written (temporary sibling and rename, or written through) is `sim.files`' job (DESIGN §11).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvsim.sim.cli import signals
from kvsim.sim.files import STDOUT, OutputClash, guard_outputs, output_target, write_atomic

EXIT_OK, EXIT_VIOLATION, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

WRITTEN: list[str] = []
"""Every file this run has written, in order (an interrupted run says which)."""

QUIET: list[bool] = []
"""Set (by `--quiet`) when a command must print no progress line."""

COMMAND: list[str] = []
"""The command running (its progress lines are named after it)."""

ARGV: list[str] = []
"""The arguments this run was given (after ``kvsim``): reports that carry their exact command line read it."""


def command_line() -> str:
    """This run's command line, quoted for a shell: ``kvsim peer vllm w.jsonl --blocks 90``."""
    import shlex
    return shlex.join(["kvsim", *ARGV])


class InputError(Exception):
    """A bad command-line input (a file that cannot be read, a bad option value): exit 2."""


class Stopped(KeyboardInterrupt):
    """A long command stopped by SIGINT/SIGTERM after writing what it had, marked partial: the command line
    ends with 130/143 and says what was written. ``done`` says how far it got."""

    partial = True

    def __init__(self, done: str) -> None:
        self.done = done
        super().__init__(done)


def signal_name() -> str:
    """The signal that stopped this run: SIGINT (Ctrl-C) unless SIGTERM came first."""
    return "SIGTERM" if signals.RECEIVED and signals.RECEIVED[0] == signal.SIGTERM else "SIGINT"


def stopping() -> bool:
    """Whether a signal asked this run to stop (results arriving after it were cut short)."""
    return bool(signals.RECEIVED)


def interrupted_status() -> int:
    """The exit status of a run a signal stopped: 130 for SIGINT (Ctrl-C), 143 for SIGTERM."""
    return signals.status()


def partial_mark(done: str) -> dict[str, str]:
    """What a partial report carries under "partial" (sim.report.verdict.PARTIAL_KEY)."""
    return {"signal": signal_name(), "done": done}


def cannot_write(path: str | os.PathLike, exc: OSError) -> InputError:
    """One line naming the output and the reason (EACCES, ENOSPC, a folder, ...): an input error, exit 2."""
    return InputError(f"{os.fspath(path)}:0: cannot write: {exc.strerror or exc}")


def write(path: str | Path, data: bytes | str) -> None:
    """Write a whole output (`sim.files.write_atomic`: a regular file by temporary sibling and rename, a device,
    FIFO or ``-`` written through), creating a regular file's folder; an unwritable path is an input error
    (exit 2) naming it."""
    text = os.fspath(path)
    try:
        target = output_target(text)
        if target.kind == "file":
            parent = os.path.dirname(target.path)
            if parent and not os.path.isdir(parent):
                os.makedirs(parent, exist_ok=True)
        write_atomic(text, data)
    except OSError as exc:
        raise cannot_write(text, exc) from None
    WRITTEN.append(text)


def checked_outputs(command: str, outputs: list[tuple[str, str]], inputs: list[str]) -> None:
    """Before any work: an output (option, path) that is one of the run's inputs is an input error (exit 2)."""
    for option, path in outputs:
        try:
            guard_outputs([path], inputs)
        except OutputClash as exc:
            raise InputError(f"kvsim {command}: {option} {path}: {exc.strerror}") from None


@contextlib.contextmanager
def stdout_for_reports(outputs: list[tuple[str, str]]) -> Iterator[None]:
    """When an output is standard output (``-``, ``/dev/stdout``), the console goes to stderr for the run, so
    that standard output holds that output alone."""
    to_stdout = False
    for _, path in outputs:
        with contextlib.suppress(OSError):
            target = output_target(path)
            to_stdout = to_stdout or (target.kind == "fd" and target.fd == 1)
    if not to_stdout:
        yield
        return
    real = sys.stdout
    STDOUT[:] = [real]
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = real
        STDOUT.clear()


# ----------------------------------------------------------------------------------------- progress lines

def progress_interval() -> float:
    """Seconds between two plain progress lines (KVSIM_PROGRESS_INTERVAL, default 30)."""
    try:
        return max(0.0, float(os.environ.get("KVSIM_PROGRESS_INTERVAL", "30")))
    except ValueError:
        return 30.0


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" \
        if s >= 60 else f"{s}s"


class PlainProgress:
    """Progress for a log: every `progress_interval` seconds (a monotonic clock), one plain line on stderr,
    ``kvsim CMD: PHASE: DONE/TOTAL UNIT, ELAPSED elapsed`` -- so a CI log shows life, and standard output stays
    what the command prints. A daemon thread writes the lines, so a phase that reports no progress still
    shows its elapsed time. It offers the part of rich's Progress that the commands use (`add_task`,
    `update`, `advance`, `remove_task`, a context manager); `phase` names what runs now."""

    def __init__(self, what: str, unit: str = "", command: str = "") -> None:
        self.what, self.unit, self.command = what, unit, command or what
        self.tasks: dict[int, dict[str, Any]] = {}
        self.interval = progress_interval()
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # rich.progress.Progress's subset
    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        with self._lock:
            key = len(self.tasks)
            self.tasks[key] = {"description": description, "total": total, "completed": 0, **fields}
        return key

    def update(self, task: int, completed: float | None = None, total: float | None = None, **fields: Any) -> None:
        with self._lock:
            t = self.tasks.get(task)
            if t is not None:
                if completed is not None:
                    t["completed"] = completed
                if total is not None:
                    t["total"] = total
                t.update(fields)
        if self.interval == 0:
            self.line()

    def advance(self, task: int, n: float = 1) -> None:
        with self._lock:
            t = self.tasks.get(task)
            if t is not None:
                t["completed"] += n
        if self.interval == 0:
            self.line()

    def remove_task(self, task: int) -> None:
        with self._lock:
            self.tasks.pop(task, None)

    def phase(self, description: str) -> None:
        """Name what runs now (a task without a count)."""
        with self._lock:
            self.tasks.clear()
            self.tasks[0] = {"description": description, "total": None, "completed": 0}

    def __enter__(self) -> PlainProgress:
        self._start = time.monotonic()
        if self.interval > 0:
            self._thread = threading.Thread(target=self._tick, name="kvsim-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.line()

    def text(self) -> str:
        """The line as it stands now."""
        with self._lock:
            parts = []
            for t in self.tasks.values():
                unit = "bytes" if t.get("bytes", self.unit == "bytes") else "" if self.unit == "bytes" else self.unit
                count = _count(t["completed"], t["total"], unit)
                name = str(t["description"]) if "{" in self.what or self.what == self.command else self.what
                parts.append(f"{name}: {count}" if count else name)
        what = "; ".join(parts) or ("started" if "{" in self.what else self.what)
        return f"kvsim {self.command}: {what}, {_duration(time.monotonic() - self._start)} elapsed"

    def line(self) -> None:
        try:
            sys.stderr.write(self.text() + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr gone: nothing to show life on
            self._stop.set()


def _count(done: float, total: float | None, unit: str) -> str:
    if unit == "bytes":
        scale, name = (1 << 20, "MiB") if max(done, total or 0) >= 1 << 20 else (1 << 10, "KiB")
        return f"{done / scale:,.1f}/{total / scale:,.1f} {name}" if total else f"{done / scale:,.1f} {name} read"
    n = f"{int(done):,}" if float(done).is_integer() else f"{done:,.1f}"
    if total is None:
        return f"{n} {unit}".strip() if done else ""
    t = f"{int(total):,}" if float(total).is_integer() else f"{total:,.1f}"
    return f"{n}/{t} {unit}".strip()


def plain_progress(what: str, unit: str = "") -> PlainProgress | None:
    """Plain progress lines on stderr when stderr is not a terminal and --quiet was not given, else None."""
    if QUIET and QUIET[0]:
        return None
    try:
        if sys.stderr.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return PlainProgress(what, unit, COMMAND[0] if COMMAND else "")
