"""The journal store a session actor writes through, against a real journal actor (a
real SQLite file) whose commits can be held back."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from surfacelog.actors.journal import JournalActor, JournalStore
from surfacelog.actors.protocol import BatchPayload
from surfacelog.session import END_SEED, AppendSpec, Session
from surfacelog.store.base import EventStore
from surfacelog.store.errors import CorruptStore
from surfacelog.store.sqlite import SqliteEventStore, sqlite_backend

from support.sessiongen import build_session, open_turn
from support.sessiongen import header as header_for

pytestmark = pytest.mark.usefixtures("ray_local")


def gated_journal(db: str) -> Any:
    """A real journal actor, except that buffered commits wait until ``release``. (The
    class is made here so that Ray ships it by value: workers cannot import tests.)"""

    class GatedJournal(JournalActor):
        def __init__(self, db: str) -> None:
            super().__init__(sqlite_backend(db))
            self._gate = asyncio.Event()

        async def append_many(self, batches: list[tuple[str, BatchPayload, int]],
                              resend: bool = False) -> list[BaseException | None]:
            await self._gate.wait()
            return await super().append_many(batches, resend)

        async def release(self) -> None:
            self._gate.set()

    return ray.remote(GatedJournal).remote(db)


def _batch(session: Session, size: int) -> list[AppendSpec]:
    base = len(session)
    return [AppendSpec("todo/write", {"todos": [{"content": f"t{base + k}",
                                                 "status": "pending"}]})
            for k in range(size)]


async def _gated_session(tmp_path: Path, sid: str, bound: int
                         ) -> tuple[Any, JournalStore, Session, int]:
    """A gated journal, a journal store over it with ``bound`` buffered events, and a
    new session ``sid`` created through it (with its writer epoch)."""
    journal = gated_journal(str(tmp_path / f"{sid}.db"))
    store = JournalStore(journal, ship_delay_s=0.0, max_buffered_events=bound)
    header = header_for(sid)
    epoch = await store.create(header)
    return journal, store, Session(header=header), epoch


async def test_buffered_appends_wait_for_the_journal_past_the_bound(tmp_path: Path) -> None:
    journal, store, session, epoch = await _gated_session(tmp_path, "gated", 100)
    for _ in range(2):  # 60, then 120 buffered: each starts under the bound
        events = session.append_batch(_batch(session, 60))
        await asyncio.wait_for(store.append("gated", events, epoch=epoch, durable=False), 5)
    assert store.buffered_events == 120
    third = session.append_batch(_batch(session, 60))
    waiting = asyncio.ensure_future(store.append("gated", third, epoch=epoch, durable=False))
    await asyncio.sleep(0.5)
    assert not waiting.done() and store.buffered_events == 120
    await journal.release.remote()
    await asyncio.wait_for(waiting, 10)
    await store.flush_session("gated")
    assert store.buffered_events == 0
    stored = await store.read_since("gated", 0, None)
    assert stored == session.log
    await store.close()


async def test_a_cancelled_wait_queues_nothing(tmp_path: Path) -> None:
    journal, store, session, epoch = await _gated_session(tmp_path, "cancel", 10)
    first = session.append_batch(_batch(session, 10))
    await store.append("cancel", first, epoch=epoch, durable=False)
    extra = session.append_batch(_batch(session, 5))
    waiting = asyncio.ensure_future(store.append("cancel", extra, epoch=epoch, durable=False))
    await asyncio.sleep(0.3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert store.buffered_events == 10
    await journal.release.remote()
    await store.flush_session("cancel")
    assert await store.read_since("cancel", 0, None) == first
    await store.close()


def crashing_journal(db: str, marker: str, when: str) -> Any:
    """A real journal actor that Ray restarts, whose process dies in its first write:
    ``before`` committing it or ``after`` (the commit is then stored but never answered).
    The marker file tells the restarted process that the crash has happened."""

    class CrashingJournal(JournalActor):
        def __init__(self, db: str, marker: str, when: str) -> None:
            super().__init__(sqlite_backend(db))
            self._marker = Path(marker)
            self._when = when

        def _crash_now(self) -> bool:
            if self._marker.exists():
                return False
            self._marker.touch()
            return True

        async def append(self, session_id: str, batch: BatchPayload, epoch: int,
                         durable: bool, resend: bool = False) -> None:
            crash = self._crash_now()
            if crash and self._when == "before":
                os._exit(1)
            await super().append(session_id, batch, epoch, durable, resend)
            if crash:
                os._exit(1)

        async def append_many(self, batches: list[tuple[str, BatchPayload, int]],
                              resend: bool = False) -> list[BaseException | None]:
            crash = self._crash_now()
            if crash and self._when == "before":
                os._exit(1)
            results = await super().append_many(batches, resend)
            if crash:
                os._exit(1)
            return results

    return ray.remote(CrashingJournal).options(max_restarts=-1).remote(db, marker, when)


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "buffered"])
@pytest.mark.parametrize("when", ["before", "after"])
async def test_writes_survive_a_journal_crash(tmp_path: Path, when: str,
                                              durable: bool) -> None:
    """The journal dies in the middle of a write, with the batch committed or not: the
    write is sent again to the restarted journal and stored exactly once, without an
    error reaching the session."""
    journal = crashing_journal(str(tmp_path / "crash.db"), str(tmp_path / "crashed"), when)
    store = JournalStore(journal, ship_delay_s=0.0)
    header = header_for("crash")
    epoch = await store.create(header)
    session = Session(header=header)
    for _ in range(3):
        events = session.append_batch(_batch(session, 20))
        await asyncio.wait_for(store.append("crash", events, epoch=epoch, durable=durable),
                               60)
    await asyncio.wait_for(store.flush_session("crash"), 60)
    assert (tmp_path / "crashed").exists()  # the crash did happen
    assert await store.read_since("crash", 0, None) == session.log
    await store.close()


async def _both_stores(path: Path) -> tuple[Any, JournalStore]:
    journal = ray.remote(JournalActor).remote(sqlite_backend(str(path)))
    return journal, JournalStore(journal, ship_delay_s=0.0)


async def test_opening_through_the_journal_matches_opening_in_process(tmp_path: Path
                                                                      ) -> None:
    """A session actor decodes, validates and repairs the rows the journal read: the
    same session, the same repair stored durably, the same epoch bump as in process."""
    path = tmp_path / "open.db"
    crashed = build_session("crashed", 2)
    open_turn(crashed, 3)  # a turn left open by a crash
    store = await SqliteEventStore.open(path)
    await store.create(header_for("crashed"), list(crashed.log))
    await store.close()
    journal, remote = await _both_stores(path)
    loaded = await remote.load("crashed")
    assert loaded.log == crashed.log
    opened = await remote.open_session("crashed")
    assert opened.epoch == 2
    repaired = [e.type for e in opened.repaired]
    assert repaired[0] == END_SEED and repaired[-1] == "turn/end"
    assert opened.session.log[:len(crashed.log)] == crashed.log
    assert await remote.read_since("crashed", 0, None) == opened.session.log
    created = await remote.open_or_create(header_for("new"))
    assert (created.epoch, len(created.session), created.repaired) == (1, 0, ())
    again = await remote.open_or_create(header_for("crashed"))
    assert again.epoch == 3 and again.session.log[:len(opened.session.log)] == \
        opened.session.log
    await remote.close()
    await journal.close.remote()
    ray.kill(journal)
    store = await SqliteEventStore.open(path)
    try:
        in_process = await store.open_session("crashed")
        assert list(in_process.session.log) == [*again.session.log, *in_process.repaired]
    finally:
        await store.close()


async def test_a_corrupt_session_is_refused_the_same_way_through_the_journal(
        tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    store = await SqliteEventStore.open(path)
    await store.create(header_for("c"), list(build_session("c", 2).log))
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE events SET data = '{not json' WHERE session_id = 'c' AND seq = 7")
    conn.close()
    def calls(store: EventStore) -> list[Callable[[str], Awaitable[object]]]:
        return [store.load, store.open_session,
                lambda sid: store.open_or_create(header_for(sid))]

    store = await SqliteEventStore.open(path)
    local = []
    try:
        for call in calls(store):
            with pytest.raises(CorruptStore) as refused:
                await call("c")
            local.append(str(refused.value))
    finally:
        await store.close()
    journal, remote = await _both_stores(path)
    try:
        for call, message in zip(calls(remote), local, strict=True):
            with pytest.raises(CorruptStore) as got:
                await call("c")
            assert str(got.value) == message
            assert (got.value.session_id, got.value.seq) == ("c", 7)
    finally:
        await remote.close()
        ray.kill(journal)
