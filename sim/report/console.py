"""Console views with rich: the replay report (`print_report`), findings and the verdict line, plain tables,
and the rule catalogue (`print_rules`).

Two styles (`Style`). On a terminal: coloured tables (refusals, coverage) and the findings; not on a terminal
(a CI log, a pipe, a file), or with NO_COLOR / --plain: one finding per line, never wrapped,
`path:line: RULE message` (the form editors and CI annotators parse), no box tables and no coverage table
unless asked (`coverage`), then the one-line verdict. `quiet` keeps the verdict line only; `github` prints
GitHub Actions `::error file=...,line=...::` annotations instead of the finding lines. Whatever the
style, a finding's line is printed with soft wrapping (rich inserts no line break, whatever the width), so
`path:line:` is never split however deep the folder.

Every string from the report is shown as a rich Text (never parsed as markup) after `safe_text`, so a
message cannot inject terminal control sequences. This module must not know how the report or the
catalogue are produced, nor the other report formats.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvsim.sim.report.kvreport import (
    format_context,
    message_text,
    refusal_summary,
    rule_family,
    rule_order,
    safe_text,
)
from kvsim.sim.report.verdict import Verdict, verdict_of

__all__ = ["print_report", "print_rules", "print_findings", "print_hazards", "print_verdict", "print_table",
           "finding_line", "github_annotation", "Style", "MAX_VIOLATION_ROWS"]

MAX_VIOLATION_ROWS = 50
COUNTERS = ("checked", "exercised", "violated")
EVIDENCE_WORDS = {"engine": "judges the engine", "model": "guards the model", "none": "not checkable"}


def _t(value: object, style: str = "") -> Text:
    return Text(safe_text(value), style=style)


def _n(value: object) -> Text:
    return Text(f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else safe_text(value),
                justify="right")


def _rule_state(counters: dict) -> str:
    if counters.get("violated", 0):
        return "violated"
    if not counters.get("checked", 0):
        return "unchecked"
    return "exercised" if counters.get("exercised", 0) else "vacuous"


# (style on a terminal, mark that also reads in plain text) per rule state
STATES = {"violated": ("bold red", "✗"), "exercised": ("green", ""), "vacuous": ("yellow", "○"),
          "unchecked": ("dim", "∅")}
LEGEND = "✗ violated · ○ checked, premise never held · ∅ not checked · unmarked: exercised, not violated"


def _rule_style(counters: dict) -> str:
    return STATES[_rule_state(counters)][0]


def _rule_mark(rule_id: str, counters: dict) -> Text:
    style, mark = STATES[_rule_state(counters)]
    return _t(rule_id + mark, style)


@dataclass(frozen=True)
class Style:
    """How a command prints: `plain` (not a terminal, NO_COLOR or --plain), `quiet` (the verdict line only),
    `github` (GitHub Actions annotations for findings), `coverage` (the coverage table even when plain)."""

    plain: bool = True
    quiet: bool = False
    github: bool = False
    coverage: bool = False

    @classmethod
    def of(cls, console: Console) -> Style:
        """The style a console implies on its own: plain unless it is a terminal with colour."""
        return cls(plain=not console.is_terminal or console.no_color)


def _one_line(value: object) -> str:
    return " ".join(safe_text(value).split("\n"))


def finding_line(v: dict) -> str:
    """`path:line: RULE message (event E, op; context)` on one line."""
    where = f"{_one_line(v.get('trace', ''))}:{v.get('line', 0)}"
    extra = [f"event {v['event']}"] if v.get("event") is not None else []
    if v.get("op"):
        extra.append(_one_line(v["op"]))
    context = format_context(v.get("context"))
    tail = f" ({', '.join(extra)}{'; ' + _one_line(context) if context else ''})" if extra or context else ""
    return f"{where}: {_one_line(v.get('rule', ''))} {_one_line(message_text(v))}{tail}"


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github_annotation(v: dict, level: str = "error") -> str:
    """A GitHub Actions workflow command: `::error file=PATH,line=N,title=RULE::RULE message`."""
    rule = safe_text(v.get("rule", ""))
    where = _gh_escape(safe_text(v.get("trace", "")), True)
    props = f"file={where},line={v.get('line', 0)},title={_gh_escape(rule, True)}"
    return f"::{level} {props}::{_gh_escape(rule + ' ' + safe_text(message_text(v)))}"


def print_findings(violations: list[dict], console: Console, style: Style, max_rows: int | None = None,
                   level: str = "error") -> None:
    """Every finding on its own line (at most max_rows, then how many more), never wrapped."""
    if style.quiet:
        return
    shown = violations if max_rows is None else violations[:max_rows]
    for v in shown:
        if style.github:
            console.print(Text(github_annotation(v, level)), soft_wrap=True, highlight=False)
        else:
            console.print(Text(finding_line(v), style="" if style.plain else "red"), soft_wrap=True, highlight=False)
    if len(shown) < len(violations):
        console.print(Text(f"… and {len(violations) - len(shown):,} more (the JSON report lists them all)"),
                      soft_wrap=True, highlight=False)


def print_hazards(hazards: list[dict], console: Console, style: Style) -> None:
    """Router-compatibility hazards (EV-3's entry), one line each: `path:line: RULE hazard: message (N
    consequences counted apart)`; a warning annotation under --format github. Never a violation."""
    if style.quiet:
        return
    for h in hazards:
        n = int(h.get("consequences", 0) or 0)
        v = {**h, "rule": f"{h.get('rule', '')} hazard ({h.get('class', 'router-compatibility')}):",
             "message": f"{message_text(h)}; {n:,} consequence{'' if n == 1 else 's'} counted apart"}
        if style.github:
            console.print(Text(github_annotation(v, "warning")), soft_wrap=True, highlight=False)
        else:
            console.print(Text(finding_line(v), style="" if style.plain else "yellow"), soft_wrap=True,
                          highlight=False)


def print_verdict(verdict: Verdict, console: Console, style: Style, title: str = "kvsim") -> None:
    """The verdict: one plain line, or on a terminal a coloured panel holding the same line."""
    if style.plain or style.quiet:
        console.print(Text(verdict.headline), soft_wrap=True, highlight=False)
    else:
        console.print(Panel(_t(verdict.headline, "bold"), title=title, title_align="left",
                            border_style="green" if verdict.passed else "red", expand=False))


def print_table(table: Table, console: Console, plain: bool) -> None:
    """A table: boxed on a terminal; plain (aligned columns, no box characters, no trailing blanks, never
    folded to the console's width) otherwise."""
    if not plain:
        console.print(table)
        return
    title, table.title = table.title, None
    if title:
        console.print(Text(str(title)), soft_wrap=True, highlight=False)
    table.box = None
    table.show_edge = False
    table.pad_edge = False
    table.title_justify = "left"
    table.caption_justify = "left"
    table.expand = False
    for column in table.columns:
        column.no_wrap = True
        column.overflow = "ignore"
        column.ratio = None
    buffer = io.StringIO()
    Console(file=buffer, width=4000, color_system=None, force_terminal=False, highlight=False).print(table)
    text = "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
    console.print(Text(text), soft_wrap=True, highlight=False)


def _consequences_table(report: dict, max_rows: int) -> Table:
    """The first consequence per desynchronized entity (sim.recovery): what followed from which finding."""
    rows = report.get("consequences", [])
    total = int(report.get("stats", {}).get("consequences", len(rows)) or 0)
    table = Table(title=f"Consequences suppressed ({total:,}; the first per entity)", title_justify="left")
    table.add_column("of", justify="right")
    for name in ("trace:line", "entity", "rule", "message"):
        table.add_column(name, overflow="fold")
    for c in rows[:max_rows]:
        table.add_row(_t(f"#{c.get('of', '')}"), _t(f"{c.get('trace', '')}:{c.get('line', '')}"),
                      _t(c.get("entity", "")), _t(c.get("rule", ""), "dim"), _t(c.get("message", ""), "dim"))
    return table


def _refusals_table(report: dict) -> Table:
    table = Table(title="Refusals by reason", title_justify="left")
    table.add_column("reason")
    table.add_column("refusals", justify="right")
    table.add_column("ops", overflow="fold")
    for row in refusal_summary(report):
        table.add_row(_t(row["reason"]), _n(row["count"]), _t(", ".join(f"{op} ×{n}" for op, n in row["ops"])))
    return table


def _coverage_table(report: dict) -> Table:
    """One row per rule family and evidence kind (rules judging the engine apart from those guarding the model
    and from clauses not checkable from traces): totals, and every rule id coloured by its state."""
    rules = report.get("rules", {})
    families: dict[str, list[str]] = {}
    marks = {"engine": "", "model": " (guards the model)", "none": " (not checkable)"}
    for kind in ("engine", "model", "none"):  # engine-judging rows first, self-checks and clauses after
        for rule_id in rule_order(report):
            if rules.get(rule_id, {}).get("evidence", "engine") == kind:
                families.setdefault(rule_family(rule_id) + marks[kind], []).append(rule_id)
    table = Table(title="Rule coverage", title_justify="left", caption=LEGEND, caption_justify="left")
    table.add_column("family")
    for name in COUNTERS:
        table.add_column(name, justify="right")
    table.add_column("rules", overflow="fold")
    for family, ids in families.items():
        totals = [sum(int(rules.get(rule_id, {}).get(key, 0)) for rule_id in ids) for key in COUNTERS]
        names = Text(" ").join(_rule_mark(rule_id, rules.get(rule_id, {"violated": 1})) for rule_id in ids)
        table.add_row(_t(family), *(_n(total) for total in totals), names)
    return table


def _refusal_lines(report: dict) -> list[str]:
    return [f"refused {row['count']:,} × {safe_text(row['reason'])} ("
            + ", ".join(f"{safe_text(op)} ×{n:,}" for op, n in row["ops"]) + ")" for row in refusal_summary(report)]


def _consequence_lines(report: dict, max_rows: int) -> list[str]:
    """`path:line: consequence of finding #N: RULE message (entity)`, the first per desynchronized entity."""
    rows = report.get("consequences", [])
    out = [f"{_one_line(c.get('trace', ''))}:{c.get('line', 0)}: consequence of finding #{c.get('of', '')}: "
           f"{_one_line(c.get('rule', ''))} {_one_line(c.get('message', ''))} ({_one_line(c.get('entity', ''))})"
           for c in rows[:max_rows]]
    total = int(report.get("stats", {}).get("consequences", len(rows)) or 0)
    if total > len(out):
        out.append(f"… {total:,} consequences suppressed in all (the first per entity listed; the JSON report "
                   "lists them)")
    return out


