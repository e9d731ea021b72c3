"""The runtime's "loaded, not taken" state on real SQLite files, without Ray: reading a
session writes nothing and fences nobody; its first write takes it (writer epoch bump,
seed marker, crash repair) and a write planned on the log as loaded is refused as a
``Conflict`` and planned again; a second writer fences the first; a write of unknown
outcome makes the handle load the session again, and the resend lands once; a state
delta travels with its events."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from surfacelog.runtime import (
    RELOAD,
    Conflict,
    EmbeddedHandle,
    LiveSession,
    SessionLike,
    SessionUnavailable,
    SurfaceView,
    append_planned,
)
from surfacelog.schema.errors import InvalidArgument
from surfacelog.session import END_SEED, AppendSpec, interrupted_turn_closers, replay
from surfacelog.store.dsh_root import DshRootEventStore
from surfacelog.store.errors import (
    CommitFailed,
    SessionDeleted,
    SessionNotFound,
    Unsupported,
    WriterFenced,
)
from surfacelog.store.sqlite import SqliteEventStore

from support.failing_stores import LostAckStore
from support.sessiongen import build_session, header, open_turn


def _row(path: Path, session_id: str) -> tuple[int, int] | None:
    """(writer epoch, next seq) as stored, read with plain sqlite3; ``None`` when the
    session is not stored."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT writer_epoch, next_seq FROM sessions WHERE id = ?",
                           (session_id,)).fetchone()
    finally:
        conn.close()
    return None if row is None else (int(row[0]), int(row[1]))


def _todo(n: int) -> AppendSpec:
    return AppendSpec("todo/write", {"todos": [{"content": f"t{n}", "status": "pending"}]})


@pytest.fixture
async def crashed(tmp_path: Path) -> AsyncIterator[tuple[Path, SqliteEventStore, int]]:
    """A store holding session ``c``: two turns, then a turn a crash left open (taking
    it adds the seed marker and closers). Yields the path, the store and the length."""
    path = tmp_path / "rt.db"
    store = await SqliteEventStore.open(path)
    source = build_session("c", 2)
    open_turn(source, 3)
    await store.create(header("c"), list(source.log))
    try:
        yield path, store, len(source)
    finally:
        await store.close()


async def test_reading_writes_nothing(crashed: tuple[Path, SqliteEventStore, int]) -> None:
    path, store, length = crashed
    stored = _row(path, "c")
    live = await LiveSession.load("c", store)
    assert not live.taken and live.epoch is None and len(live.session) == length
    assert live.stats().epoch == 0
    handle = EmbeddedHandle("c", store)
    assert isinstance(handle, SessionLike)
    events = await handle.events()
    snap, nodes = await handle.surface_events()
    messages = await handle.derive_messages()
    assert len(events) == snap.length == length and len(nodes) == len(snap.nodes)
    assert messages == replay(events).derive_messages().to_list()
    assert handle.live is not None and not handle.live.taken
    await handle.flush()
    assert await handle.passivate()
    assert _row(path, "c") == stored  # no epoch bump, no seed marker, no closers
    # A session that is not stored reads as empty and stays unstored.
    missing = EmbeddedHandle("new", store)
    assert await missing.events() == [] and (await missing.surface()).length == 0
    assert _row(path, "new") is None
    with pytest.raises(SessionNotFound):
        await EmbeddedHandle("new", store, create=False).events()
    assert [info.id for info in await store.list_sessions()] == ["c"]


async def test_the_first_write_takes_it(crashed: tuple[Path, SqliteEventStore, int]
                                        ) -> None:
    path, store, length = crashed
    epoch, _ = _row(path, "c") or (0, 0)
    handle = EmbeddedHandle("c", store)
    assert len(await handle.events()) == length
    # Planned on the log as loaded: taking it seals the log first, so the write no
    # longer lands where it was planned, and nothing of it is appended.
    with pytest.raises(Conflict):
        await handle.append_batch([_todo(1)], expected_seq=length)
    live = handle.live
    assert live is not None and live.taken and live.epoch == epoch + 1
    closers = interrupted_turn_closers(replay(await store.read_since("c")).log[:length])
    sealed = live.session.log[length:]
    assert sealed[0].type == END_SEED and closers
    assert [e.type for e in sealed[1:]] == [e.type for e in closers]
    assert _row(path, "c") == (epoch + 1, len(live.session))  # the seal is stored
    # Planned again from a new view, it lands.
    logged = await append_planned(handle, lambda view: [_todo(view.length)])
    assert [e.seq for e in logged] == [length + len(sealed)]
    assert await store.read_since("c") == list(live.session.log)
    # A new session is stored by its first write, at epoch 1, with nothing added.
    fresh = EmbeddedHandle("new", store)
    view = await SurfaceView.read(fresh)
    assert view.length == 0 and list(view.nodes) == []
    assert [e.seq for e in await fresh.append_batch([_todo(0)], expected_seq=0)] == [0]
    assert _row(path, "new") == (1, 1)


