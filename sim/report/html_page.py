"""One self-contained HTML page from a kvreport/1 dict and its pool timelines.

The page shows the verdict, the inputs, for each trace a plot of allocated / reserved / available pages
per pool over the event index (the store contract's capacity identity "allocated+reserved+available=
capacity", CAP-3) with violations as vertical markers and refusals as ticks, the violations table, the
refusals by reason and the per-rule coverage with a bar of exercised/checked. Plots are drawn by
matplotlib (Agg canvas, SVG output, fixed hash salt, no date) and embedded inline: no script, no external
URL. Long timelines are downsampled deterministically, keeping every bucket's extremes. All text is
escaped.

This module must not know how the report or the timelines are produced, nor the other report formats.
"""

from __future__ import annotations

import html
import io
import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.sim.report.kvreport import (
    format_context,
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
from kvsim.sim.report.verdict import plural, verdict_of

__all__ = ["render_html", "downsample_indices", "plot_trace_svg", "PLOT_POINT_LIMIT", "MAX_VIOLATION_ROWS"]

PLOT_POINT_LIMIT = 5000
MAX_VIOLATION_ROWS = 2000
SERIES = (("allocated", "#1f77b4"), ("reserved", "#ff7f0e"), ("available", "#2ca02c"))
VIOLATION_COLOUR = "#d62728"
REFUSAL_COLOUR = "#9467bd"

# the seed clauses are Chinese: a CJK face must follow the Latin ones, or machines without one show boxes
FONT_STACK = ('system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans CJK SC","Source Han Sans SC",'
              '"Source Han Sans","PingFang SC","Hiragino Sans GB","Microsoft YaHei","WenQuanYi Micro Hei",sans-serif')
# the same fallback for matplotlib (SVG text is drawn by the browser with this family list)
PLOT_FONTS = ["DejaVu Sans", "Noto Sans CJK SC", "Source Han Sans SC", "Source Han Sans", "PingFang SC",
              "Microsoft YaHei", "WenQuanYi Micro Hei", "sans-serif"]

_CSS = """
body{font-family:FONTS;margin:1.5rem auto;max-width:1200px;
 padding:0 1rem;color:#222;line-height:1.4}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}h3{font-size:1rem}
.verdict{padding:.8rem 1rem;border-radius:6px;font-weight:600;font-size:1.1rem}
.pass{background:#e6f4ea;color:#1e6b34;border:1px solid #9bd3a8}
.fail{background:#fdecea;color:#8a1c12;border:1px solid #f1a39b}
.incomplete{background:#fff4e5;color:#7a4a00;border:1px solid #f0c27b}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.msg{white-space:pre-wrap;max-width:32rem}td.ctx{font-family:ui-monospace,monospace;font-size:.8rem}
td.clause{color:#555;max-width:24rem}td.nw{white-space:nowrap}code{font-size:.85em}
tr.violated td{background:#fdf3f2}tr.unchecked td{color:#888}
.bar{display:inline-block;width:6rem;height:.7rem;background:#eee;border:1px solid #ccc;vertical-align:middle}
.bar>span{display:block;height:100%;background:#2ca02c}
.plot svg{max-width:100%;height:auto}.note{color:#555;font-size:.85rem}
details.trace{border:1px solid #ddd;border-radius:6px;margin:.5rem 0;padding:0 .8rem}
details.trace>summary{cursor:pointer;padding:.4rem 0;font-weight:600}
details.trace>summary .note{font-weight:normal}
details.trace[open]>summary{border-bottom:1px solid #eee;margin-bottom:.5rem}
nav.toc ol{columns:2;font-size:.85rem;margin:.3rem 0}nav.toc li.bad a{color:#8a1c12;font-weight:600}
ul.why{margin:.3rem 0 .8rem}ul.why li{font-family:ui-monospace,monospace;font-size:.8rem}
""".replace("FONTS", FONT_STACK)


def _h(value: object) -> str:
    """Escaped text: characters XML forbids shown as escapes, then HTML special characters escaped."""
    return html.escape(safe_text(value), quote=True)


def _label(value: object) -> str:
    """Text for a matplotlib label: no forbidden characters, no mathtext."""
    return safe_text(value).replace("\n", " ")


def downsample_indices(series: Sequence[Sequence[float] | np.ndarray], limit: int = PLOT_POINT_LIMIT) -> np.ndarray:
    """Indices (increasing) of at most `limit` points to plot from equally long series.

    Up to `limit` points every index is kept. Above it the range is cut into equal buckets and each bucket
    keeps its first and last index and, for every series, the index of its minimum and of its maximum, so
    every series' extremes (and so its global minimum and maximum) survive. Deterministic.
    """
    arrays = [np.asarray(values) for values in series]
    n = len(arrays[0]) if arrays else 0
    if n <= limit:
        return np.arange(n)
    buckets = max(1, limit // (2 + 2 * len(arrays)))
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    keep = []
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        if hi <= lo:
            continue
        keep += [lo, hi - 1]
        for values in arrays:
            segment = values[lo:hi]
            keep += [lo + int(np.argmin(segment)), lo + int(np.argmax(segment))]
    return np.unique(np.asarray(keep, dtype=np.int64))


def plot_trace_svg(trace: str, timeline: dict, violation_events: Sequence[int], refusal_events: Sequence[int],
                   salt: str) -> str:
    """An inline <svg> of one trace's pools (one panel per pool) over the event index.

    `salt` makes the SVG's internal ids unique on the page and the output reproducible.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    events = np.asarray(timeline.get("event", []))
    pools = [(name, data) for name, data in timeline.get("pools", {}).items() if len(data.get("allocated", []))]
    violations = sorted(set(violation_events))
    refusals = sorted(set(refusal_events))
    settings: dict[Any, Any] = {"svg.hashsalt": salt, "svg.fonttype": "none", "text.parse_math": False, "font.size": 9,
                "axes.spines.top": False, "axes.spines.right": False, "font.family": "sans-serif",
                "font.sans-serif": PLOT_FONTS}
    with matplotlib.rc_context(settings), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")  # the browser draws the text
        height = 0.6 + 2.3 * len(pools)
        figure = Figure(figsize=(11, height))  # fixed margins: constrained layout would double the cost
        figure.subplots_adjust(left=0.07, right=0.80, top=1 - 0.45 / height, bottom=0.5 / height, hspace=0.25)
        FigureCanvasAgg(figure)
        axes = figure.subplots(len(pools), 1, sharex=True, squeeze=False)[:, 0]
        for panel, (ax, (pool, data)) in enumerate(zip(axes, pools, strict=True)):
            columns = [np.asarray(data[key]) for key, _ in SERIES]
            keep = downsample_indices(columns)
            for (key, colour), values in zip(SERIES, columns, strict=True):
                ax.step(events[keep], values[keep], where="post", color=colour, linewidth=1.1, label=key)
            if "capacity" in data:
                ax.axhline(data["capacity"], color="#7f7f7f", linestyle="--", linewidth=0.9, label="capacity")
            if violations:
                ax.vlines(violations, 0, 1, transform=ax.get_xaxis_transform(), color=VIOLATION_COLOUR,
                          linewidth=1.0, alpha=0.8, label=f"violation ({plural(len(violations), 'event')})")
            if refusals:
                ax.plot(refusals, [1.0] * len(refusals), linestyle="none", marker="v", markersize=6,
                        color=REFUSAL_COLOUR, transform=ax.get_xaxis_transform(), clip_on=False,
                        label=f"refusal ({plural(len(refusals), 'event')})")
            ax.set_ylabel(_label(f"{pool} (pages)"))
            ax.set_ylim(bottom=0)
            ax.grid(True, axis="y", color="#e5e5e5", linewidth=0.6)
            if panel == 0:
                ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
                sampled = f", {len(keep):,} of {len(events):,} points plotted" if len(keep) < len(events) else ""
                ax.set_title(_label(f"{trace}: pool pages by event{sampled}"), loc="left")
        axes[-1].set_xlabel("event index")
        axes[-1].set_xlim(left=0)
        for ax in axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg",
                       metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: the page is HTML
    return re.sub(r'<g id="[^"]*"', "<g", svg)  # group ids repeat across figures; nothing refers to them


def _table(header: list[str], rows: list[str], numeric: frozenset[int] = frozenset()) -> str:
    head = "".join(f'<th{" class=n" if i in numeric else ""}>{_h(name)}</th>' for i, name in enumerate(header))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _td(value: object, cls: str = "", markup: str | None = None) -> str:
    """One cell: the value escaped (numbers with separators), or `markup` already written as HTML."""
    if markup is None:
        markup = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else _h(value)
    return f"<td class={cls}>{markup}</td>" if cls else f"<td>{markup}</td>"


def _tr(cells: list[str], attrs: str = "") -> str:
    return f"<tr{attrs}>{''.join(cells)}</tr>"


def _mismatches(report: dict) -> dict[str, dict]:
    return {m.get("trace"): m for m in report.get("stats", {}).get("check", {}).get("mismatches", [])}


def _inputs(report: dict) -> str:
    """The inputs, each linking to its section; for a check, whether each scenario behaved as declared (the
    page's table of contents)."""
    entries = {entry.get("path"): entry for entry in report.get("inputs", [])}
    check, bad = is_check(report), _mismatches(report)
    rows = []
    for number, trace in enumerate(trace_order(report)):
        entry = entries.get(trace, {})
        violations = sum(1 for v in report.get("violations", []) if v.get("trace") == trace)
        refusals = sum(1 for r in report.get("refusals", []) if r.get("trace") == trace)
        cells = [_td(trace, markup=f'<a href="#trace-{number}">{_h(trace)}</a>')]
        if check:
            cells.append(_td("did not behave as declared" if trace in bad else "as declared", "nw"))
        digest = str(entry.get("sha256", ""))
        cells += [_td(entry.get("events", 0), "n"), _td(violations, "n"), _td(refusals, "n"),
                  _td(None, markup=f'<code title="{_h(digest)}">{_h(digest[:16])}</code>')]
        rows.append(_tr(cells, ' class="violated"' if trace in bad else ""))
    header = ["trace", *(["behaved"] if check else []), "events", "violations", "refusals", "sha256"]
    first = 2 if check else 1
    return '<h2 id="inputs">Inputs</h2>' + _table(header, rows, frozenset({first, first + 1, first + 2}))


def _difference(d: dict) -> str:
    return f"line {d.get('line')}: {d.get('rule')} {d.get('message')}"


def _why(report: dict) -> str:
    """For a failing check: each scenario that did not behave as declared, and what differed."""
    bad = _mismatches(report)
    if not bad:
        return ""
    numbers = {trace: number for number, trace in enumerate(trace_order(report))}
    items = []
    for trace, m in bad.items():
        why = "".join(f"<li>{_h(_difference(d))}</li>" for d in m.get("why", []))
        items.append(f'<h3><a href="#trace-{numbers.get(trace, 0)}">{_h(trace)}</a></h3><ul class="why">{why}</ul>')
    return (f'<h2 id="why">Why {plural(len(bad), "scenario")} did not behave as declared</h2>' + "".join(items))


def _toc(report: dict) -> str:
    links = [("inputs", "Inputs" + (" (scenarios)" if is_check(report) else "")), ("traces", "Traces"),
             ("violations-section", "Violations"), ("refusals", "Refusals"), ("coverage", "Rule coverage")]
    if report.get("consequences"):
        links.insert(3, ("consequences", "Consequences"))
    if report.get("run"):
        links.insert(4 if report.get("consequences") else 3, ("run", "Run"))
    if (report.get("stats") or {}).get("coverage"):
        links.append(("engine-paths", "Engine paths"))
    if _mismatches(report):
        links.insert(0, ("why", "Why it failed"))
    items = "".join(f'<li><a href="#{anchor}">{_h(name)}</a></li>' for anchor, name in links)
    return f'<nav class="toc"><strong>Contents</strong><ol>{items}</ol></nav>'


def _trace_section(report: dict, number: int, trace: str, timeline: dict | None, open_: bool) -> str:
    """One trace, collapsible: its pools and its plot (open when it failed, or when the page has few traces)."""
    entry: dict = next((e for e in report.get("inputs", []) if e.get("path") == trace), {})
    found = sum(1 for v in report.get("violations", []) if v.get("trace") == trace)
    status = ""
    if is_check(report):
        status = ", did not behave as declared" if trace in _mismatches(report) else ", as declared"
    summary = (f'{_h(trace)} <span class="note">{_h(plural(int(entry.get("events", 0)), "event"))}, '
               f'{_h(plural(found, "violation"))}{status}</span>')
    parts = [f'<details class="trace" id="trace-{number}"{" open" if open_ else ""}><summary>{summary}</summary>']
    pools = report.get("stats", {}).get("traces", {}).get(trace, {}).get("pools", {})
    if pools:
        keys = ("capacity", "peak_allocated", "peak_reserved", "min_available")
        rows = [_tr([_td(pool), *(_td(data.get(key, ""), "n") for key in keys)]) for pool, data in pools.items()]
        header = ["pool", "capacity", "peak allocated", "peak reserved", "min available"]
        parts.append(_table(header, rows, frozenset({1, 2, 3, 4})))
    if timeline and any(len(data.get("allocated", [])) for data in timeline.get("pools", {}).values()):
        violations = [v.get("event") for v in report.get("violations", []) if v.get("trace") == trace]
        refusals = [r.get("event") for r in report.get("refusals", []) if r.get("trace") == trace]
        svg = plot_trace_svg(trace, timeline, [e for e in violations if isinstance(e, int)],
                             [e for e in refusals if isinstance(e, int)], salt=f"kvsim-trace-{number}")
        parts.append(f'<div class="plot">{svg}</div>')
    else:
        parts.append('<p class="note">No pool timeline recorded for this trace.</p>')
    parts.append("</details>")
    return "\n".join(parts)


def _violations(report: dict, max_rows: int) -> str:
    if not is_check(report):
        return _violation_table("Violations", "violations", report.get("violations", []), max_rows)
    unexpected, expected = split_violations(report)
    parts = []
    if unexpected:
        parts.append(_violation_table("Unexpected violations", "violations", unexpected, max_rows))
    missing = missing_declared(report)
    if missing:
        rows = [_tr([_td(m["rule"], "nw"), _td(m["trace"]), _td(str(m["line"]), "n"), _td(str(m["event"]), "n")])
                for m in missing]
        parts.append("<h2>Declared but not reported</h2>" + _table(["rule", "trace", "line", "event"], rows,
                                                                     frozenset({2, 3})))
    parts.append(_violation_table("Expected violations (declared by the violation scenarios)", "expected",
                                  expected, max_rows))
    return "".join(parts)


def _violation_table(title: str, anchor: str, violations: list[dict], max_rows: int) -> str:
    if not violations:
        return f"<h2>{_h(title)}</h2><p>None.</p>"
    rows = [
        _tr([
            _td(None, "nw", f'<a href="#rule-{_h(v.get("rule", ""))}">{_h(v.get("rule", ""))}</a>'),
            _td(v.get("trace", "")), _td(str(v.get("line", "")), "n"), _td(str(v.get("event", "")), "n"),
            _td(v.get("op", "")),
            _td(message_text(v), "msg"), _td(format_context(v.get("context")), "ctx"),
        ])
        for v in violations[:max_rows]
    ]
    more = ""
    if len(violations) > max_rows:
        more = (f'<p class="note">… and {len(violations) - max_rows:,} more violations '
                "(the JSON report lists them all).</p>")
    table = _table(["rule", "trace", "line", "event", "op", "message", "context"], rows, frozenset({2, 3}))
    return f'<h2 id="{anchor}">{_h(title)} ({len(violations):,})</h2>{table}{more}'


def _refusals(report: dict) -> str:
    summary = refusal_summary(report)
    if not summary:
        return '<h2 id="refusals">Refusals</h2><p>None.</p>'
    rows = [
        _tr([_td(row["reason"]), _td(row["count"], "n"), _td(", ".join(f"{op} ×{n}" for op, n in row["ops"])),
             _td(", ".join(f"{trace} ×{n}" for trace, n in row["traces"]))])
        for row in summary
    ]
    table = _table(["reason", "refusals", "ops", "traces"], rows, frozenset({1}))
    return '<h2 id="refusals">Refusals by reason</h2>' + table


def _coverage(report: dict) -> str:
    rules = report.get("rules", {})
    header = ["rule", "title", "seed clause", "checked", "exercised", "violated", "exercised / checked"]
    parts = ['<h2 id="coverage">Rule coverage</h2>']
    check = is_check(report)
    unexpected = {v.get("rule") for v in report.get("violations", []) if not v.get("expected")}
    for title, ids in rules_by_evidence(report):
        rows = []
        for rule_id in ids:
            counters = rules.get(rule_id, {})
            checked, exercised, violated = (int(counters.get(k, 0)) for k in ("checked", "exercised", "violated"))
            share = min(100.0, 100.0 * exercised / checked) if checked else 0.0  # a bar never overflows
            failed = violated and (not check or rule_id in unexpected)  # a check's declared violations are fine
            state = "violated" if failed else ("unchecked" if not checked else "ok")
            bar = (f'<span class="bar" title="{share:.1f} % exercised"><span style="width:{share:.1f}%"></span>'
                   f"</span> {share:.0f} %" if checked else "not checked")
            name = str(counters.get("title", ""))
            if counters.get("subsumed_by"):
                name += f" (subsumed by {', '.join(counters['subsumed_by'])})"
            rows.append(_tr([
                _td(rule_id, "nw"), _td(name), _td(counters.get("clause", ""), "clause"),
                _td(checked, "n"), _td(exercised, "n"), _td(violated, "n"), _td(None, "nw", bar),
            ], attrs=f' class="{state}" id="rule-{_h(rule_id)}"'))
        parts.append(f"<h3>{_h(title)}</h3>" + _table(header, rows, frozenset({3, 4, 5})))
    return "".join(parts)


def _run(report: dict) -> str:
    """How a peer run was made (``run``): the exact command line, the versions, the workload's digest -- what
    reproduces it."""
    run = report.get("run")
    if not run:
        return ""
    wl = run.get("workload") or {}
    rows = [_tr([_td(k, "nw"), _td(str(v), "msg")]) for k, v in (
        ("command", run.get("command", "")), ("engine", run.get("engine", "")), ("kvsim", run.get("kvsim", "")),
        ("workload", f"{wl.get('name', '')} ({wl.get('requests', '?')} requests, sha256 {wl.get('sha256', '')})"),
        *((("re-judged from", run["rejudged"]),) if run.get("rejudged") else ()))]
    return '<h2 id="run">Run</h2>' + _table(["", ""], rows, frozenset())


def _consequences(report: dict, max_rows: int) -> str:
    """The first consequence per entity (each of an earlier root finding), after the roots: counted apart, never
    violations."""
    rows = report.get("consequences") or []
    if not rows:
        return ""
    total = int((report.get("stats") or {}).get("consequences", len(rows)) or 0)
    body = [_tr([_td(f"#{c.get('of', '')}", "n"), _td(c.get("rule", "")), _td(str(c.get("line", "")), "n"),
                 _td(c.get("entity", "")), _td(c.get("message", ""), "msg")]) for c in rows[:max_rows]]
    return (f'<h2 id="consequences">Consequences ({total:,}; the first per entity)</h2>'
            + _table(["of", "rule", "line", "entity", "message"], body, frozenset({2})))


def _engine_paths(report: dict) -> str:
    """A peer run's engine paths (stats.coverage): how often the run took each; a path never taken is a part of
    the engine the PASS says nothing about."""
    cov = (report.get("stats") or {}).get("coverage")
    if not cov:
        return ""
    rows = [_tr([_td(name, "nw"), _td(n, "n")], attrs=f' class="{"ok" if n else "unchecked"}"')
            for name, n in cov["engine_paths"].items()]
    note = (f'<p class="note">{cov["exercised"]} of {cov["paths"]} engine paths exercised; judge rules with '
            f'something to judge: {cov["rules_exercised"]} of {cov["rules"]}'
            + (f' (idle: {_h(", ".join(cov["rules_not_exercised"]))})' if cov["rules_not_exercised"] else "")
            + (f"; {_h(cov['hint'])}" if cov.get("hint") else "") + "</p>")
    return '<h2 id="engine-paths">Engine paths</h2>' + note + _table(["path", "taken"], rows, frozenset({1}))


def render_html(report: dict, timelines: dict, max_rows: int = MAX_VIOLATION_ROWS) -> str:
    """The whole page as text (UTF-8 when written); at most max_rows violation rows."""
    judged = verdict_of(report)
    verdict = f'<div class="verdict {judged.status}">{_h(judged.headline)}</div>'
    order = trace_order(report)
    bad = set(_mismatches(report)) if is_check(report) else {
        v.get("trace") for v in report.get("violations", []) if not v.get("expected")}
    traces = [_trace_section(report, number, trace, timelines.get(trace), len(order) <= 3 or trace in bad)
              for number, trace in enumerate(order)]
    note = "" if len(order) <= 3 else (f'<p class="note">{plural(len(order), "trace")}; each section opens on a '
                                       f'click{", those that failed are open" if bad else ""}.</p>')
    body = "\n".join([
        f"<h1>{report_title(report)} report: {judged.word}</h1>", verdict, _toc(report),
        _why(report), _inputs(report), '<h2 id="traces">Traces</h2>', note, *traces,
        f'<div id="violations-section">{_violations(report, max_rows)}</div>', _consequences(report, max_rows),
        _run(report), _refusals(report), _coverage(report), _engine_paths(report),
    ])
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{report_title(report)} report: {judged.word}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )
