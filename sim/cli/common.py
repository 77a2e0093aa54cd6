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


def remember(report: dict) -> None:
    """Keep the last run's report so that `kvsim rules` can show its coverage."""
    try:
        write(reports_dir() / "last-run.json", dumps_report(report))
    except InputError:
        pass  # an unwritable reports folder must not fail a replay


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
