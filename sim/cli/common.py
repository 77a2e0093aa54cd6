"""What every `kvsim` command shares: exit codes, input errors, writing files and reports, running traces.

Exit codes (DESIGN §8, §11): 0 no violation, 1 at least one violation, 2 input error (one line
`file:line: reason` on stderr), 3 internal error (a bug inside kvsim: one line naming the event and line).
This module knows no command; the command modules import it, never each other.
"""

from __future__ import annotations

import contextlib
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console

from kvsim.sim.cli.argtypes import integer
from kvsim.sim.cli.outputs import (  # noqa: F401 - re-exported: the command modules import them from here
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_VIOLATION,
    WRITTEN,
    InputError,
    Stopped,
    interrupted_status,
    partial_mark,
    plain_progress,
    stopping,
    write,
)
from kvsim.sim.files import STDIN, Source, label, open_source, write_atomic
from kvsim.sim.replay import Interrupted, TraceResult, replay_trace
from kvsim.sim.report.console import Style
from kvsim.sim.report.kvreport import dumps_report


def reports_dir() -> Path:
    """Where reports go unless a command is told otherwise (KVSIM_REPORTS overrides `reports/`)."""
    return Path(os.environ.get("KVSIM_REPORTS", "reports"))


def scenarios_dir() -> Path:
    """The bundled scenarios: package data of `kvsim.scenarios` (the repository's `scenarios/` folder)."""
    return Path(str(resources.files("kvsim.scenarios")))


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
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, dumps_report(report))  # not a report the user asked for: not in WRITTEN
    except OSError:
        return None
    return path


def open_input(path: str | Path) -> Source:
    """Open a FILE argument once (``-``: standard input); an unreadable one is an input error (exit 2)."""
    try:
        return open_source(path)
    except OSError as exc:
        raise InputError(f"{label(path)}:0: cannot read: {exc.strerror or exc}") from None


_KVTRACE = re.compile(rb'^\s*\{\s*"format"\s*:\s*"kvtrace/1"')
_EVENT_BATCH = re.compile(rb'^\s*(\[\s*-?[0-9.eE+-]+\s*,\s*\[|\{\s*"(ts|events|seq)"\s*:|\{[^\n]{0,40}"type"\s*:\s*'
                          rb'"(BlockStored|BlockRemoved|AllBlocksCleared)")')
_MOONCAKE = re.compile(rb'^\s*\{[^\n]*"input_length"[^\n]*"hash_ids"')


def sniff(first_line: bytes) -> str | None:
    """What a file's first line says it is: "kvtrace/1", "kv-events" (a KV-event log's batch), "mooncake" (a
    request workload) or None (unknown: the reader then says what is wrong). A look at the text, never a
    parse: the first line of an event log can be longer than the peek."""
    if _KVTRACE.match(first_line):
        return "kvtrace/1"
    if _EVENT_BATCH.match(first_line):
        return "kv-events"
    if _MOONCAKE.match(first_line):
        return "mooncake"
    return None


def once_stdin(command: str, paths: list[str]) -> None:
    """Standard input can be named once per command."""
    if sum(str(p) == STDIN for p in paths) > 1:
        raise InputError(f"kvsim {command}: standard input ('{STDIN}') can be read only once")


def progress_bar(console: Console, what: str, unit: str = "") -> Any:
    """A rich progress bar with its total and ETA on a terminal; not on a terminal (a CI log), plain progress
    lines every 30 s on stderr (`sim.cli.outputs.PlainProgress`), or None with --quiet.
    ``unit`` "bytes" shows sizes read (a task added with ``bytes=False`` counts instead); otherwise counts
    (M of N ``unit``). ``what`` may name ``{task.description}``."""
    if not console.is_terminal:
        return plain_progress(what, unit)
    from rich import progress as rp

    class Count(rp.ProgressColumn):
        sizes, counts = rp.DownloadColumn(), rp.MofNCompleteColumn()

        def render(self, task: rp.Task) -> Any:
            if task.fields.get("bytes", unit == "bytes"):
                return self.sizes.render(task)
            return self.counts.render(task)

    return rp.Progress(rp.SpinnerColumn(), rp.TextColumn(what), rp.BarColumn(), Count(),
                       rp.TextColumn("" if unit == "bytes" else unit), rp.TimeElapsedColumn(),
                       rp.TimeRemainingColumn(), console=console, transient=True)


