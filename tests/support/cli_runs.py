"""``surfacelog`` and the scenario scripts run as child processes, for tests whose run
starts its own Ray (the test process may already hold the suite's local Ray, and a
process joins one cluster)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from support.paths import REPO, SUPPORT

CLUSTER_ENV: dict[str, str] = {
    # Each worker node of a local cluster offers 1 CPU, and a raylet starts at most that
    # many worker processes at once (Ray's ``maximum_startup_concurrency``): a node's
    # shard writer and session actors, at the start and again when the node returns,
    # would start one after another (about a second each here) instead of together.
    "RAY_worker_maximum_startup_concurrency": "4",
}
"""The environment of a run on a local cluster (``--local-nodes``): the same actors,
started side by side."""

NODE_LOSS_ENV: dict[str, str] = {
    **CLUSTER_ENV,
    # The GCS of a local cluster checks each raylet every period and declares it dead
    # after the threshold of failures in a row (``localcluster.HEALTH_CHECKS``: 1 s x 5),
    # the first check only after the initial delay (Ray's 5 s), and only then restarts
    # the node's actors on the node that comes back: a killed raylet fails each check at
    # once, so a short period finds it dead in about 1 s instead of 5 (or, killed within
    # 5 s of its return, 5 s + 5 s). A live raylet, however loaded, still has Ray's 10 s
    # timeout to answer each check, and the threshold is kept.
    "RAY_health_check_period_ms": "200",
    "RAY_health_check_initial_delay_ms": "500",
}
"""The environment of a run that removes nodes on purpose (``--kill-node-every``,
``--kill-disk-every``): the same outages, without waiting out Ray's detection of each."""


def cli(*args: str, timeout_s: float, env: Mapping[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``python -m surfacelog.cli ARGS``; ``env``: variables set on top of this
    process's environment."""
    return subprocess.run([sys.executable, "-m", "surfacelog.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout_s, check=False,
                          env=None if env is None else {**os.environ, **env})


def clis(*commands: tuple[str, ...], timeout_s: float
         ) -> list[subprocess.CompletedProcess[str]]:
    """``cli(*command)`` for each of ``commands``, all at once (each a process of its
    own); their results in the same order."""
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda args: cli(*args, timeout_s=timeout_s), commands))


def run_report(db: Path, *args: str, timeout_s: float = 300,
               env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON report of a ``run --json`` on ``db`` (``env``: as ``cli``'s); asserts it
    exited 0 with exactly one JSON object on stdout and no traceback."""
    proc = cli("run", "--db", str(db), "--json", *args, timeout_s=timeout_s, env=env)
    context = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n" \
              f"stderr:\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, context
    assert "Traceback" not in proc.stderr, context
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, context
    report: dict[str, Any] = json.loads(lines[0])
    return report


def scenario_report(script: str, *args: str, timeout_s: float) -> dict[str, Any]:
    """Run ``tests/support/<script> ARGS``: the JSON object on its last stdout line, with
    its stderr's tail (``_stderr_tail``) and exit status (``_returncode``) added."""
    proc = subprocess.run([sys.executable, str(SUPPORT / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"no report (exit {proc.returncode}); stderr:\n{proc.stderr[-6000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    report["_stderr_tail"] = proc.stderr[-6000:]
    report["_returncode"] = proc.returncode
    return report


@functools.cache
def short_cluster_run() -> dict[str, Any]:
    """The report of ``cluster_scenario.py --short --colocate``, run once per test
    process: ``tests/cluster/test_node_removed_and_added.py`` checks its run, and
    ``tests/cluster/test_colocation.py`` its colocation section, checked on the same
    cluster before the run (the multi-node modules run one after another on one
    worker). Read it, never change it."""
    return scenario_report("cluster_scenario.py", "--short", "--colocate", timeout_s=300)
