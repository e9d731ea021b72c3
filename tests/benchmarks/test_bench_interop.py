"""Smoke test of benchmarks/bench_interop.py at a tiny size (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from surfacelog.schema.codec import read_log
from surfacelog.session import replay

from support.benchmodules import load_bench


def test_generated_file_is_a_valid_packed_zstd_session(tmp_path: Path) -> None:
    bench = load_bench("bench_interop")
    path = tmp_path / "session.jsonl.zstd"
    written = bench.write_file(path, 3_000)
    log = read_log(path)
    assert len(log.events) == written >= 3_000
    assert log.packed_rows > 0 and log.torn is None
    replay(log.events, log.header)
    assert bench.phase_decode(path) < written  # packed rows: fewer lines than events
    assert bench.phase_import(path, tmp_path / "s.db") == written


@pytest.mark.parametrize("argv", [["--quick"]])
def test_quick_run_reports_every_phase(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    bench = load_bench("bench_interop")
    monkeypatch.chdir(tmp_path)
    result = bench.main(argv)
    (run,) = result["runs"]
    assert {"decode", "read", "import"} <= run.keys()
    assert run["import"]["count"] == result["events"]