def print_report(report: dict, console: Console, max_rows: int = MAX_VIOLATION_ROWS, style: Style | None = None,
                 title: str = "kvsim replay") -> None:
    """Print the findings (at most max_rows), the refusals by reason, the coverage (on a terminal, or when
    asked) and last the verdict line."""
    style = style or Style.of(console)
    verdict = verdict_of(report)
    if not style.quiet:
        print_findings(report.get("violations", []), console, style, max_rows)
        print_hazards(report.get("hazards", []), console, style)
        if report.get("consequences"):
            if style.plain:
                for line in _consequence_lines(report, max_rows):
                    console.print(Text(line), soft_wrap=True, highlight=False)
            else:
                console.print(_consequences_table(report, max_rows))
        if report.get("refusals"):
            if style.plain:
                for line in _refusal_lines(report):
                    console.print(Text(line), soft_wrap=True, highlight=False)
            else:
                console.print(_refusals_table(report))
        if report.get("rules") and (style.coverage or not style.plain):
            print_table(_coverage_table(report), console, style.plain)
    print_verdict(verdict, console, style, title)


def print_rules(rules: Iterable[dict], console: Console, plain: bool | None = None) -> None:
    """Print the rule catalogue (id, kind, title, seed clause) and, when the entries carry them, the
    checked / exercised / violated counters. Plain, the short columns come first and the title with its seed
    clause last, so every row stays one aligned line."""
    rules = list(rules)
    plain = Style.of(console).plain if plain is None else plain
    with_counters = any(any(key in rule for key in COUNTERS) for rule in rules)
    table = Table(title=f"kvsim rules ({len(rules)})", title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("evidence", no_wrap=True)
    if with_counters and plain:
        for name in COUNTERS:
            table.add_column(name, justify="right", no_wrap=True)
    if plain:
        table.add_column("title — seed clause")
    else:
        table.add_column("title", overflow="fold", ratio=3)
        table.add_column("seed clause", overflow="fold", ratio=2)
    if with_counters and not plain:
        for name in COUNTERS:
            table.add_column(name, justify="right", no_wrap=True)
    for rule in rules:
        title = rule.get("title", "")
        if rule.get("subsumed_by"):
            title += f" (subsumed by {', '.join(rule['subsumed_by'])})"
        if rule.get("not_checkable"):
            title += f" — not checkable from traces: {rule['not_checkable']}"
        cells = [_t(rule.get("id", ""), "bold"), _t(rule.get("kind", "")),
                 _t(EVIDENCE_WORDS.get(rule.get("evidence", ""), rule.get("evidence", "")))]
        counters = [_n(rule[key]) if key in rule else Text("") for key in COUNTERS] if with_counters else []
        if plain:
            clause = f" — {rule['clause']}" if rule.get("clause") else ""
            cells += [*counters, _t(title + clause)]
        else:
            cells += [_t(title), _t(rule.get("clause", ""), "dim"), *counters]
        table.add_row(*cells, style=_rule_style(rule) if with_counters else None)
    print_table(table, console, plain)
