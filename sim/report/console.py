"""Console views with rich: the replay report (`print_report`) and the rule catalogue (`print_rules`).

Both take the Console to print on, so the caller decides the destination; colour and box styling follow
rich's own terminal detection, so a CI log or a file gets plain text without escape codes. Every string
from the report is shown as a rich Text (never parsed as markup) after `safe_text`, so a message cannot
inject terminal control sequences.

This module must not know how the report or the catalogue are produced, nor the other report formats.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvsim.sim.report.kvreport import (
    format_context,
    headline,
    refusal_summary,
    rule_family,
    rule_order,
    safe_text,
)

__all__ = ["print_report", "print_rules", "MAX_VIOLATION_ROWS"]

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


def _violations_table(violations: list[dict], max_rows: int) -> Table:
    table = Table(title=f"Violations ({len(violations):,})", title_justify="left", expand=False)
    for name, justify in (("rule", "left"), ("trace:line", "left"), ("event", "right"), ("op", "left"),
                          ("message", "left"), ("context", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for v in violations[:max_rows]:
        table.add_row(_t(v.get("rule", ""), "bold red"), _t(f"{v.get('trace', '')}:{v.get('line', '')}"),
                      _t(v.get("event", "")), _t(v.get("op", "")), _t(v.get("message", "")),
                      _t(format_context(v.get("context")), "dim"))
    if len(violations) > max_rows:
        table.caption = f"… and {len(violations) - max_rows:,} more (the JSON report lists them all)"
    return table


def _consequences_table(report: dict, max_rows: int) -> Table:
    """The first consequence per desynchronized entity (sim.recovery): what followed from which finding."""
    rows = report.get("consequences", [])
    total = int(report.get("stats", {}).get("consequences", len(rows)) or 0)
    table = Table(title=f"Consequences suppressed ({total:,}; the first per entity)", title_justify="left")
    for name, justify in (("of", "right"), ("trace:line", "left"), ("entity", "left"), ("rule", "left"),
                          ("message", "left")):
        table.add_column(name, justify=justify, overflow="fold")
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


def print_report(report: dict, console: Console, max_rows: int = MAX_VIOLATION_ROWS) -> None:
    """Print the verdict panel, the violations (at most max_rows), refusal counts and a coverage summary."""
    passed = report.get("verdict") == "pass"
    console.print(Panel(_t(headline(report), "bold"), title="kvsim replay", title_align="left",
                        border_style="green" if passed else "red", expand=False))
    violations = report.get("violations", [])
    parts = []
    if violations:
        parts.append(_violations_table(violations, max_rows))
    if report.get("consequences"):
        parts.append(_consequences_table(report, max_rows))
    if report.get("refusals"):
        parts.append(_refusals_table(report))
    if report.get("rules"):
        parts.append(_coverage_table(report))
    for part in parts:
        console.print(part)


def print_rules(rules: Iterable[dict], console: Console) -> None:
    """Print the rule catalogue (id, kind, title, seed clause) and, when the entries carry them, the
    checked / exercised / violated counters."""
    rules = list(rules)
    with_counters = any(any(key in rule for key in COUNTERS) for rule in rules)
    table = Table(title=f"kvsim rules ({len(rules)})", title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("evidence", no_wrap=True)
    table.add_column("title", overflow="fold", ratio=3)
    table.add_column("seed clause", overflow="fold", ratio=2)
    if with_counters:
        for name in COUNTERS:
            table.add_column(name, justify="right", no_wrap=True)
    for rule in rules:
        title = rule.get("title", "")
        if rule.get("subsumed_by"):
            title += f" (subsumed by {', '.join(rule['subsumed_by'])})"
        if rule.get("not_checkable"):
            title += f" — not checkable from traces: {rule['not_checkable']}"
        cells = [_t(rule.get("id", ""), "bold"), _t(rule.get("kind", "")),
                 _t(EVIDENCE_WORDS.get(rule.get("evidence", ""), rule.get("evidence", ""))), _t(title),
                 _t(rule.get("clause", ""), "dim")]
        if with_counters:
            cells += [_n(rule[key]) if key in rule else Text("") for key in COUNTERS]
        table.add_row(*cells, style=_rule_style(rule) if with_counters else None)
    console.print(table)
