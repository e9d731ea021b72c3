"""Smoke test of benchmarks/bench_decode_event.py at a tiny size (no timing asserts)."""

from __future__ import annotations

import pytest

from support.benchmodules import load_bench


def test_bench_decode_event_prints_each_group_beside_the_strict_decoder(
        capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("bench_decode_event")
    figures = bench.main(["--quick", "--events", "2000", "--rounds", "1"])
    assert figures["events"] == 2000
    groups = ("holding -0", "without -0")
    assert sum(figures[group]["lines"] for group in groups) == 2000
    for group in groups:
        assert figures[group]["lines"] > 0, group
        assert set(figures[group]["ratio"]) == {"decode_event", "loose"}
        assert all(value > 0 for value in figures[group]["us_per_line"].values())
    out = capsys.readouterr().out
    assert "holding -0" in out and "(baseline)" in out
