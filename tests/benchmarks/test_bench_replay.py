"""Smoke test of benchmarks/bench_replay.py at a tiny size (no timing asserts)."""

from __future__ import annotations

import pytest

from support.benchmodules import load_bench


def test_bench_replay_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("bench_replay")
    figures = bench.main(["--quick", "--events", "3000", "--sizes", "500,1500",
                          "--rounds", "1"])
    fold = figures["fold"]
    assert fold["events"] == 3000 and fold["nodes"] > 0
    assert fold["fold_s"] > 0 and fold["sub_fold_s"] > 0
    assert [row["events"] for row in figures["activation"]] == [500, 1500]
    for row in figures["activation"]:
        assert row["raw_s"] > 0 and row["activate_s"] > 0
    out = capsys.readouterr().out
    assert "fold/decode" in out and "activate/raw" in out