def add_output_options(parser, findings: bool = True, coverage: bool = False) -> None:
    """--plain, --quiet and (commands that report findings) --format text|github, (replay) --coverage."""
    group = parser.add_argument_group("output")
    group.add_argument("--plain", action="store_true",
                       help="plain output even on a terminal: one finding per line, no tables (the default when "
                       "standard output is not a terminal or NO_COLOR is set)")
    group.add_argument("--quiet", action="store_true", help="print only the one-line verdict (and no progress "
                       "lines)")
    if findings:
        group.add_argument("--format", dest="output_format", choices=("text", "github"), default="text",
                           help="findings as text lines `path:line: RULE message` or as GitHub Actions "
                           "::error annotations (more than 10: every finding as a line, then one annotation "
                           "per file, GitHub showing only 10 per step)")
        group.add_argument("--max-findings", type=integer(0), metavar="N",
                           help="print at most N findings, then how many were left out (default: every one "
                           "when the output is plain or --format github; 50 in a terminal's table)")
    if coverage:
        group.add_argument("--coverage", action="store_true",
                           help="print the rule coverage table even when the output is plain")


def output_style(args, console: Console | None = None) -> Style:
    """The console style the command line and the environment ask for (see sim.report.console.Style)."""
    console = console or Console()
    plain = bool(getattr(args, "plain", False)) or bool(os.environ.get("NO_COLOR")) or not console.is_terminal
    return Style(plain=plain, quiet=bool(getattr(args, "quiet", False)),
                 github=getattr(args, "output_format", "text") == "github",
                 coverage=bool(getattr(args, "coverage", False)), max_findings=getattr(args, "max_findings", None),
                 listed_in=json_out if isinstance(json_out := getattr(args, "json", None), str) else None)


def run_traces(paths: list[str], stop_at_first: bool = False, lockstep: bool = False, console: Console | None = None,
               lockstep_profile: str | None = None, streams: list[Source] | None = None) -> list[TraceResult]:
    """Replay traces in order; returns the results (stops after the first violating trace if asked).

    Each input is read once, as a stream (``streams``, beside ``paths``: each one already opened; ``-`` is
    standard input). On a terminal only (never in CI logs) a progress bar shows the bytes read of the trace
    (its total and ETA when it is a file) and, for several traces, how many are done. Ctrl-C raises
    `Interrupted` counting the events of every trace replayed so far.
    """
    observer = None
    if lockstep:
        from kvsim.sim.lockstep import lockstep_factory

        def observer(st: Any) -> Any:
            return lockstep_factory(st, lockstep_profile)
    results: list[TraceResult] = []
    err = console if console is not None else Console(stderr=True)
    prog = progress_bar(err, "{task.description}", "bytes")
    with prog if prog is not None else contextlib.nullcontext():
        every = prog.add_task("traces", total=len(paths), bytes=False) if prog is not None and len(paths) > 1 else None
        for i, path in enumerate(paths):
            try:
                stream = streams[i] if streams is not None else None
                if prog is not None:
                    src = stream if stream is not None else open_input(path)
                    task = prog.add_task(label(path), total=src.size)

                    def advance(n: int, task: Any = task, src: Source = src) -> None:
                        prog.update(task, completed=src.consumed)
                    r = replay_trace(path, stop_at_first, observer_factory=observer, stream=src, progress=advance)
                    prog.remove_task(task)
                    if every is not None:
                        prog.advance(every, 1)
                else:
                    r = replay_trace(path, stop_at_first, observer_factory=observer, stream=stream)
            except KeyboardInterrupt as exc:  # in a replay (Interrupted, with its count) or between two
                n = sum(x.events for x in results) + (getattr(exc, "events", None) or 0)
                stop = Interrupted(f"{n:,} events", n)
                stop.results = results  # type: ignore[attr-defined]  # the traces replayed whole
                raise stop from None
            results.append(r)
            if stop_at_first and r.violations:
                break
    return results
