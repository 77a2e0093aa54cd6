"""HTML pages for the scheduler simulation: one run (occupancy, prefix hit ratio and Host traffic over
virtual time; per-request latency: a table of percentiles, the distributions and TTFT over arrival time) and
a what-if sweep (hit ratio, evictions, Host traffic, TTFT and throughput against capacity, one line per KV
profile).

Plots are drawn by matplotlib (Agg canvas, SVG output, fixed hash salt, no date) and embedded inline, like
`html_page`; all text is escaped. This module must not know how the report, the series or the sweep rows
are produced.
"""

from __future__ import annotations

import html
import io
import re
from typing import Any

from kvsim.sim.report.html_page import FONT_STACK, PLOT_FONTS
from kvsim.sim.report.kvreport import refusal_summary, safe_text
from kvsim.sim.report.verdict import sweep_verdict, verdict_of

__all__ = ["render_simulation_html", "render_sweep_html"]

_CSS = """
body{font-family:FONTS;margin:1.5rem auto;max-width:1200px;
 padding:0 1rem;color:#222;line-height:1.4}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
.verdict{padding:.8rem 1rem;border-radius:6px;font-weight:600;font-size:1.1rem}
.pass{background:#e6f4ea;color:#1e6b34;border:1px solid #9bd3a8}
.fail{background:#fdecea;color:#8a1c12;border:1px solid #f1a39b}
.incomplete{background:#fff4e5;color:#7a4a00;border:1px solid #f0c27b}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.plot svg{max-width:100%;height:auto}.note{color:#555;font-size:.85rem}
""".replace("FONTS", FONT_STACK)
PERCENT = ("hit_ratio", "acceptance")  # ratios shown in percent, in tables and plots alike
GIB = float(1 << 30)


def _h(value: object) -> str:
    return html.escape(safe_text(value), quote=True)


