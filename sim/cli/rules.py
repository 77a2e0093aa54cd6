"""`kvsim rules [FAMILY ...]`: the rule catalogue -- every id any command reports, store rules, TS-*, EV-* and
PEER-* -- or only the families named, with the per-rule coverage of the last run; `--obligations`: the seed-002
obligation ledger (spec/obligations/seed002.toml) counted by section and status, at the baseline and now.
`kvsim explain RULE` prints one entry in full."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kvsim.sim.cli.argtypes import input_file
from kvsim.sim.cli.common import EXIT_OK, InputError, last_run_path, open_input, output_style
from kvsim.sim.report.console import print_rules, print_table
from kvsim.sim.report.kvreport import FORMAT
from kvsim.spec import obligations as ob
from kvsim.spec.catalogue import FAMILY_GROUPS, FAMILY_ORDER, all_rules, families

COUNTERS = ("checked", "exercised", "violated")


def add_parser(sub) -> None:
    ru = sub.add_parser("rules", help="the rule catalogue, with the last run's coverage")
    ru.add_argument("families", nargs="*", metavar="FAMILY", help="list only these families: a family ("
                    f"{', '.join(FAMILY_ORDER)}; any case), or {' / '.join(FAMILY_GROUPS)} for all of theirs "
                    "(default: every rule)")
    ru.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    ru.add_argument("--report", type=input_file, metavar="F", help="take the coverage from this kvreport/1 file "
                    "('-': standard input) (default: the last run's, kept in $KVSIM_REPORTS/last-run.json or "
                    "~/.cache/kvsim/last-run.json, when there is one)")
    ru.add_argument("--obligations", action="store_true", help="the obligations of seed 002 (cache concepts) per "
                    "seed section: how many are faithful / weaker / absent / contradicts / not-checkable, at the "
                    "baseline commit -> now")
    ru.add_argument("--list", choices=ob.STATUSES, metavar="STATUS", help="with --obligations: list the obligations "
                    f"whose status now is STATUS ({', '.join(ob.STATUSES)}), one line each")
    ru.add_argument("--kind", choices=ob.KINDS, metavar="KIND", help="with --obligations: only obligations of this "
                    f"kind ({', '.join(ob.KINDS)})")
    ru.set_defaults(fn=run)


def selected(words: list[str]) -> tuple[str, ...]:
    """The families the FAMILY words name, or InputError naming the first word that names none."""
    out: list[str] = []
    for word in words:
        fams = families(word)
        if not fams:
            raise InputError(f"kvsim rules: {word!r} is no rule family (families: {', '.join(FAMILY_ORDER)}; "
                             f"{' and '.join(FAMILY_GROUPS)} name several; `kvsim explain ID` prints one rule)")
        out += fams
    return tuple(dict.fromkeys(out))


def run(args) -> int:
    if args.obligations:
        if args.families:
            raise InputError("kvsim rules: FAMILY: not with --obligations (the ledger is counted by seed section)")
        return run_obligations(args)
    for flag in ("list", "kind"):
        if getattr(args, flag) is not None:
            raise InputError(f"kvsim rules: --{flag}: only with --obligations")
    chosen = set(selected(args.families))
    rows = [r.as_dict() for r in all_rules() if not chosen or r.family in chosen]
    # engine-judging rules first, then model guards, then clauses
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


def known_rules() -> dict[str, tuple[str, str]]:
    """Every rule id an obligation may name, with its evidence and seed citation: the catalogue's (every rule a
    command can report, the peer judges' PEER-* and EV-* included)."""
    return {r.id: (r.evidence, r.clause) for r in all_rules()}


