"""Smoke test of benchmarks/bench_startup.py: one run of each command, every row printed
with its figures (no timing asserts)."""

from __future__ import annotations

import subprocess
import sys

from support import paths


def test_one_run_prints_a_row_per_command_with_its_ratio() -> None:
    done = subprocess.run([sys.executable, str(paths.REPO / "benchmarks" / "bench_startup.py"),
                           "--runs", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines()[1:] if line.strip()]
    names = [row[:30].strip() for row in rows]
    assert names == ["python -c pass (floor)", "surfacelog --help", "surfacelog fold FILE",
                     "surfacelog fold --json FILE"]
    ratios = [float(row.split()[-1]) for row in rows]
    assert ratios[0] == 1.0 and all(r > 0 for r in ratios)
