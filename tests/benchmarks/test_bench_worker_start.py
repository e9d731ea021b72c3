"""Smoke test of benchmarks/bench_worker_start.py: two workers and two imports, each row
printed with a figure (no timing asserts). In a child process: it starts a local Ray of
its own, and this one may hold the suite's."""

from __future__ import annotations

import re
import subprocess
import sys

from support import paths


def test_two_workers_print_their_cpu_beside_the_import_baseline() -> None:
    done = subprocess.run([sys.executable, str(paths.BENCHMARKS / "bench_worker_start.py"),
                           "--workers", "2"], capture_output=True, text=True, timeout=180,
                          cwd=paths.REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| figure")}
    assert list(rows) == ["a Ray worker's CPU once it answered its first call",
                          'baseline: `python -c "import ray"`', "ratio (medians)"]
    for name in list(rows)[:2]:
        low, high = map(float, re.findall(r"([\d.]+)-([\d.]+) s", rows[name])[0])
        assert 0 < low <= high, rows[name]
    assert float(re.findall(r"([\d.]+)x", rows["ratio (medians)"])[0]) > 0
