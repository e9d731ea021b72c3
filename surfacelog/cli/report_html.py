"""The self-contained HTML report of ``surfacelog run --report``.

Charts are drawn by plotly.js (MIT licence), embedded inline from the ``plotly``
Python package (about 4.6 MB, once per report), so the page needs no network and no
other file. Each chart has a title, axis titles with units and a legend:

- throughput: events/s (between progress polls) and appends/s (per second);
- append latency percentiles per second: p50 and p99 (ms);
- compactions, prunes, conflicts and errors so far (cumulative counts);
- each session's surface size (nodes), compactions marked.

The chaos is marked on every timeline: a dotted line and an ``x`` per actor kill,
a shaded band per node kill (from the node's loss to its return). Above the charts:
the verdict, the run's configuration and its figures as readable tables, and the
per-shard table.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from surfacelog.cli.outputs import write_atomic
from surfacelog.cli.runmodel import RunConfig, RunResult

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
TIME_AXIS = "time since the agents started (s)"
MAX_SURFACE_SERIES = 20
"""Sessions drawn in the surface chart (the first by id); the rest are left out."""

Points = Sequence[tuple[float, float]]


def value(v: Any, unit: str = "") -> str:
    """A figure as people read it: ``–`` for none, thousands separated, ``yes``/``no``."""
    if v is None or v == [] or v == {}:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        text = f"{v:,}"
    elif isinstance(v, float):
        text = f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    elif isinstance(v, (list, tuple)):
        text = ", ".join(value(x) for x in v)
    else:
        text = str(v)
    return f"{text} {unit}".rstrip()


CONFIG_LABELS: dict[str, tuple[str, str]] = {
    "sessions": ("Sessions", ""),
    "turns": ("Turns per session", ""),
    "placement": ("Placement", ""),
    "packs": ("Session actors (packed placement)", ""),
    "drivers": ("Driver actors", ""),
    "compact_at": ("Compact a surface above", "tokens"),
    "prune_over": ("Prune tool results over", "characters"),
    "durability": ("Durability", ""),
    "writer": ("Writer", ""),
    "summariser": ("Summariser", ""),
    "mode": ("Append mode", ""),
    "chunk_every_ms": ("A session's appends arrive every", "ms"),
    "db": ("Database", ""),
    "address": ("Ray cluster", ""),
    "shard_map": ("Shard map", ""),
    "seed": ("Seed", ""),
    "kill_every_s": ("Chaos: kill an actor every", "s"),
    "kill_journal": ("Chaos: every second kill is the writer's", ""),
    "local_nodes": ("Local cluster worker nodes", ""),
    "shards": ("Shards", ""),
    "kill_node_every_s": ("Node chaos: remove a node every", "s"),
    "node_down_s": ("Node chaos: a removed node stays down", "s"),
    "replica": ("Litestream replicas under", ""),
    "kill_disk_every_s": ("Disk chaos: a node loses its disk every", "s"),
    "max_kills": ("Chaos: kills at most, each chaos", ""),
}
"""The configuration rows: each ``RunConfig`` field shown, its label and unit."""


def config_rows(cfg: RunConfig) -> list[tuple[str, str]]:
    """The run's configuration as (label, value) rows: what a person needs to know to
    read the figures (``--json``, ``--report`` and ``--force`` are left out)."""
    hidden = {"packs": cfg.placement != "packed", "kill_journal": not cfg.kill_every_s,
              "node_down_s": not (cfg.kill_node_every_s or cfg.kill_disk_every_s),
              "chunk_every_ms": cfg.mode == "batch",
              "max_kills": not cfg.chaos,
              "replica": cfg.replica is None, "kill_disk_every_s": not cfg.kill_disk_every_s,
              # With a shard map the shards are the map's: no --db, no shard count.
              "shard_map": cfg.shard_map is None, "db": cfg.shard_map is not None,
              "shards": cfg.shard_map is not None}
    rows = []
    for f in fields(cfg):
        if f.name not in CONFIG_LABELS or hidden.get(f.name, False):
            continue
        label, unit = CONFIG_LABELS[f.name]
        raw = getattr(cfg, f.name)
        if f.name == "writer":
            text = cfg.hosting_writer + (" (auto)" if raw == "auto" else "")
        elif f.name == "address":
            text = "a one-node Ray started by the run" if raw is None else str(raw)
        elif f.name == "shards":
            text = value(cfg.shard_count)
        elif f.name == "db":
            text = value(cfg.db_path)
        elif f.name in ("kill_every_s", "kill_node_every_s") and not raw:
            text = "off"
        elif f.name == "max_kills" and not raw:
            text = "no bound"
        elif f.name == "chunk_every_ms" and not raw:
            text = "as soon as the one before is acknowledged"
        elif f.name == "local_nodes" and not raw:
            text = "none (one-node Ray)"
        elif f.name == "node_down_s":
            text = value(cfg.node_down, unit)
        else:
            text = value(raw, unit)
        rows.append((label, text))
    return rows


def cpu_shares(by_process: dict[str, float], shown: int = 4) -> str:
    """``by_process`` (CPU seconds by process kind, the largest first) as the share of
    each of the ``shown`` largest, the rest summed: ``OwnerActor 55%, DriverActor 30%,
    ...``; ``-`` when empty."""
    total = sum(by_process.values())
    if total <= 0:
        return "-"
    kinds = list(by_process.items())
    parts = [(kind, seconds) for kind, seconds in kinds[:shown]]
    rest = sum(seconds for _, seconds in kinds[shown:])
    if rest > 0:
        parts.append(("the rest", rest))
    return ", ".join(f"{kind} {100 * seconds / total:.0f}%" for kind, seconds in parts)


def summary_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's figures as (label, value) rows (``run``'s terminal table and the
    HTML report's)."""
    lat = report["append_latency_ms"]
    comp, prunes = report["compactions"], report["prunes"]
    rows = [
        ("Sessions", f"{report['sessions']} ({report['placement']}, "
                     f"{report['durability']}, writer {report['writer']}"
                     + (", through the HTTP gateway)" if report.get("via") == "http" else ")")),
        ("Turns done / interrupted", f"{value(report['turns_done'])} / "
                                     f"{value(report['turns_interrupted'])}"),
        ("Events appended", value(report["events"])),
        ("Throughput", value(report["events_per_s"], "events/s")),
        ("Append latency p50 / p95 / p99", f"{value(lat['p50'])} / {value(lat['p95'])} / "
                                           f"{value(lat['p99'], 'ms')}"),
        ("Compactions committed / failed", f"{value(comp['committed'])} / "
                                           f"{value(comp['failed'])}"),
        ("Prunes committed", value(prunes["committed"])),
        ("Conflicts retried", value(report["conflicts_retried"])),
        ("Actor kills (chaos) / requests resent after", f"{value(report['actor_kills'])} / "
                                                        f"{value(report['resent'])}"),
        ("Acknowledged events lost (buffered, or a lost disk's unreplicated tail)",
         value(report["lost_acknowledged"])),
        ("Errors", value(report["errors"])),
        ("Store size", value(round(report["store_bytes"] / 1e6, 2), "MB")),
        ("Wall time", value(report["wall_s"], "s")),
        ("CPU per append / per event, all processes",
         f"{value(report['cpu_ms_per_append'], 'ms')} / "
         f"{value(report['cpu_ms_per_event'], 'ms')}"),
        ("Ray calls per event (drivers to session actors)",
         value(report["ray_calls_per_event"])),
        ("CPU by process", cpu_shares(report.get("cpu_s_by_process") or {})),
        ("Verification", "passed" if report["verification"]["passed"] else "FAILED"),
    ]
    if report.get("incomplete"):
        rows.append(("Run", "INCOMPLETE (see below)"))
    for line in report.get("chaos_not_performed", ()):
        rows.append(("WARNING: chaos asked, not performed", line))
    for loss in report.get("nodes_lost_outside_chaos", ()):
        rows.append(("WARNING: node lost, not by the run's chaos", _loss_line(loss)))
    if report["local_nodes"]:
        rec = report["recovery_s"]
        rows += [
            ("Local cluster", f"head + {report['local_nodes']} worker nodes, "
                              f"{len(report['shards'])} shards, auth {report['auth_mode']}"),
            ("Shard map (for --shard-map)", value(report["shard_map"])),
            ("Node kills (abrupt)", f"{report['node_kills']} ({report['node_kills_abrupt']})"),
            ("Recovery, node lost -> shard serving: p50 / max",
             f"{value(rec['p50'])} / {value(rec['max'], 's')}"
             + (f"; never: {', '.join(rec['unrecovered'])}" if rec["unrecovered"] else "")),
            ("Requests refused during outages (retried)", value(report["unavailable"])),
        ]
        if report.get("disk_losses"):
            rows.append(("Disk losses / acknowledged events lost to them (not yet "
                         "replicated)", f"{report['disk_losses']} / "
                                        f"{value(report['lost_to_disk_loss'])}"))
    elif report.get("shard_map"):
        rows.append(("Shards (--shard-map)", f"{len(report['shards'])} of "
                     f"{report['shard_map']}, verified by their writers on their nodes"))
    return rows


