"""Smoke test of benchmarks/bench_actors.py at tiny sizes on the shared local Ray (no
timing asserts)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from surfacelog.session import Session

from support.benchmodules import load_bench

pytestmark = pytest.mark.usefixtures("ray_local")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bench_actors")


def test_batches_are_valid_scripted_turns(bench: ModuleType) -> None:
    gen = bench.Batches("s", 100)
    batches = gen.take(300)
    session = Session()
    for batch in batches:
        assert len(batch) >= 100
        session.append_batch(batch)
    assert len(session) == gen.length >= 300
    kinds = {e.type for e in session.log}
    assert {"turn/start", "user/message", "assistant/chunk", "assistant/message",
            "tool/call", "tool/result", "turn/end"} <= kinds


async def test_measurements_run_at_tiny_sizes(bench: ModuleType, tmp_path: Path) -> None:
    report = bench.Report()
    tmp = str(tmp_path)
    await bench.bench_append_rtt(tmp, report, n=20, block=10)
    await bench.bench_append_batch(tmp, report, batch=64, events=300, reps=2)
    await bench.bench_derive(tmp, report, sizes=(200,), calls=20, reactivations=3)
    empty = await bench.empty_actor_baseline(tmp, n=1)
    await bench.bench_dedicated(tmp, report, empty, sequential=1, concurrent=1)
    await bench.bench_packed(tmp, report, empty, maximum=60, wave=20,
                             checkpoints=(30, 60), sequential=5)
    await bench.bench_journal(tmp, report, sessions=3, rounds=2)
    await bench.bench_append_cpu(tmp, report, n=20, block=10, warmup=10)
    sections = {r.section for r in report.results}
    assert sections == {"1", "2", "3", "4", "5", "6", "7"}
    cpu = [r for r in report.results if r.section == "7"]
    assert [r.name.rsplit(" ", 1)[-1] for r in cpu] == ["journal", "owner"]
    assert all(r.baseline and r.ratio is not None and r.ok is not None for r in cpu)
    for result in report.results:
        assert result.value >= 0, result
        assert result.baseline is None or result.ratio is not None, result
    held = [r for r in report.results if r.name == "packed: sessions held"]
    assert held and held[0].value == 60
    assert "| # |" in report.markdown()
