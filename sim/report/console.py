"""Console views with rich: the replay report (`print_report`), findings and the verdict line, plain tables,
and the rule catalogue (`print_rules`).

Two styles (`Style`). On a terminal: coloured tables (refusals, coverage) and the findings; not on a terminal
(a CI log, a pipe, a file), or with NO_COLOR / --plain: one finding per line, never wrapped,
`path:line: RULE message` (the form editors and CI annotators parse), every one of them (unless
--max-findings caps them, which is then said), no box tables and no coverage table
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
import os
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
from kvsim.sim.report.verdict import Verdict, plural, unlisted, verdict_of

__all__ = ["print_report", "print_rules", "print_findings", "print_hazards", "print_consequences", "print_verdict",
           "print_table",
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
    max_findings: int | None = None
    """--max-findings N: print at most N findings (None: every one, except on a terminal's table)."""
    listed_in: str | None = None
    """The report file that lists every finding (the command's --json), named when some are not printed."""

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


def _annotated_file(name: object) -> str | None:
    """The file an annotation may name: one that exists (a trace, a workload, a recorded log). A finding of a
    run that kept no file (``(tokenspeed run)``, a live stream, ``-``) is annotated without ``file=``: GitHub
    would show a path that is not in the repository."""
    text = safe_text(name or "")
    return text if text and text != "-" and os.path.isfile(text) else None


def github_annotation(v: dict, level: str = "error") -> str:
    """A GitHub Actions workflow command: `::error file=PATH,line=N,title=RULE::RULE message` (no file= and
    line= when the finding's trace is no file: its place stays in the message)."""
    rule = safe_text(v.get("rule", ""))
    title = f"title={_gh_escape(rule, True)}"
    where = _annotated_file(v.get("trace"))
    props = f"file={_gh_escape(where, True)},line={v.get('line', 0)},{title}" if where else title
    text = rule + " " + safe_text(message_text(v))
    if where is None and v.get("trace"):
        text = f"{safe_text(v.get('trace'))}:{v.get('line', 0)}: {text}"
    return f"::{level} {props}::{_gh_escape(text)}"


GITHUB_ANNOTATIONS_PER_STEP = 10
"""GitHub shows at most 10 annotations of each level (error, warning, notice) per step and 50 per job
(actions/toolkit, docs/problem-matchers.md, "Limitations"); later ones are dropped without a word."""


def _shown(violations: list[dict], style: Style, max_rows: int | None) -> tuple[list[dict], str]:
    """The findings to print and, when some are left out, why. Plain (a log, a pipe, --plain) and GitHub
    output print every finding unless --max-findings caps them; a terminal's table stops at ``max_rows``."""
    if style.max_findings is not None:
        cap, why = style.max_findings, f"capped by --max-findings {style.max_findings}"
    elif style.plain or style.github:
        cap, why = None, ""
    else:
        cap, why = max_rows, "on a terminal; --plain or a pipe lists every one"
    if cap is None or len(violations) <= cap:
        return violations, ""
    return violations[:cap], why


def _github_groups(violations: list[dict], level: str) -> list[str]:
    """Annotations for more findings than GitHub shows: one per file (its first finding's line, the count and
    the rules), at most `GITHUB_ANNOTATIONS_PER_STEP`; when more files have findings, the last annotation
    counts the files and findings it leaves to the log (where every finding is printed as a line)."""
    files: dict[str, list[dict]] = {}
    for v in violations:
        files.setdefault(safe_text(v.get("trace", "")), []).append(v)
    names = list(files)
    room = GITHUB_ANNOTATIONS_PER_STEP if len(names) <= GITHUB_ANNOTATIONS_PER_STEP else \
        GITHUB_ANNOTATIONS_PER_STEP - 1
    out = []
    for name in names[:room]:
        group = files[name]
        rules = sorted({safe_text(v.get("rule", "")) for v in group})
        first = group[0]
        text = f"{plural(len(group), 'finding')} in {'this file' if _annotated_file(name) else name} " \
               f"({', '.join(rules)}); first at line " \
               f"{first.get('line', 0)}: {safe_text(first.get('rule', ''))} {safe_text(message_text(first))} " \
               "(every finding is listed in the log)"
        title = "kvsim: " + plural(len(group), "finding")
        props = f"file={_gh_escape(name, True)},line={first.get('line', 0)},title={_gh_escape(title, True)}" \
            if _annotated_file(name) else f"title={_gh_escape(title, True)}"
        out.append(f"::{level} {props}::{_gh_escape(text)}")
    rest = names[room:]
    if rest:
        n = sum(len(files[name]) for name in rest)
        text = f"{plural(n, 'finding')} in {plural(len(rest), 'more file')} not annotated (GitHub shows " \
               f"{GITHUB_ANNOTATIONS_PER_STEP} per step): every finding is listed in the log"
        out.append(f"::{level} title=kvsim::{_gh_escape(text)}")
    return out


def print_findings(violations: list[dict], console: Console, style: Style, max_rows: int | None = None,
                   level: str = "error", total: int | None = None) -> None:
    """Every finding on its own line, never wrapped; on a terminal at most ``max_rows`` (then how many more),
    in a log or pipe every one unless --max-findings caps them (then the cap, exactly how many were left out and
    where they are: the --json report, or the option that writes it). ``total`` counts findings a judge counted
    without listing them (``stats.violations_not_listed``), said apart.

    ``--format github``: up to `GITHUB_ANNOTATIONS_PER_STEP` findings, one annotation each; more, and every
    finding is printed as a plain line (the log keeps them all) followed by one annotation per file
    (`_github_groups`), since GitHub would drop every annotation past the tenth of a step silently."""
    if style.quiet:
        return
    shown, why = _shown(violations, style, max_rows)
    if style.github and len(shown) <= GITHUB_ANNOTATIONS_PER_STEP:
        for v in shown:
            console.print(Text(github_annotation(v, level)), soft_wrap=True, highlight=False)
    else:
        for v in shown:
            console.print(Text(finding_line(v), style="" if style.plain else "red"), soft_wrap=True, highlight=False)
        if style.github:
            for line in _github_groups(shown, level):
                console.print(Text(line), soft_wrap=True, highlight=False)
    total = len(violations) if total is None else max(total, len(violations))
    if len(shown) < total:
        console.print(Text(f"… and {plural(total - len(shown), 'more finding')} not printed "
                           f"({why or 'not listed by the judge'}); {_where_listed(style, len(violations), total)}"),
                      soft_wrap=True, highlight=False)


def _where_listed(style: Style, listed: int, total: int) -> str:
    """Where the findings not printed are: the JSON report (all of them, or how many it lists of the total)."""
    if style.listed_in:
        name = "the JSON report on standard output" if style.listed_in == "-" else style.listed_in
        return f"{name} lists all {total:,}" if listed == total else \
            f"{name} lists {listed:,} of the {total:,} ({total - listed:,} counted, not listed)"
    return f"--json F writes a report listing all {total:,}" if listed == total else \
        f"--json F writes a report listing {listed:,} of the {total:,} ({total - listed:,} counted, not listed)"


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
                            border_style={"pass": "green", "fail": "red"}.get(verdict.status, "yellow"),
                            expand=False))


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


