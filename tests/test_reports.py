"""kvreport/1 JSON, JUnit XML and Markdown renderers: determinism, structure, escaping."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_samples import FORK, LONG, RULES, UNCHECKED, VIOLATIONS, sample_report

from kvsim.sim.report.junit import junit_classname, render_junit
from kvsim.sim.report.kvreport import (
    ReportFormatError,
    dumps_report,
    format_context,
    headline,
    load_report,
    refusal_summary,
    rule_order,
    safe_text,
    trace_order,
)
from kvsim.sim.report.markdown import md_cell, render_markdown

# --- JSON ------------------------------------------------------------------------------------------------


def test_json_is_byte_identical_for_equal_reports():
    assert dumps_report(sample_report()) == dumps_report(sample_report())


def test_json_keeps_insertion_order_non_ascii_and_trailing_newline():
    data = dumps_report(sample_report())
    text = data.decode("utf-8")
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert "启动时固定" in text  # clause kept as UTF-8, not \\u escapes
    assert text.index('"format"') < text.index('"inputs"') < text.index('"verdict"') < text.index('"stats"')
    assert text.index('"CAP-1"') < text.index('"CAP-2"') < text.index('"TS-POOL-1"')
    assert text.splitlines()[1].startswith('  "format"')  # indent 2


def test_json_round_trips_through_a_file(tmp_path):
    report = sample_report()
    path = tmp_path / "report.json"
    path.write_bytes(dumps_report(report))
    assert load_report(path) == report


def test_json_refuses_nan():
    report = sample_report()
    report["stats"]["ratio"] = float("nan")
    with pytest.raises(ValueError):
        dumps_report(report)


@pytest.mark.parametrize("content", [b"{not json", b'{"format": "kvtrace/1"}', b"[1, 2]", b"\xff\xfe"])
def test_load_report_refuses_other_files_with_the_path(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ReportFormatError, match="bad.json"):
        load_report(path)


# --- shared views ----------------------------------------------------------------------------------------


def test_trace_and_rule_order():
    report = sample_report()
    assert trace_order(report) == [FORK, LONG]
    assert rule_order(report) == [rule_id for rule_id, _, _ in RULES]
    report["violations"].append({"rule": "NEW-1", "trace": "other.jsonl", "event": 0, "line": 1, "op": "x",
                                 "message": "m", "context": {}})
    assert trace_order(report)[-1] == "other.jsonl"
    assert rule_order(report)[-1] == "NEW-1"


def test_refusal_summary_does_not_depend_on_input_order():
    report = sample_report()
    summary = refusal_summary(report)
    assert [(row["reason"], row["count"]) for row in summary] == \
        [("entitlement", 3), ("capacity", 1), ("no free row", 1)]
    report["refusals"].reverse()
    assert refusal_summary(report) == summary


def test_format_context_and_headline():
    assert format_context({"seq": "s2", "n": 3, "ok": True, "x": None, "l": [1, 2], "s": "a b"}) == \
        'seq=s2, n=3, ok=true, x=null, l=[1, 2], s="a b"'
    assert format_context({}) == ""
    assert headline(sample_report()).startswith("FAIL: 7 violations of 5 rules in 2 traces")
    assert headline(sample_report(passing=True)).startswith("PASS")


def test_safe_text_escapes_forbidden_characters():
    assert safe_text("a\x00b\x1bc\td\r\ne\ud800\uffff\x85\u2028f") == "a\\x00b\\x1bc\td\ne\\ud800\\uffff\\x85\nf"


# --- JUnit -----------------------------------------------------------------------------------------------


def _suites(xml: bytes) -> dict[str, ET.Element]:
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    return {suite.get("name"): suite for suite in root.findall("testsuite")}


def test_junit_is_byte_identical_for_equal_reports():
    assert render_junit(sample_report()) == render_junit(sample_report())


def test_junit_counts_per_suite_and_total():
    report = sample_report()
    root = ET.fromstring(render_junit(report))
    suites = _suites(render_junit(report))
    assert list(suites) == [FORK, LONG]
    expected_failures = {FORK: {"WR-2", "CAP-3", "TRACE-1"}, LONG: {"PAGE-2", "ENT-3"}}
    for trace, suite in suites.items():
        cases = suite.findall("testcase")
        assert len(cases) == len(RULES) == int(suite.get("tests"))
        failed = {case.get("name").split(":")[0] for case in cases if case.find("failure") is not None}
        skipped = {case.get("name").split(":")[0] for case in cases if case.find("skipped") is not None}
        assert failed == expected_failures[trace]
        assert skipped == UNCHECKED[trace]
        assert int(suite.get("failures")) == len(failed)
        assert int(suite.get("skipped")) == len(skipped)
        assert suite.get("errors") == "0"
        assert {case.get("classname") for case in cases} == {junit_classname(trace)}
    assert int(root.get("tests")) == 2 * len(RULES)
    assert int(root.get("failures")) == 5 and int(root.get("skipped")) == 5


def test_junit_names_carry_rule_id_and_title_and_no_times():
    xml = render_junit(sample_report())
    suite = _suites(xml)[FORK]
    names = [case.get("name") for case in suite.findall("testcase")]
    assert names[0] == f"{RULES[0][0]}: {RULES[0][1]}"
    assert all(element.get("time") in (None, "0") for element in ET.fromstring(xml).iter())
    assert junit_classname(FORK) == "kvsim.scenarios.fork_jsonl"


def test_junit_failure_lists_every_violation_of_the_rule_in_the_trace():
    suites = _suites(render_junit(sample_report()))
    for rule, trace, event, line, op, message, context in VIOLATIONS:
        case = next(c for c in suites[trace].findall("testcase") if c.get("name").startswith(rule + ":"))
        failure = case.find("failure")
        assert failure.get("type") == rule
        assert f"event {event}, line {line}, op {op}: " in failure.text
        assert message.split("\n")[0] in failure.text
        assert format_context(context) in failure.text
        count = sum(1 for v in VIOLATIONS if v[0] == rule and v[1] == trace)
        assert failure.text.count("event ") == count
        assert rule in failure.get("message") and trace in failure.get("message")


def test_junit_refusals_in_system_out():
    suites = _suites(render_junit(sample_report()))
    out = suites[LONG].find("system-out").text
    assert "3 refusals" in out and "event 301, op reserve: refused (capacity)" in out


def test_junit_passing_report_has_no_failure():
    root = ET.fromstring(render_junit(sample_report(passing=True)))
    assert root.get("failures") == "0" and not list(root.iter("failure"))


_FRAGMENTS = ["<", ">", "&", '"', "'", "]]>", "|", "\\", "\x00", "\x01", "\x0b", "\x1b", "\r", "\r\n", "\n", "\t",
              "\x85", "\u2028", "\ufffe", "\ud800", "*_`[", "中文"]
_awkward = st.lists(st.one_of(st.characters(codec="utf-8"), st.sampled_from(_FRAGMENTS)), max_size=20).map("".join)


@settings(max_examples=60, deadline=None)
@given(message=_awkward, title=_awkward, trace=_awkward.filter(bool), key=_awkward, value=_awkward)
def test_junit_is_well_formed_for_any_text(message, title, trace, key, value):
    report = sample_report()
    report["inputs"][0]["path"] = trace
    report["stats"]["traces"] = {trace: report["stats"]["traces"][FORK]}
    report["rules"]["WR-2"]["title"] = title
    report["violations"] = [{"rule": "WR-2", "trace": trace, "event": 1, "line": 2, "op": "launch",
                             "message": message, "context": {key: value}}]
    report["refusals"] = [{"trace": trace, "event": 0, "op": value, "reason": message}]
    xml = render_junit(report)
    root = ET.fromstring(xml)  # raises on malformed XML
    suite = root.find("testsuite")
    assert suite.get("name") == safe_text(trace)
    failure = next(iter(root.iter("failure")))
    first_line = safe_text(message).split("\n")[0]
    assert first_line in failure.text
    assert safe_text(format_context({key: value})).replace("\n", "") in failure.text.replace("\n", "")
    assert int(root.get("failures")) == 1


# --- Markdown --------------------------------------------------------------------------------------------


def test_markdown_is_identical_for_equal_reports():
    assert render_markdown(sample_report()) == render_markdown(sample_report())


def test_markdown_sections_and_tables():
    text = render_markdown(sample_report())
    assert text.startswith("## kvsim replay: ❌ FAIL")
    for heading in ("### Inputs", "### Violations", "### Refusals by reason", "### Rule coverage"):
        assert heading in text
    for rule_id, _, _ in RULES:
        assert f"| {rule_id} |" in text
    assert "| scenarios/fork.jsonl:19 | 17 | launch |" in text
    assert "| entitlement | 3 | map ×3 |" in text
    assert render_markdown(sample_report(passing=True)).startswith("## kvsim replay: ✅ PASS")


def _cells(row: str) -> list[str]:
    """Split a GFM table row the way GitHub does: on pipes not escaped by a backslash."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_markdown_escapes_pipes_newlines_and_markup():
    text = render_markdown(sample_report())
    rows = [line for line in text.splitlines() if line.startswith("| WR-2 |") or line.startswith("| TRACE-1 |")]
    assert len(rows) == 3
    assert all(len(_cells(row)) == 6 for row in rows)
    assert "column 40 \\| no private COW page" in rows[0]
    assert "\\<tail\\> \\& no COW" in rows[1]
    assert "refuses:<br>row 2 already active" in rows[2]
    assert md_cell("a|b\nc*d_e`f") == "a\\|b<br>c\\*d\\_e\\`f"


