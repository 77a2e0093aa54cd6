"""The `kvsim` command line. `main` parses, runs one command and classifies how it ended.

Exit codes (DESIGN §8, §11): 0 no violation (for `check`: every scenario behaved as declared), 1 at least
one violation (or a scenario that misbehaved), 2 input error — one line `file:line: reason` (or `kvsim CMD:
--flag must be ...`) on stderr, never a traceback —, 3 internal error: a bug inside kvsim, one line naming
where it happened and asking for a report; the full traceback only with `--debug`. 130: interrupted
(Ctrl-C or SIGTERM), one line saying how far it got and what was written.
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback

REPORT_HINT = "this is a bug in kvsim, not in your trace: please report it with the trace (rerun with --debug " \
              "for the traceback)"
EXIT_INTERRUPTED = 130


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM is an interruption like Ctrl-C: worker processes stop too, and the run ends with exit 130."""
    import multiprocessing
    for child in multiprocessing.active_children():
        child.terminate()
    raise KeyboardInterrupt


def _interrupted(exc: BaseException) -> int:
    from kvsim.sim.cli.common import WRITTEN
    done = getattr(exc, "done", None)
    wrote = f"wrote {', '.join(WRITTEN)}, nothing else" if WRITTEN else "no report written"
    print(f"kvsim: interrupted{f' after {done}' if done else ''}: {wrote}", file=sys.stderr)
    return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    try:
        signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread (kvsim called from a test's worker thread)
        pass
    args = None
    try:
        from kvsim.sim.cli.parser import build_parser
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a bad argument (one line already printed)
            return exc.code if isinstance(exc.code, int) else 2
        return _run(args)
    except KeyboardInterrupt as exc:
        return _interrupted(exc)


def _run(args: argparse.Namespace) -> int:
    from kvsim.sim.cli.common import EXIT_INPUT, EXIT_INTERNAL, InputError
    from kvsim.sim.replay import InternalError
    from kvsim.sim.trace.stream import TraceInputError
    try:
        return args.fn(args)
    except (TraceInputError, InputError) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # `kvsim rules | head`: the reader left; nothing more to say
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 — classified: a crash is exit 3, never "violations found"
        if args.debug:
            traceback.print_exc()
        where = str(exc) if isinstance(exc, InternalError) else f"kvsim {args.command}: internal error: " \
                                                                    f"{type(exc).__name__}: {exc}"
        print(f"{where} — {REPORT_HINT}", file=sys.stderr)
        return EXIT_INTERNAL


__all__ = ["main"]
