"""Reading without taking, taking at the first write (``EventStore.take``), on real
SQLite files: a reader writes nothing and fences nobody, a writer that takes a loaded
session fences every earlier writer, and a session stored further since the load is
activated from a whole read (no write is planned on a stale log)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from surfacelog.integrations.adk import SurfacelogSessionService
from surfacelog.integrations.openai_agents import SurfacelogSession
from surfacelog.session import interrupted_turn_closers, replay
from surfacelog.session.session import END_SEED
from surfacelog.store import SqliteEventStore
from surfacelog.store.errors import SessionDeleted, WriterFenced

from support.sessiongen import add_turn, build_session, header, open_turn


def _session_row(path: Path, session_id: str) -> tuple[int, int]:
    """(writer epoch, next seq) as stored, read with plain sqlite3."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT writer_epoch, next_seq FROM sessions WHERE id = ?",
                           (session_id,)).fetchone()
    finally:
        conn.close()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_take_of_an_unchanged_load_seals_the_loaded_session(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = await SqliteEventStore.open(path)
    try:
        source = build_session("t", 2)
        open_turn(source, 3)  # a turn a crash left open: taking it adds closers
        events = list(source.log)
        old = await store.create(header("t"), events)
        loaded = await store.load("t")
        assert _session_row(path, "t") == (old, len(events))  # the load wrote nothing
        opened = await store.take("t", loaded)
        assert opened.session is loaded and opened.epoch == old + 1
        closers = interrupted_turn_closers(replay(events).log)
        assert closers and opened.repaired[0].type == END_SEED
        assert [e.type for e in opened.repaired[1:]] == [e.type for e in closers]
        assert loaded.first_live_seq == len(events)
        assert await store.read_since("t") == list(loaded.log)  # the repair is stored
    finally:
        await store.close()
    # The same log as taking the same stored session the usual way.
    twin = await SqliteEventStore.open(tmp_path / "twin.db")
    try:
        await twin.create(header("t"), events)
        usual = await twin.open_session("t")
        assert list(usual.session.log) == list(loaded.log) and usual.repaired == opened.repaired
    finally:
        await twin.close()


async def test_take_fences_the_earlier_writer(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    writer = await SqliteEventStore.open(path)
    reader = await SqliteEventStore.open(path)  # another process, as far as SQLite knows
    try:
        source = build_session("f", 2)
        events = list(source.log)
        epoch = await writer.create(header("f"), events)
        loaded = await reader.load("f")
        more = source.append("turn/start", {"turn": 9})
        opened = await reader.take("f", loaded)
        assert opened.session is loaded
        with pytest.raises(WriterFenced, match="stale"):
            await writer.append("f", [more], epoch=epoch)
        assert await writer.read_since("f") == list(loaded.log)  # nothing of the old one
    finally:
        await writer.close()
        await reader.close()


async def test_take_after_another_write_reads_the_whole_session(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    writer = await SqliteEventStore.open(path)
    reader = await SqliteEventStore.open(path)
    try:
        source = build_session("w", 1)
        epoch = await writer.create(header("w"), list(source.log))
        loaded = await reader.load("w")
        length = len(loaded)
        add_turn(source, 5)
        await writer.append("w", list(source.log)[length:], epoch=epoch)
        opened = await reader.take("w", loaded)
        assert opened.session is not loaded and len(loaded) == length  # left as it was
        assert list(opened.session.log)[: len(source)] == list(source.log)
        assert await reader.read_since("w") == list(opened.session.log)
        with pytest.raises(WriterFenced):
            await writer.append("w", [source.append("turn/start", {"turn": 9})],
                                epoch=epoch)
    finally:
        await writer.close()
        await reader.close()


async def test_a_failed_take_leaves_the_loaded_session_unchanged(tmp_path: Path) -> None:
    store = await SqliteEventStore.open(tmp_path / "d.db")
    try:
        await store.create(header("d"), list(build_session("d", 1).log))
        loaded = await store.load("d")
        before = list(loaded.log)
        await store.delete_session("d", at=1)
        with pytest.raises(SessionDeleted):
            await store.take("d", loaded)
        assert list(loaded.log) == before
    finally:
        await store.close()


async def test_an_adapter_reading_after_a_restart_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    first = SurfacelogSession("a", path)
    await first.add_items([{"role": "user", "content": "hi"}])
    await first.close()
    stored = _session_row(path, "a")
    reader = SurfacelogSession("a", path)
    assert await reader.get_items() == [{"role": "user", "content": "hi"}]
    assert _session_row(path, "a") == stored  # no bump, no seed marker: nothing written
    missing = SurfacelogSession("none", path)
    assert await missing.get_items() == []
    await missing.close()
    # The reader's first write takes the session: it fences a writer that took it since.
    other = SurfacelogSession("a", path)
    await other.add_items([{"role": "user", "content": "from the other"}])
    await reader.add_items([{"role": "user", "content": "from the reader"}])
    with pytest.raises(WriterFenced):
        await other.add_items([{"role": "user", "content": "late"}])
    await other.close()
    assert await reader.get_items() == [{"role": "user", "content": "hi"},
                                        {"role": "user", "content": "from the other"},
                                        {"role": "user", "content": "from the reader"}]
    await reader.close()
    # other: one bump; reader: one by its take, one by the whole read after "other" wrote
    assert _session_row(path, "a")[0] == stored[0] + 3
    store = await SqliteEventStore.open(path)
    try:
        assert [info.id for info in await store.list_sessions()] == ["a"]
    finally:
        await store.close()


async def test_an_adk_service_reading_after_a_restart_writes_nothing(tmp_path: Path
                                                                      ) -> None:
    from google.adk.events.event import Event as AdkEvent
    from google.genai import types

    def said(text: str) -> AdkEvent:
        return AdkEvent(invocation_id="i", author="user",
                        content=types.Content(role="user", parts=[types.Part(text=text)]))

    path = tmp_path / "adk.db"
    first = SurfacelogSessionService(path=path)
    session = await first.create_session(app_name="app", user_id="u", session_id="s")
    await first.append_event(session, said("hi"))
    await first.close()
    stored = _session_row(path, "s")
    service = SurfacelogSessionService(path=path)
    got = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert got is not None and [e.content.parts[0].text for e in got.events  # type: ignore[union-attr,index]
                                ] == ["hi"]
    assert _session_row(path, "s") == stored
    await service.append_event(got, said("again"))  # takes the session
    assert _session_row(path, "s")[0] == stored[0] + 1
    again = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert again is not None and len(again.events) == 2
    await service.close()