@settings(max_examples=60, deadline=None)
@given(message=_awkward)
def test_markdown_cell_never_splits_or_breaks_a_row(message):
    report = sample_report()
    report["violations"] = report["violations"][:1]
    report["violations"][0]["message"] = message
    rows = [line for line in render_markdown(report).splitlines() if line.startswith("| WR-2 | scenarios")]
    assert len(rows) == 1 and len(_cells(rows[0])) == 6
    rows[0].encode("utf-8")  # no lone surrogate left


def test_markdown_caps_violation_rows():
    report = sample_report()
    template = report["violations"][0]
    report["violations"] = [dict(template, event=i, line=i + 2) for i in range(250)]
    text = render_markdown(report, max_rows=200)
    assert sum(1 for line in text.splitlines() if line.startswith("| WR-2 | scenarios/fork.jsonl:")) == 200
    assert "… and 50 more violations" in text
    assert json.loads(dumps_report(report))["violations"][249]["event"] == 249


def test_junit_without_per_trace_counters_skips_nothing_and_still_fails():
    report = sample_report()
    report["stats"] = {}
    root = ET.fromstring(render_junit(report))
    assert root.get("skipped") == "0" and root.get("failures") == "5"
    assert [suite.get("name") for suite in root.findall("testsuite")] == [FORK, LONG]