def _of(report: dict, c: dict) -> str:
    """What a consequence follows from: a KV-event stream's router-compatibility hazard (numbered apart, EV-3's
    entry) or a root finding."""
    return f"{'hazard' if c.get('op') == 'kv' and report.get('hazards') else 'finding'} #{c.get('of', '')}"


def _consequences_table(report: dict, max_rows: int) -> Table:
    """The first consequence per desynchronized entity (sim.recovery): what followed from which finding."""
    rows = report.get("consequences", [])
    total = int(report.get("stats", {}).get("consequences", len(rows)) or 0)
    table = Table(title=f"Consequences suppressed ({total:,}; the first per entity)", title_justify="left")
    table.add_column("of", justify="right")
    for name in ("trace:line", "entity", "rule", "message"):
        table.add_column(name, overflow="fold")
    for c in rows[:max_rows]:
        table.add_row(_t(_of(report, c)), _t(f"{c.get('trace', '')}:{c.get('line', '')}"),
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
    out = [f"{_one_line(c.get('trace', ''))}:{c.get('line', 0)}: consequence of {_of(report, c)}: "
           f"{_one_line(c.get('rule', ''))} {_one_line(c.get('message', ''))} ({_one_line(c.get('entity', ''))})"
           for c in rows[:max_rows]]
    total = int(report.get("stats", {}).get("consequences", len(rows)) or 0)
    if total > len(out):
        out.append(f"… {total:,} consequences suppressed in all (the first per entity listed; the JSON report "
                   "lists them)")
    return out


def print_consequences(report: dict, console: Console, style: Style, max_rows: int = 5) -> None:
    """The first consequences (at most ``max_rows``) and how many were suppressed in all, after the roots."""
    if style.quiet or not report.get("consequences"):
        return
    if style.plain:
        for line in _consequence_lines(report, max_rows):
            console.print(Text(line), soft_wrap=True, highlight=False)
    else:
        console.print(_consequences_table(report, max_rows))


def print_report(report: dict, console: Console, max_rows: int = MAX_VIOLATION_ROWS, style: Style | None = None,
                 title: str = "kvsim replay") -> None:
    """Print the findings (at most max_rows), the refusals by reason, the coverage (on a terminal, or when
    asked) and last the verdict line."""
    style = style or Style.of(console)
    verdict = verdict_of(report)
    if not style.quiet:
        print_findings(report.get("violations", []), console, style, max_rows,
                       total=len(report.get("violations", [])) + unlisted(report.get("stats", {}) or {}))
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
