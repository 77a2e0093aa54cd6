"""`kvsim rules`: the rule catalogue, with the per-rule coverage of the last run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from kvsim.sim.cli.argtypes import input_file
from kvsim.sim.cli.common import EXIT_OK, InputError, last_run_path, open_input, output_style
from kvsim.sim.report.console import print_rules
from kvsim.sim.report.kvreport import FORMAT
from kvsim.spec.catalogue import all_rules

COUNTERS = ("checked", "exercised", "violated")


def add_parser(sub) -> None:
    ru = sub.add_parser("rules", help="the rule catalogue, with the last run's coverage")
    ru.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    ru.add_argument("--report", type=input_file, metavar="F", help="take the coverage from this kvreport/1 file "
                    "('-': standard input) (default: the last run's, kept in $KVSIM_REPORTS/last-run.json or "
                    "~/.cache/kvsim/last-run.json, when there is one)")
    ru.set_defaults(fn=run)


def run(args) -> int:
    rows = [r.as_dict() for r in all_rules()]  # engine-judging rules first, then model guards, then clauses
    rows.sort(key=lambda r: ("engine", "model", "none").index(r["evidence"]))
    path = args.report if args.report else last_run_path()
    if args.report or Path(path).is_file():
        counters = report_counters(path)
        for row in rows:
            c = counters.get(row["id"])
            row.update({k: c.get(k, 0) if isinstance(c, dict) else 0 for k in COUNTERS})
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    else:
        console = Console()
        print_rules(rows, console, output_style(args, console).plain)
    return EXIT_OK


def report_counters(path: str | Path) -> dict:
    """The per-rule counters of a kvreport/1 file, read once (``-``: standard input)."""
    src = open_input(path)
    with src:
        data = src.readall()
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{src.name}:0: not a kvreport/1 JSON file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("rules"), dict):
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InputError(f"{src.name}:0: not a kvreport/1 report with rule counters (format {found!r})")
    return doc["rules"]
