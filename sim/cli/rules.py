"""`kvsim rules`: the rule catalogue, with the per-rule coverage of the last run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from kvsim.sim.cli.common import EXIT_OK, InputError, last_run_path, output_style
from kvsim.sim.report.console import print_rules
from kvsim.sim.report.kvreport import ReportFormatError, load_report
from kvsim.spec.catalogue import all_rules

COUNTERS = ("checked", "exercised", "violated")


def add_parser(sub) -> None:
    ru = sub.add_parser("rules", help="the rule catalogue, with the last run's coverage")
    ru.add_argument("--json", action="store_true")
    ru.add_argument("--report", help="a kvreport/1 file (default: the last run's, kept in $KVSIM_REPORTS/last-run.json "
                    "or ~/.cache/kvsim/last-run.json)")
    ru.set_defaults(fn=run)


def run(args) -> int:
    rows = [r.as_dict() for r in all_rules()]  # engine-judging rules first, then model guards, then clauses
    rows.sort(key=lambda r: ("engine", "model", "none").index(r["evidence"]))
    path = Path(args.report) if args.report else last_run_path()
    if args.report and not path.is_file():
        raise InputError(f"--report: {path}: no such report file")
    if path.is_file():
        try:
            counters = load_report(path)["rules"]
        except (ReportFormatError, KeyError) as exc:
            raise InputError(f"{path}:0: {exc}") from None
        for row in rows:
            row.update({k: counters.get(row["id"], {}).get(k, 0) for k in COUNTERS})
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    else:
        console = Console()
        print_rules(rows, console, output_style(args, console).plain)
    return EXIT_OK
