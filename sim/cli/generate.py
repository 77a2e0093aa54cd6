"""`kvsim generate`: write a generated kvtrace/1 workload, legal or with one engine fault (`--fault NAME`).

One seed chooses the workload and where the fault lands (`sim.trace.generate.options_for`); the header's
meta logs every option. Prints a JSON summary: events written and, with a fault, the rule replay must report
and the bad event's index and line. `--list-faults` prints the fault catalogue (name, rule, bug class).
"""

from __future__ import annotations

import json
import sys

from kvsim.sim.cli.common import EXIT_OK, InputError
from kvsim.sim.trace.faults import FAULTS
from kvsim.sim.trace.generate import generate_with, options_for


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="write a generated kvtrace/1 workload, optionally with an engine fault")
    g.add_argument("out", nargs="?", help="the trace file to write")
    g.add_argument("--events", type=int, default=10_000)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--fault", choices=sorted(FAULTS), help="inject this engine bug class")
    g.add_argument("--concurrency", type=int, default=8)
    g.add_argument("--max-context", type=int, default=4096)
    g.add_argument("--list-faults", action="store_true", help="print the fault catalogue and exit")
    g.set_defaults(fn=run)


def run(args) -> int:
    if args.list_faults:
        rows = [{"name": f.name, "rule": f.rule, "bug": f.bug} for f in FAULTS.values()]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    if not args.out:
        raise InputError("generate:0: an output path is required (or --list-faults)")
    if args.events < 1:
        raise InputError(f"generate:0: --events must be positive, not {args.events}")
    try:
        opts = options_for(args.events, args.seed, args.fault, concurrency=args.concurrency,
                           max_context=args.max_context)
        out = open(args.out, "wb")
    except (ValueError, OSError) as exc:
        raise InputError(f"{args.out}:0: {exc}") from None
    try:
        with out:
            g = generate_with(out, opts)
    except ValueError as exc:
        raise InputError(f"{args.out}:0: {exc}") from None
    summary = {"path": args.out, "events": g.events, "seed": args.seed, "fault": g.fault, "rule": g.rule,
               "event": g.event, "line": g.line}
    sys.stdout.write(json.dumps(summary) + "\n")
    return EXIT_OK