def _loss_line(loss: dict[str, Any]) -> str:
    """``node 0123abcd4567 at 12.3 s: s1 back after 6.1 s, s2 never`` (a report's
    ``nodes_lost_outside_chaos`` entry)."""
    shards = ", ".join(f"{shard} never back" if back is None else
                       f"{shard} back after {back} s"
                       for shard, back in loss["back_after_s"].items()) or "no shard"
    return f"node {loss['node_id'][:12]} at {loss['lost_s']} s: {shards}"


def _per_second(times_ms: Sequence[float]) -> list[tuple[float, float]]:
    buckets: dict[int, int] = defaultdict(int)
    for t in times_ms:
        buckets[int(t // 1000)] += 1
    return [(s + 0.5, float(buckets[s])) for s in sorted(buckets)]


def _latency_percentiles(times_ms: Sequence[float], lat: Sequence[float]
                         ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Per second of the run: the p50 and p99 of the appends acknowledged in it."""
    buckets: dict[int, list[float]] = defaultdict(list)
    for t, v in zip(times_ms, lat, strict=True):
        buckets[int(t // 1000)].append(v)
    p50, p99 = [], []
    for s in sorted(buckets):
        vals = sorted(buckets[s])
        p50.append((s + 0.5, vals[(len(vals) - 1) // 2]))
        p99.append((s + 0.5, vals[min(len(vals) - 1, round(0.99 * (len(vals) - 1)))]))
    return p50, p99


def _line(go: Any, name: str, points: Points, color: str, **extra: Any) -> Any:
    return go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], name=name,
                      mode="lines", line={"color": color, "width": 2}, **extra)


def _figure(go: Any, title: str, ytitle: str, traces: list[Any], result: RunResult,
            yformat: str = "~s") -> Any:
    fig = go.Figure(traces)
    fig.update_layout(
        title={"text": title, "x": 0.0, "xanchor": "left"}, template="plotly_white",
        height=360, margin={"l": 80, "r": 20, "t": 60, "b": 60},
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0.0},
        hovermode="x unified")
    fig.update_xaxes(title_text=TIME_AXIS, range=[0, max(result.wall_s, 1.0)],
                     automargin=True)
    fig.update_yaxes(title_text=ytitle, rangemode="tozero", automargin=True,
                     tickformat=yformat)
    _mark_chaos(go, fig, result)
    return fig


def _mark_chaos(go: Any, fig: Any, result: RunResult) -> None:
    """Actor kills as dotted lines with an ``x`` in the legend; node kills as bands."""
    kills = result.actor_kill_times
    for t in kills:
        fig.add_vline(x=t, line={"color": "#555", "width": 1, "dash": "dot"})
    if kills:
        fig.add_trace(go.Scatter(
            x=kills, y=[0.0] * len(kills), mode="markers", name="actor killed (chaos)",
            marker={"symbol": "x", "size": 9, "color": "#000"},
            hovertemplate="actor killed at %{x:.1f} s<extra></extra>"))
    for kill in result.node_kills:
        start = kill.lost_at - result.started_at
        end = (kill.added_at if kill.added_at is not None else kill.lost_at + 1.0) \
            - result.started_at
        fig.add_vrect(x0=start, x1=end, fillcolor="#d62728", opacity=0.12, line_width=0,
                      annotation_text=f"node {kill.node} down"
                                      f"{'' if kill.graceful else ' (abrupt)'}",
                      annotation_position="top left")


def charts(result: RunResult) -> list[tuple[str, Any]]:
    """The report's plotly figures, each with its element id."""
    import plotly.graph_objects as go

    p = result.progress
    events_rate: list[tuple[float, float]] = []
    prev_t, prev_e = 0.0, 0
    for s in result.samples:
        if s.t > prev_t:
            events_rate.append((s.t, (s.events - prev_e) / (s.t - prev_t)))
        prev_t, prev_e = s.t, s.events
    p50, p99 = _latency_percentiles(p.append_times_ms, p.latencies_ms)
    samples = result.samples
    counts = [(name, [(s.t, float(getattr(s, attr))) for s in samples], COLORS[k])
              for k, (name, attr) in enumerate((("compactions", "compactions"),
                                                ("prunes", "prunes"),
                                                ("conflicts", "conflicts"),
                                                ("errors", "errors")))]
    by_session: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for pt in p.surface_points:
        by_session[pt.session].append((pt.t_ms / 1000.0, float(pt.nodes), pt.generation))
    surface = []
    marks: list[tuple[float, float]] = []
    for k, (sid, pts) in enumerate(sorted(by_session.items())[:MAX_SURFACE_SERIES]):
        pts.sort()
        surface.append(_line(go, sid, [(t, n) for t, n, _ in pts], COLORS[k % len(COLORS)]))
        marks += [(t, n) for (t, n, g), (_, _, before) in zip(pts[1:], pts, strict=False)
                  if g > before]
    if marks:
        surface.append(go.Scatter(x=[m[0] for m in marks], y=[m[1] for m in marks],
                                  mode="markers", name="compaction committed",
                                  marker={"symbol": "circle-open", "size": 9,
                                          "color": "#000"}))
    shown = min(len(by_session), MAX_SURFACE_SERIES)
    return [
        ("throughput", _figure(go, "Throughput", "per second", [
            _line(go, "events/s", events_rate, COLORS[0]),
            _line(go, "appends/s", _per_second(p.append_times_ms), COLORS[2])], result)),
        ("latency", _figure(go, "Append latency percentiles, per second",
                            "append latency (ms)", [
                                _line(go, "p50", p50, COLORS[0]),
                                _line(go, "p99", p99, COLORS[1])], result, yformat="")),
        ("activity", _figure(go, "Compactions, prunes, conflicts and errors so far",
                             "count (cumulative)",
                             [_line(go, name, pts, color) for name, pts, color in counts],
                             result, yformat="d")),
        ("surface", _figure(
            go, f"Surface size per session ({shown} of {len(by_session)} sessions)",
            "surface (nodes)", surface, result, yformat="d")),
    ]


def _table(rows: Sequence[tuple[str, str]], table_id: str) -> str:
    body = "".join(f"<tr><th scope=\"row\">{html.escape(k)}</th><td>{html.escape(v)}</td>"
                   "</tr>" for k, v in rows)
    return f'<table id="{table_id}">{body}</table>'


def render_report(result: RunResult) -> str:
    """The whole HTML page."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    report = result.report()
    figures = "".join(
        "<section class=\"chart\">" + pio.to_html(
            fig, include_plotlyjs=False, full_html=False, div_id=chart_id,
            default_width="100%", default_height="360px",
            config={"displaylogo": False, "responsive": True}) + "</section>"
        for chart_id, fig in charts(result))
    status = "passed" if result.verified else "FAILED"
    if result.incomplete:
        status += " (the run is incomplete)"
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in
                       [*report["incomplete"], *report["verification"]["mismatches"]])
    problems = f"<h2>Problems</h2><ul id=\"problems\">{problems}</ul>" if problems else ""
    script = get_plotlyjs().replace("</script", "<\\/script")
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<title>surfacelog run report</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;"
        "padding:0 1em;color:#222}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.5em}"
        "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;"
        "padding:4px 10px;text-align:left;font-size:14px}th{background:#f5f5f5;"
        "font-weight:600}td{font-variant-numeric:tabular-nums}"
        ".columns{display:flex;gap:2em;flex-wrap:wrap}.chart{margin:1.5em 0}"
        ".passed{color:#2ca02c}.failed{color:#d62728}</style>"
        f"<script>{script}</script></head><body>"
        f"<h1>surfacelog run: verification <span class=\""
        f"{'passed' if result.verified else 'failed'}\">{html.escape(status)}</span></h1>"
        "<div class=\"columns\"><section><h2>Configuration</h2>"
        f"{_table(config_rows(result.config), 'config')}</section>"
        f"<section><h2>Results</h2>{_table(summary_rows(report), 'summary')}</section>"
        f"</div>{problems}{_shard_table(report)}{figures}</body></html>"
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
        node = "this machine (one node)" if shard["node"] is None else shard["node"]
        values = [name, node, shard["events"], shard["events_per_s"], lat["p50"],
                  lat["p99"], shard["unavailable"], shard["node_kills"], rec["p50"],
                  rec["max"]]
        cells.append("<tr>" + "".join(f"<td>{html.escape(value(v))}</td>" for v in values)
                     + "</tr>")
    rec = report["recovery_s"]
    summary = (f"<p>{report['node_kills']} node kill(s), {report['node_kills_abrupt']} "
               f"abrupt; recovery (node lost -&gt; shard serving again) p50 "
               f"{html.escape(value(rec['p50'], 's'))}, max "
               f"{html.escape(value(rec['max'], 's'))}</p>") if report["local_nodes"] else ""
    return (f'<section><h2>Shards</h2>{summary}<table id="shards">{head}{"".join(cells)}'
            "</table></section>")


def write_html(path: str | Path, result: RunResult) -> None:
    """Write the self-contained HTML report of ``result`` to ``path`` atomically
    (``outputs.write_atomic``: the old file or the whole report, never part of it;
    ``run`` checked the path with ``outputs.check_output`` before it started). Raises
    ``OutputError`` when the file cannot be written."""
    write_atomic(path, render_report(result).encode("utf-8"))
