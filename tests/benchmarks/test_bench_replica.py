"""Smoke test of benchmarks/bench_replica.py at a tiny size (no timing asserts)."""

from __future__ import annotations

import pytest

from support.benchmodules import load_bench


def test_bench_replica_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("bench_replica")
    figures = bench.main(["--quick"])
    lag = figures["lag"]
    assert lag["samples"] > 0 and lag["events_per_s"] > 0
    assert 0 <= lag["lag_p50_s"] <= lag["lag_p99_s"] <= lag["lag_max_s"]
    assert lag["lost_p50"] <= lag["lost_p99"] <= lag["lost_max"]
    restore = figures["restore"]
    assert restore["sessions"] > 0 and restore["bytes"] > 0
    assert restore["restore_s"] > 0 and restore["verify_s"] > 0
    out = capsys.readouterr().out
    assert "lag p50" in out and "s/GB" in out
