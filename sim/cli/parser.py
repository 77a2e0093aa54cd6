"""The `kvsim` argument parser: one subcommand per module of this package, each adding its own options."""

from __future__ import annotations

import argparse

from kvsim.sim.cli import bench, capacity, check, events, fuzz, generate, peer, replay, rules, selfcheck, simulate

COMMANDS = (replay, check, rules, capacity, bench, simulate, generate, fuzz, selfcheck, peer, events)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvsim", description="Executable specification and test harness for "
                                "paged KV-cache stores (kvtrace/1 replay, rule checking, reports).")
    p.add_argument("--debug", action="store_true", help="on an internal error, print the full traceback")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p
