"""The SQLite event store (issue 3, SPEC sections 9, 11, 12), on real files."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import itertools
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from surfacelog.schema.codec import read_log
from surfacelog.schema.events import Event
from surfacelog.session import Session, interrupted_turn_closers, replay
from surfacelog.store import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    SqliteEventStore,
    export_session,
    import_log,
    verify_store,
)
from surfacelog.store.errors import (
    BadEvent,
    CommitFailed,
    CorruptStore,
    SeqMismatch,
    SessionExists,
    SessionNotFound,
    StoreError,
    VersionRefused,
    WriterFenced,
)
from surfacelog.store.sqlite.file_format import inspect_file, schema_sql

from support.sessiongen import Clock, add_turn, build_session, header, open_turn, sessions
from support.shared_examples import EXAMPLES

VALID_EXAMPLES = sorted(p for p in EXAMPLES.glob("*.jsonl") if not p.name.startswith("invalid"))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    s = await SqliteEventStore.open(tmp_path / "store.db")
    try:
        yield s
    finally:
        await s.close()


def _rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _same_session(a: Session, b: Session) -> None:
    assert list(a.log) == list(b.log)
    assert list(a.surface.nodes) == list(b.surface.nodes)
    assert a.surface.replace_generation == b.surface.replace_generation
    assert list(a.replacements()) == list(b.replacements())
    assert a.derive_messages().to_list() == b.derive_messages().to_list()


# -- initialisation --------------------------------------------------------------------


async def test_new_file_is_initialised(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store = await SqliteEventStore.open(path)
    await store.close()
    assert _rows(path, "PRAGMA application_id") == [(APPLICATION_ID,)]
    assert _rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert _rows(path, "PRAGMA journal_mode") == [("wal",)]
    columns = [r[1] for r in _rows(path, "PRAGMA table_info(events)")]
    assert columns == ["session_id", "seq", "type", "time", "data", "source_event_seqs",
                       "surface_op", "ignorable"]
    # Reopening our own file works and changes nothing in the schema.
    store = await SqliteEventStore.open(path)
    assert await store.list_sessions() == []
    await store.close()


async def test_empty_file_is_initialised(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    store = await SqliteEventStore.open(path)
    await store.close()
    assert _rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


async def test_missing_file_without_create(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await SqliteEventStore.open(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()


async def test_pragmas_synchronous(tmp_path: Path) -> None:
    modes: tuple[tuple[Literal["FULL", "NORMAL"], int], ...] = (("FULL", 2), ("NORMAL", 1))
    for mode, value in modes:
        store = await SqliteEventStore.open(tmp_path / f"{mode}.db", synchronous=mode)
        got = await store._conn.run(lambda c: c.execute("PRAGMA synchronous").fetchone())
        timeout = await store._conn.run(lambda c: c.execute("PRAGMA busy_timeout").fetchone())
        await store.close()
        assert got == (value,)
        assert timeout == (5000,)
    with pytest.raises(ValueError):
        await SqliteEventStore.open(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]


# -- bump-and-reject -------------------------------------------------------------------


def _snapshot(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir())}


async def _our_db(path: Path) -> None:
    store = await SqliteEventStore.open(path)
    await store.create(header("s1"), list(build_session("s1", 2).log))
    await store.close()


def _edit(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in statements:
        conn.execute(sql)
    conn.close()


def _foreign_db(path: Path, ddl: str, app_id: int, version: int, wal: bool = False) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(ddl)
    conn.execute(f"PRAGMA application_id = {app_id}")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()


REFUSALS: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "other user_version": (
        lambda p: _edit(p, "PRAGMA user_version = 99"),
        ["user_version", "99", f"expects {SCHEMA_VERSION}"]),
    "other application_id": (
        lambda p: _edit(p, "PRAGMA application_id = 1234"),
        ["application_id", "0x000004d2", f"{APPLICATION_ID:#010x}"]),
    "extra table": (
        lambda p: _edit(p, "CREATE TABLE snapshots (id TEXT)"),
        ["unexpected table 'snapshots'"]),
    "extra index": (
        lambda p: _edit(p, "CREATE INDEX events_by_type ON events (type)"),
        ["unexpected index 'events_by_type'"]),
    "extra column": (
        lambda p: _edit(p, "ALTER TABLE events ADD COLUMN meta TEXT"),
        ["table 'events' has columns", "meta TEXT", "this build expects"]),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
async def test_other_build_is_refused_and_untouched(tmp_path: Path, case: str) -> None:
    path = tmp_path / "db.sqlite"
    await _our_db(path)
    change, fragments = REFUSALS[case]
    change(path)
    before = _snapshot(tmp_path)
    with pytest.raises(VersionRefused) as info:
        await SqliteEventStore.open(path)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "refused" in message and "unmodified" in message
    assert _snapshot(tmp_path) == before


def _missing_column_ddl() -> str:
    return schema_sql().replace("    ignorable         INTEGER CHECK (ignorable = 1),\n", "")


@pytest.mark.parametrize("wal", [False, True])
async def test_missing_column_is_refused_and_untouched(tmp_path: Path, wal: bool) -> None:
    path = tmp_path / "db.sqlite"
    ddl = _missing_column_ddl()
    assert "ignorable" not in ddl.split("CREATE TABLE events")[1]
    _foreign_db(path, ddl, APPLICATION_ID, SCHEMA_VERSION, wal=wal)
    before = _snapshot(tmp_path)
    assert list(before) == ["db.sqlite"]
    with pytest.raises(VersionRefused, match="table 'events' has columns"):
        await SqliteEventStore.open(path)
    # Not even a -wal or -shm file appears beside a WAL-mode file.
    assert _snapshot(tmp_path) == before


async def test_foreign_files_are_refused_and_untouched(tmp_path: Path) -> None:
    other_app = tmp_path / "other.db"
    _foreign_db(other_app, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);", 0, 0)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(os.urandom(4096))
    text = tmp_path / "text.db"
    text.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)  # a header and nothing else
    before = _snapshot(tmp_path)
    with pytest.raises(VersionRefused, match="unexpected table 'notes'"):
        await SqliteEventStore.open(other_app)
    with pytest.raises(VersionRefused, match="not a SQLite database"):
        await SqliteEventStore.open(garbage)
    with pytest.raises(VersionRefused):
        await SqliteEventStore.open(text)
    assert _snapshot(tmp_path) == before


async def test_refused_with_a_crashed_writers_wal(tmp_path: Path) -> None:
    """A file of another build whose writer died with a live -wal: the main file, the
    -wal and the -shm all stay byte-identical (the -shm index is not rebuilt)."""
    path = tmp_path / "db.sqlite"
    await _our_db(path)
    _edit(path, f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    crash = (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA wal_autocheckpoint = 0')\n"
        "c.execute(\"INSERT INTO sessions VALUES ('zz', '{}', 0, 1, 0, NULL)\")\n"
        "os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", crash, str(path)], check=False)
    before = _snapshot(tmp_path)
    assert {"db.sqlite-wal", "db.sqlite-shm"} <= set(before)
    with pytest.raises(VersionRefused, match="user_version"):
        await SqliteEventStore.open(path)
    assert _snapshot(tmp_path) == before


async def test_a_writer_killed_as_it_opened_the_file_leaves_it_readable(
        tmp_path: Path) -> None:
    """A writer killed between creating its -wal (SQLite opens it first) and its -shm
    leaves an empty -wal beside no -shm. A read-only reader cannot open a WAL that has no
    index, but that WAL holds nothing: the schema check reads the file as it is, leaves
    both files untouched, and the store opens and serves what was committed; a file of
    another build in that state is refused for its version, not called unreadable (both
    were refused as "cannot be read as a SQLite database" before)."""
    path = tmp_path / "db.sqlite"
    await _our_db(path)
    wal = tmp_path / "db.sqlite-wal"
    wal.write_bytes(b"")
    before = _snapshot(tmp_path)
    assert list(before) == ["db.sqlite", "db.sqlite-wal"]
    assert inspect_file(path) == "ours"
    assert _snapshot(tmp_path) == before
    store = await SqliteEventStore.open(path)
    try:
        assert list((await store.load("s1")).log) == list(build_session("s1", 2).log)
    finally:
        await store.close()

    _edit(path, f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    wal.write_bytes(b"")
    before = _snapshot(tmp_path)
    with pytest.raises(VersionRefused, match="user_version"):
        await SqliteEventStore.open(path)
    assert _snapshot(tmp_path) == before


# -- round trips -----------------------------------------------------------------------

_counter = itertools.count()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(session=sessions(), splits=st.lists(st.integers(1, 7), min_size=1, max_size=5),
       durable=st.lists(st.booleans(), min_size=1, max_size=5), via_create=st.booleans())
def test_round_trip_any_valid_session(tmp_path_factory: pytest.TempPathFactory,
                                      session: Session, splits: list[int],
                                      durable: list[bool], via_create: bool) -> None:
    path = tmp_path_factory.getbasetemp() / "roundtrip.db"
    sid = f"{session.id}-{next(_counter)}"
    assert session.header is not None
    hdr = msgspec.structs.replace(session.header, id=sid)
    events = list(session.log)

    async def run() -> None:
        store = await SqliteEventStore.open(path, group_delay_ms=0.5)
        try:
            if via_create:
                epoch = await store.create(hdr, events)
            else:
                epoch = await store.create(hdr)
                start, k = 0, 0
                while start < len(events):
                    size = splits[k % len(splits)]
                    await store.append(sid, events[start:start + size], epoch=epoch,
                                       durable=durable[k % len(durable)])
                    start, k = start + size, k + 1
                await store.flush()
            assert await store.header(sid) == hdr
            assert await store.read_since(sid) == events
            assert await store.read_since(sid, 3, 2) == events[3:5]
            loaded = await store.load(sid)
            _same_session(loaded, session)
            opened = await store.open_session(sid)
            assert opened.epoch == epoch + 1
            marker_time = opened.repaired[0].time  # "now" when the log is empty
            expected = Session(events, header=hdr, clock=lambda: marker_time)
            for closer in interrupted_turn_closers(expected.log):
                expected.append_event(closer)
            _same_session(opened.session, expected)
            assert list(opened.repaired) == list(expected.log)[len(events):]
            _same_session(await store.load(sid), expected)
        finally:
            await store.close()

    asyncio.run(run())


@pytest.mark.parametrize("path", VALID_EXAMPLES, ids=lambda p: p.stem)
async def test_examples_round_trip_exactly(store: SqliteEventStore, path: Path) -> None:
    log = read_log(path)
    hdr = await import_log(store, log, path)
    assert hdr.id == path.stem
    exported = await export_session(store, path.stem)
    first, rest = exported.split(b"\n", 1)
    assert msgspec.json.decode(first)["type"] == "session"
    assert rest == path.read_bytes()
    _same_session(await store.load(path.stem), replay(log.events))


async def test_empty_list_and_null_are_kept_apart(store: SqliteEventStore) -> None:
    hdr = header("nulls")
    session = Session(header=hdr, clock=Clock())
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("assistant/message", {
        "turn": 1, "step": 1,
        "message": {"id": "a", "role": "assistant",
                    "source": {"kind": "model", "provider": "p", "model": "m"},
                    "content": []}}, surface_op="append", source_event_seqs=[])
    session.append("assistant/message", {
        "turn": 1, "step": 1,
        "message": {"id": "b", "role": "assistant",
                    "source": {"kind": "model", "provider": "p", "model": "m"},
                    "content": [{"type": "text", "text": "x"}]}}, surface_op="append")
    session.append("x-ext/empty", None, ignorable=True)
    session.append("x-ext/absent", ignorable=True)
    session.append("x-ext/list", [], ignorable=True)
    events = list(session.log)
    assert events[4].data is None and events[5].data is UNSET
    await store.create(hdr, events)
    rows = _rows(store.path, "SELECT seq, data, source_event_seqs, surface_op, ignorable "
                 "FROM events WHERE session_id = 'nulls' ORDER BY seq")
    assert rows[2][2] == "[]" and rows[3][2] is None
    assert rows[2][3] == '"append"' and rows[0][3] is None
    assert rows[4][1] == "null" and rows[5][1] is None and rows[6][1] == "[]"
    assert [r[4] for r in rows] == [None] * 4 + [1, 1, 1]
    assert await store.read_since("nulls") == events
    _same_session(await store.load("nulls"), session)


async def test_replace_marker_is_stored_as_json(store: SqliteEventStore) -> None:
    log = read_log(EXAMPLES / "compaction.jsonl")
    await import_log(store, log, EXAMPLES / "compaction.jsonl")
    ops = _rows(store.path, "SELECT surface_op FROM events WHERE surface_op LIKE '{%'")
    assert ops and all(msgspec.json.decode(op)["op"] == "replace" for (op,) in ops)


# -- API semantics ---------------------------------------------------------------------


async def test_errors_for_unknown_and_duplicate_sessions(store: SqliteEventStore) -> None:
    await store.create(header("a"))
    with pytest.raises(SessionExists):
        await store.create(header("a"))
    for call in (store.open_session, store.load, store.header, store.read_since):
        with pytest.raises(SessionNotFound):
            await call("nope")
    event = Event(type="turn/start", seq=0, time=1, data={"turn": 1})
    with pytest.raises(SessionNotFound):
        await store.append("nope", [event], epoch=1)


async def test_list_sessions(store: SqliteEventStore) -> None:
    s = build_session("b", 1)
    await store.create(header("b"), list(s.log))
    await store.create(header("a", created_at=5))
    infos = await store.list_sessions()
    assert [(i.id, i.length, i.writer_epoch) for i in infos] == [("a", 0, 1), ("b", len(s), 1)]
    assert infos[0].created_at == 5 and infos[0].last_time is None
    assert infos[1].last_time == s.log[-1].time


async def test_seq_gap_and_duplicate_are_refused(store: SqliteEventStore) -> None:
    events = list(build_session("g", 1).log)
    epoch = await store.create(header("g"))
    await store.append("g", events[:5], epoch=epoch)
    for bad in (events[6:8], events[4:7], events[0:2]):
        with pytest.raises(SeqMismatch, match="stored next seq is 5"):
            await store.append("g", bad, epoch=epoch)
    with pytest.raises(SeqMismatch, match="not contiguous"):
        await store.append("g", [events[5], events[7]], epoch=epoch)
    assert await store.read_since("g") == events[:5]
    await store.append("g", events[5:], epoch=epoch)
    assert await store.read_since("g") == events


async def test_a_resend_of_a_stored_batch_counts_as_written(tmp_path: Path) -> None:
    """A batch sent again after its first send's outcome was lost: written once if the
    first send stored it, written now if it did not; anything else is still refused."""
    path = tmp_path / "resend.db"
    store = await SqliteEventStore.open(path)
    try:
        events = list(build_session("r", 1).log)
        epoch = await store.create(header("r"))
        await store.append("r", events[:5], epoch=epoch)
        await store.append("r", events[:5], epoch=epoch, resend=True)  # stored: no-op
        await store.append("r", events[3:5], epoch=epoch, resend=True)  # the tail of it
        await store.append("r", events[5:8], epoch=epoch, resend=True)  # lost: written
        with pytest.raises(SeqMismatch, match="stored next seq is 8"):
            await store.append("r", events[9:11], epoch=epoch, resend=True)  # a gap
        with pytest.raises(SeqMismatch, match="stored next seq is 8"):
            await store.append("r", events[5:8], epoch=epoch)  # not marked: refused
        assert await store.read_since("r") == events[:8]
        assert store.stats()["events"] == 8  # a resend found stored writes nothing
        other = await SqliteEventStore.open(path)
        try:
            opened = await other.open_session("r")  # a newer writer takes the session
        finally:
            await other.close()
        with pytest.raises(WriterFenced, match="stale"):
            await store.append("r", events[5:8], epoch=epoch, resend=True)
        stored = await store.read_since("r")
        assert stored == list(opened.session.log) and stored[:8] == events[:8]
        assert _rows(path, "SELECT count(*) FROM events WHERE session_id = 'r'") == \
            [(len(stored),)]  # the first eight once, then the new writer's repair
    finally:
        await store.close()


async def test_second_writer_fences_the_first(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    first = await SqliteEventStore.open(path)
    second = await SqliteEventStore.open(path)  # another process, as far as SQLite knows
    try:
        events = list(build_session("f", 2).log)
        epoch1 = await first.create(header("f"), events[:10])
        opened = await second.open_session("f")
        assert opened.epoch == epoch1 + 1
        with pytest.raises(WriterFenced, match="stale"):
            await first.append("f", events[10:12], epoch=epoch1)
        await first.append("f", events[10:12], epoch=epoch1, durable=False)
        with pytest.raises(WriterFenced):
            await first.flush()
        await first.flush()  # reported once
        stored = await second.read_since("f")
        assert stored == list(opened.session.log)  # nothing of the old writer's
        more = opened.session.append("turn/start", {"turn": 9})
        await second.append("f", [more], epoch=opened.epoch)
        assert (await first.read_since("f"))[-1] == more
    finally:
        await first.close()
        await second.close()


async def test_flush_session_reports_only_its_own_failures(store: SqliteEventStore) -> None:
    a, b = list(build_session("a", 1).log), list(build_session("b", 1).log)
    ea = await store.create(header("a"))
    eb = await store.create(header("b"))
    await store.append("a", a[1:3], epoch=ea, durable=False)  # gap: fails
    await store.append("b", b[:3], epoch=eb, durable=False)
    await store.flush_session("b")
    with pytest.raises(SeqMismatch):
        await store.flush_session("a")
    await store.flush()


async def test_open_session_repairs_a_crashed_turn_durably(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    log = read_log(EXAMPLES / "crash-tail.jsonl")
    store = await SqliteEventStore.open(path)
    await import_log(store, log, EXAMPLES / "crash-tail.jsonl")
    opened = await store.open_session("crash-tail")
    await store.close()
    n = len(log.events)
    assert opened.repaired[0].type == "session/end-seed"
    assert opened.repaired[-1].type == "turn/end"
    assert opened.repaired[-1].data["reason"] == {"kind": "interrupted"}
    expected_closers = interrupted_turn_closers([*log.events, opened.repaired[0]])
    assert list(opened.repaired[1:]) == expected_closers
    assert opened.session.first_live_seq == n
    # Durable: a fresh store sees them, and reopening adds only a new seed marker.
    store = await SqliteEventStore.open(path)
    try:
        assert await store.read_since("crash-tail", n) == list(opened.repaired)
        again = await store.open_session("crash-tail")
        assert [e.type for e in again.repaired] == ["session/end-seed"]
        assert again.epoch == opened.epoch + 1
    finally:
        await store.close()


async def test_open_session_of_an_empty_session(store: SqliteEventStore) -> None:
    epoch = await store.create(header("e"))
    opened = await store.open_session("e")
    assert opened.epoch == epoch + 1
    assert [e.type for e in opened.repaired] == ["session/end-seed"]
    assert await store.read_since("e") == list(opened.repaired)


async def test_buffered_appends_are_durable_after_close(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    events = list(build_session("b", 3).log)
    store = await SqliteEventStore.open(path, group_delay_ms=1000)
    epoch = await store.create(header("b"))
    for e in events:
        await store.append("b", [e], epoch=epoch, durable=False)
    assert store.stats()["queued_batches"] > 0
    await store.close()
    store = await SqliteEventStore.open(path)
    assert await store.read_since("b") == events
    await store.close()


# -- group commit ----------------------------------------------------------------------


async def test_hundred_sessions_concurrently_lose_nothing(store: SqliteEventStore) -> None:
    logs = {f"s{i:03d}": list(build_session(f"s{i:03d}", 1 + i % 3).log) for i in range(100)}
    epochs = {sid: await store.create(header(sid)) for sid in logs}
    appends = 0

    async def writer(sid: str) -> None:
        nonlocal appends
        events, start = logs[sid], 0
        for k in itertools.count():
            size = 1 + (k + len(sid)) % 4
            await store.append(sid, events[start:start + size], epoch=epochs[sid],
                               durable=k % 3 != 0)
            appends += 1
            start += size
            if start >= len(events):
                return

    before = store.stats()["commits"]
    await asyncio.gather(*(writer(sid) for sid in logs))
    await store.flush()
    for sid, events in logs.items():
        assert await store.read_since(sid) == events
    stats = store.stats()
    assert stats["batches"] >= appends
    assert stats["commits"] - before < appends / 4, stats


async def test_failed_batch_fails_alone_in_its_group(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    other = await SqliteEventStore.open(path)
    store = await SqliteEventStore.open(path, group_delay_ms=50)
    try:
        logs = {sid: list(build_session(sid, 1).log) for sid in ("ok1", "gap", "fenced", "ok2")}
        epochs = {sid: await store.create(header(sid)) for sid in logs}
        await other.open_session("fenced")  # epoch bumped behind this store's back
        before = store.stats()["commits"]
        results = await asyncio.gather(
            store.append("ok1", logs["ok1"][:4], epoch=epochs["ok1"]),
            store.append("gap", logs["gap"][2:4], epoch=epochs["gap"]),
            store.append("fenced", logs["fenced"][:4], epoch=epochs["fenced"]),
            store.append("ok2", logs["ok2"][:4], epoch=epochs["ok2"]),
            return_exceptions=True)
        assert results[0] is None and results[3] is None
        assert isinstance(results[1], SeqMismatch)
        assert isinstance(results[2], WriterFenced)
        assert store.stats()["commits"] - before == 1  # one group, one transaction
        assert await store.read_since("ok1") == logs["ok1"][:4]
        assert await store.read_since("ok2") == logs["ok2"][:4]
        assert await store.read_since("gap") == []
        assert [e.type for e in await store.read_since("fenced")] == ["session/end-seed"]
    finally:
        await store.close()
        await other.close()


async def test_sessions_created_at_once_share_commits(store: SqliteEventStore) -> None:
    """Creates go through the group writer: a wave of them shares transactions, a
    duplicate id fails alone with ``SessionExists``, a create with events stores them."""
    seeded = list(build_session("seeded", 1).log)
    before, batches = store.stats()["commits"], store.stats()["batches"]
    results = await asyncio.gather(
        *(store.create(header(f"c{i:03d}")) for i in range(150)),
        store.create(header("c007")),
        store.create(header("seeded"), seeded),
        return_exceptions=True)
    assert results[:150] == [1] * 150 and results[151] == 1
    assert isinstance(results[150], SessionExists)
    assert "'c007' is already stored" in str(results[150])
    assert store.stats()["batches"] - batches == 151  # the writer's: one per create
    assert store.stats()["commits"] - before < 150 / 4, store.stats()
    infos = {i.id: i for i in await store.list_sessions()}
    assert len(infos) == 151
    assert (infos["c042"].length, infos["c042"].writer_epoch, infos["c042"].last_time) == \
        (0, 1, None)
    assert infos["seeded"].length == len(seeded)
    assert infos["seeded"].last_time == seeded[-1].time
    assert await store.read_since("seeded") == seeded
    assert await store.header("c007") == header("c007")
    opened = await store.open_session("c042")
    assert opened.epoch == 2


async def test_open_or_create(store: SqliteEventStore) -> None:
    created = await store.open_or_create(header("oc"))
    assert (created.epoch, len(created.session), created.repaired) == (1, 0, ())
    assert created.session.header == header("oc")
    events = list(build_session("oc", 1).log)
    await store.append("oc", events, epoch=created.epoch)
    opened = await store.open_or_create(header("oc", created_at=99))
    assert opened.epoch == 2 and opened.session.header == header("oc")
    assert opened.session.log[:len(events)] == events
    assert await store.read_since("oc") == list(opened.session.log)


async def test_failed_commit_keeps_batches_queued(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    store = await SqliteEventStore.open(path, busy_timeout_ms=50)
    events = list(build_session("q", 1).log)
    epoch = await store.create(header("q"))
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        await store.append("q", events[:3], epoch=epoch, durable=False)
        with pytest.raises(CommitFailed, match="locked") as info:
            await store.append("q", events[3:5], epoch=epoch)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert store.stats()["queued_batches"] == 2
        with pytest.raises(CommitFailed):
            await store.flush()
        assert store.stats()["failed_commits"] >= 2
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    await store.flush()  # retried in order, now it goes through
    assert await store.read_since("q") == events[:5]
    await store.append("q", events[5:], epoch=epoch)
    assert await store.read_since("q") == events
    await store.close()


# -- bad input, corruption -------------------------------------------------------------


async def test_bad_events_are_refused_whole(store: SqliteEventStore) -> None:
    epoch = await store.create(header("x"))
    good = Event(type="turn/start", seq=0, time=1, data={"turn": 1})
    with pytest.raises(BadEvent, match="not JSON"):
        await store.append("x", [good, Event(type="x/y", seq=1, time=2, data=object())],
                           epoch=epoch)
    with pytest.raises(BadEvent):
        await store.append("x", [good, Event(type="x/y", seq=1, time=2.5, data={})],  # type: ignore[arg-type]
                           epoch=epoch)
    with pytest.raises(BadEvent):
        await store.append("x", [good, Event(type="x/y", seq=1, time=2, data={},
                                              ignorable=False)], epoch=epoch)  # type: ignore[arg-type]
    assert await store.read_since("x") == []
    await store.append("x", [good], epoch=epoch)


def _tamper(path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(sql, params)
    conn.close()


@pytest.mark.parametrize(("change", "seq", "fragment"), [
    ("SET data = '{not json' WHERE seq = 7", 7, "cannot be decoded"),
    ("DELETE", 9, "missing"),
    ("SET surface_op = NULL WHERE seq = 1", 1, "requires a surfaceOp"),
    ("SET source_event_seqs = '[\"a\"]' WHERE seq = 7", 7, "sourceEventSeqs"),
    ("SET type = 'mystery/type' WHERE seq = 4", 4, "unknown event type"),
])
async def test_corruption_names_session_and_seq(tmp_path: Path, change: str, seq: int,
                                                fragment: str) -> None:
    path = tmp_path / "c.db"
    session = build_session("c", 2)
    store = await SqliteEventStore.open(path)
    await store.create(header("c"), list(session.log))
    await store.create(header("fine"), list(build_session("fine", 1).log))
    await store.close()
    if change == "DELETE":
        _tamper(path, f"DELETE FROM events WHERE session_id = 'c' AND seq = {seq}")
    else:
        _tamper(path, f"UPDATE events {change} AND session_id = 'c'")
    store = await SqliteEventStore.open(path)
    try:
        for call in (store.load, store.open_session):
            with pytest.raises(CorruptStore, match=fragment) as info:
                await call("c")
            assert info.value.session_id == "c" and info.value.seq == seq
            assert f"'c' seq {seq}" in str(info.value)
        checked, failures = await verify_store(store)
        assert checked == 2
        assert [(f.session_id, f.seq) for f in failures] == [("c", seq)]
    finally:
        await store.close()


async def test_corrupt_header_and_row_count(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    store = await SqliteEventStore.open(path)
    await store.create(header("h"), list(build_session("h", 1).log))
    await store.create(header("n"), list(build_session("n", 1).log))
    await store.close()
    _tamper(path, "UPDATE sessions SET header = '{\"version\": 7}' WHERE id = 'h'")
    _tamper(path, "UPDATE sessions SET next_seq = 3 WHERE id = 'n'")
    store = await SqliteEventStore.open(path)
    try:
        with pytest.raises(CorruptStore, match="header"):
            await store.load("h")
        with pytest.raises(CorruptStore, match="next seq is 3"):
            await store.load("n")
        _, failures = await verify_store(store)
        assert [(f.session_id, f.seq) for f in failures] == [("h", None), ("n", None)]
    finally:
        await store.close()


async def test_repairs_survive_an_interrupted_open_turn_session(store: SqliteEventStore
                                                                ) -> None:
    session = Session(header=header("o"), clock=Clock())
    add_turn(session, 1)
    open_turn(session, 2)
    await store.create(header("o"), list(session.log))
    opened = await store.open_session("o")
    types = [e.type for e in opened.repaired]
    assert types == ["session/end-seed", "tool/result", "step/end", "turn/end"]
    assert interrupted_turn_closers(opened.session.log) == []
    _same_session(await store.load("o"), opened.session)


async def test_close_raises_unreported_buffered_failures(tmp_path: Path) -> None:
    events = list(build_session("a", 1).log)
    for count in (1, 2):
        store = await SqliteEventStore.open(tmp_path / f"close{count}.db")
        epoch = await store.create(header("a"))
        await store.append("a", events[:2], epoch=epoch, durable=False)
        for k in range(count):  # each starts past the stored next seq
            await store.append("a", events[3 + k:4 + k], epoch=epoch, durable=False)
        expected = SeqMismatch if count == 1 else StoreError
        with pytest.raises(expected, match="buffered batches failed" if count == 2 else "seq"):
            await store.close()
        await store.close()  # closed already: nothing more to say
        store = await SqliteEventStore.open(tmp_path / f"close{count}.db")
        assert await store.read_since("a") == events[:2]
        await store.close()


_EXIT_WITHOUT_CLOSE = """
import asyncio, sys
from surfacelog.schema.events import Event
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.store import SqliteEventStore

