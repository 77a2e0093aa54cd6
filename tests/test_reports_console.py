"""Console views: plain text on a non-terminal, every rule id shown, report text never parsed as markup."""

from __future__ import annotations

import io

import pytest
from report_samples import RULES, sample_report
from rich.console import Console

from kvsim.sim.report.console import Style, github_annotation, print_report, print_rules


@pytest.fixture(autouse=True)
def _no_forced_terminal(monkeypatch):
    """rich honours these variables; a CI runner may set them, and they would defeat the non-TTY check."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def _plain_console() -> Console:
    return Console(file=io.StringIO(), width=120)


def _catalogue(with_counters: bool) -> list[dict]:
    report = sample_report()
    entries = []
    for rule_id, title, clause in RULES:
        entry = {"id": rule_id, "title": title, "clause": clause, "kind": "state"}
        if with_counters:
            entry.update({key: report["rules"][rule_id][key] for key in ("checked", "exercised", "violated")})
        entries.append(entry)
    return entries


def test_report_on_a_non_terminal_is_one_finding_per_line_then_the_verdict():
    console = _plain_console()
    assert not console.is_terminal
    report = sample_report()
    print_report(report, console)
    lines = console.file.getvalue().splitlines()
    assert "\x1b" not in "".join(lines) and not any(c in "".join(lines) for c in "│─┃━┏╭")
    assert lines[-1].startswith("FAIL: 7 violations of 5 rules in 2 traces")
    for v in report["violations"]:
        assert any(line.startswith(f"{v['trace']}:{v['line']}: {v['rule']} ") for line in lines)
    assert "stale generation 7" in "\n".join(lines)
    assert any("entitlement" in line for line in lines) and any("no free row" in line for line in lines)
    assert "CAP-3✗" not in "\n".join(lines)  # no coverage table unless asked


def test_plain_report_with_coverage_lists_every_rule():
    console = _plain_console()
    print_report(sample_report(), console, style=Style(plain=True, coverage=True))
    out = console.file.getvalue()
    for rule_id, _, _ in RULES:
        assert rule_id in out
    assert "CAP-3✗" in out and "UNIT-1○" in out and "TS-POOL-1∅" in out
    assert not any(c in out for c in "│─┃━┏╭")


def test_a_finding_line_is_never_wrapped_however_long_the_path():
    report = sample_report()
    deep = "/".join(["a_rather_long_folder_name"] * 12) + "/trace.jsonl"
    report["violations"] = [dict(report["violations"][0], trace=deep)]
    for terminal in (False, True):  # on a terminal too: coloured, never split by rich
        console = Console(file=io.StringIO(), width=80, force_terminal=terminal, color_system=None)
        print_report(report, console)
        lines = console.file.getvalue().splitlines()
        assert lines[0].startswith(f"{deep}:{report['violations'][0]['line']}: WR-2 ")


def _files_named_by(report: dict, folder) -> None:
    """Create the traces a sample report names (an annotation names a file only when it exists)."""
    for v in report["violations"]:
        (folder / v["trace"]).parent.mkdir(parents=True, exist_ok=True)
        (folder / v["trace"]).touch()


def test_quiet_keeps_the_verdict_line_and_github_annotates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _files_named_by(sample_report(), tmp_path)
    (tmp_path / "a,b:c.jsonl").touch()
    console = _plain_console()
    print_report(sample_report(), console, style=Style(quiet=True))
    assert console.file.getvalue().splitlines() == ["FAIL: 7 violations of 5 rules in 2 traces (2 traces, 9,048 "
                                                    "events, 5 refusals)"]
    console = _plain_console()
    print_report(sample_report(), console, style=Style(github=True))
    lines = console.file.getvalue().splitlines()
    v = sample_report()["violations"][0]
    assert lines[0] == github_annotation(v)
    assert lines[0].startswith(f"::error file={v['trace']},line={v['line']},title={v['rule']}::{v['rule']} ")
    assert github_annotation({"trace": "a,b:c.jsonl", "line": 3, "rule": "X-1", "message": "50%\nok"}) == \
        "::error file=a%2Cb%3Ac.jsonl,line=3,title=X-1::X-1 50%25%0Aok"


def test_an_annotation_names_a_file_only_when_there_is_one(tmp_path, monkeypatch):
    """A peer run that kept no record, a live stream, standard input: no `file=` GitHub could not open; the
    place stays in the message."""
    monkeypatch.chdir(tmp_path)
    for trace in ("(tokenspeed run)", "(vllm event stream)", "-", "missing.jsonl"):
        line = github_annotation({"trace": trace, "line": 7, "rule": "PEER-9", "message": "counts differ"})
        assert line == f"::error title=PEER-9::{trace}:7: PEER-9 counts differ", line
    (tmp_path / "run.cachetrace.jsonl").touch()
    assert github_annotation({"trace": "run.cachetrace.jsonl", "line": 7, "rule": "PEER-9", "message": "m"}) == \
        "::error file=run.cachetrace.jsonl,line=7,title=PEER-9::PEER-9 m"


def test_report_colours_on_a_terminal():
    console = Console(file=io.StringIO(), width=120, force_terminal=True, color_system="standard")
    print_report(sample_report(), console)
    assert "\x1b[" in console.file.getvalue()


def test_report_text_is_not_markup_and_cannot_carry_escape_codes():
    report = sample_report()
    report["violations"][0]["message"] = "[bold red]not markup[/] \x1b[31mred\x1b[0m"
    console = _plain_console()
    print_report(report, console)
    out = console.file.getvalue()
    assert "[bold red]not markup[/]" in out
    assert "\x1b" not in out and "\\x1b[31mred" in out


def test_report_caps_violation_rows_on_a_terminal_only():
    """A terminal's table stops at max_rows; a log or pipe (plain) gets every finding; --max-findings caps any
    style and says so."""
    report = sample_report()
    report["violations"] = [dict(report["violations"][0], event=1000 + i) for i in range(60)]
    console = _plain_console()
    print_report(report, console, max_rows=50, style=Style(plain=False))
    out = console.file.getvalue()
    assert "1049" in out and "1050" not in out
    assert "… and 10 more findings not printed (on a terminal; --plain or a pipe lists every one); --json F writes " \
        "a report listing all 60" in out
    console = _plain_console()
    print_report(report, console, max_rows=50, style=Style(plain=True))
    out = console.file.getvalue()
    assert "1059" in out and "more findings" not in out
    for style in (Style(plain=True, max_findings=7), Style(plain=True, github=True, max_findings=7)):
        console = _plain_console()
        print_report(report, console, max_rows=50, style=style)
        out = console.file.getvalue()
        assert out.count("::error") == 7 if style.github else ("1006" in out and "1007" not in out)
        assert "… and 53 more findings not printed (capped by --max-findings 7); --json F writes a report listing " \
            "all 60" in out


def test_counts_are_exact_when_a_judge_counted_more_than_it_listed():
    """Findings counted but not listed (stats.violations_not_listed) are never silently dropped: the line says
    how many are left out and how many of them the JSON report holds."""
    report = sample_report()
    report["violations"] = [dict(report["violations"][0], event=1000 + i) for i in range(8)]
    report.setdefault("stats", {})["violations_not_listed"] = 5
    console = _plain_console()
    print_report(report, console, style=Style(plain=True, max_findings=3, listed_in="r.json"))
    assert "… and 10 more findings not printed (capped by --max-findings 3); r.json lists 8 of the 13 (5 counted, " \
           "not listed)" in console.file.getvalue()
    console = _plain_console()
    print_report(report, console, style=Style(plain=True))
    assert "… and 5 more findings not printed (not listed by the judge); --json F writes a report listing 8 of the " \
           "13 (5 counted, not listed)" in console.file.getvalue()


def test_github_annotations_one_per_finding_up_to_ten_then_one_per_file(tmp_path, monkeypatch):
    """GitHub shows 10 annotations of a level per step: more findings are every one a log line, and one
    annotation per file (the last one counting the files left to the log when more than 10 have findings)."""
    monkeypatch.chdir(tmp_path)
    report = sample_report()
    _files_named_by(report, tmp_path)
    for i in range(12):
        (tmp_path / f"t{i}.jsonl").touch()
    base = report["violations"][0]
    report["violations"] = [dict(base, event=i) for i in range(10)]
    console = _plain_console()
    print_report(report, console, style=Style(plain=True, github=True))
    assert console.file.getvalue().count("::error file=") == 10
    report["violations"] = [dict(base, event=i, trace=f"t{i % 12}.jsonl", line=i + 2) for i in range(36)]
    console = _plain_console()
    print_report(report, console, style=Style(plain=True, github=True))
    lines = console.file.getvalue().splitlines()
    annotations = [line for line in lines if line.startswith("::error")]
    assert len(annotations) == 10
    assert sum(line.startswith("t") and ".jsonl:" in line for line in lines) == 36
    assert annotations[0].startswith("::error file=t0.jsonl,line=2,title=kvsim%3A 3 findings::3 findings in this")
    assert annotations[-1] == "::error title=kvsim::9 findings in 3 more files not annotated (GitHub shows 10 per " \
                              "step): every finding is listed in the log"


def test_passing_report():
    console = _plain_console()
    print_report(sample_report(passing=True), console)
    out = console.file.getvalue()
    assert out.splitlines()[-1].startswith("PASS: no violation") and ".jsonl:" not in out


def test_rules_table_with_and_without_counters():
    console = _plain_console()
    print_rules(_catalogue(with_counters=False), console)
    plain = console.file.getvalue()
    assert "\x1b" not in plain and "checked" not in plain
    for rule_id, _, _ in RULES:
        assert rule_id in plain
    assert "启动时固定" in plain

    console = _plain_console()
    print_rules(_catalogue(with_counters=True), console)
    counted = console.file.getvalue()
    assert "checked" in counted and "exercised" in counted and "violated" in counted
    assert f"{sample_report()['rules']['CAP-1']['checked']:,}" in counted
