"""Smoke test of benchmarks/bench_cluster.py: its ``--quick`` run on a real multi-node
cluster, in a child process (this one may hold the suite's local Ray), must print a
well-formed report with every figure present. No timing is asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import pytest

from support import paths
from support.cli_runs import CLUSTER_ENV

BENCH = paths.BENCHMARKS / "bench_cluster.py"
PREFIX = "BENCH_CLUSTER_JSON "


def quick_run(*args: str) -> tuple[dict[str, Any], list[str]]:
    """The JSON report and the markdown table's lines of ``bench_cluster.py --quick
    ARGS``, which must exit 0."""
    # The actors of each deployment start side by side on their nodes (CLUSTER_ENV).
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", *args],
                          cwd=BENCH.parent.parent, capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, **CLUSTER_ENV})
    tail = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n" \
        f"{proc.stderr[-3000:]}"
    assert proc.returncode == 0, tail
    lines = [line for line in proc.stdout.splitlines() if line.startswith(PREFIX)]
    assert len(lines) == 1, tail
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    return json.loads(lines[0][len(PREFIX):]), table


def _check_figures(figures: dict[str, Any]) -> None:
    for key, figure in figures.items():
        assert math.isfinite(figure["value"]), key
        # A net-of-idle figure may come out below zero on a tiny run: it is a difference.
        assert figure["value"] >= 0 or "_net_" in key, key
        if key != "c.sessions_held":
            assert figure["baseline"] and figure["ratio"] is not None, key


def test_quick_colocation_section_prints_its_figures() -> None:
    """The default run's smoke test: section b alone (one deployment on the cluster)."""
    report, table = quick_run("--only", "b")
    figures = report["figures"]
    assert {"b.latency_p50_ms", "b.latency_p99_ms", "b.cpu_ms_per_append"} <= set(figures)
    assert not any(k.startswith(("a.", "c.", "d.")) for k in figures), sorted(figures)
    _check_figures(figures)
    assert all(report["facts"]["b.placement"].values()), report["facts"]
    assert {line.split("|")[1].strip() for line in table[2:]} == {"b"}


@pytest.mark.slow  # about a minute alone, six deployments: section b runs by default
def test_quick_run_prints_every_figure() -> None:
    report, table = quick_run()
    figures = report["figures"]
    expected = {f"a.{writer}.{shards}.{figure}"
                for writer in ("journal", "owner") for shards in (1, 2, 4)
                for figure in ("events_per_s", "p50_ms", "p99_ms", "writer_cpu_per_1k",
                               "writer_net_cpu_per_1k", "all_cpu_per_1k",
                               "all_net_cpu_per_1k", "events_per_commit")}
    expected |= {f"a.journal.{shards}.session_cpu_per_1k" for shards in (1, 2, 4)}
    expected |= {"b.latency_p50_ms", "b.latency_p99_ms", "b.cpu_ms_per_append",
                 "c.sessions_held", "d.sessions_per_s"}

    assert expected <= set(figures), sorted(expected - set(figures))
    assert any(k.startswith("c.uss_kb_per_added_session.") for k in figures)
    assert any(k.startswith("c.rss_kb_per_session.") for k in figures)
    _check_figures(figures)
    assert figures["c.sessions_held"]["value"] > 0
    assert all(report["facts"]["b.placement"].values()), report["facts"]
    assert report["facts"]["auth"] == "token"
    # The markdown table names every section.
    assert {line.split("|")[1].strip() for line in table[2:]} == {"a", "b", "c", "d"}
