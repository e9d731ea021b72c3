"""``surfacelog import | export | verify`` over a SQLite store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.schema.codec import encode_log, read_log

from support.shared_examples import EXAMPLES

VALID = sorted(p for p in EXAMPLES.glob("*.jsonl") if not p.name.startswith("invalid"))
INVALID = sorted(EXAMPLES.glob("invalid-*.jsonl"))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_import_export_round_trip(tmp_path: Path, runner: CliRunner) -> None:
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["import", str(db), *map(str, VALID)])
    assert result.exit_code == 0, result.output
    for path in VALID:
        assert f"imported as session {path.stem}" in result.output
        out = runner.invoke(app, ["export", str(db), path.stem])
        assert out.exit_code == 0
        header_line, rest = out.stdout_bytes.split(b"\n", 1)
        assert msgspec.json.decode(header_line) == {
            "type": "session", "version": 0, "id": path.stem,
            "createdAt": read_log(path).events[0].time,
            "delegationDepth": 0}  # DSH requires it: always written
        assert rest == path.read_bytes()
    # An exported file (with its header line) imports again into another store.
    target = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["export", str(db), "compaction", "-o", str(target)]).exit_code == 0
    other = tmp_path / "other.db"
    assert runner.invoke(app, ["import", str(other), str(target)]).exit_code == 0
    again = runner.invoke(app, ["export", str(other), "compaction"])
    assert again.stdout_bytes == target.read_bytes()


def test_import_refuses_invalid_logs_and_duplicates(tmp_path: Path, runner: CliRunner) -> None:
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["import", str(db), str(VALID[0]), *map(str, INVALID)])
    assert result.exit_code == 1
    for path in INVALID:
        assert f"{path}: not imported" in result.output
    again = runner.invoke(app, ["import", str(db), str(VALID[0])])
    assert again.exit_code == 1 and "already stored" in again.output
    missing = runner.invoke(app, ["import", str(db), str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2
    listed = runner.invoke(app, ["verify", str(db)])
    assert listed.exit_code == 0 and "1 session(s) checked, 0 failed" in listed.output


def test_import_legacy(tmp_path: Path, runner: CliRunner) -> None:
    log = read_log(EXAMPLES / "tool-calls.jsonl")
    legacy_events = [msgspec.structs.replace(e, surface_op=msgspec.UNSET) for e in log.events]
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_bytes(encode_log(None, legacy_events))
    db = tmp_path / "s.db"
    assert runner.invoke(app, ["import", str(db), str(legacy)]).exit_code == 1
    result = runner.invoke(app, ["import", str(db), "--legacy", str(legacy)])
    assert result.exit_code == 0, result.output
    out = runner.invoke(app, ["export", str(db), "legacy"])
    assert out.stdout_bytes.split(b"\n", 1)[1] == (EXAMPLES / "tool-calls.jsonl").read_bytes()


def test_verify_reports_failures_by_session_and_seq(tmp_path: Path, runner: CliRunner) -> None:
    db = tmp_path / "s.db"
    assert runner.invoke(app, ["import", str(db), *map(str, VALID)]).exit_code == 0
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE events SET surface_op = '\"sideways\"' "
                 "WHERE session_id = 'compaction' AND seq = 4")
    conn.execute("UPDATE events SET data = 'oops' WHERE session_id = 'tool-calls' AND seq = 9")
    conn.close()
    result = runner.invoke(app, ["verify", str(db)])
    assert result.exit_code == 1
    assert "FAIL session compaction seq 4:" in result.output
    assert "FAIL session tool-calls seq 9:" in result.output
    assert f"{len(VALID)} session(s) checked, 2 failed" in result.output


def test_commands_on_missing_or_foreign_databases(tmp_path: Path, runner: CliRunner) -> None:
    absent = tmp_path / "absent.db"
    assert runner.invoke(app, ["verify", str(absent)]).exit_code == 2
    assert runner.invoke(app, ["export", str(absent), "x"]).exit_code == 2
    assert not absent.exists()
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    result = runner.invoke(app, ["verify", str(foreign)])
    assert result.exit_code == 2 and "unexpected table 't'" in result.output
    db = tmp_path / "s.db"
    assert runner.invoke(app, ["import", str(db), str(VALID[0])]).exit_code == 0
    missing = runner.invoke(app, ["export", str(db), "nope"])
    assert missing.exit_code == 1 and "not stored" in missing.output
