"""Signal handling of the `kvsim` command line (DESIGN §11), installed before anything else imports.

`stop_now` (while kvsim starts, and for a second signal): one line on stderr, the temporary files being
written removed, exit 128 + the signal at once. `stop_run` (while a command runs): KeyboardInterrupt where the
command stands, after stopping its worker processes; the command then writes what it has. `RECEIVED` lists
the signals this run got (the first one names the exit status: 130 for SIGINT, 143 for SIGTERM).

Signals that arrive within `SAME_STOP_S` of the first count as that one: `timeout -s INT` sends its signal to
the command and again to its process group, a terminal's Ctrl-C reaches every process of the foreground
group, a CI runner may send SIGINT then SIGTERM at once -- one request to stop, which must not cut short the
partial report the first one asked for. A signal later than that is a second request: stop at once. The
interval is measured on the monotonic clock and decides nothing any output shows.
"""

from __future__ import annotations

import os
import signal
import sys
import time

MAIN_PID = os.getpid()
RECEIVED: list[int] = []
FIRST_AT: list[float] = []
"""When the first signal came (time.monotonic)."""
SAME_STOP_S = 1.0
"""Signals within this many seconds of the first are the same request to stop."""


def name(signum: int) -> str:
    return "interrupted (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


def status() -> int:
    """The exit status of a run a signal stopped: 130 for SIGINT (Ctrl-C), 143 for SIGTERM."""
    return 128 + (RECEIVED[0] if RECEIVED else signal.SIGINT)


def stop_now(signum: int, frame: object) -> None:
    """Starting up (nothing written yet), or a second signal: one line, temporary files removed, exit now."""
    if os.getpid() != MAIN_PID:  # a forked worker: its parent speaks for the run
        os._exit(128 + signum)
    files = sys.modules.get("kvsim.sim.files")
    for tmp in list(getattr(files, "PENDING", ())):
        try:
            os.unlink(tmp)
        except OSError:
            pass
    what = "while starting: nothing written" if not RECEIVED else "again: stopped at once, no report written"
    try:
        os.write(2, f"kvsim: {name(signum)} {what}\n".encode())
    finally:
        os._exit(128 + signum)


REDELIVERED: list[bool] = []


def stop_run(signum: int, frame: object) -> None:
    """While a command runs: stop it where it is (KeyboardInterrupt); a second signal stops at once."""
    if os.getpid() != MAIN_PID:
        if signum == signal.SIGTERM:
            os._exit(128 + signum)
        raise KeyboardInterrupt
    if REDELIVERED:
        REDELIVERED.clear()
    elif RECEIVED:
        if FIRST_AT and time.monotonic() - FIRST_AT[0] < SAME_STOP_S:
            return  # the first request again (timeout's process group, a terminal's group): already stopping
        stop_now(signum, frame)  # a second request while the first is handled
    else:
        RECEIVED.append(signum)
        FIRST_AT[:] = [time.monotonic()]
        stop_children()
    raise KeyboardInterrupt


def unraisable(hook: object) -> object:
    """A `sys.unraisablehook` that, when the KeyboardInterrupt of a signal was raised where Python swallows
    exceptions (a gc callback, a ``__del__``: "Exception ignored in ..."), prints nothing and delivers the
    signal again a moment later, so that the run stops where it can; anything else goes to `hook`."""
    def redeliver(u: object) -> None:
        if isinstance(getattr(u, "exc_value", None), KeyboardInterrupt) and RECEIVED:
            import threading
            REDELIVERED.append(True)
            threading.Timer(0.01, os.kill, (os.getpid(), RECEIVED[0])).start()
            return
        hook(u)  # type: ignore[operator]
    return redeliver


def stop_children() -> None:
    """The run stops: its worker processes (a sweep's pool, the self-check's fuzz subprocesses) stop too,
    whichever signal came and whoever sent it (a SIGTERM reaches this process alone)."""
    mp = sys.modules.get("multiprocessing")
    for child in mp.active_children() if mp is not None else ():
        child.terminate()
    try:  # Linux: every thread's children (subprocess.run from worker threads included)
        tasks = os.listdir(f"/proc/{os.getpid()}/task")
    except OSError:
        return
    for tid in tasks:
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass


def handle(handler: object) -> dict[int, object]:
    """Install `handler` for SIGINT and SIGTERM; returns the previous ones (empty off the main thread)."""
    previous: dict[int, object] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)  # type: ignore[arg-type]
    except ValueError:  # not the main thread (kvsim called from a test's worker thread)
        pass
    return previous
