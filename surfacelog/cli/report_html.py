"""The self-contained HTML report of ``surfacelog run --report``: inline SVG charts, no
external assets or scripts.

Charts: throughput (events/s) over time, append latency (p50 and p95 per second) over
time, and each session's surface size (nodes) over time with compaction points marked.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from surfacelog.cli.outputs import write_atomic
from surfacelog.cli.runmodel import RunResult

W, H, PAD = 760, 260, 44
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")

Series = tuple[str, Sequence[tuple[float, float]], str]


def _scale(lo: float, hi: float, a: float, b: float) -> Any:
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def line_chart(title: str, xlabel: str, ylabel: str, series: Sequence[Series],
               marks: Sequence[tuple[float, float]] = (), chart_id: str = "") -> str:
    """One SVG chart: a polyline per series, optional circle marks."""
    points = [p for _, pts, _ in series for p in pts] + list(marks)
    xs = [p[0] for p in points] or [0.0, 1.0]
    ys = [p[1] for p in points] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y1 = max(ys) * 1.05 or 1.0
    sx = _scale(x0, x1, PAD, W - 12)
    sy = _scale(0.0, y1, H - PAD, 14)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{chart_id}" '
             f'viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img">',
             f"<title>{html.escape(title)}</title>",
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 12}" y2="{H - PAD}" stroke="#333"/>',
             f'<line x1="{PAD}" y1="14" x2="{PAD}" y2="{H - PAD}" stroke="#333"/>']
    for k in range(5):
        yv = y1 * k / 4
        y = sy(yv)
        parts.append(f'<text x="{PAD - 4}" y="{y + 4:.1f}" font-size="10" '
                     f'text-anchor="end">{yv:.3g}</text>')
        parts.append(f'<line x1="{PAD}" y1="{y:.1f}" x2="{W - 12}" y2="{y:.1f}" '
                     'stroke="#eee"/>')
        xv = x0 + (x1 - x0) * k / 4
        parts.append(f'<text x="{sx(xv):.1f}" y="{H - PAD + 14}" font-size="10" '
                     f'text-anchor="middle">{xv:.3g}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 8}" font-size="11" '
                 f'text-anchor="middle">{html.escape(xlabel)}</text>')
    parts.append(f'<text x="12" y="{H / 2}" font-size="11" text-anchor="middle" '
                 f'transform="rotate(-90 12 {H / 2})">{html.escape(ylabel)}</text>')
    for name, pts, color in series:
        if not pts:
            continue
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                     f'points="{coords}"><title>{html.escape(name)}</title></polyline>')
    for x, y in marks:
        parts.append(f'<circle class="compaction" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" '
                     'fill="none" stroke="#000"/>')
    parts.append("</svg>")
    return "".join(parts)


def _per_second(times_ms: Sequence[float], weights: Sequence[float]) -> list[tuple[float, float]]:
    buckets: dict[int, float] = defaultdict(float)
    for t, w in zip(times_ms, weights, strict=True):
        buckets[int(t // 1000)] += w
    return [(float(s), buckets[s]) for s in sorted(buckets)]


def _latency_percentiles(times_ms: Sequence[float], lat: Sequence[float]
                         ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    buckets: dict[int, list[float]] = defaultdict(list)
    for t, v in zip(times_ms, lat, strict=True):
        buckets[int(t // 1000)].append(v)
    p50, p95 = [], []
    for s in sorted(buckets):
        vals = sorted(buckets[s])
        p50.append((float(s), vals[len(vals) // 2]))
        p95.append((float(s), vals[min(len(vals) - 1, int(len(vals) * 0.95))]))
    return p50, p95


def render_report(result: RunResult) -> str:
    """The whole HTML page."""
    p = result.progress
    report = result.report()
    counts = [1.0] * len(p.append_times_ms)
    appends = _per_second(p.append_times_ms, counts)
    events_by_s: list[tuple[float, float]] = []
    if result.samples:
        prev_t, prev_e = 0.0, 0
        for s in result.samples:
            if s.t > prev_t:
                events_by_s.append((s.t, (s.events - prev_e) / (s.t - prev_t)))
            prev_t, prev_e = s.t, s.events
    p50, p95 = _latency_percentiles(p.append_times_ms, p.latencies_ms)
    by_session: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for pt in p.surface_points:
        by_session[pt.session].append((pt.t_ms / 1000.0, float(pt.nodes), pt.generation))
    surface_series: list[Series] = []
    marks: list[tuple[float, float]] = []
    for k, (sid, pts) in enumerate(sorted(by_session.items())):
        pts.sort()
        surface_series.append((sid, [(t, n) for t, n, _ in pts], COLORS[k % len(COLORS)]))
        last_gen = None
        for t, n, g in pts:
            if last_gen is not None and g > last_gen:
                marks.append((t, n))
            last_gen = g
    charts = [
        ("Throughput", line_chart("Throughput over time", "seconds", "events/s",
                                  [("events/s", events_by_s, COLORS[0]),
                                   ("appends/s", appends, COLORS[2])],
                                  chart_id="throughput")),
        ("Append latency", line_chart("Append latency over time", "seconds", "ms",
                                      [("p50", p50, COLORS[0]), ("p95", p95, COLORS[1])],
                                      chart_id="latency")),
        ("Surface size per session", line_chart(
            "Surface size per session (circles: a compaction happened)", "seconds",
            "surface nodes", surface_series, marks, chart_id="surface")),
    ]
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                   for k, v in report.items() if k not in ("journal", "shards"))
    body = "".join(f"<section><h2>{html.escape(t)}</h2>{svg}</section>" for t, svg in charts)
    status = "passed" if result.verified else "FAILED"
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"/>"
        "<title>surfacelog run report</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:820px}"
        "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:3px 8px;"
        "text-align:left;font-size:13px}svg{background:#fff;border:1px solid #ddd}"
        "</style></head><body>"
        f"<h1>surfacelog run: verification {status}</h1>"
        f"<table>{rows}</table>{_shard_table(report)}{body}</body></html>"
    )


def _shard_table(report: dict[str, Any]) -> str:
    """Per shard: its node, events/s, append latency p50/p99, refusals during outages,
    node kills, recovery (node lost -> shard serving again) p50/max."""
    head = ("<tr><th>shard</th><th>node</th><th>events</th><th>events/s</th>"
            "<th>append p50 (ms)</th><th>append p99 (ms)</th><th>refused (outage)</th>"
            "<th>node kills</th><th>recovery p50 (s)</th><th>recovery max (s)</th></tr>")
    cells = []
    for name, shard in report["shards"].items():
        lat, rec = shard["append_latency_ms"], shard["recovery_s"]
        values = [name, shard["node"], shard["events"], shard["events_per_s"], lat["p50"],
                  lat["p99"], shard["unavailable"], shard["node_kills"], rec["p50"],
                  rec["max"]]
        cells.append("<tr>" + "".join(f"<td>{html.escape(str('-' if v is None else v))}"
                                      "</td>" for v in values) + "</tr>")
    rec = report["recovery_s"]
    summary = (f"<p>{report['node_kills']} node kill(s), {report['node_kills_abrupt']} "
               f"abrupt; recovery (node lost -&gt; shard serving again) p50 "
               f"{rec['p50']} s, max {rec['max']} s</p>") if report["local_nodes"] else ""
    return (f'<section><h2>Shards</h2>{summary}<table id="shards">{head}{"".join(cells)}'
            "</table></section>")


def write_html(path: str | Path, result: RunResult) -> None:
    """Write the self-contained HTML report of ``result`` to ``path`` atomically
    (``outputs.write_atomic``: the old file or the whole report, never part of it;
    ``run`` checked the path with ``outputs.check_output`` before it started). Raises
    ``OutputError`` when the file cannot be written."""
    write_atomic(path, render_report(result).encode("utf-8"))
