"""The `kvsim` command line. `main` parses, runs one command and classifies how it ended.

Exit codes (DESIGN §8, §11): 0 no violation (for `check`: every scenario behaved as declared), 1 at least
one violation (or a scenario that misbehaved), 2 input error — one line `file:line: reason` (or `kvsim CMD:
--flag must be ...`) on stderr, never a traceback —, 3 internal error: a bug inside kvsim, one line naming
where it happened and asking for a report; the full traceback only with `--debug`.

Signals (DESIGN §11). Ctrl-C exits 130 and SIGTERM 143 (128 + the signal), with one line on stderr and no
traceback, at any moment:
- while kvsim starts (its modules import, the arguments parse) nothing is written yet: the handler installed
  first thing in this module prints the line and ends the process at once — an import cut half-way is never
  resumed, so no half-registered rule catalogue can complain;
- while a command runs, the signal raises KeyboardInterrupt: outputs being written under temporary names are
  removed (`sim.files.atomic_path`), and the long commands (check, simulate, fuzz, selfcheck, peer) write what
  they have, marked partial in the report and the headline; the line says what was written;
- signals within a second of the first are that one (`timeout -s INT` signals the command and its process
  group); a later signal while the first is handled stops at once (temporary files removed, nothing renamed).
A closed standard output (`kvsim rules | head -1`) ends quietly with 141 (128 + SIGPIPE, the status a shell
shows for a tool killed by a broken pipe), never 1 and never a traceback.
"""

from __future__ import annotations

import os
import signal
import sys

from kvsim.sim.cli import signals

if os.path.basename(sys.argv[0] if sys.argv else "") == "kvsim":  # the console script: before any import
    signals.handle(signals.stop_now)


def _interrupted(exc: BaseException) -> int:
    from kvsim.sim.cli.outputs import WRITTEN
    signum = signals.RECEIVED[0] if signals.RECEIVED else signal.SIGINT
    done = getattr(exc, "done", None)
    wrote = f"wrote {', '.join(WRITTEN)}" if WRITTEN else "no report written"
    if getattr(exc, "partial", False):
        wrote += " (partial: what was done before the signal)"
    elif WRITTEN:
        wrote += ", nothing else"
    print(f"kvsim: {signals.name(signum)}{f' after {done}' if done else ''}: {wrote}", file=sys.stderr, flush=True)
    return 128 + signum


def _broken_pipe() -> int:
    """The reader of standard output left: say nothing more (anything still buffered goes nowhere)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 128 + signal.SIGPIPE


def _rich_broken_pipe(console: object) -> None:
    """rich's Console met a closed standard output: the same quiet end as every other broken pipe."""
    console.quiet = True  # type: ignore[attr-defined]
    raise BrokenPipeError


def main(argv: list[str] | None = None) -> int:
    previous = signals.handle(signals.stop_now)
    signals.RECEIVED.clear()
    signals.FIRST_AT.clear()
    hook = sys.unraisablehook
    sys.unraisablehook = signals.unraisable(hook)  # type: ignore[assignment]
    try:
        try:
            from kvsim.sim.cli import outputs as run_state
            run_state.ARGV[:] = list(sys.argv[1:] if argv is None else argv)
            from kvsim.sim.cli.parser import parse
            try:
                args, outputs, inputs = parse(argv)
            except SystemExit as exc:  # --help, --version, or a bad argument (one line already printed)
                sys.stdout.flush()
                return exc.code if isinstance(exc.code, int) else 2
        except BrokenPipeError:
            return _broken_pipe()
        signals.handle(signals.stop_run)
        try:
            return _run(args, outputs, inputs)
        except KeyboardInterrupt as exc:
            try:
                return _interrupted(exc)
            except BrokenPipeError:
                return signals.status()
    finally:
        sys.unraisablehook = hook
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _run(args, outputs: list[tuple[str, str]], inputs: list[str]) -> int:
    from kvsim.sim.cli import outputs as run_state
    from kvsim.sim.cli.outputs import EXIT_INPUT, EXIT_INTERNAL, InputError, checked_outputs, stdout_for_reports
    from kvsim.sim.trace.stream import TraceInputError
    run_state.QUIET[:] = [bool(getattr(args, "quiet", False))]
    run_state.COMMAND[:] = [args.command]
    run_state.WRITTEN.clear()
    rich_console = sys.modules.get("rich.console")
    if rich_console is not None:  # rich ends a broken pipe with SystemExit(1): "violations found"
        rich_console.Console.on_broken_pipe = _rich_broken_pipe
    try:
        checked_outputs(args.command, outputs, inputs)
        with stdout_for_reports(outputs):
            code = args.fn(args)
            sys.stdout.flush()  # a reader that left shows here, not at exit
        return code
    except (TraceInputError, InputError) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # `kvsim rules | head`: the reader left; nothing more to say
        return _broken_pipe()
    except Exception as exc:  # noqa: BLE001 — classified: a crash is exit 3, never "violations found"
        if args.debug:
            import traceback
            traceback.print_exc()
        internal = getattr(sys.modules.get("kvsim.sim.replay"), "InternalError", ())  # names its event itself
        where = str(exc) if isinstance(exc, internal) else f"kvsim {args.command}: internal error: " \
                                                              f"{type(exc).__name__}: {exc}"
        print(f"{where} — this is a bug in kvsim, not in your trace: please report it with the trace (rerun with "
              "--debug for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


__all__ = ["main"]
