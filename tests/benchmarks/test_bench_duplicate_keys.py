"""Smoke test of benchmarks/bench_duplicate_keys.py at a tiny size (no timing asserts)."""

from __future__ import annotations

import pytest

from support.benchmodules import load_bench


def test_bench_duplicate_keys_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("bench_duplicate_keys")
    figures = bench.main(["--quick", "--events", "5000", "--rounds", "1"])
    assert figures["events"] == 5000
    for name in ("read", "import", "gateway"):
        assert figures[name]["ratio"] > 0
    assert set(figures["block"]) == {"decode", "encode", "compare", "object_pairs_hook"}
    assert "median ratio" in capsys.readouterr().out
