"""Smoke test of benchmarks/bench_adapters.py at a tiny size (no timing asserts)."""

from __future__ import annotations

import pytest

from support.benchmodules import load_bench
from support.installed import require

require("agents", "openai-agents is not installed (pip install surfacelog[openai-agents])")


def test_openai_bench_runs_and_checks_its_reads(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("bench_adapters")
    rows = bench.main(["--items", "60", "--every", "20", "--reads", "2", "--only", "openai"])[
        "openai_agents"]
    assert set(rows) == {"sdk", "surfacelog", "surfacelog-buffered"}
    for row in rows.values():
        assert row["reads_checked"] == 3
        assert row["add_ms"] > 0 and row["read_at_60_ms"] > 0
    assert rows["sdk"]["add_ratio"] == 1.0
    assert "full read every 20" in capsys.readouterr().out


def test_the_workload_is_what_the_sdk_stores() -> None:
    bench = load_bench("bench_adapters")
    items = bench.openai_items(7)
    assert len(items) == 7
    assert [i.get("type", i.get("role")) for i in items[:5]] == [
        "user", "reasoning", "function_call", "function_call_output", "message"]


def test_adk_bench_runs_and_checks_its_reads(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("google.adk", reason="google-adk is not installed "
                        "(pip install surfacelog[adk])")
    bench = load_bench("bench_adapters")
    rows = bench.main(["--items", "40", "--every", "20", "--reads", "2", "--only", "adk"])[
        "adk"]
    assert set(rows) == {"sdk", "surfacelog", "surfacelog-buffered"}
    for row in rows.values():
        assert row["reads_checked"] == 2
        assert row["add_ms"] > 0 and row["read_at_40_ms"] > 0
    assert "Google ADK: 40 events" in capsys.readouterr().out
