"""`kvsim generate`: write a generated kvtrace/1 workload, legal or with one engine fault (`--fault NAME`).

One seed chooses the workload and where the fault lands (`sim.trace.generate.options_for`); the header's
meta logs every option. Prints a JSON summary: events written and, with a fault, the rule replay must report
and the bad event's index and line. `--list-faults` prints the fault catalogue (name, rule, bug class).
"""

from __future__ import annotations

import json
import sys

from kvsim.sim.cli.argtypes import integer, output_path
from kvsim.sim.cli.common import EXIT_OK, InputError
from kvsim.sim.files import atomic_output
from kvsim.sim.trace.faults import FAULTS
from kvsim.sim.trace.generate import generate_with, options_for


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="write a generated kvtrace/1 workload, optionally with an engine fault")
    g.add_argument("out", nargs="?", type=output_path, metavar="OUT",
                   help="the trace file to write (renamed into place when complete)")
    g.add_argument("--events", type=integer(1), default=10_000, help="events to write (at least)")
    g.add_argument("--seed", type=integer(0), default=0, help="seed of the workload and of the fault's position")
    g.add_argument("--fault", choices=sorted(FAULTS), help="inject this engine bug class (default: none, a legal "
                   "trace)")
    g.add_argument("--concurrency", type=integer(2), default=8,
                   help="execution rows (max_concurrency; a fault needs at least 4)")
    g.add_argument("--max-context", type=integer(64), default=4096,
                   help="S, the longest sequence in tokens (a fault needs at least 2048)")
    g.add_argument("--list-faults", action="store_true", help="print the fault catalogue and exit")
    g.set_defaults(fn=run)


def run(args) -> int:
    if args.list_faults:
        rows = [{"name": f.name, "rule": f.rule, "bug": f.bug} for f in FAULTS.values()]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    if not args.out:
        raise InputError("kvsim generate: the trace file to write (OUT) is required, or --list-faults")
    try:
        opts = options_for(args.events, args.seed, args.fault, concurrency=args.concurrency,
                           max_context=args.max_context)
    except ValueError as exc:
        raise InputError(f"kvsim generate: --fault {args.fault}: {exc}") from None
    try:
        with atomic_output(args.out) as out:  # a truncated trace never appears under its name
            g = generate_with(out, opts)
    except OSError as exc:
        raise InputError(f"{args.out}:0: cannot write: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(f"{args.out}:0: {exc}") from None
    summary = {"path": args.out, "events": g.events, "seed": args.seed, "fault": g.fault, "rule": g.rule,
               "event": g.event, "line": g.line}
    sys.stdout.write(json.dumps(summary) + "\n")
    return EXIT_OK
