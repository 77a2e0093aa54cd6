"""kvreport/1: serialise and load the replay report, and the small read-only views every renderer shares.

The report dict is built by the replay engine (DESIGN §8). This module writes it as canonical JSON (the
same dict gives the same bytes: insertion order kept, no timestamps, no host names) and reads it back,
refusing a file that is not kvreport/1. The views below (trace and rule order, violations grouped by
trace and rule, refusals by reason, context and headline text, characters no output may carry) are pure
functions over the dict, so that the JUnit, Markdown, HTML and console renderers say the same thing.

This module must not know how a report is produced (the model, the rule checkers, the trace format) nor
how any renderer lays it out.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from os import PathLike
from typing import Any

from kvsim.sim.report.verdict import CONSEQUENCE_KEY, verdict_of

FORMAT = "kvreport/1"

__all__ = [
    "FORMAT",
    "ReportFormatError",
    "dumps_report",
    "load_report",
    "trace_order",
    "rule_order",
    "rule_family",
    "trace_rule_counters",
    "violations_by_trace_rule",
    "refusal_summary",
    "format_value",
    "format_context",
    "headline",
    "message_text",
    "passed",
    "is_check",
    "report_title",
    "split_violations",
    "missing_declared",
    "safe_text",
]


class ReportFormatError(ValueError):
    """A file that should hold a kvreport/1 document does not."""


def dumps_report(report: dict) -> bytes:
    """Canonical kvreport/1 bytes: UTF-8 JSON, indent 2, non-ASCII kept, insertion order, final newline.

    NaN and infinities are refused (they are not JSON); the same dict always gives the same bytes.
    """
    text = json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def load_report(path: str | PathLike) -> dict:
    """Read a kvreport/1 file written by `dumps_report`; raise ReportFormatError with the path if it is not one."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportFormatError(f"{path}: not a kvreport/1 JSON file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ReportFormatError(f"{path}: expected format {FORMAT!r}, found {found!r}")
    return data


# --- shared views ---------------------------------------------------------------------------------------


def _append_new(order: list[str], seen: set[str], name: Any) -> None:
    if isinstance(name, str) and name not in seen:
        seen.add(name)
        order.append(name)


def trace_order(report: dict) -> list[str]:
    """Every trace the report mentions: the inputs in their order, then any other trace by first mention."""
    order: list[str] = []
    seen: set[str] = set()
    for entry in report.get("inputs", []):
        _append_new(order, seen, entry.get("path"))
    for name in report.get("stats", {}).get("traces", {}):
        _append_new(order, seen, name)
    for item in (*report.get("violations", []), *report.get("refusals", [])):
        _append_new(order, seen, item.get("trace"))
    return order


def rule_order(report: dict) -> list[str]:
    """Rule ids in catalogue order (the order of report["rules"]), then any violated id not catalogued."""
    order: list[str] = []
    seen: set[str] = set()
    for rule_id in report.get("rules", {}):
        _append_new(order, seen, rule_id)
    for violation in report.get("violations", []):
        _append_new(order, seen, violation.get("rule"))
    return order


EVIDENCE_SECTIONS = (("engine", "Rules judging the engine"),
                     ("model", "Rules guarding the model (self-checks, not engine coverage)"),
                     ("none", "Clauses not checkable from traces"))


def rules_by_evidence(report: dict) -> list[tuple[str, list[str]]]:
    """(section title, rule ids in catalogue order) per evidence kind, non-empty sections only; a rule
    without an evidence entry (an older report, or an uncatalogued violated id) counts as judging the engine."""
    rules = report.get("rules", {})
    out = []
    for kind, title in EVIDENCE_SECTIONS:
        ids = [r for r in rule_order(report) if rules.get(r, {}).get("evidence", "engine") == kind]
        if ids:
            out.append((title, ids))
    return out


def rule_family(rule_id: str) -> str:
    """The family of a rule id: everything before its last '-' ("TS-POOL-3" -> "TS-POOL")."""
    head, sep, _ = rule_id.rpartition("-")
    return head if sep else rule_id


def trace_rule_counters(report: dict, trace: str, rule_id: str) -> dict | None:
    """The checked/exercised/violated counters of one rule in one trace, or None when the report has none."""
    trace_stats = report.get("stats", {}).get("traces", {}).get(trace)
    if not isinstance(trace_stats, dict):
        return None
    return trace_stats.get("rules", {}).get(rule_id)


