"""Crash safety (SPEC sections 9 and 12): a child process appends and flushes in a loop
and is SIGKILLed at random moments; after each kill the store must hold every event the
child saw acknowledged, nothing half-written, and an open turn must be closed by repair
closers when the session is taken for writing again."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from surfacelog.session import interrupted_turn_closers
from surfacelog.store import SqliteEventStore

from support import paths
from support.sessiongen import header

CHILD = paths.SUPPORT / "store_crash_child.py"


def _run_child(db: Path, session_id: str, seed: int, rng: random.Random) -> int:
    """Start a child, SIGKILL it at a random moment, return the last acked seq (-1 if
    none). One run in five is killed during startup or while it repairs the log."""
    proc = subprocess.Popen([sys.executable, str(CHILD), str(db), session_id, str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0.0, 0.3))
        else:
            line = proc.stdout.readline()  # "ack N": the session is open and repaired
            if not line:
                raise AssertionError(f"child died: {proc.communicate()[1]}")
            time.sleep(rng.uniform(0.0, 0.12))
    finally:
        proc.kill()
    out, err = proc.communicate()
    if proc.returncode != -9:
        raise AssertionError(f"child exited {proc.returncode} before the kill:\n{err}")
    acks = [int(line.split()[1]) for line in out.splitlines() if line.startswith("ack ")]
    return max(acks, default=-1)


async def _check(db: Path, session_id: str, acked: int) -> tuple[int, bool]:
    """Assert the store's state after a kill; return (log length, repaired a turn)."""
    store = await SqliteEventStore.open(db)
    try:
        # load: every row decodes, rows are contiguous from 0, their count matches the
        # session's next seq, and the whole log passes the core's validation.
        loaded = await store.load(session_id)
        log = list(loaded.log)
        assert len(log) > acked, f"acked seq {acked} lost: only {len(log)} events"
        # Batches are all or nothing: a turn/start always has its user/message.
        for event in log:
            if event.type == "turn/start":
                assert log[event.seq + 1].type == "user/message", event.seq
        open_turn = bool(interrupted_turn_closers(log))
        opened = await store.open_session(session_id)
        assert interrupted_turn_closers(opened.session.log) == []
        if open_turn:
            closer = opened.repaired[-1]
            assert closer.type == "turn/end"
            assert closer.data["reason"] == {"kind": "interrupted"}
        assert await store.read_since(session_id, len(log)) == list(opened.repaired)
        return len(log), open_turn
    finally:
        await store.close()


async def _create(db: Path, session_id: str) -> None:
    store = await SqliteEventStore.open(db)
    await store.create(header(session_id))
    await store.close()


def _kill_loop(tmp_path: Path, kills: int, seed: int, kills_per_session: int = 25) -> None:
    """``kills`` child runs; a new session every ``kills_per_session`` runs keeps each
    log (and so each reload) small."""
    db = tmp_path / "crash.db"
    rng = random.Random(seed)
    repaired_turns, progress = 0, 0
    for k in range(kills):
        session_id = f"crash-{k // kills_per_session}"
        if k % kills_per_session == 0:
            asyncio.run(_create(db, session_id))
            length = 0
        acked = _run_child(db, session_id, seed * 10_000 + k, rng)
        before = length
        length, repaired = asyncio.run(_check(db, session_id, acked))
        progress += length > before
        repaired_turns += repaired
    # The children made progress and many kills landed inside a turn.
    assert progress >= kills // 2, (progress, kills)
    assert repaired_turns >= kills // 5, (repaired_turns, kills)


def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    _kill_loop(tmp_path, kills=50, seed=1)


@pytest.mark.slow
def test_sigkill_soak(tmp_path: Path) -> None:
    _kill_loop(tmp_path, kills=400, seed=2)