async def main() -> None:
    store = await SqliteEventStore.open(sys.argv[1])
    epoch = await store.create(SessionHeader(version=SESSION_FORMAT_VERSION, id="left",
                                             created_at=1))
    await store.append("left", [Event(type="turn/start", seq=0, time=2,
                                      data={"turn": 1})], epoch=epoch)
    raise SystemExit(7)  # no close: the process must still end

asyncio.run(main())
"""


def test_a_process_that_never_closes_its_store_still_exits(tmp_path: Path) -> None:
    """The connection thread does not hold the interpreter open (a crashed script, or a
    Ray worker told to exit, would otherwise hang holding the file)."""
    path = tmp_path / "left.db"
    done = subprocess.run([sys.executable, "-c", _EXIT_WITHOUT_CLOSE, str(path)],
                          timeout=120, capture_output=True, text=True)
    assert done.returncode == 7, done.stderr

    async def read() -> list[Event]:
        store = await SqliteEventStore.open(path)
        try:
            return await store.read_since("left")
        finally:
            await store.close()

    assert [e.type for e in asyncio.run(read())] == ["turn/start"]


def test_schema_precheck_waits_out_a_transient_lock_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only check that meets SQLITE_PROTOCOL (a killed writer's stale -shm being
    recovered by another process) retries instead of calling a good file foreign; a
    lasting error is still refused."""
    from surfacelog.store.sqlite import file_format as schema_check

    db = tmp_path / "s.db"
    asyncio.run(_create_one(db))
    holder = sqlite3.connect(db)  # a live reader keeps -wal/-shm: the readonly_shm path
    holder.execute("SELECT count(*) FROM sessions").fetchone()
    assert (tmp_path / "s.db-wal").exists()
    real = schema_check.read_shape
    failures = iter([True, True])

    def flaky(conn: sqlite3.Connection) -> schema_check.SchemaShape:
        if next(failures, False):
            exc = sqlite3.OperationalError("locking protocol")
            exc.sqlite_errorcode = 15  # type: ignore[attr-defined]
            raise exc
        return real(conn)

    monkeypatch.setattr(schema_check, "read_shape", flaky)
    assert schema_check.inspect_file(db) == "ours"

    def always(conn: sqlite3.Connection) -> schema_check.SchemaShape:
        exc = sqlite3.OperationalError("locking protocol")
        exc.sqlite_errorcode = 15  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(schema_check, "read_shape", always)
    with pytest.raises(VersionRefused, match="locking protocol"):
        schema_check.inspect_file(db)
    holder.close()


