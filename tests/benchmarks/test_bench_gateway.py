"""Smoke test of benchmarks/bench_gateway.py at tiny sizes on the shared local Ray (no
timing asserts): the echo app and both gateways deploy, and every figure is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.benchmodules import load_bench

pytestmark = pytest.mark.usefixtures("ray_local")


async def test_figures_are_measured_at_tiny_sizes(tmp_path: Path) -> None:
    bench = load_bench("bench_gateway")
    base = bench.deploy(str(tmp_path))
    try:
        figures = [await bench.round_trip(base, "b", blocks=1, per_block=2),
                   await bench.concurrent(base, "d", clients=3, per_client=2)]
    finally:
        await bench.undeploy(str(tmp_path))
    assert [f.name.split(":")[0] for f in figures] == ["1", "2"]
    assert all(f.value > 0 and f.baseline > 0 for f in figures)
    assert "| ratio |" in bench.markdown(figures)