def _text(v: object, key: str = "") -> str:
    """A value as a person reads it, never a Python repr: percent for ratios, separators for counts, "n/a"
    for None, lists and mappings spelled out ("none" when empty)."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if key in PERCENT and isinstance(v, (int, float)):
        return f"{100 * v:,.2f} %"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4f}"
    if isinstance(v, dict):
        if {"fault", "line"} <= set(v):  # a missed fault
            return f"{v['fault']} at line {v['line']} (expected {v.get('rule')}, reported " \
                   f"{', '.join(map(str, v.get('reported', []))) or 'nothing'})"
        return ", ".join(f"{k} {_text(x, str(k))}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple)):
        return "; ".join(_text(x) for x in v) or "none"
    return str(v)


def _num(v: object, key: str = "") -> str:
    return _h(_text(v, key))


def _page(title: str, body: str) -> str:
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_h(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]
    return re.sub(r'<g id="[^"]*"', "<g", svg)


def _figure(rows: int, salt: str, height_per: float = 2.4) -> tuple[Any, Any]:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    ctx = matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none", "text.parse_math": False,
                                 "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                                 "font.family": "sans-serif", "font.sans-serif": PLOT_FONTS})
    ctx.__enter__()
    height = 0.6 + height_per * rows
    fig = Figure(figsize=(11, height))
    fig.subplots_adjust(left=0.08, right=0.80, top=1 - 0.45 / height, bottom=0.5 / height, hspace=0.35)
    FigureCanvasAgg(fig)
    return fig, ctx


def has_host_traffic(series: dict) -> bool:
    return bool(max(series.get("host_bytes_out", [])[-1:] + series.get("host_bytes_in", [])[-1:] + [0]))


def has_reuse(series: dict) -> bool:
    return any(series.get("hit_ratio", []))


def _occupancy(ax: Any, t: list, series: dict) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.step(t, series["allocated"], where="post", color="#1f77b4", linewidth=1.1, label="allocated")
    ax.step(t, series["reserved"], where="post", color="#ff7f0e", linewidth=1.1, label="reserved")
    if series.get("capacity"):
        ax.axhline(series["capacity"][-1], color="#7f7f7f", linestyle="--", linewidth=0.9, label="capacity")
    ax.set_ylabel("main pool (pages)")
    ax.set_title("Device occupancy", loc="left")


def _reuse(ax: Any, t: list, series: dict) -> None:
    ax.plot(t, [100.0 * v for v in series["hit_ratio"]], color="#2ca02c", linewidth=1.2, label="cumulative")
    ax.set_ylabel("prefix hit (% of prompt tokens)")
    ax.set_title("Prefix reuse", loc="left")


def _host(ax: Any, t: list, series: dict) -> None:
    top = max(series["host_bytes_out"][-1:] + series["host_bytes_in"][-1:] + [0])
    unit, name = (GIB, "GiB") if top >= GIB else (float(1 << 20), "MiB")
    ax.plot(t, [v / unit for v in series["host_bytes_out"]], color="#9467bd", linewidth=1.2,
            label="Device → Host (offload)")
    ax.plot(t, [v / unit for v in series["host_bytes_in"]], color="#8c564b", linewidth=1.2,
            label="Host → Device (restore)")
    ax.set_ylabel(f"cumulative {name}")
    ax.set_title("Host traffic", loc="left")


def series_panels(series: dict) -> tuple[list, list[str]]:
    """The panels worth drawing over time (occupancy always; prefix reuse and Host traffic when there is
    some) and a sentence for each left out: no empty plot."""
    panels, empty = [_occupancy], []
    for test, draw, why in ((has_reuse, _reuse, "No prefix reuse: no request hit a cached prefix."),
                            (has_host_traffic, _host,
                             "No Host traffic: nothing was offloaded to or restored from the Host arena.")):
        if test(series):
            panels.append(draw)
        else:
            empty.append(why)
    return panels, empty


def plot_series_svg(series: dict) -> str:
    """Panels over virtual time: Main pool pages and, when there is any, the cumulative prefix hit ratio and
    cumulative Host bytes."""
    t = series.get("time", [])
    panels, _ = series_panels(series)
    fig, ctx = _figure(len(panels), "kvsim-simulation")
    try:
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, draw in zip(axes, panels, strict=True):
            draw(ax, t, series)
            ax.set_ylim(bottom=0)
            ax.grid(True, axis="y", color="#e5e5e5", linewidth=0.6)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        axes[-1].set_xlabel("virtual time (s)")
        return _svg(fig)
    finally:
        ctx.__exit__(None, None, None)


def _stats_table(stats: dict) -> str:
    """Numbers right-aligned; lists and mappings one entry per line, left-aligned."""
    rows = []
    for k, v in stats.items():
        if isinstance(v, dict) and v:
            cell = "<td>" + "<br>".join(_h(f"{name}: {_text(x, str(name))}") for name, x in v.items()) + "</td>"
        elif isinstance(v, (list, tuple)) and v:
            cell = "<td>" + "<br>".join(_h(_text(x)) for x in v) + "</td>"
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            cell = f"<td class=n>{_num(v, k)}</td>"
        else:
            cell = f"<td>{_num(v, k)}</td>"
        rows.append(f"<tr><td>{_h(k)}</td>{cell}</tr>")
    return f"<table><thead><tr><th>statistic</th><th>value</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _violation_table(title: str, vs: list[dict], limit: int) -> str:
    rows = "".join(f"<tr><td>{_h(v.get('rule'))}</td><td class=n>{_num(v.get('event'))}</td><td>{_h(v.get('op'))}"
                   f"</td><td>{_h(v.get('message'))}</td></tr>" for v in vs[:limit])
    more = f'<p class="note">… and {len(vs) - limit:,} more (see the JSON report).</p>' if len(vs) > limit else ""
    return (f"<h2>{_h(title)} ({len(vs):,})</h2><table><thead><tr><th>rule</th><th>event</th><th>op</th>"
            f"<th>message</th></tr></thead><tbody>{rows}</tbody></table>{more}")


def _violations(report: dict, limit: int = 200) -> str:
    """The violations; with injected faults, those no fault accounts for first, then the expected ones."""
    vs = report.get("violations", [])
    if not vs:
        return "<h2>Violations</h2><p>None: every event passed every rule.</p>"
    if not any("expected" in v for v in vs):
        return _violation_table("Violations", vs, limit)
    other = [v for v in vs if not v.get("expected")]
    parts = [_violation_table("Violations no injected fault accounts for", other, limit) if other else
             "<h2>Violations no injected fault accounts for</h2><p>None.</p>"]
    parts.append(_violation_table("Expected violations (each injected fault at its bad event, with its rule)",
                                  [v for v in vs if v.get("expected")], limit))
    return "".join(parts)


def _refusals(report: dict) -> str:
    summary = refusal_summary(report)
    if not summary:
        return "<h2>Refusals</h2><p>None.</p>"
    rows = "".join(f"<tr><td>{_h(r['reason'])}</td><td class=n>{r['count']:,}</td></tr>" for r in summary)
    return f"<h2>Refusals</h2><table><thead><tr><th>reason</th><th>count</th></tr></thead><tbody>{rows}</tbody></table>"


_METRIC_NAMES = {"queue": "queueing delay", "ttft": "time to first token (TTFT)",
                 "tpot": "time per output token (TPOT)", "e2e": "end-to-end"}


def _notes(notes: list[str] | None) -> str:
    return "".join(f'<p class="note"><strong>Note:</strong> {_h(n)}</p>' for n in notes or ())


def _latency_table(stats: dict) -> str:
    """Mean and p50/p90/p99 of each latency metric, and the throughput figures."""
    if "ttft_p50" not in stats:
        return ""
    rows = "".join(f"<tr><td>{_h(name)}</td>" + "".join(f"<td class=n>{stats[f'{m}_{c}']:,.4f}</td>"
                                                         for c in ("mean", "p50", "p90", "p99")) + "</tr>"
                   for m, name in _METRIC_NAMES.items())
    thr = (f"<p>Throughput: {stats['throughput_rps']:,.4f} requests/s, {stats['output_tokens_per_s']:,.1f} output "
           f"tokens/s, {stats['tokens_per_s']:,.1f} prompt + output tokens/s over {stats['makespan_s']:,.1f} "
           "virtual seconds.</p>")
    return ("<table><thead><tr><th>seconds (virtual)</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>{thr}"
            '<p class="note">Virtual time from the timing model (per-iteration base, per prefill token, per decode '
            "lane, Host copies at the link bandwidth): the figures are only as good as that model.</p>")


def plot_latency_svg(curves: dict) -> str:
    """Two panels: each metric's distribution (seconds at each percentile, log scale) and TTFT p50/p99 over
    the requests' arrival time."""
    fig, ctx = _figure(2, "kvsim-latency")
    try:
        ax1, ax2 = fig.subplots(2, 1)
        pct = curves["percentiles"]
        colors = {"queue": "#7f7f7f", "ttft": "#1f77b4", "tpot": "#2ca02c", "e2e": "#d62728"}
        short = {"queue": "queueing delay", "ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end"}
        for m in _METRIC_NAMES:
            ys = curves.get(m) or []
            if ys and max(ys) > 0:  # zero delays have no place on a log axis: left out
                ax1.plot(pct, [y if y > 0 else float("nan") for y in ys], color=colors[m], linewidth=1.2,
                         label=short[m])
        from matplotlib.ticker import FuncFormatter
        ax1.set_yscale("log")
        ax1.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax1.set_xlabel("percentile of served requests")
        ax1.set_ylabel("seconds (virtual, log)")
        ax1.set_title("Latency distributions", loc="left")
        ax2.plot(curves["window_arrival"], curves["window_ttft_p50"], marker=".", color="#1f77b4", linewidth=1.1,
                 label="TTFT p50")
        ax2.plot(curves["window_arrival"], curves["window_ttft_p99"], marker=".", color="#ff7f0e", linewidth=1.1,
                 label="TTFT p99")
        ax2.set_ylim(bottom=0)
        ax2.set_xlabel("arrival time (virtual s; groups of requests in arrival order)")
        ax2.set_ylabel("TTFT (s)")
        ax2.set_title("Time to first token over the run", loc="left")
        for ax in (ax1, ax2):
            ax.grid(True, color="#e5e5e5", linewidth=0.6)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return _svg(fig)
    finally:
        ctx.__exit__(None, None, None)


