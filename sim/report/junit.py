"""JUnit XML for CI test reporters (GitHub Actions reporters, GitLab, Jenkins) from a kvreport/1 dict.

Shape of a replay: one <testsuite> per trace, one <testcase> per catalogue rule in that trace. A rule
violated in the trace fails with one <failure> listing every violation of it there; a rule the trace never
checked is skipped ("not exercised by this trace"); the trace's refusals go to the suite's <system-out>.
Shape of `kvsim check`: one <testsuite> "kvsim check" with one <testcase> per scenario, failing when the
scenario did not behave as declared (its <failure> says what differed: each violation not declared, each
declaration not reported), so that `failures` is the console's count of failed scenarios (the one verdict,
sim.report.verdict); a passing case lists its expected violations in <system-out>. Violations that are
consequences of an earlier finding are listed with it, never failing a case of their own. No times,
host names or timestamps: the same report gives the same bytes. Every string passes `safe_text`, so
characters XML 1.0 forbids cannot make the file unreadable.

This module must not know how the report is produced, nor anything of the other report formats.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from kvsim.sim.report.kvreport import (
    format_context,
    is_check,
    missing_declared,
    report_title,
    rule_order,
    safe_text,
    trace_order,
    trace_rule_counters,
    violations_by_trace_rule,
)
from kvsim.sim.report.verdict import CONSEQUENCE_KEY, PARTIAL_KEY, plural

__all__ = ["render_junit", "junit_classname"]

NOT_EXERCISED = "not exercised by this trace"
_MESSAGE_LIMIT = 300


def junit_classname(trace: str) -> str:
    """A dotted class name for a trace path ("scenarios/fork.jsonl" -> "kvsim.scenarios.fork_jsonl"),
    so that reporters which group by package show the trace's folders."""
    parts = [re.sub(r"\W", "_", part) for part in re.split(r"[\\/]+", trace) if part not in ("", ".")]
    return ".".join(["kvsim", *(part or "_" for part in parts)])


def _element(tag: str, attrs: dict[str, object] | None = None, text: str | None = None) -> ET.Element:
    element = ET.Element(tag, {key: safe_text(value) for key, value in (attrs or {}).items()})
    if text is not None:
        element.text = safe_text(text)
    return element