def test_schema_precheck_gives_up_by_time_when_sqlite_itself_waits_long(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's own wal-index retry loop can spend ~10 s in one read before it answers
    SQLITE_PROTOCOL; the check's retries are bounded by time, so such a file costs one
    slow read and FileBusy, not a dozen (a CI run once spent 150 s here)."""
    import types

    from surfacelog.store.errors import FileBusy
    from surfacelog.store.sqlite import file_format as schema_check

    db = tmp_path / "s.db"
    asyncio.run(_create_one(db))
    holder = sqlite3.connect(db)
    holder.execute("SELECT count(*) FROM sessions").fetchone()
    clock = [0.0]
    reads = []

    def slow_protocol_error(conn: sqlite3.Connection) -> schema_check.SchemaShape:
        reads.append(clock[0])
        clock[0] += 10.0
        exc = sqlite3.OperationalError("locking protocol")
        exc.sqlite_errorcode = 15  # type: ignore[attr-defined]
        raise exc

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(schema_check, "read_shape", slow_protocol_error)
    monkeypatch.setattr(schema_check, "time",
                        types.SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep))
    with pytest.raises(FileBusy, match="locking protocol"):
        schema_check.inspect_file(db)
    assert reads == [0.0]
    holder.close()


async def _create_one(db: Path) -> None:
    store = await SqliteEventStore.open(db)
    await store.create(header("precheck"))
    await store.close()


def test_file_kind_probes_tell_ours_dshs_and_others_apart_and_never_block(
        tmp_path: Path) -> None:
    """``is_sqlite_file``, ``sqlite_identity`` and ``is_dsh_database`` read a file's
    header: ours and DSH's databases are told apart by application id; a text file, a
    file holding only the magic, a missing path and a directory are no database; a FIFO
    is not opened (a read of it would wait for a writer that never comes)."""
    from surfacelog.store.sqlite.file_format import (
        DSH_APPLICATION_ID,
        SQLITE_MAGIC,
        is_dsh_database,
        is_sqlite_file,
        sqlite_identity,
    )

    from support.dsh_database import dsh_database

    ours = tmp_path / "ours.db"
    asyncio.run(_create_one(ours))
    dsh = tmp_path / "dsh.db"
    dsh_database(dsh, {})
    text = tmp_path / "log.jsonl"
    text.write_text('{"type":"turn/start"}\n', encoding="utf-8")
    magic_only = tmp_path / "magic.db"
    magic_only.write_bytes(SQLITE_MAGIC)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    assert sqlite_identity(ours) == (SCHEMA_VERSION, APPLICATION_ID)
    assert sqlite_identity(dsh) is not None and sqlite_identity(dsh)[1] == DSH_APPLICATION_ID
    assert (is_dsh_database(ours), is_dsh_database(dsh)) == (False, True)
    assert is_sqlite_file(ours) and is_sqlite_file(dsh) and is_sqlite_file(magic_only)
    for other in (text, magic_only, tmp_path / "missing.db", tmp_path):
        assert sqlite_identity(other) is None, other
        assert not is_dsh_database(other), other
    for other in (text, tmp_path / "missing.db", tmp_path):
        assert not is_sqlite_file(other), other

    # A probe that opened the FIFO would wait for a writer: the probes run on a thread,
    # and only when it is stuck is each open given a writer (opened and closed) until
    # they end, so this test fails instead of hanging.
    found: list[tuple[object, ...]] = []
    probe = threading.Thread(target=lambda: found.append(
        (sqlite_identity(fifo), is_dsh_database(fifo), is_sqlite_file(fifo))), daemon=True)
    probe.start()
    probe.join(10)
    if probe.is_alive():
        while probe.is_alive():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader has it open just now
                    raise
            probe.join(0.05)
        pytest.fail("a probe opened the FIFO and waited on it")
    assert found == [(None, False, False)]

