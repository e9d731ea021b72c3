"""Scopes, state, scoped listing and deletion (``surfacelog.store.scoped``): one contract
over the SQLite and memory backends, and over the proxies that reach a shard's store
through a real local Ray (a session actor's ``JournalStore``, a client's ``ShardStore``
through a journal or an owner writer; each shared by the module's tests, which name
their sessions and apps apart); a store without the capability is told apart by
its type; a schema-version-1 file is refused (SPEC 12)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from surfacelog.schema.errors import InvalidArgument
from surfacelog.store.base import EventStore, ScopedEventStore, require_scoped
from surfacelog.store.dsh_root import DshRootEventStore
from surfacelog.store.errors import (
    ScopeConflict,
    SeqMismatch,
    SessionDeleted,
    SessionExists,
    SessionNotFound,
    StoreError,
    Unsupported,
    VersionRefused,
    WriterFenced,
)
from surfacelog.store.jsonl import export_session
from surfacelog.store.memory import MemoryEventStore
from surfacelog.store.sqlite import SqliteEventStore, sqlite_backend
from surfacelog.store.sqlite.file_format import SCHEMA_VERSION, schema_sql

from support.names import Names
from support.sessiongen import build_session
from support.sessiongen import header as header_for

PROXIES = [pytest.param(kind, marks=pytest.mark.ray)
           for kind in ("journal-store", "shard-store-journal", "shard-store-owner")]


@pytest.fixture(scope="module")
def proxies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The module's Ray-side stores by kind: a journal actor (``journal-store``), or a
    client of a one-shard deployment (``shard-store-*``), each on a file of its own and
    shared by the module's tests (each names its sessions and apps apart, ``Names``):
    a deployment's start and stop cost about a second of CPU. Started by the first test
    that asks."""
    made: dict[str, Any] = {}
    try:
        yield made
    finally:
        for kind, held in made.items():
            if kind == "journal-store":
                import ray

                ray.get(held.close.remote())
                ray.kill(held)
            else:
                held.shutdown()


def _proxy(made: dict[str, Any], kind: str, path: Path) -> Any:
    """The journal actor or the client of ``kind``, started on ``path`` if it is not."""
    if kind not in made:
        if kind == "journal-store":
            import ray

            from surfacelog.actors.journal import JournalActor

            made[kind] = ray.remote(JournalActor).remote(sqlite_backend(str(path)))
        else:
            from surfacelog.actors.client import connect

            made[kind] = connect(db=str(path), placement="packed", packs=1,
                                 writer="owner" if kind.endswith("owner") else "journal")
    return made[kind]