async def test_a_second_writer_fences_the_first(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    mine = await SqliteEventStore.open(path)
    theirs = await SqliteEventStore.open(path)  # another process, as far as SQLite knows
    try:
        first = EmbeddedHandle("s", mine)
        await first.append_batch([_todo(0)], expected_seq=0)
        second = EmbeddedHandle("s", theirs)
        assert len(await second.events()) == 1  # loaded: the first still writes
        await first.append_batch([_todo(1)], expected_seq=1)
        # second's first write takes the session: the log grew since its load, so it is
        # read again whole, and the write planned on the old length is a Conflict.
        with pytest.raises(Conflict):
            await second.append_batch([_todo(9)], expected_seq=1)
        await append_planned(second, lambda view: [_todo(view.length)])
        stored = await mine.read_since("s")
        with pytest.raises(WriterFenced):
            await first.append_batch([_todo(2)])
        assert await mine.read_since("s") == stored  # nothing of the fenced writer
        with pytest.raises(SessionUnavailable, match="fenced"):
            await first.events()  # a fenced handle never takes the session back itself
        # Passivated, it loads again; its next write takes the session back.
        await first.passivate()
        await append_planned(first, lambda view: [_todo(view.length)])
        with pytest.raises(WriterFenced):
            await second.append_batch([_todo(7)])
        assert [e.seq for e in await mine.read_since("s")] == list(range(len(stored) + 2))
    finally:
        await mine.close()
        await theirs.close()


async def test_a_deleted_session_is_neither_loaded_nor_created(tmp_path: Path) -> None:
    store = await SqliteEventStore.open(tmp_path / "d.db")
    try:
        await store.create(header("d"), list(build_session("d", 1).log))
        loaded = EmbeddedHandle("d", store)
        await loaded.events()
        await store.delete_session("d", at=1)
        with pytest.raises(SessionDeleted):  # the take of the loaded session
            await loaded.append_batch([_todo(0)])
        with pytest.raises(SessionDeleted):
            await EmbeddedHandle("d", store).events()
    finally:
        await store.close()


async def test_an_unknown_outcome_reloads_and_the_resend_lands_once(tmp_path: Path
                                                                    ) -> None:
    store = await LostAckStore.open(tmp_path / "lost.db")
    try:
        handle = EmbeddedHandle("s", store)
        await handle.append_batch([_todo(0)], expected_seq=0)
        store.lose_next = True
        specs = [_todo(1), _todo(2)]
        with pytest.raises(CommitFailed):
            await handle.append_batch(specs, expected_seq=1)
        closed = handle.live
        assert closed is not None and closed.closed == RELOAD and len(closed.session) == 1
        # The next request loads the session again and, a write, takes it (a seed
        # marker after what is stored): the resend finds the events the lost commit
        # stored and appends nothing of its own.
        again = await handle.append_batch(specs, expected_seq=1)
        assert [e.seq for e in again] == [1, 2]
        assert handle.live is not closed
        assert await store.read_since("s") == await handle.events()
        assert [e.type for e in await handle.events()] == ["todo/write"] * 3 + [END_SEED]
    finally:
        await store.close()


async def _scoped_store(path: Path) -> SqliteEventStore:
    store = await SqliteEventStore.open(path)
    await store.create(header("a"))
    await store.set_scope("a", "app", "u", at=1)
    return store


async def test_a_state_delta_is_written_with_its_events_once(tmp_path: Path) -> None:
    store = await _scoped_store(tmp_path / "state.db")
    try:
        handle = EmbeddedHandle("a", store, create=False)
        delta = {"k": 1, "app:shared": [1, 2], "temp:x": 0}
        # Taking the stored empty session adds its seed marker: the write planned at
        # seq 0 is refused, and its delta with it.
        with pytest.raises(Conflict):
            await handle.append_with_state([_todo(0)], delta, at=5, expected_seq=0)
        assert (await store.get_state("a")).session == {}
        at = len(await handle.events())
        logged: Sequence[object] = await handle.append_with_state(
            [_todo(0)], delta, at=5, expected_seq=at)
        assert len(logged) == 1
        state = await store.get_state("a")
        assert (state.session, state.app) == ({"k": 1}, {"shared": [1, 2]})
        # A resend finds its events; the delta was written with them, not again.
        await store.update_state("a", {"k": 2}, at=6)
        again = await handle.append_with_state([_todo(0)], {"k": 1}, at=7, expected_seq=at)
        assert [e.seq for e in again] == [at] and (await store.get_state("a")).session == \
            {"k": 2}
        # A value JSON cannot carry is refused before anything is appended.
        with pytest.raises(InvalidArgument):
            await handle.append_with_state([_todo(1)], {"bad": {1, 2}}, at=8)
        live = handle.live
        assert live is not None and live.closed is None and len(live.session) == at + 1
        assert len(await store.read_since("a")) == at + 1
    finally:
        await store.close()


async def test_a_state_delta_needs_a_scoped_store(tmp_path: Path) -> None:
    store = await DshRootEventStore.open(tmp_path / "root")
    try:
        handle = EmbeddedHandle("r", store)
        with pytest.raises(Unsupported, match="DshRootEventStore does not support scopes"):
            await handle.append_with_state([_todo(0)], {"k": 1}, at=1)
        assert await handle.events() == []
        await handle.append_batch([_todo(0)])  # plain appends still work
        assert len(await handle.events()) == 1
    finally:
        await store.close()
