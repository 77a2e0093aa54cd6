"""The `kvsim` argument parser: one subcommand per module of this package, each adding its own options.

Options are typed with their ranges (`sim.cli.argtypes`): a bad value is one line naming the argument and
what it accepts, exit 2; `--help` shows every default.

Only the command asked for is imported (a command module imports what it runs: the model, the fuzz machines,
numpy, rich...), so `kvsim --version` and `kvsim replay` do not pay for every other command; `kvsim --help`
and a mistyped command import them all to list them.
"""

from __future__ import annotations

import argparse
import importlib
import os

from kvsim.sim.cli.argtypes import KvsimParser, output_path

COMMANDS = ("replay", "check", "rules", "explain", "capacity", "bench", "simulate", "generate", "fuzz", "selfcheck",
            "peer", "events")


def kvsim_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("kvsim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Version(argparse.Action):
    """--version: looked up only when asked for (importlib.metadata reads the installed distributions)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        import sys
        sys.stdout.write(f"kvsim {kvsim_version()}\n")
        parser.exit(0)


def chosen(argv: list[str]) -> str | None:
    """The command named on the command line (the first word that is not an option), when it is one."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> KvsimParser:
    """The parser, with only the command `argv` names (every command when it names none, or with no argv)."""
    p = KvsimParser(prog="kvsim", description="Executable specification and test harness for paged KV-cache "
                    "stores (kvtrace/1 replay, rule checking, reports). Every FILE argument may be '-' for "
                    "standard input.")
    p.add_argument("--version", action=_Version)
    p.add_argument("--debug", action="store_true", help="on an internal error, print the full traceback")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    name = chosen(argv) if argv is not None else None
    version_only = argv is not None and name is None and "--version" in argv and not {"-h", "--help"} & set(argv)
    for command in (() if version_only else (name,) if name else COMMANDS):
        importlib.import_module(f"kvsim.sim.cli.{command}").add_parser(sub)
    return p


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[tuple[str, str]], list[str]]:
    """(arguments, the outputs named as (option, path), the inputs: every other value that names a file or is
    '-'). Raises SystemExit as argparse does."""
    import sys
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    outputs: list[tuple[str, str]] = []
    dests: set[str] = set()
    for action in sub.choices[args.command]._actions:
        if action.type is output_path:
            dests.add(action.dest)
            value = getattr(args, action.dest, None)
            for v in value if isinstance(value, list) else [value]:
                if v:
                    outputs.append((action.option_strings[-1] if action.option_strings else action.metavar
                                    or action.dest, v))
    inputs: list[str] = []
    for dest, value in sorted(vars(args).items()):
        if dest in dests or dest == "fn":
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and (v == "-" or (os.path.exists(v) and not os.path.isdir(v))):
                inputs.append(v)
    return args, outputs, inputs