@pytest.fixture(params=["sqlite", "memory", *PROXIES])
async def store(request: pytest.FixtureRequest, tmp_path: Path,
                tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[ScopedEventStore]:
    s: ScopedEventStore
    kind = request.param
    path = tmp_path / "scoped.db"
    if kind == "sqlite":
        s = await SqliteEventStore.open(path)
    elif kind == "memory":
        s = await MemoryEventStore.open()
    else:
        request.getfixturevalue("ray_local")
        made = request.getfixturevalue("proxies")
        held = _proxy(made, kind, tmp_path_factory.mktemp("scoped") / "scoped.db")
        if kind == "journal-store":  # what a session actor writes through
            from surfacelog.actors.journal import JournalStore

            s = JournalStore(held, ship_delay_s=0.0)
        else:  # what a client (the ADK service over Ray) reaches the shard with
            yield held.shard_store()
            return
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def n() -> Names:
    return Names()


async def _scoped(store: ScopedEventStore, sid: str, app: str, user: str = "u1",
                  **state: object) -> None:
    await store.create(header_for(sid))
    await store.set_scope(sid, app, user, state=state, at=1)


async def test_state_prefixes(store: ScopedEventStore, n: Names) -> None:
    app, s1_, s2_, s3_ = n("app"), n("s1"), n("s2"), n("s3")
    await _scoped(store, s1_, app, **{"k": 1, "app:a": "A", "user:u": [1], "temp:t": 9})
    await _scoped(store, s2_, app, user="u1")
    await _scoped(store, s3_, app, user="u2")
    s1 = await store.get_state(s1_)
    assert (s1.app, s1.user, s1.session) == ({"a": "A"}, {"u": [1]}, {"k": 1})
    assert s1.merged() == {"k": 1, "app:a": "A", "user:u": [1]}
    # app state is app-wide, user state per user, session state per session, temp never
    s2, s3 = await store.get_state(s2_), await store.get_state(s3_)
    assert (s2.app, s2.user, s2.session) == ({"a": "A"}, {"u": [1]}, {})
    assert (s3.app, s3.user, s3.session) == ({"a": "A"}, {}, {})
    await store.update_state(s3_, {"user:u": None, "app:a": {"x": 2}, "k": "v",
                                   "temp:z": 1}, at=5)
    s3 = await store.get_state(s3_)
    assert (s3.app, s3.user, s3.session) == ({"a": {"x": 2}}, {"u": None}, {"k": "v"})
    assert (await store.get_state(s1_)).app == {"a": {"x": 2}}
    assert await store.user_state(app, "u1") == {"u": [1]}
    assert await store.user_state(app, "nobody") == {}
    assert (await store.scope_of(s3_)).update_time == 5


async def test_scope_refusals(store: ScopedEventStore, n: Names) -> None:
    app, s1, bare = n("app"), n("s1"), n("bare")
    await _scoped(store, s1, app)
    with pytest.raises(ScopeConflict, match=f"belongs to app '{app}', user 'u1'"):
        await store.set_scope(s1, app, "u2", at=2)
    await store.create(header_for(bare))
    with pytest.raises(ScopeConflict, match="no app and user scope"):
        await store.get_state(bare)
    with pytest.raises(SessionNotFound, match="is not stored"):
        await store.set_scope(n("nope"), app, "u", at=1)
    with pytest.raises(InvalidArgument, match="not JSON"):
        await store.update_state(s1, {"k": object()}, at=2)
    assert (await store.get_state(s1)).session == {}


async def test_list_scoped_pages(store: ScopedEventStore, n: Names) -> None:
    app = n("app")
    ids = [n(f"s{i}") for i in range(5)]
    for i, sid in enumerate(ids):
        await _scoped(store, sid, app, user="u1" if i % 2 == 0 else "u2")
    await _scoped(store, n("other"), n("app2"))
    await store.create(header_for(n("bare")))
    page = await store.list_scoped(app)
    assert [s.id for s in page.sessions] == ids
    assert page.next_after is None
    assert [s.id for s in (await store.list_scoped(app, "u1")).sessions] == ids[::2]
    seen, after = [], None
    while True:
        page = await store.list_scoped(app, after=after, limit=2)
        seen.append([s.id for s in page.sessions])
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == [ids[0:2], ids[2:4], ids[4:]]
    with pytest.raises(InvalidArgument):
        await store.list_scoped(app, limit=0)


async def test_delete_tombstone_then_purge(store: ScopedEventStore, n: Names) -> None:
    app, s1, s2 = n("app"), n("s1"), n("s2")
    session = build_session(s1, 2)
    await store.create(header_for(s1), session.log)
    await store.set_scope(s1, app, "u1", state={"k": 1, "user:u": 2}, at=1)
    opened = await store.open_session(s1)
    exported = await export_session(store, s1)  # export works before delete
    assert exported.count(b"\n") == len(opened.session) + 1  # header line + events
    await store.delete_session(s1, at=9)
    for call in (store.load, store.open_session, store.header, store.get_state,
                 lambda sid: export_session(store, sid),
                 store.scope_of, lambda sid: store.open_or_create(header_for(sid))):
        with pytest.raises(SessionDeleted, match=f"'{s1}' is deleted"):
            await call(s1)
    with pytest.raises(WriterFenced):  # the writer of before the delete is fenced
        await store.append(s1, opened.session.log[-1:], epoch=opened.epoch)
    assert s1 not in [s.id for s in await store.list_sessions()]
    assert (await store.list_scoped(app)).sessions == []
    assert await store.user_state(app, "u1") == {"u": 2}  # user state outlives it
    with pytest.raises(SessionDeleted):
        await store.delete_session(s1, at=10)
    with pytest.raises(SessionExists):  # the id stays taken until the purge
        await store.create(header_for(s1))
    await store.create(header_for(s2))
    with pytest.raises(StoreError, match="delete it before purging"):
        await store.purge_session(s2)
    await store.purge_session(s1)
    with pytest.raises(SessionNotFound, match="is not stored"):
        await store.load(s1)
    await store.create(header_for(s1))  # the id is free again
    await store.set_scope(s1, app, "u1", at=11)
    assert (await store.get_state(s1)).session == {}
    with pytest.raises(SessionNotFound):
        await store.purge_session(n("nope"))


async def test_sqlite_tombstone_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = await SqliteEventStore.open(path)
    await _scoped(store, "s1", "app", **{"k": 1})
    await store.delete_session("s1", at=3)
    await store.close()
    store = await SqliteEventStore.open(path, read_only=True)
    try:
        with pytest.raises(SessionDeleted):
            await store.load("s1")
        assert await store.list_sessions() == []
    finally:
        await store.close()
    rows = sqlite3.connect(path).execute(
        "SELECT value FROM state WHERE session_id = 's1'").fetchall()
    assert rows == [("1",)]  # kept until a purge


def _old_database(path: Path, version: int) -> None:
    """A database as the build of schema version ``version`` wrote it (its schema.sql is
    today's up to the note of what the next version added), holding one session."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(schema_sql().split(f"-- Schema version {version + 1} added")[0])
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    assert tables == ({"sessions", "events"} if version == 1 else
                      {"sessions", "events", "scopes", "state", "tombstones"})
    conn.execute("PRAGMA application_id = 0x53664C67")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute("INSERT INTO sessions VALUES ('old', '{\"version\":0,\"id\":\"old\","
                 "\"createdAt\":5}', 5, 1, 0, NULL)")
    conn.close()


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("read_only", [True, False])
async def test_an_older_database_is_refused_and_left_untouched(
        tmp_path: Path, read_only: bool, version: int) -> None:
    """SPEC 12: bump-and-reject, no migration, whichever way it is opened."""
    assert version < SCHEMA_VERSION
    path = tmp_path / "old.db"
    _old_database(path, version)
    before = path.read_bytes()
    with pytest.raises(VersionRefused, match="user_version"):
        await SqliteEventStore.open(path, read_only=read_only)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (version,)


async def test_append_with_state_all_or_nothing(store: ScopedEventStore, n: Names) -> None:
    s1, bare_id = n("s1"), n("bare")
    session = build_session(s1, 2)
    await store.create(header_for(s1))
    await store.set_scope(s1, n("app"), "u1", at=1)
    opened = await store.open_session(s1)
    start = len(opened.session)
    batch = [e.__class__(**{**{f: getattr(e, f) for f in e.__struct_fields__},
                            "seq": start + i}) for i, e in enumerate(session.log[:3])]
    await store.append_with_state(s1, batch, {"k": 1, "user:u": 2, "temp:t": 3},
                                  epoch=opened.epoch, at=7)
    state = await store.get_state(s1)
    assert (state.user, state.session) == ({"u": 2}, {"k": 1})
    assert len(await store.read_since(s1)) == start + 3
    assert (await store.scope_of(s1)).update_time == 7
    # a refused batch (stale seq) writes no state either
    with pytest.raises(SeqMismatch):
        await store.append_with_state(s1, batch, {"k": 99}, epoch=opened.epoch, at=8)
    assert (await store.get_state(s1)).session == {"k": 1}
    # a session without scope: nothing written, events included
    await store.create(header_for(bare_id))
    bare = await store.open_session(bare_id)
    more = [e.__class__(**{**{f: getattr(e, f) for f in e.__struct_fields__},
                           "seq": len(bare.session)}) for e in session.log[:1]]
    with pytest.raises(ScopeConflict, match="nothing written"):
        await store.append_with_state(bare_id, more, {"k": 1}, epoch=bare.epoch, at=9)
    assert len(await store.read_since(bare_id)) == len(bare.session)
    with pytest.raises(InvalidArgument):
        await store.append_with_state(s1, [], {"k": {1, 2}}, epoch=opened.epoch, at=9)


async def test_the_capability_is_a_type(tmp_path: Path) -> None:
    """Scopes, state and deletion are a sub-interface: the backends that keep them are
    ``ScopedEventStore``s, the DSH root is a plain ``EventStore`` without those methods,
    and asking for the capability names the store that lacks it."""
    assert issubclass(SqliteEventStore, ScopedEventStore)
    assert issubclass(MemoryEventStore, ScopedEventStore)
    assert not issubclass(DshRootEventStore, ScopedEventStore)
    for method in ("set_scope", "append_with_state", "scope_of", "get_state", "user_state",
                   "update_state", "list_scoped", "delete_session", "purge_session"):
        assert not hasattr(EventStore, method) and hasattr(ScopedEventStore, method)
    root = await DshRootEventStore.open(tmp_path / "root")
    memory = await MemoryEventStore.open()
    try:
        with pytest.raises(Unsupported, match=r"^DshRootEventStore does not support "
                                              r"scopes, state and deletion .* ADK"):
            require_scoped(root, "ADK")
        assert require_scoped(memory) is memory
    finally:
        await root.close()
        await memory.close()