def _one_line(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _violation_text(violation: dict) -> str:
    message = safe_text(violation.get("message", "")).replace("\n", "\n    ")
    lines = [f"event {violation.get('event')}, line {violation.get('line')}, op {violation.get('op')}: {message}"]
    context = format_context(violation.get("context"))
    if context:
        lines.append(f"    context: {context}")
    return "\n".join(lines)


def _failure(rule_id: str, trace: str, violations: list[dict]) -> ET.Element:
    first = violations[0]
    times = "once" if len(violations) == 1 else f"{len(violations)} times"
    message = (
        f"{rule_id} violated {times} in {trace}; first at event {first.get('event')} "
        f"(line {first.get('line')}, op {first.get('op')}): {_one_line(first.get('message', ''))}"
    )
    text = "\n".join(_violation_text(violation) for violation in violations)
    return _element("failure", {"message": _one_line(message), "type": rule_id}, text + "\n")


def _refusals_text(refusals: list[dict]) -> str:
    lines = [f"{len(refusals)} refusal{'' if len(refusals) == 1 else 's'}:"]
    lines += [
        f"event {refusal.get('event')}, op {refusal.get('op')}: refused ({refusal.get('reason')})"
        for refusal in refusals
    ]
    return "\n".join(lines) + "\n"


def _missing_failure(rule_id: str, trace: str, missing: list[dict]) -> ET.Element:
    where = ", ".join(f"event {m['event']} (line {m['line']})" for m in missing)
    return _element("failure", {"message": _one_line(f"{rule_id} declared at {where} in {trace} but not reported"),
                                "type": "declared-not-reported"})


def _suite(report: dict, trace: str, rule_ids: list[str], groups: dict, missing: dict) -> ET.Element:
    rules = report.get("rules", {})
    inputs = {entry.get("path"): entry for entry in report.get("inputs", [])}
    classname = junit_classname(trace)
    cases: list[ET.Element] = []
    failures = skipped = 0
    for rule_id in rule_ids:
        title = rules.get(rule_id, {}).get("title", "")
        attrs: dict[str, object] = {"classname": classname, "name": f"{rule_id}: {title}" if title else rule_id,
                                    "file": trace}
        found = groups.get((trace, rule_id), [])
        violations = [v for v in found if not v.get("expected") and v.get(CONSEQUENCE_KEY) is None]
        expected = [v for v in found if v.get("expected")]
        absent = missing.get((trace, rule_id), [])
        counters = trace_rule_counters(report, trace, rule_id)
        if found:
            attrs["line"] = (violations or found)[0].get("line")
        case = _element("testcase", attrs)
        if violations or absent:
            failures += 1
            case.append(_failure(rule_id, trace, violations) if violations
                        else _missing_failure(rule_id, trace, absent))
        elif expected:
            text = "\n".join(_violation_text(v) for v in expected)
            case.append(_element("system-out", text=f"expected (declared by the scenario):\n{text}\n"))
        elif counters is not None and counters.get("checked", 0) == 0:
            skipped += 1
            case.append(_element("skipped", {"message": NOT_EXERCISED}))
        cases.append(case)

    suite = _element("testsuite", {
        "name": trace, "tests": len(cases), "failures": failures, "errors": 0, "skipped": skipped, "time": 0,
    })
    entry = inputs.get(trace)
    if entry is not None:
        properties = _element("properties")
        for key in ("sha256", "events"):
            if key in entry:
                properties.append(_element("property", {"name": key, "value": entry[key]}))
        suite.append(properties)
    suite.extend(cases)
    refusals = [refusal for refusal in report.get("refusals", []) if refusal.get("trace") == trace]
    if refusals:
        suite.append(_element("system-out", text=_refusals_text(refusals)))
    return suite


def _check_suite(report: dict) -> ET.Element:
    """`kvsim check`: one case per scenario, failing with what differed from its declaration."""
    why = {m.get("trace"): m for m in report.get("stats", {}).get("check", {}).get("mismatches", [])}
    groups: dict[str, list[dict]] = {}
    for v in report.get("violations", []):
        groups.setdefault(v.get("trace"), []).append(v)
    suite = _element("testsuite", {"name": "kvsim check"})
    failures = 0
    for trace in trace_order(report):
        case = _element("testcase", {"classname": junit_classname(trace), "name": f"{trace}: behaves as declared",
                                     "file": trace})
        mismatch = why.get(trace)
        if mismatch is not None:
            failures += 1
            found = mismatch.get("why") or [{"difference": "mismatch", "rule": "-", "line": 0,
                                             "message": "did not behave as declared"}]
            undeclared = [d for d in found if d.get("difference") != "not-reported"]
            if undeclared:
                kind, first = str(undeclared[0].get("rule")), undeclared[0]
                headline = f"{first.get('rule')} at line {first.get('line')}: {first.get('message')}"
            else:
                kind = "declared-not-reported"
                headline = "; ".join(f"{d.get('rule')} declared at event {d.get('event')} (line {d.get('line')}) "
                                     f"in {trace} but not reported" for d in found)
            more = f" (and {plural(len(found) - 1, 'more difference')})" if undeclared and len(found) > 1 else ""
            text = "\n".join(f"line {d.get('line')}: {d.get('rule')} {d.get('message')}" for d in found)
            case.append(_element("failure", {"message": _one_line(headline + more), "type": kind}, text + "\n"))
        else:
            listed = [v for v in groups.get(trace, []) if v.get("expected")]
            if listed:
                text = "\n".join(_violation_text(v) for v in listed)
                case.append(_element("system-out", text=f"expected (declared by the scenario):\n{text}\n"))
        suite.append(case)
    for key, value in (("tests", len(suite)), ("failures", failures), ("errors", 0), ("skipped", 0), ("time", 0)):
        suite.set(key, str(value))
    return suite


def _interrupted_suite(report: dict) -> ET.Element | None:
    """A run stopped by a signal (``partial``): one suite "kvsim run" whose one case errs with what was left
    undone, so that a CI reporter never shows an interrupted run as a clean one (its verdict is incomplete or,
    with a violation found so far, failed)."""
    mark = report.get(PARTIAL_KEY)
    if not mark:
        return None
    done = f" after {mark['done']}" if mark.get("done") else ""
    case = _element("testcase", {"classname": "kvsim", "name": "the run judged every input"})
    case.append(_element("error", {"message": f"interrupted by {mark.get('signal', 'a signal')}{done}: the figures "
                                              "are those of the part judged", "type": "interrupted"}))
    suite = _element("testsuite", {"name": "kvsim run", "tests": 1, "failures": 0, "errors": 1, "skipped": 0,
                                   "time": 0})
    suite.append(case)
    return suite


def render_junit(report: dict) -> bytes:
    """The report as JUnit XML bytes (UTF-8, with an XML declaration and a final newline)."""
    if is_check(report):
        suites = [_check_suite(report)]
    else:
        rule_ids = rule_order(report)
        groups = violations_by_trace_rule(report)
        missing: dict[tuple, list] = {}
        for m in missing_declared(report):
            missing.setdefault((m["trace"], m["rule"]), []).append(m)
        suites = [_suite(report, trace, rule_ids, groups, missing) for trace in trace_order(report)]
    stopped = _interrupted_suite(report)
    if stopped is not None:
        suites.append(stopped)
    totals = {key: sum(int(suite.get(key) or 0) for suite in suites)
              for key in ("tests", "failures", "errors", "skipped")}
    root = _element("testsuites", {"name": report_title(report), **totals, "time": 0})
    root.extend(suites)
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n").encode("utf-8")
