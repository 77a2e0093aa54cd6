"""GitHub-flavoured Markdown for a CI step summary ($GITHUB_STEP_SUMMARY) from a kvreport/1 dict.

Sections: the verdict, the inputs, the violations (capped, with a "… and N more" line; for `kvsim check`
the unexpected ones, the declared ones not reported, then the expected ones), a KV-event stream's
router-compatibility hazards (if any), the refusals by reason,
and the per-rule coverage. Every cell is escaped: Markdown punctuation that could open markup is
backslash-escaped, pipes cannot split a cell, line breaks become <br>. No timestamps: the same report
gives the same text.

This module must not know how the report is produced, nor anything of the other report formats.
"""

from __future__ import annotations

import re

from kvsim.sim.report.kvreport import (
    format_context,
    headline,
    is_check,
    message_text,
    missing_declared,
    refusal_summary,
    report_title,
    rules_by_evidence,
    safe_text,
    split_violations,
    trace_order,
)
from kvsim.sim.report.verdict import verdict_of

__all__ = ["render_markdown", "md_cell", "MAX_VIOLATION_ROWS"]

MAX_VIOLATION_ROWS = 200

_MARKUP = re.compile(r"([\\`*_\[\]<>|~&])")

STATUS = {"violated": "❌", "exercised": "✅", "vacuous": "⚠️", "unchecked": "⏭️"}


def md_cell(value: object) -> str:
    """Text safe inside a GFM table cell: markup characters escaped, line breaks as <br>, no control characters."""
    text = safe_text(value)
    lines = [_MARKUP.sub(r"\\\1", line.strip()) for line in text.split("\n")]
    return "<br>".join(lines) if text else ""


class _Raw(str):
    """A cell already written as Markdown (not escaped again)."""


def _cell(value: object) -> str:
    if isinstance(value, _Raw):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return md_cell(value)


def _table(header: list[str], align: str, rows: list[list[object]]) -> list[str]:
    """A GFM table; align holds one of 'l'/'r' per column."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return out


def _status(counters: dict) -> str:
    if counters.get("violated", 0):
        return STATUS["violated"]
    if counters.get("exercised", 0):
        return STATUS["exercised"]
    return STATUS["vacuous"] if counters.get("checked", 0) else STATUS["unchecked"]


def _inputs(report: dict) -> list[str]:
    sizes = {entry.get("path"): entry for entry in report.get("inputs", [])}
    rows = []
    for trace in trace_order(report):
        entry = sizes.get(trace, {})
        violations = sum(1 for v in report.get("violations", []) if v.get("trace") == trace)
        refusals = sum(1 for r in report.get("refusals", []) if r.get("trace") == trace)
        digest = str(entry.get("sha256", ""))
        shown = f"`{digest[:16]}`" if re.fullmatch(r"[0-9a-fA-F]+", digest) else md_cell(digest)
        rows.append([trace, int(entry.get("events", 0)), violations, refusals, _Raw(shown)])
    return ["### Inputs", "", *_table(["trace", "events", "violations", "refusals", "sha256"], "lrrrl", rows)]


def _violations(report: dict, max_rows: int) -> list[str]:
    if not is_check(report):
        return _violation_table("Violations", report.get("violations", []), max_rows)
    unexpected, expected = split_violations(report)
    out = []
    if unexpected:
        out += _violation_table("Unexpected violations", unexpected, max_rows) + [""]
    missing = missing_declared(report)
    if missing:
        rows = [[m["rule"], f"{m['trace']}:{m['line']}", str(m["event"])] for m in missing]
        out += ["### Declared but not reported", "", *_table(["rule", "trace:line", "event"], "llr", rows), ""]
    return out + _violation_table("Expected violations (declared by the violation scenarios)", expected, max_rows)


def _violation_table(title: str, violations: list[dict], max_rows: int) -> list[str]:
    if not violations:
        return [f"### {title}", "", "None."]
    rows = [
        [v.get("rule", ""), f"{v.get('trace', '')}:{v.get('line', '')}", str(v.get("event", "")), str(v.get("op", "")),
         message_text(v), format_context(v.get("context"))]
        for v in violations[:max_rows]
    ]
    out = [f"### {title}", "", *_table(["rule", "trace:line", "event", "op", "message", "context"], "llrlll", rows)]
    if len(violations) > max_rows:
        out += ["", f"… and {len(violations) - max_rows:,} more violations (the JSON report lists them all)."]
    return out


def _hazards(report: dict, max_rows: int) -> list[str]:
    """A KV-event stream's router-compatibility hazards (EV-3's entry): listed apart, never violations."""
    hazards = report.get("hazards") or []
    if not hazards:
        return []
    rows = [{**h, "message": f"{message_text(h)} ({int(h.get('consequences', 0) or 0):,} consequences counted "
                             "apart)"} for h in hazards]
    return _violation_table("Router-compatibility hazards (not violations)", rows, max_rows)


def _refusals(report: dict) -> list[str]:
    summary = refusal_summary(report)
    if not summary:
        return ["### Refusals", "", "None."]
    rows = [
        [row["reason"], row["count"], ", ".join(f"{op} ×{n}" for op, n in row["ops"]),
         ", ".join(f"{trace} ×{n}" for trace, n in row["traces"])]
        for row in summary
    ]
    return ["### Refusals by reason", "", *_table(["reason", "refusals", "ops", "traces"], "lrll", rows)]


def _coverage(report: dict) -> list[str]:
    rules = report.get("rules", {})
    out = ["### Rule coverage"]
    for title, ids in rules_by_evidence(report):
        rows = []
        for rule_id in ids:
            counters = rules.get(rule_id, {})
            name = str(counters.get("title", ""))
            if counters.get("subsumed_by"):
                name += f" (subsumed by {', '.join(counters['subsumed_by'])})"
            if counters.get("partial"):  # checks the trace let judge only in part (e.g. a hidden Host layout)
                name += f" ({int(counters['partial'])} checks partial)"
            rows.append([_Raw(_status(counters)), rule_id, name,
                         *(int(counters.get(key, 0)) for key in ("checked", "exercised", "violated"))])
        out += ["", f"#### {title}", "",
                *_table(["", "rule", "title", "checked", "exercised", "violated"], "lllrrr", rows)]
    legend = (f"{STATUS['violated']} violated · {STATUS['exercised']} exercised · "
              f"{STATUS['vacuous']} checked, premise never held · {STATUS['unchecked']} not checked")
    return out + ["", legend]


def _why(report: dict) -> list[str]:
    """For a failing check: each scenario that did not behave as declared, and what differed."""
    out = []
    for m in report.get("stats", {}).get("check", {}).get("mismatches", []):
        out += ["", f"- {md_cell(m.get('trace'))}"]
        out += [f"  - line {md_cell(d.get('line'))}: {md_cell(d.get('rule'))} {md_cell(d.get('message'))}"
                for d in m.get("why", [])]
    return ["### Why scenarios did not behave as declared", *out] if out else []


def render_markdown(report: dict, max_rows: int = MAX_VIOLATION_ROWS) -> str:
    """The report as Markdown text ending in a newline; at most max_rows violation rows."""
    verdict = {"pass": "✅ PASS", "fail": "❌ FAIL", "incomplete": "⚠️ INCOMPLETE"}[verdict_of(report).status]
    parts = [
        [f"## {report_title(report)}: {verdict}", "", f"**{md_cell(headline(report))}**"],
        _why(report),
        _inputs(report),
        _violations(report, max_rows),
        _hazards(report, max_rows),
        _refusals(report),
        _coverage(report),
    ]
    return "\n\n".join("\n".join(part) for part in parts if part) + "\n"