def _rejected(stats: dict) -> str:
    """Rejected requests: the count per reason and the first ones, with their sizes and why."""
    if not stats.get("rejected"):
        return ""
    reasons = "".join(f"<tr><td>{_h(why)}</td><td class=n>{n:,}</td></tr>"
                      for why, n in stats.get("rejections", {}).items())
    first = "".join(f"<tr><td class=n>{r['request']}</td><td class=n>{r['prompt']:,}</td><td class=n>"
                    f"{r['output']:,}</td><td>{_h(r['reason'])}</td></tr>" for r in stats.get("rejected_requests", []))
    return (f"<h2>Rejected requests ({stats['rejected']:,})</h2><table><thead><tr><th>reason</th><th>requests</th>"
            f"</tr></thead><tbody>{reasons}</tbody></table><table><thead><tr><th>request</th><th>prompt</th>"
            f"<th>output</th><th>why</th></tr></thead><tbody>{first}</tbody></table>")


def render_simulation_html(report: dict, series: dict, title: str) -> str:
    """One simulation run: verdict, notes, latency, statistics, the plots, rejections, violations and refusals."""
    judged = verdict_of(report)
    stats = {k: v for k, v in report.get("stats", {}).items() if k != "traces"}
    table = {k: v for k, v in stats.items() if k not in ("notes", "rejected_requests", "rejections")}
    curves = series.get("latency") or {}
    body = "\n".join([
        f"<h1>kvsim simulation: {_h(title)}</h1>",
        f'<div class="verdict {judged.status}">{_h(judged.headline)}</div>',
        _notes(stats.get("notes")),
        "<h2>Latency and throughput</h2>", _latency_table(stats),
        f'<div class="plot">{plot_latency_svg(curves)}</div>' if curves.get("ttft") else
        '<p class="note">No request was served.</p>',
        "<h2>Statistics</h2>", _stats_table(table),
        "<h2>Over time</h2>",
        f'<div class="plot">{plot_series_svg(series)}</div>' if series.get("time") else
        '<p class="note">No iteration ran.</p>',
        *(f'<p class="note">{_h(why)}</p>' for why in (series_panels(series)[1] if series.get("time") else [])),
        _rejected(stats), _violations(report), _refusals(report),
    ])
    return _page(f"kvsim simulation: {title}", body)


