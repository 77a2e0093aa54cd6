"""The released TokenSpeed scheduler wheel (PyPI ``tokenspeed-scheduler``, extra ``peers``) as the adapter calls it.

``engine()`` imports it with its logger at ``warn`` unless the user set ``SPDLOG_LEVEL``; ``Guarded`` wraps the
scheduler so that what the wheel raises from its own code becomes ``EngineFailure`` -- a finding about the
scheduler (PEER-10), never kvsim's own error. The wheel logs through spdlog to the process's standard output (one
info line per retraction and restore, with a wall-clock stamp): while it runs (``engine_stdout_to_stderr``), file
descriptor 1 points at standard error, so kvsim's own output stays one finding per line and the same bytes for the
same run.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["engine", "available", "version", "EngineFailure", "ENGINE_EXCEPTIONS", "Guarded",
           "engine_stdout_to_stderr"]


def engine():
    """The wheel's module, imported with its logger at ``warn`` unless the user set ``SPDLOG_LEVEL`` (the
    extension reads it once, when it loads)."""
    os.environ.setdefault("SPDLOG_LEVEL", "warn")
    import tokenspeed_scheduler
    return tokenspeed_scheduler


def available() -> bool:
    try:
        engine()
    except ImportError:
        return False
    return True


class EngineFailure(Exception):
    """A call into the scheduler raised ``RuntimeError`` (its own invariant check): a finding about the
    scheduler (PEER-10), never kvsim's own error."""

    def __init__(self, call: str, message: str) -> None:
        super().__init__(f"{call}: {message}")
        self.call, self.message = call, " ".join(message.split())


# what the wheel raises from its own code (C++ exceptions as pybind11 translates them, an assert of its Python
# layer); TypeError (a call kvsim made wrong) and ValueError (a request refused at submission) are not among them
ENGINE_EXCEPTIONS = (RuntimeError, IndexError, KeyError, OverflowError, ArithmeticError, AssertionError, SystemError,
                     MemoryError)


class Guarded:
    """The scheduler object, each method call turning what the wheel raises from its own code
    (``ENGINE_EXCEPTIONS``) into ``EngineFailure`` (``ValueError`` -- a request the scheduler refuses at
    submission -- and ``TypeError`` -- kvsim's own wrong call -- pass through)."""

    def __init__(self, sched) -> None:
        self._sched = sched

    def __getattr__(self, name: str):
        fn = getattr(self._sched, name)

        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except ENGINE_EXCEPTIONS as exc:
                kind = "" if type(exc) is RuntimeError else f"{type(exc).__name__}: "
                raise EngineFailure(name, kind + str(exc)) from None
        return call


@contextlib.contextmanager
def engine_stdout_to_stderr() -> Iterator[None]:
    """While the wheel runs, what it writes to file descriptor 1 goes to standard error."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no standard output at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v
    try:
        return v("tokenspeed-scheduler")
    except PackageNotFoundError:
        return "unknown"
