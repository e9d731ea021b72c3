"""Smoke test of benchmarks/bench_surface.py at tiny sizes (no timing asserts)."""

from __future__ import annotations

from types import ModuleType

import pytest

from surfacelog.schema import ReplaceOp, decode_log, encode_log
from surfacelog.session import derive_from_nodes, fold_surface, replay

from support.benchmodules import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bench_surface")


def test_generated_log_is_valid_and_realistic(bench: ModuleType) -> None:
    # A small compaction budget so a short log already holds nested compactions.
    gen = bench.LogGenerator(seed=3, compact_tokens=3_000)
    gen.generate(4_000)
    log = list(gen.session.log)
    assert len(log) == 4_000
    stats = gen.stats
    assert stats.compactions >= 2 and stats.prunes >= 1
    kinds = {e.type for e in log}
    assert {"turn/start", "step/start", "assistant/chunk", "assistant/message", "tool/call",
            "tool/result", "user/message", "compaction/start", "compaction/summary",
            "compaction/end", "compaction/prune"} <= kinds
    # Round trip through JSONL, then fold and replay agree with the live session.
    decoded = decode_log(encode_log(None, log)).events
    assert decoded == log
    folded = fold_surface(decoded)
    assert list(folded.nodes) == list(gen.session.surface.nodes)
    assert len(folded.replacements) == gen.session.surface.replace_generation
    nested = {r.seq for r in folded.replacements}
    assert any(r.start in nested for r in folded.replacements), "no nested replace"
    assert replay(decoded).derive_messages() == derive_from_nodes(folded.nodes, decoded)


def test_continuation_is_the_same_traffic_after_any_prefix(bench: ModuleType) -> None:
    log, _ = bench.generate_log(1_500, seed=5)
    a = bench.continuation(log[:500], 300)
    b = bench.continuation(log[:1_500], 300)
    assert len(a) == len(b) == 300
    assert [e.seq for e in a] == list(range(500, 800))
    # Same kinds of events in the same order until a state-dependent decision.
    assert [e.type for e in a[:100]] == [e.type for e in b[:100]]


def test_bench_functions_run(bench: ModuleType) -> None:
    log, _ = bench.generate_log(2_000, seed=11)
    row = bench.bench_fold(log[:1_500], repeats=1)
    assert row.events == 1_500 and row.nodes > 0
    assert len(row.decode_s) == len(row.fold_s) == len(row.replay_derive_s) == 1
    assert row.fold_over_decode > 0 and row.replay_over_decode > 0
    assert "1500" in bench.fold_table([row])

    rows = bench.bench_append(log, [200, 1_000], ops=50, repeats=2, naive_counts=[3, 2])
    assert [r.size for r in rows] == [200, 1_000]
    for r in rows:
        assert r.incremental_us > 0 and r.naive_us > 0
        assert r.naive_ops in (2, 3)
    assert rows[1].generation > 0
    assert "flatness" in bench.append_table(rows)


def test_pass_reads_agree_with_a_walk_and_are_timed(bench: ModuleType) -> None:
    log, _ = bench.generate_log(3_000, seed=4)
    row = bench.bench_pass_reads(log, 2_000, ops=60)  # raises when the two disagree
    assert (row.size, row.ops) == (2_000, 60)
    assert row.tally_us > 0 and row.walk_us > 0


def test_window_replaces_are_counted(bench: ModuleType) -> None:
    gen = bench.LogGenerator(seed=2, compact_tokens=2_000, prune_rate=0.5)
    gen.generate(1_500)
    assert any(isinstance(e.surface_op, ReplaceOp) for e in gen.session.log)


def test_main_runs_at_tiny_sizes(bench: ModuleType,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert bench._sizes("1k, 10k,1M,500") == [1_000, 10_000, 1_000_000, 500]
    assert bench.main(["--sizes", "300,600", "--fold-sizes", "600", "--ops", "40",
                       "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "## Surface (bench_surface.py)" in out
    assert "flatness cost(600) / cost(300)" in out
    assert "time travel over 600 events (50 calls)" in out


def test_time_travel_bench_checks_its_answers(bench: ModuleType) -> None:
    gen = bench.LogGenerator(seed=4, compact_tokens=2_000)
    gen.generate(3_000)
    row = bench.bench_time_travel(list(gen.session.log), 10, seed=1)
    assert row.events == 3_000 and row.calls == 10
    assert row.checkpoint_us > 0 and row.fresh_us > 0 and row.first_call_ms > 0