def _x_axis(rows: list[dict]) -> tuple[str, str]:
    point = rows[0]["point"]
    for key, label in (("hbm", "HBM budget (GiB)"), ("pages", "capacity (pages)"), ("host", "Host arena (GiB)")):
        if key in point:
            return key, label
    return "", "point"


def doubling(xs: list[float]) -> bool:
    """Whether sorted sweep points grow geometrically (each at least 1.8× the last), as `pages=1024,2048,4096`
    does: such an axis is drawn on a log scale so that the points are evenly spaced."""
    pts = sorted(set(x for x in xs if x > 0))
    return len(pts) >= 3 and all(b >= 1.8 * a for a, b in zip(pts, pts[1:], strict=False))


SWEEP_PANELS = (  # (title, y label, value of a row, integer axis)
    ("prefix hit ratio", "prefix hit (% of prompt tokens)", lambda r: 100 * r["hit_ratio"], False),
    ("checkpoints evicted from Device", "evictions (checkpoints)", lambda r: r["evictions"], True),
    ("Host traffic (offload + restore)", "Host traffic (GiB)",
     lambda r: (r["host_bytes_out"] + r["host_bytes_in"]) / GIB, False),
    ("time to first token, median (virtual s, from the timing model)", "TTFT p50 (s)",
     lambda r: r.get("ttft_p50", 0.0), False),
    ("time to first token, 99th percentile (virtual s)", "TTFT p99 (s)", lambda r: r.get("ttft_p99", 0.0), False),
    ("throughput (virtual time)", "requests/s", lambda r: r.get("throughput_rps", 0.0), False),
)


