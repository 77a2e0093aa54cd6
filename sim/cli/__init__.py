"""The `kvsim` command line. `main` parses, runs one command and classifies how it ended.

Exit codes (DESIGN §8, §11): 0 no violation (for `check`: every scenario behaved as declared), 1 at least
one violation (or a scenario that misbehaved), 2 input error — one line `file:line: reason` on stderr,
never a traceback —, 3 internal error: a bug inside kvsim, one line naming where it happened and asking
for a report; the full traceback only with `--debug`.
"""

from __future__ import annotations

import sys
import traceback

from kvsim.sim.cli.common import EXIT_INPUT, EXIT_INTERNAL, InputError
from kvsim.sim.cli.parser import build_parser
from kvsim.sim.replay import InternalError
from kvsim.sim.trace.stream import TraceInputError

REPORT_HINT = "this is a bug in kvsim, not in your trace: please report it with the trace (rerun with --debug " \
              "for the traceback)"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (TraceInputError, InputError) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 — classified: a crash is exit 3, never "violations found"
        if args.debug:
            traceback.print_exc()
        where = str(exc) if isinstance(exc, InternalError) else f"kvsim {args.command}: internal error: " \
                                                                    f"{type(exc).__name__}: {exc}"
        print(f"{where} — {REPORT_HINT}", file=sys.stderr)
        return EXIT_INTERNAL


__all__ = ["main"]
