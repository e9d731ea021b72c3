"""Smoke test of benchmarks/bench_worker_start.py: two workers and two imports, each row
printed with a figure (no timing asserts). In a child process that joins this worker's
Ray (``--address``): one Ray fewer started and stopped."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import ray

from support import paths


@pytest.mark.usefixtures("ray_local")
def test_two_workers_print_their_cpu_beside_the_import_baseline() -> None:
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, str(paths.BENCHMARKS / "bench_worker_start.py"),
                           "--workers", "2", "--address", address], capture_output=True,
                          text=True, timeout=180, cwd=paths.REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| figure")}
    assert list(rows) == ["a Ray worker's CPU once it answered its first call",
                          'baseline: `python -c "import ray"`', "ratio (medians)"]
    for name in list(rows)[:2]:
        low, high = map(float, re.findall(r"([\d.]+)-([\d.]+) s", rows[name])[0])
        assert 0 < low <= high, rows[name]
    assert float(re.findall(r"([\d.]+)x", rows["ratio (medians)"])[0]) > 0