def sweep_panels(rows: list[dict]) -> tuple[list, list[str]]:
    """The panels worth drawing (the hit ratio always; evictions and Host traffic when any point has some), and
    a sentence for each left out."""
    keep, empty = [], []
    for i, panel in enumerate(SWEEP_PANELS):
        if any(panel[2](r) for r in rows):
            keep.append(panel)
        else:
            empty.append(("no prefix was reused at any point", "no checkpoint was evicted at any point",
                          "no Host traffic at any point", "no time to first token at any point",
                          "no time to first token at any point", "no request was served at any point")[i])
    return keep, empty


def plot_sweep_svg(rows: list[dict]) -> str:
    """Hit ratio, evictions, Host traffic, TTFT p50 and p99 and throughput against the capacity axis; one line
    per profile, with a legend only when profiles are swept; a log axis when the points double; no panel that
    would be empty. An unbounded pages point sits at the capacity it was given."""
    from matplotlib.ticker import MaxNLocator, NullLocator, ScalarFormatter

    key, label = _x_axis(rows)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r["point"].get("profile", "")), []).append(r)
    panels, _ = sweep_panels(rows)
    if not panels:
        return ""
    fig, ctx = _figure(len(panels), "kvsim-sweep")
    try:
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        xs_all: list[float] = []
        for name, rs in groups.items():
            if key == "pages":
                xs = [r["capacity_pages"] for r in rs]
            else:
                xs = [(r["point"][key] / GIB if key in ("hbm", "host") else r["point"][key]) if key else i
                      for i, r in enumerate(rs)]
            xs_all += xs
            for ax, (_, _, value, _) in zip(axes, panels, strict=True):
                ax.plot(xs, [value(r) for r in rs], marker="o", label=name or None)
        for ax, (title, ylabel, _, integer) in zip(axes, panels, strict=True):
            ax.set_title(title, loc="left")
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(True, color="#e5e5e5", linewidth=0.6)
            if integer:
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            if len(groups) > 1:
                ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="profile")
        axes[-1].set_xlabel(label + (" — log scale" if key and doubling(xs_all) else ""))
        if key and doubling(xs_all):
            axes[-1].set_xscale("log", base=2)
            axes[-1].set_xticks(sorted(set(xs_all)))
            axes[-1].xaxis.set_major_formatter(ScalarFormatter())
            axes[-1].xaxis.set_minor_locator(NullLocator())
        return _svg(fig)
    finally:
        ctx.__exit__(None, None, None)


def render_sweep_html(rows: list[dict], title: str, columns: tuple, notes: list[str] | None = None) -> str:
    """A sweep: the table of every point and the plots against capacity."""
    keys = list(rows[0]["point"]) if rows else []
    head = "".join(f"<th>{_h(c)}</th>" for c in keys + list(columns))
    def axis(k: str, v: Any) -> str:
        return f"{v / GIB:g} GiB" if k in ("hbm", "host") and isinstance(v, int) else _text(v, k)

    body_rows = "".join("<tr>" + "".join(f"<td class=n>{_h(axis(k, r['point'][k]))}</td>" for k in keys)
                        + "".join(f"<td class=n>{_num(r[c], c)}</td>" for c in columns) + "</tr>" for r in rows)
    judged = sweep_verdict(rows)
    verdict = f'<div class="verdict {judged.status}">{_h(judged.headline)}</div>'
    body = "\n".join([f"<h1>kvsim what-if sweep: {_h(title)}</h1>", verdict, _notes(notes),
                      f"<table><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody></table>",
                      f'<div class="plot">{plot_sweep_svg(rows)}</div>' if rows and sweep_panels(rows)[0] else "",
                      *(f'<p class="note">{_h(why[0].upper() + why[1:])}.</p>' for why in sweep_panels(rows)[1])])
    return _page(f"kvsim sweep: {title}", body)
