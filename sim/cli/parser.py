"""The `kvsim` argument parser: one subcommand per module of this package, each adding its own options.

Options are typed with their ranges (`sim.cli.argtypes`): a bad value is one line naming the argument and
what it accepts, exit 2; `--help` shows every default.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from kvsim.sim.cli import bench, capacity, check, events, fuzz, generate, peer, replay, rules, selfcheck, simulate
from kvsim.sim.cli.argtypes import KvsimParser

COMMANDS = (replay, check, rules, capacity, bench, simulate, generate, fuzz, selfcheck, peer, events)


def kvsim_version() -> str:
    try:
        return version("kvsim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> KvsimParser:
    p = KvsimParser(prog="kvsim", description="Executable specification and test harness for paged KV-cache "
                    "stores (kvtrace/1 replay, rule checking, reports). Every FILE argument may be '-' for "
                    "standard input.")
    p.add_argument("--version", action="version", version=f"kvsim {kvsim_version()}")
    p.add_argument("--debug", action="store_true", help="on an internal error, print the full traceback")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return p