def violations_by_trace_rule(report: dict) -> dict[tuple[str, str], list[dict]]:
    """Violations grouped by (trace, rule), each group in report order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for violation in report.get("violations", []):
        groups.setdefault((violation.get("trace"), violation.get("rule")), []).append(violation)
    return groups


def refusal_summary(report: dict) -> list[dict]:
    """Refusals counted by reason: [{"reason", "count", "ops": [(op, n)...], "traces": [(trace, n)...]}].

    Ordered by descending count, then reason; ops and traces likewise, so the input order does not matter.
    """
    by_reason: dict[str, list[dict]] = {}
    for refusal in report.get("refusals", []):
        by_reason.setdefault(str(refusal.get("reason")), []).append(refusal)

    def ranked(counter: Counter) -> list[tuple[str, int]]:
        return sorted(counter.items(), key=lambda item: (-item[1], item[0]))

    summary: list[dict[str, Any]] = [
        {
            "reason": reason,
            "count": len(items),
            "ops": ranked(Counter(str(item.get("op")) for item in items)),
            "traces": ranked(Counter(str(item.get("trace")) for item in items)),
        }
        for reason, items in by_reason.items()
    ]
    summary.sort(key=lambda row: (-row["count"], row["reason"]))
    return summary


_BARE = re.compile(r"[\w./:+#@-]+")


def format_value(value: Any) -> str:
    """One context value as text: plain words bare, everything else as JSON (strings quoted, null, true)."""
    if isinstance(value, str) and _BARE.fullmatch(value):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=False, default=str)


def format_context(context: dict | None) -> str:
    """A violation's context as "key=value, key=value" in the given key order ("" when empty)."""
    if not context:
        return ""
    return ", ".join(f"{key}={format_value(value)}" for key, value in context.items())


def is_check(report: dict) -> bool:
    """Whether the report is `kvsim check`'s: scenarios with declared outcomes, judged against them."""
    return isinstance(report.get("stats", {}).get("check"), dict)


def report_title(report: dict) -> str:
    return "kvsim check" if is_check(report) else "kvsim replay"


def split_violations(report: dict) -> tuple[list[dict], list[dict]]:
    """(unexpected, expected) violations, each in report order; only a check report has expected ones (a
    violation scenario's header declares them)."""
    violations = report.get("violations", [])
    return [v for v in violations if not v.get("expected")], [v for v in violations if v.get("expected")]


def missing_declared(report: dict) -> list[dict]:
    """Declared violations a check run did not report: {"trace", "rule", "event", "line"}, in report order."""
    out = []
    for m in report.get("stats", {}).get("check", {}).get("mismatches", []):
        reported = {tuple(t) for t in m.get("reported", [])}
        out += [{"trace": m.get("trace"), "rule": t[0], "event": t[1], "line": t[2]}
                for t in m.get("expected", []) if tuple(t) not in reported]
    return out


def message_text(violation: dict) -> str:
    """A violation's message, saying when it is the consequence of an earlier finding (never counted)."""
    message = str(violation.get("message", ""))
    after = violation.get(CONSEQUENCE_KEY)
    return message if after is None else f"{message} [consequence of finding #{after}, not counted]"


def headline(report: dict) -> str:
    """The verdict's one line (sim.report.verdict): e.g. "FAIL: 5 violations of 3 rules in 2 traces (...)"; for
    a check report, whether every scenario behaved as declared (and which did not)."""
    return verdict_of(report).headline


def passed(report: dict) -> bool:
    """Whether the report's verdict is a pass (derived, like the headline, from the one verdict)."""
    return verdict_of(report).passed


# XML 1.0 allows #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]; DEL and the C1
# controls are allowed there but move a terminal's cursor, so they are shown as escapes too.
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_LINE_BREAK = re.compile("\r\n|[\r\u2028\u2029]")


def safe_text(text: Any) -> str:
    """Text that XML 1.0, HTML and a terminal all show as written: control and non-characters shown as
    \\xNN / \\uNNNN escapes, every line break (CR, CRLF, U+2028, U+2029) turned into LF (tab kept)."""
    text = _LINE_BREAK.sub("\n", str(text))

    def shown(match: re.Match) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _UNSAFE.sub(shown, text)
