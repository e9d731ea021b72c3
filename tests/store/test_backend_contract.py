"""The small ``EventStore`` interface: every backend (SQLite, and the in-memory reference
backend) gets the same activation, repair, fencing and refusals from the shared code,
in process and behind a journal actor; and a batch is refused with ``BadEvent`` where
it is encoded to rows, in the session actor, before anything is sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import ray

from surfacelog.actors.journal import JournalActor, JournalStore
from surfacelog.runtime.live import LiveSession
from surfacelog.schema.events import Event
from surfacelog.session import END_SEED, AppendSpec, Session
from surfacelog.store import activation
from surfacelog.store.base import EventStore
from surfacelog.store.dsh_root import DshRootEventStore, dsh_root_backend
from surfacelog.store.errors import (
    BadEvent,
    CorruptStore,
    SeqMismatch,
    SessionExists,
    SessionNotFound,
    WriterFenced,
)
from surfacelog.store.memory import MemoryEventStore
from surfacelog.store.rows import encode_batch
from surfacelog.store.sqlite import SqliteEventStore, sqlite_backend

from support.sessiongen import build_session, open_turn
from support.sessiongen import header as header_for

BACKENDS = ["sqlite", "memory", "dsh-zstd", "dsh-plain"]


async def _open(kind: str, tmp_path: Path) -> EventStore:
    if kind == "sqlite":
        return await SqliteEventStore.open(tmp_path / "backend.db")
    if kind.startswith("dsh-"):
        return await DshRootEventStore.open(tmp_path / f"root-{kind}",
                                            "zstd" if kind == "dsh-zstd" else "none")
    return await MemoryEventStore.open()


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path
                ) -> AsyncIterator[EventStore]:
    s = await _open(request.param, tmp_path)
    try:
        yield s
    finally:
        await s.close()


def _crashed(session_id: str) -> Session:
    session = build_session(session_id, 2)
    open_turn(session, 3)  # a turn left open by a crash
    return session


async def _store_corrupt(store: EventStore, session_id: str) -> None:
    """A session whose row at seq 7 is not JSON, stored through the primitive (neither
    backend decodes rows it stores)."""
    batch = encode_batch(session_id, build_session(session_id, 2).log)
    row = batch.rows[7]
    batch.rows[7] = (*row[:4], "{not json", *row[5:])
    await store.create_stored(header_for(session_id), batch)


async def _refusals(store: EventStore, session_id: str) -> list[tuple[str, Any, Any]]:
    """What ``load``, ``open_session`` and ``open_or_create`` raise for the session."""
    calls = (store.load, store.open_session,
             lambda sid: store.open_or_create(header_for(sid)))
    out = []
    for call in calls:
        with pytest.raises(CorruptStore) as got:
            await call(session_id)
        out.append((str(got.value), got.value.session_id, got.value.seq))
    return out


# -- in process, every backend ----------------------------------------------------------


async def test_create_read_and_list(store: EventStore) -> None:
    session = build_session("a", 2)
    assert await store.create(header_for("a"), list(session.log)) == 1
    assert await store.create(header_for("b")) == 1
    assert await store.read_since("a") == session.log
    assert await store.read_since("a", 5, 3) == session.log[5:8]
    assert await store.header("a") == header_for("a")
    assert (await store.load("a")).log == session.log
    infos = await store.list_sessions()
    assert [(i.id, i.length, i.writer_epoch) for i in infos] == [("a", len(session), 1),
                                                                 ("b", 0, 1)]
    with pytest.raises(SessionExists):
        await store.create(header_for("a"))
    for call in (store.open_session, store.load, store.header, store.read_since):
        with pytest.raises(SessionNotFound):
            await call("nope")


async def test_activation_repairs_and_fences(store: EventStore) -> None:
    crashed = _crashed("c")
    await store.create(header_for("c"), list(crashed.log))
    opened = await store.open_session("c")
    assert opened.epoch == 2
    types = [e.type for e in opened.repaired]
    assert (types[0], types[-1]) == (END_SEED, "turn/end")
    assert opened.session.log[:len(crashed)] == crashed.log
    assert await store.read_since("c") == opened.session.log  # repaired durably
    again = await store.open_session("c")  # a new seed marker, no repair
    assert again.epoch == 3 and [e.type for e in again.repaired] == [END_SEED]
    late = Event(type="x/late", seq=len(again.session), time=1, data={}, ignorable=True)
    with pytest.raises(WriterFenced):
        await store.append("c", [late], epoch=opened.epoch)
    await store.append("c", [late], epoch=again.epoch)
    await store.append("c", [late], epoch=again.epoch, resend=True)  # stored: no-op
    with pytest.raises(SeqMismatch):
        await store.append("c", [late], epoch=again.epoch)
    created = await store.open_or_create(header_for("new"))
    assert (created.epoch, len(created.session), created.repaired) == (1, 0, ())


async def test_bad_events_are_refused_whole(store: EventStore) -> None:
    epoch = await store.create(header_for("x"))
    good = Event(type="turn/start", seq=0, time=1, data={"turn": 1})
    bad = [Event(type="x/y", seq=1, time=2, data=object()),
           Event(type="x/y", seq=1, time=2.5, data={}),  # type: ignore[arg-type]
           Event(type="x/y", seq=1, time=2, data={}, ignorable=False)]  # type: ignore[arg-type]
    for event in bad:
        for durable in (True, False):
            with pytest.raises(BadEvent):
                await store.append("x", [good, event], epoch=epoch, durable=durable)
                await store.flush_session("x")  # a buffered batch fails here
    assert await store.read_since("x") == []
    await store.append("x", [good], epoch=epoch)
    assert await store.read_since("x") == [good]


async def test_a_corrupt_session_is_refused_the_same_by_every_backend(tmp_path: Path
                                                                     ) -> None:
    found = []
    for kind in BACKENDS:
        store = await _open(kind, tmp_path)
        try:
            await _store_corrupt(store, "k")
            found.append(await _refusals(store, "k"))
        finally:
            await store.close()
    assert all(f == found[0] for f in found)
    assert {(sid, seq) for _, sid, seq in found[0]} == {("k", 7)}


async def test_activation_is_one_function_over_the_primitives(tmp_path: Path) -> None:
    """The store's methods are the shared activation's: same session, repair, epoch."""
    for kind in BACKENDS:
        store = await _open(kind, tmp_path)
        twin = await MemoryEventStore.open()
        try:
            for s in (store, twin):
                await s.create(header_for("c"), list(_crashed("c").log))
            by_method = await store.open_session("c")
            by_function = await activation.open_session(twin, "c")
            assert by_method.session.log == by_function.session.log
            assert (by_method.epoch, by_method.repaired) == \
                (by_function.epoch, by_function.repaired)
        finally:
            await store.close()
            await twin.close()


# -- behind a journal actor --------------------------------------------------------------


def _journal(kind: str, tmp_path: Path) -> Any:
    opener = (sqlite_backend(str(tmp_path / "journal.db")) if kind == "sqlite"
              else dsh_root_backend(str(tmp_path / f"journal-{kind}"),
                                    "zstd" if kind == "dsh-zstd" else "none")
              if kind.startswith("dsh-") else MemoryEventStore.open)
    return ray.remote(JournalActor).remote(opener)


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("kind", BACKENDS)
async def test_activation_through_the_journal_matches_in_process(tmp_path: Path,
                                                                 kind: str) -> None:
    """The same stored log gives the same session, repair and epoch in process and
    through a journal over the same kind of backend (built from an opener alone), and a
    corrupt one the same ``CorruptStore``."""
    journal = _journal(kind, tmp_path)
    remote = JournalStore(journal, ship_delay_s=0.0)
    (tmp_path / "local").mkdir()
    local = await _open(kind, tmp_path / "local")  # its own file: the same rows twice
    try:
        for s in (local, remote):
            await s.create(header_for("c"), list(_crashed("c").log))
            await _store_corrupt(s, "k")
        mine, theirs = await local.open_session("c"), await remote.open_session("c")
        assert theirs.session.log == mine.session.log
        assert (theirs.epoch, theirs.repaired) == (mine.epoch, mine.repaired) == \
            (2, mine.repaired)
        assert await remote.read_since("c") == await local.read_since("c")
        assert await _refusals(remote, "k") == await _refusals(local, "k")
        # A resend of a batch the journal stored counts as written, buffered or not.
        late = Event(type="x/late", seq=len(theirs.session), time=1, data={},
                     ignorable=True)
        await remote.append("c", [late], epoch=theirs.epoch)
        for durable in (True, False):
            await remote.append("c", [late], epoch=theirs.epoch, durable=durable,
                                resend=True)
        await remote.flush_session("c")
        assert (await remote.read_since("c"))[-1] == late
        # The host the actors build on works over it unchanged.
        host = await LiveSession.activate("h", remote, durability="buffered")
        await host.append_batch([AppendSpec("turn/start", {"turn": 1})])
        await host.flush()
        assert await remote.read_since("h") == host.session.log
        assert [i.id for i in await remote.list_sessions()] == ["c", "h", "k"]
        stats = await journal.stats.remote()
        assert stats["events"] >= 1 + len(theirs.repaired)
    finally:
        await remote.close()
        await local.close()
        await journal.close.remote()
        ray.kill(journal)


class _Float(float):
    """A float the core keeps as it is (a scalar) but JSON cannot encode."""


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("durability", ["durable", "buffered"])
@pytest.mark.parametrize("bad", ["float subclass", "object in an event"])
async def test_a_bad_event_is_refused_before_it_is_sent(tmp_path: Path, durability: str,
                                                        bad: str) -> None:
    """The session actor encodes the rows: a value that is not JSON raises ``BadEvent``
    there, nothing reaches the journal, and the session is as it was and serves on."""
    journal = _journal("sqlite", tmp_path)
    store = JournalStore(journal, ship_delay_s=0.0)
    try:
        host = await LiveSession.activate("b", store, durability=durability)  # type: ignore[arg-type]
        await host.append_batch([AppendSpec("turn/start", {"turn": 1})])
        await host.flush()
        before = list(host.session.log)
        stats = await journal.stats.remote()
        item: Any = (AppendSpec("x/bad", _Float(1.5), ignorable=True) if bad == "float subclass"
                     else Event("x/bad", len(before) + 1, 1, object(), ignorable=True))
        with pytest.raises(BadEvent, match="not JSON"):
            await host.append_batch([AppendSpec("x/ok", {"n": 1}, ignorable=True), item])
        assert host.session.log == before and host.closed is None
        assert store.buffered_events == 0
        await asyncio.sleep(0.05)
        assert await journal.stats.remote() == stats  # nothing was sent
        await host.append_batch([AppendSpec("x/ok", {"n": 2}, ignorable=True)])
        await host.flush()
        assert await store.read_since("b") == host.session.log
    finally:
        await store.close()
        await journal.close.remote()
        ray.kill(journal)
