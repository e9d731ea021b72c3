"""Smoke test of benchmarks/bench_hosting.py: its ``--quick`` run (each ``surfacelog run``
a child process with its own Ray) prints every row with its same-run baseline. No
timing is asserted."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from support import paths

BENCH = paths.BENCHMARKS / "bench_hosting.py"
PREFIX = "BENCH_HOSTING_JSON "
OWNER_ROW = "the owner's side of a coalesced append, in process: CPU per request"
QUIET_ROW = "no-op call, 50 in flight, without Ray's task events: CPU per call"


def test_quick_run_prints_every_row() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--quick"], cwd=paths.REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    tail = f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, tail
    lines = [line for line in proc.stdout.splitlines() if line.startswith(PREFIX)]
    assert len(lines) == 1, tail
    rows = {r["name"]: r for r in json.loads(lines[0][len(PREFIX):])}
    for name in ("no-op async-actor call, one at a time", "in process, chunk mode, 4 sessions",
                 "hosted path's code in process, chunk mode: CPU per event",
                 "chunk, 4 sessions: events/s", "chunk, 4 sessions: events/s vs in process",
                 "chunk, 4 sessions: p50", "chunk, 4 sessions: CPU per event",
                 "chunk, 4 sessions: CPU per event, OwnerActor",
                 "chunk, 4 sessions: CPU per event, DriverActor",
                 "chunk, 4 sessions: CPU per event, every other process", OWNER_ROW,
                 QUIET_ROW):
        assert name in rows, (name, sorted(rows))
    for row in rows.values():
        assert math.isfinite(row["value"]) and row["value"] > 0, row
    # The hosted rows stand beside a baseline measured in the same run.
    assert rows["chunk, 4 sessions: events/s"]["baseline"] > 0
    assert rows["chunk, 4 sessions: events/s vs in process"]["baseline"] == \
        rows["in process, chunk mode, 4 sessions"]["value"]
    # The run's CPU per event, split by process, adds up to the whole.
    split = [rows[f"chunk, 4 sessions: CPU per event, {part}"]["value"]
             for part in ("OwnerActor", "DriverActor", "every other process")]
    assert sum(split) == pytest.approx(rows["chunk, 4 sessions: CPU per event"]["value"],
                                       rel=0.02, abs=0.01)
    # The hosted path's code ran the same workload, its CPU beside the in-process one's.
    assert rows["hosted path's code in process, chunk mode: CPU per event"]["baseline"] > 0
    # The owner's side alone, per request, beside the session's own append.
    assert rows[OWNER_ROW]["baseline"] > 0
    # A no-op call without task events, beside the same call with them.
    assert rows[QUIET_ROW]["baseline"] > 0