def run_obligations(args) -> int:
    """The ledger per seed section (before -> now), or (--list) the obligations with one status now."""
    ledger = ob.load()
    problems = ob.check_rules(ledger, known_rules())
    if problems:  # the packaged ledger names a rule the catalogue lost: kvsim's own bug (exit 3)
        raise RuntimeError(f"obligation ledger: {problems[0]}")
    kinds = (args.kind,) if args.kind else ob.KINDS
    if args.list:
        rows = [o for o in ledger.with_status(args.list) if o.kind in kinds]
        if args.json:
            sys.stdout.write(json.dumps([o.as_dict() for o in rows], indent=2, ensure_ascii=False) + "\n")
            return EXIT_OK
        for o in rows:
            rules = f" [{', '.join(o.rules)}]" if o.rules else ""
            note = f" — {o.note}" if o.note else ""
            change = f" (before: {o.before})" if o.before != o.now else ""
            sys.stdout.write(f"{o.id} {o.kind}: {o.clause}{note}{rules}{change}\n")
        return EXIT_OK
    if args.json:
        sys.stdout.write(json.dumps(obligations_summary(ledger, kinds), indent=2, ensure_ascii=False) + "\n")
        return EXIT_OK
    console = Console()
    print_table(obligations_table(ledger, kinds), console, output_style(args, console).plain)
    return EXIT_OK


def obligations_summary(ledger: ob.Ledger, kinds: tuple[str, ...]) -> dict:
    """The counts as JSON: per section and in total, each status before and now."""
    before, now = ledger.counts("before", kinds), ledger.counts("now", kinds)
    none: Counter = Counter()
    sections = [{"line": s.line, "title": s.title,
                 "before": {st: before.get(s.title, none)[st] for st in ob.STATUSES},
                 "now": {st: now.get(s.title, none)[st] for st in ob.STATUSES}}
                for s in ledger.sections if s.title in before or s.title in now]
    tb, tn = ledger.totals("before", kinds), ledger.totals("now", kinds)
    return {"seed": ledger.seed, "baseline": ledger.baseline, "kinds": list(kinds),
            "obligations": sum(tn.values()), "sections": sections,
            "total": {"before": {st: tb[st] for st in ob.STATUSES}, "now": {st: tn[st] for st in ob.STATUSES}},
            "faithful_now_judged_on": {on: sum(1 for o in ledger.with_status("faithful")
                                               if o.kind in kinds and o.judged_on == on) for on in ("engine", "model")}}


def obligations_table(ledger: ob.Ledger, kinds: tuple[str, ...]) -> Table:
    """Sections in seed order, one column per status ("before -> now"); totals, and the judgeable
    (scheduler and model) clauses apart from the kernel, runtime, L3, collective and code ones."""
    before, now = ledger.counts("before", kinds), ledger.counts("now", kinds)
    n = sum(ledger.totals("now", kinds).values())
    engine = sum(1 for o in ledger.with_status("faithful") if o.kind in kinds and o.judged_on == "engine")
    faithful = ledger.totals("now", kinds)["faithful"]
    table = Table(title=f"seed {ledger.seed} obligations ({n}) by section: before ({ledger.baseline}) -> now; "
                  f"faithful now: {faithful}, {engine} of them judged on a real scheduler's plans or events",
                  title_justify="left")
    table.add_column("line", justify="right", no_wrap=True)
    table.add_column("section")
    for st in ob.STATUSES:
        table.add_column(st, no_wrap=True)

    def cells(b: Counter, a: Counter) -> list[str]:
        return [f"{b[st]} -> {a[st]}" for st in ob.STATUSES]

    none: Counter = Counter()
    for s in ledger.sections:
        if s.title in before or s.title in now:
            table.add_row(str(s.line), s.title, *cells(before.get(s.title, none), now.get(s.title, none)))
    table.add_row("", "all sections", *cells(ledger.totals("before", kinds), ledger.totals("now", kinds)),
                  end_section=True)
    judged = tuple(k for k in kinds if k in ob.JUDGEABLE)
    other = tuple(k for k in kinds if k not in ob.JUDGEABLE)
    if judged and other:
        table.add_row("", f"{' and '.join(judged)} clauses",
                      *cells(ledger.totals("before", judged), ledger.totals("now", judged)))
        table.add_row("", f"{', '.join(other)} clauses",
                      *cells(ledger.totals("before", other), ledger.totals("now", other)))
    return table
