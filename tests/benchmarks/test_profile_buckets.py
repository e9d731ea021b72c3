"""benchmarks/profile_buckets.py: py-spy samples put in parts by their stacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.benchmodules import load_bench

SQLITE = ("Thread._bootstrap (threading.py:1002);"
          "_connection_worker_thread (aiosqlite/core.py:63);"
          "commit_group (surfacelog/store/sqlite/group_commit.py:270)")
APPEND = "SessionActor.append_wire (surfacelog/actors/session_actor.py:255)"
RAW = "".join(f"{stack} {count}\n" for stack, count in (
    (f"{SQLITE};in_transaction (surfacelog/store/sqlite/connection.py:108)", 5),
    (f"{SQLITE};insert_rows (surfacelog/store/sqlite/group_commit.py:111)", 3),
    ("Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)", 4),
    (f"{APPEND};Recorder.appended (surfacelog/actors/metrics.py:116);"
     "Metric._record (ray/util/metrics.py:133)", 2),
    (f"{APPEND};LiveSession.append_request (surfacelog/runtime/live.py:314);"
     "Session.append_batch (surfacelog/session/session.py:339)", 6),
    ("main (x.py:1);something (elsewhere.py:9)", 1)))


def test_samples_go_to_their_parts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("profile_buckets")
    total, parts = bench.shares(RAW.splitlines())
    assert total == 21
    assert parts == [
        ("session core (schema, fold, surface)", 6),
        ("SQLite connection thread: BEGIN, COMMIT", 5),
        ("native code holding the GIL (Ray's Cython, no Python frame on top)", 4),
        ("SQLite connection thread: the rest", 3),
        ("Ray metrics (recording)", 2),
        (bench.OTHER, 1)]
    raw = tmp_path / "owner.raw"
    raw.write_text(RAW, encoding="utf-8")
    assert bench.main([str(raw)]) == 0
    out = capsys.readouterr().out
    assert f"{raw}: 21 samples" in out and " 28.6%       6  session core" in out


def test_a_file_that_is_not_py_spy_output_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("profile_buckets")
    bad = tmp_path / "bad.raw"
    bad.write_text("frame;frame 3\nnot a sample\n", encoding="utf-8")
    assert bench.main([str(bad)]) == 2
    assert "line 2: not py-spy raw output" in capsys.readouterr().err
