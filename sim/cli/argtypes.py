"""Argument types with their accepted ranges, and the parser that reports a bad value in one line.

Every `kvsim` option is validated while it is parsed (argparse ``type=``), so a user's mistake is exit 2
with one line naming the argument and what it accepts -- ``kvsim simulate: --requests must be >= 1 (got
0)`` -- before anything runs, never exit 3 (kvsim's own bug) or a raw Python message. The parser also lets
a value that starts with ``-`` and a digit (``--hbm-bytes -5G``) reach its type, which then names the range,
instead of argparse's "expected one argument", and shows every default in ``--help``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["KvsimParser", "DefaultsFormatter", "integer", "real", "byte_size", "input_file", "output_path",
           "folder", "interpreter", "STDIN", "parse_byte_size"]

STDIN = "-"
"""The name of standard input wherever a file is expected."""

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_BYTES = re.compile(r"([0-9]*\.?[0-9]+)\s*([KMGTP]?)(?:I?B)?", re.IGNORECASE)
BYTE_LIMIT = 1 << 60
"""The largest byte size accepted (an exbibyte): anything larger is a typo."""


class DefaultsFormatter(argparse.HelpFormatter):
    """Help text that ends with ``(default: X)`` for every option that has a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default is argparse.SUPPRESS or not (
                action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)):
            return text
        default = action.default
        if default is None or default is False:
            shown = "off" if action.nargs == 0 else "none"
        else:
            shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
        return f"{text} (default: {shown})" if text else f"(default: {shown})"


class KvsimParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (``kvsim CMD: --flag must be ...``, exit 2),
    which passes values such as ``-5G`` to their type, and which shows defaults in its help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)
        # a value that starts with '-' and a digit is a (possibly bad) value, never an option: the options'
        # types then say what range they accept (no kvsim option is spelled like a number)
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    _intermixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """Options and positionals in any order (``kvsim peer vllm --engine-python PY WORKLOAD``, ``kvsim replay
        a.jsonl --json r.json b.jsonl``): a command's parser reads its options wherever they stand, then its
        positionals from what is left (argparse's intermixed parsing). Plain argparse binds every positional it
        can at the first run of positionals -- ``WORKLOAD`` after an option is then "unrecognized". The
        top-level parser, whose positional is the command itself, parses as usual."""
        if self._intermixing or any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._actions):
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {_one_line(message)}\n")
        sys.exit(2)


def _one_line(message: str) -> str:
    """argparse's ``argument --requests: must be >= 1 (got 0)`` as ``--requests must be >= 1 (got 0)``."""
    m = re.match(r"argument ([^:]+?): (.*)$", " ".join(message.split()))
    if m is None:
        return " ".join(message.split())
    names, reason = m.groups()
    name = names.split("/")[-1]  # "-q/--quiet" -> "--quiet"
    return f"{name} {reason}" if reason.startswith("must ") else f"{name}: {reason}"


def _bound_text(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"in [{lo:g}, {hi:g}]" if not lo_open else f"in ({lo:g}, {hi:g}]"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo:g}"
    return f"<= {hi:g}" if hi is not None else ""


def integer(lo: int | None = None, hi: int | None = None, name: str = "") -> Callable[[str], int]:
    """An integer in [lo, hi]; the error says the range and the value given."""
    bound = _bound_text(lo, hi)

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {bound} (got {text!r})".replace("  ", " ")) \
                from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {bound} (got {value})")
        return value

    parse.__name__ = name or f"integer {bound}"
    return parse


def real(lo: float | None = None, hi: float | None = None, lo_open: bool = False, what: str = "a number") \
        -> Callable[[str], float]:
    """A finite number in [lo, hi] (or (lo, hi] with ``lo_open``)."""
    bound = _bound_text(lo, hi, lo_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (lo is not None and (value <= lo if lo_open else value < lo)) or \
                (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {what} {bound} (got {text!r})")
        return value

    parse.__name__ = what
    return parse


def parse_byte_size(text: str) -> int:
    """``123``, ``64G``, ``1.5T``, ``512MiB``, ``40GB`` (binary multiples) -> bytes; ValueError otherwise."""
    m = _BYTES.fullmatch(text.strip())
    if m is None:
        raise ValueError(text)
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not math.isfinite(value) or value > BYTE_LIMIT:
        raise ValueError(text)
    return int(value)


def byte_size(text: str) -> int:
    """A byte size >= 0: a count, or a number with K, M, G, T or P (binary multiples)."""
    try:
        return parse_byte_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a byte size >= 0 like 4096, 512M or 40G, at most 1E "
                                         f"(got {text!r})") from None


def input_file(text: str) -> str:
    """A file that exists (not a folder), or ``-`` for standard input."""
    if text == STDIN or os.path.isfile(text) or (os.path.exists(text) and not os.path.isdir(text)):
        return text
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"is a folder, not a file: {text}")
    raise argparse.ArgumentTypeError(f"no such file: {text}")


def output_path(text: str) -> str:
    """A file to write: its folder must exist (a typo in a folder name is not silently created)."""
    if not text:
        raise argparse.ArgumentTypeError("must name a file (got '')")
    parent = os.path.dirname(text)
    if parent and not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"no such folder: {parent}")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"is a folder, not a file: {text}")
    return text


def interpreter(text: str) -> str:
    """A Python interpreter: a file, or a venv's folder (its ``bin/python`` is taken, as ``scripts/install-engine
    ENGINE VENV`` builds it). Whether it runs and holds the engine is checked when the run starts."""
    if os.path.isdir(text):
        inside = os.path.join(text, "bin", "python")
        if os.path.isfile(inside):
            return inside
        raise argparse.ArgumentTypeError(f"is a folder without bin/python: {text} (give the venv's interpreter, "
                                         "VENV/bin/python, or the VENV that scripts/install-engine built)")
    return text


def folder(text: str) -> str:
    """A folder that exists."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"no such folder: {text}")
    return text
