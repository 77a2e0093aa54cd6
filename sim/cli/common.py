"""What every `kvsim` command shares: exit codes, input errors, writing files and reports, running traces.

Exit codes (DESIGN §8, §11): 0 no violation, 1 at least one violation, 2 input error (one line
`file:line: reason` on stderr), 3 internal error (a bug inside kvsim: one line naming the event and line).
This module knows no command; the command modules import it, never each other.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from rich.console import Console

from kvsim.sim.replay import replay_trace
from kvsim.sim.report.console import Style
from kvsim.sim.report.kvreport import dumps_report

EXIT_OK, EXIT_VIOLATION, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class InputError(Exception):
    """A bad command-line input (a file that cannot be read, a bad option value): exit 2."""


def reports_dir() -> Path:
    """Where reports go unless a command is told otherwise (KVSIM_REPORTS overrides `reports/`)."""
    return Path(os.environ.get("KVSIM_REPORTS", "reports"))


def scenarios_dir() -> Path:
    """The bundled scenarios: package data of `kvsim.scenarios` (the repository's `scenarios/` folder)."""
    return Path(str(resources.files("kvsim.scenarios")))


def write(path: str | Path, data: bytes | str) -> None:
    """Write a file, creating its folder; an unwritable path is an input error (exit 2)."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        p.write_bytes(data)
    except OSError as exc:
        raise InputError(f"{p}:0: cannot write: {exc.strerror or exc}") from None


def write_reports(report: dict, timelines: dict, json_path=None, junit=None, markdown=None, html=None) -> None:
    """Write the kvreport/1 dict in each format asked for (renderers are imported only when needed)."""
    if json_path:
        write(json_path, dumps_report(report))
    if junit:
        from kvsim.sim.report.junit import render_junit
        write(junit, render_junit(report))
    if markdown:
        from kvsim.sim.report.markdown import render_markdown
        write(markdown, render_markdown(report))
    if html:
        from kvsim.sim.report.html_page import render_html
        write(html, render_html(report, timelines))


def last_run_path() -> Path:
    """Where the last run's report is kept for `kvsim rules`: `$KVSIM_REPORTS/last-run.json` when that folder
    is named, otherwise the user's cache (`$XDG_CACHE_HOME/kvsim`, default `~/.cache/kvsim`), never a
    `reports/` folder in whatever directory a command happens to run from."""
    if os.environ.get("KVSIM_REPORTS"):
        return reports_dir() / "last-run.json"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kvsim" / "last-run.json"


def remember(report: dict) -> Path | None:
    """Keep the last run's report so that `kvsim rules` can show its coverage; returns where (None when that
    place cannot be written: it must not fail a run)."""
    path = last_run_path()
    try:
        write(path, dumps_report(report))
    except (InputError, OSError):
        return None
    return path


def add_output_options(parser, findings: bool = True, coverage: bool = False) -> None:
    """--plain, --quiet and (commands that report findings) --format text|github, (replay) --coverage."""
    group = parser.add_argument_group("output")
    group.add_argument("--plain", action="store_true",
                       help="plain output even on a terminal: one finding per line, no tables (the default when "
                       "standard output is not a terminal or NO_COLOR is set)")
    group.add_argument("--quiet", action="store_true", help="print only the one-line verdict")
    if findings:
        group.add_argument("--format", dest="output_format", choices=("text", "github"), default="text",
                           help="findings as text lines `path:line: RULE message` or as GitHub Actions "
                           "::error annotations")
    if coverage:
        group.add_argument("--coverage", action="store_true",
                           help="print the rule coverage table even when the output is plain")


def output_style(args, console: Console | None = None) -> Style:
    """The console style the command line and the environment ask for (see sim.report.console.Style)."""
    console = console or Console()
    plain = bool(getattr(args, "plain", False)) or bool(os.environ.get("NO_COLOR")) or not console.is_terminal
    return Style(plain=plain, quiet=bool(getattr(args, "quiet", False)),
                 github=getattr(args, "output_format", "text") == "github",
                 coverage=bool(getattr(args, "coverage", False)))


def run_traces(paths, stop_at_first: bool = False, lockstep: bool = False, console=None, lockstep_profile=None):
    """Replay traces in order; returns the results (stops after the first violating trace if asked).

    A progress bar shows on a terminal only (never in CI logs).
    """
    observer = None
    if lockstep:
        from kvsim.sim.lockstep import lockstep_factory

        def observer(st):
            return lockstep_factory(st, lockstep_profile)
    results = []
    err = console if console is not None else Console(stderr=True)
    for path in paths:
        if err.is_terminal:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed:,} events"),
                          TimeElapsedColumn(), console=err, transient=True) as prog:
                task = prog.add_task(str(path), total=None)
                r = replay_trace(path, stop_at_first, observer_factory=observer,
                                 progress=lambda n, task=task: prog.advance(task, n))
        else:
            r = replay_trace(path, stop_at_first, observer_factory=observer)
        results.append(r)
        if stop_at_first and r.violations:
            break
    return results
