"""Smoke test of benchmarks/bench_sessions.py at a tiny size (no timing asserts)."""

from __future__ import annotations

import pytest
from benchmodules import load_bench

pytest.importorskip(
    "agents", reason="openai-agents is not installed (pip install surfacelog[openai-agents])")


def test_bench_sessions_runs_and_checks_its_reads(capsys: pytest.CaptureFixture[str]) -> None:
    load_bench("bench_adapters")
    bench = load_bench("bench_sessions")
    rows = bench.main(["--items", "40", "--every", "20", "--reads", "2"])
    assert set(rows) == {"sdk", "surfacelog", "surfacelog-buffered"}
    for row in rows.values():
        assert row["reads_checked"] == 2
        assert row["reopen_read_ms"] > 0
    assert rows["sdk"]["reopen_read_ratio"] == 1.0
    assert "then reopen and read" in capsys.readouterr().out
