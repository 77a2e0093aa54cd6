"""`kvsim rules`: the rule catalogue, with the per-rule coverage of the last run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from kvsim.sim.cli.common import EXIT_OK, InputError, reports_dir
from kvsim.sim.report.console import print_rules
from kvsim.sim.report.kvreport import ReportFormatError, load_report
from kvsim.spec.catalogue import all_rules

COUNTERS = ("checked", "exercised", "violated")


def add_parser(sub) -> None:
    ru = sub.add_parser("rules", help="the rule catalogue, with the last run's coverage")
    ru.add_argument("--json", action="store_true")
    ru.add_argument("--report", help="a kvreport/1 file (default: reports/last-run.json)")
    ru.set_defaults(fn=run)


def run(args) -> int:
    rows = [r.as_dict() for r in all_rules()]  # engine-judging rules first, then model guards, then clauses
    rows.sort(key=lambda r: ("engine", "model", "none").index(r["evidence"]))
    path = Path(args.report) if args.report else reports_dir() / "last-run.json"
    if path.exists():
        try:
            counters = load_report(path)["rules"]
        except (ReportFormatError, KeyError) as exc:
            raise InputError(f"{path}:0: {exc}") from None
        for row in rows:
            row.update({k: counters.get(row["id"], {}).get(k, 0) for k in COUNTERS})
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    else:
        print_rules(rows, Console())
    return EXIT_OK
