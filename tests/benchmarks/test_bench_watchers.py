"""Smoke test of benchmarks/bench_watchers.py at tiny sizes on the shared local Ray (no
timing asserts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from surfacelog.actors.client import connect

from support.benchmodules import load_bench

pytestmark = pytest.mark.usefixtures("ray_local")


async def test_both_watchers_are_measured_beside_their_per_session_baseline(
        tmp_path: Path) -> None:
    bench = load_bench("bench_watchers")
    client = connect(db=str(tmp_path / "w.db"), placement="packed", packs=2)
    try:
        figures = await bench.measure(client, sessions=6, passes=2, rounds=2)
    finally:
        client.shutdown()
    assert sorted(figures) == ["CompactionActor", "PrunerActor"]
    for f in figures.values():
        assert all(len(values) == 2 and all(v >= 0 for v in values) for values in f.values())
        assert all(v > 0 for v in f["held_wall"] + f["alone_wall"])
    lines = bench.report(figures, 6)
    assert len(lines) == 4
    # A round whose baseline saw no CPU tick has no ratio: the line says so.
    still = {k: {f: [0.0, 0.0] if f.endswith("cpu") else v for f, v in figures[k].items()}
             for k in figures}
    assert "ratio n/a" in bench.report(still, 6)[1]
    assert all("a request per session (same rounds)" in line and "ratio" in line
               for line in lines)
