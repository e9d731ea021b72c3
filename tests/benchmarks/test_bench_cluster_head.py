"""benchmarks/bench_cluster_head.py: each process of a local cluster counted as its kind
(the figures themselves come from real clusters, in the benchmark's own runs)."""

from __future__ import annotations

import pytest

from support.benchmodules import load_bench

PY = "/work/.venv/bin/python"
SITE = "/work/.venv/lib/python3.11/site-packages/ray"


@pytest.mark.parametrize(("cmdline", "kind"), [
    ([PY, "-u", f"{SITE}/_private/log_monitor.py", "--session-dir=/tmp/ray/s"],
     "log_monitor"),
    ([PY, "-u", f"{SITE}/autoscaler/_private/monitor.py", "--logs-dir=/tmp/ray/s"],
     "monitor.py"),
    ([PY, f"{SITE}/dashboard/dashboard.py", "--host=127.0.0.1"], "dashboard.py"),
    ([f"{SITE}/core/src/ray/gcs/gcs_server", "--gcs_server_port=0"], "gcs_server"),
    ([f"{SITE}/core/src/ray/raylet/raylet", "--raylet_socket_name=x",
      f"--dashboard_agent_command={PY} {SITE}/dashboard/agent.py"], "raylet/raylet"),
    (["ray::Echo"], "workers and agents"),
    (["ray::DashboardAgent"], "workers and agents"),
])
def test_each_process_is_counted_as_its_kind(cmdline: list[str], kind: str) -> None:
    bench = load_bench("bench_cluster_head")
    assert bench.kind_of(cmdline) == kind
