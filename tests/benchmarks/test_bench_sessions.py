"""Smoke test of benchmarks/bench_sessions.py at a tiny size (no timing asserts)."""

from __future__ import annotations

import pytest

from support.benchmodules import load_bench
from support.installed import require

require("agents", "openai-agents is not installed (pip install surfacelog[openai-agents])")
require("google.adk", "google-adk is not installed")


def test_bench_sessions_runs_and_checks_its_reads(capsys: pytest.CaptureFixture[str]) -> None:
    load_bench("bench_adapters")
    bench = load_bench("bench_sessions")
    out = bench.main(["--items", "40", "--every", "20", "--reads", "2"])
    assert set(out) == {"openai_agents", "adk"}
    for rows in out.values():
        assert set(rows) == {"sdk", "surfacelog", "surfacelog-buffered"}
        for row in rows.values():
            assert row["reads_checked"] == 2
            assert row["reopen_read_ms"] > 0
        assert rows["sdk"]["reopen_read_ratio"] == 1.0
    printed = capsys.readouterr().out
    assert "then reopen and read" in printed and "Google ADK SqliteSessionService" in printed
