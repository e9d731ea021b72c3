"""A session is imported whole or not at all, whatever ends ``surfacelog import``: a real
process, stopped (SIGSTOP) while its import transaction is open, then sent SIGINT,
SIGTERM or SIGKILL. Afterwards nothing of the session is visible (not listed, verify
checks 0 sessions), and importing the file again stores all of it, which verify checks
against the import's record. A file whose last line is bad stores nothing either (the
pipeline in process: the command line's refusal is tested with the other commands')."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from surfacelog.schema.codec import encode_log
from surfacelog.store.importing import Imported, Refused

from support import paths
from support.importing import import_files, verified
from support.sessiongen import build_session, header

TURNS = 2_000  # about 34,000 events, 5.6 MB: the import takes long enough to be caught open


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    events = list(build_session("big", TURNS).log)
    path = tmp_path_factory.mktemp("source") / "big.jsonl"
    path.write_bytes(encode_log(header("big"), events))
    return path, len(events)


def surfacelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "surfacelog.cli", *args],
                          env={**os.environ, "PYTHONPATH": str(paths.REPO)},
                          capture_output=True, text=True, timeout=120)


def committed(db: Path) -> bool:
    """Whether ``db`` holds a committed session (read through a connection of its own,
    which sees only committed transactions)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return bool(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])


def stop_while_importing(folder: Path, source: Path) -> tuple[subprocess.Popen[str], Path]:
    """Start ``import DB source`` and SIGSTOP it once its transaction has spilled pages
    into the WAL (the session is being written, not yet committed); the process and its
    new database in ``folder``. An import that commits before this process looks again
    (a loaded machine can hold the test back that long) is checked whole, and another
    one started, up to five."""
    for attempt in range(5):
        db = folder / f"s-{attempt}.db"
        proc = subprocess.Popen([sys.executable, "-m", "surfacelog.cli", "import", str(db),
                                 str(source)],
                                env={**os.environ, "PYTHONPATH": str(paths.REPO)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wal = db.with_name(db.name + "-wal")
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if wal.exists() and wal.stat().st_size > 1_000_000:
                os.kill(proc.pid, signal.SIGSTOP)
                break
            time.sleep(0.002)
        if proc.poll() is None:
            if not committed(db):
                return proc, db
            # Stopped just after its COMMIT (the WAL had passed 1 MB by then): not an
            # open transaction. It is let finish and checked whole like the others.
            os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate()
        assert proc.returncode == 0 and "imported as session big" in out, err
    pytest.fail("every import committed before it could be stopped")


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=lambda s: signal.Signals(s).name)
def test_an_interrupted_import_stores_nothing_and_a_new_one_stores_all(
        tmp_path: Path, big_log: tuple[Path, int], how: signal.Signals) -> None:
    source, length = big_log
    proc, db = stop_while_importing(tmp_path, source)
    try:
        os.kill(proc.pid, how)
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert "imported as session" not in out
    assert "Traceback" not in err
    if how == signal.SIGINT:
        assert (proc.returncode, err.strip()) == (130, "surfacelog: interrupted")
    else:
        assert proc.returncode == -how
    assert asyncio.run(verified(db)) == (0, [])
    if how == signal.SIGKILL:  # once, through the command line as a user would
        again = surfacelog("import", str(db), str(source))
        assert again.returncode == 0, again.stderr
        assert f"imported as session big ({length} events)" in again.stdout
        checked = surfacelog("verify", str(db))
        assert (checked.returncode, checked.stdout.strip()) == (
            0, "1 session(s) checked, 0 failed"), checked.stderr
    else:
        assert asyncio.run(import_files(db, source)) == [
            Imported(str(source), "file", "big", length)]
        assert asyncio.run(verified(db)) == (1, [])


def test_a_bad_last_line_stores_nothing(tmp_path: Path, big_log: tuple[Path, int]) -> None:
    source, _ = big_log
    bad = tmp_path / "big.jsonl"
    body = source.read_bytes()
    last = body.rstrip(b"\n").rfind(b"\n") + 1
    bad.write_bytes(body[:last] + b'{"type":"turn/end","seq":"x"}\n')
    db = tmp_path / "s.db"
    [refused] = asyncio.run(import_files(db, bad))
    assert isinstance(refused, Refused) and refused.rule == "contiguity", refused
    assert asyncio.run(verified(db)) == (0, [])
