"""``SqliteEventStore``: the event store over one SQLite file (WAL) through aiosqlite."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import msgspec

from surfacelog.schema.codec import JSON_ENCODER
from surfacelog.schema.dsh import PackedRun
from surfacelog.schema.errors import DecodeError, InvalidArgument
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader, check_header, header_to_json
from surfacelog.schema.limits import gc_paused
from surfacelog.store.base import EventStore, ScopedEventStore, SessionInfo
from surfacelog.store.errors import (
    DatabaseNotFound,
    FileBusy,
    SeqMismatch,
    SessionDeleted,
    SessionExists,
    SessionNotFound,
    StoreError,
)
from surfacelog.store.rows import (
    NO_ROWS,
    EncodedBatch,
    RowDigest,
    SourceCheck,
    encode_batch,
    encode_records,
)
from surfacelog.store.scoped import (
    ScopedSession,
    ScopedState,
    SessionPage,
    check_page,
    split_delta,
)
from surfacelog.store.sqlite import scoped as scoped_sql
from surfacelog.store.sqlite.connection import ConnectionThread, in_transaction
from surfacelog.store.sqlite.file_format import (
    check_or_initialise,
    classify,
    inspect_file,
    read_shape,
    side_files,
)
from surfacelog.store.sqlite.group_commit import (
    CREATE_SESSION,
    CommitObserver,
    GroupWriter,
    NewSession,
    insert_rows,
)
from surfacelog.store.sqlite.statements import SELECT_EVENTS, check_import, record_import
from surfacelog.store.stored import StoredSession

Synchronous = Literal["FULL", "NORMAL"]
T = TypeVar("T")

_NO_LIMIT: Final = -1


# -- units of work on the connection thread ----------------------------------------------


def _prepare(where: str, synchronous: Synchronous, busy_timeout_ms: int,
             wal_autocheckpoint: int | None, conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    if wal_autocheckpoint is not None:
        conn.execute(f"PRAGMA wal_autocheckpoint = {int(wal_autocheckpoint)}")
    state = classify(read_shape(conn), where)  # refuse before the first write
    (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if str(mode).lower() != "wal":
        raise StoreError(f"{where}: cannot switch to WAL journal mode (still {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    if state != "ours":  # ours stays ours: only a blank file needs the locked re-check
        check_or_initialise(conn, where)


def _prepare_read_only(where: str, busy_timeout_ms: int, conn: sqlite3.Connection) -> None:
    """Check the file holds our store, of this schema version (docs/rules.md §12: a file of any
    other version is refused, never migrated). Raises ``StoreError``,
    ``VersionRefused``."""
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    if classify(read_shape(conn), where) == "new":
        raise StoreError(f"{where} holds no surfacelog store (a blank database); "
                         f"nothing to read")


def _read_session(session_id: str, since_seq: int, limit: int, bump: bool,
                  conn: sqlite3.Connection) -> StoredSession | None:
    def work() -> StoredSession | None:
        if scoped_sql.deleted(conn, session_id):
            raise SessionDeleted(f"session {session_id!r} is deleted")
        if bump:
            conn.execute("UPDATE sessions SET writer_epoch = writer_epoch + 1 WHERE id = ?",
                         (session_id,))
        row = conn.execute("SELECT header, writer_epoch, next_seq FROM sessions WHERE id = ?",
                           (session_id,)).fetchone()
        if row is None:
            return None
        rows = conn.execute(SELECT_EVENTS, (session_id, since_seq, limit)).fetchall()
        return StoredSession(row[0], row[1], row[2], rows)

    return in_transaction(conn, "BEGIN IMMEDIATE" if bump else "BEGIN", work)


def _create_streamed(header: SessionHeader, header_json: str,
                     batches: Iterable[Sequence[Event | PackedRun]], source: str | None,
                     conn: sqlite3.Connection) -> int:
    """``SqliteEventStore.create_streamed`` on the connection thread: one ``BEGIN
    IMMEDIATE`` transaction holding every batch's rows, then the ``sessions`` row,
    committed once; rolled back on any error, so nothing of the session is stored
    unless all of it is. The batches are consumed to the end even when the id is
    taken, so that their own errors win over ``SessionExists``. With ``source``, the
    import is recorded in the same transaction (``statements.record_import``)."""
    sid = header.id

    def work() -> int:
        exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone()
        stored, last_time = 0, None
        digest = RowDigest()
        for batch in batches:
            if exists is not None or not batch:
                continue
            with gc_paused():  # a batch's worth of fresh acyclic row tuples
                encoded = encode_records(sid, batch)
                if encoded.start != stored:
                    raise SeqMismatch(f"session {sid!r}: batch starts at seq "
                                      f"{encoded.start}, expected {stored}; nothing "
                                      f"written")
                insert_rows(conn, encoded.rows)
                if source is not None:
                    digest.add(row[1:] for row in encoded.rows)
            stored += len(encoded.rows)
            last_time = encoded.last_time
        if exists is not None:
            raise SessionExists(f"session {sid!r} is already stored")
        conn.execute(CREATE_SESSION, (sid, header_json, header.created_at, stored,
                                      last_time))
        if source is not None:
            record_import(conn, sid, source, digest)
        return stored

    return in_transaction(conn, "BEGIN IMMEDIATE", work)


def _list_sessions(conn: sqlite3.Connection) -> list[SessionInfo]:
    rows = conn.execute("SELECT id, created_at, next_seq, last_time, writer_epoch"
                        " FROM sessions WHERE NOT EXISTS (SELECT 1 FROM tombstones AS t"
                        " WHERE t.session_id = id) ORDER BY id").fetchall()
    return [SessionInfo(*row) for row in rows]


def _checked_at_end(header: SessionHeader, batches: Iterable[Sequence[Event | PackedRun]]
                    ) -> Iterable[Sequence[Event | PackedRun]]:
    """``batches``, then ``check_header(header)``: a header this build cannot store is
    refused after the batches' own errors, in the order ``create`` after a validation
    of the whole log reported them."""
    yield from batches
    check_header(header)


# -- the store -------------------------------------------------------------------------


class SqliteEventStore(ScopedEventStore):
    """Session logs in one SQLite database file, written behind with group commit.

    Open with ``await SqliteEventStore.open(path, ...)``. The file is checked before it
    is touched (bump-and-reject, see ``schema_check``): a file of another build raises
    ``VersionRefused`` and stays byte-identical; a missing or blank file is initialised.

    One connection serves every session: WAL journal, ``BEGIN IMMEDIATE`` for every write,
    ``busy_timeout`` for other processes holding the lock. ``synchronous`` is explicit:

    - ``"FULL"`` (default): every commit is fsynced before it is acknowledged; an
      acknowledged (durable) batch survives a process crash, an OS crash and power loss.
    - ``"NORMAL"``: WAL commits are not fsynced, only checkpoints are. A process crash
      loses nothing acknowledged, but an OS crash or power loss may roll back the last
      commits before it, durable ones included. The database is never corrupted and
      never half-written: it comes back as of an earlier commit.

    Appends are queued and committed in groups (see ``writer``): ``group_max_events``
    caps a group, ``group_delay_ms`` is how long a non-durable batch waits for company.
    Reads (``load``, ``read_since``, ``header``, ``list_sessions``) see committed events
    only; ``flush()`` first to include queued ones. Use one store from one event loop.

    It implements the ``EventStore`` primitives and the scopes, state and deletion of a
    ``ScopedEventStore``; ``create``, ``append``, ``load``, ``open_session``... come
    from ``EventStore``, the same for every backend.
    """

    def __init__(self, path: Path, conn: ConnectionThread, writer: GroupWriter) -> None:
        """Use ``open``."""
        self.path = path
        self._conn = conn
        self._writer = writer
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        group_max_events: int = 4096,
        group_delay_ms: float = 1.0,
        busy_timeout_ms: int = 5000,
        create: bool = True,
        read_only: bool = False,
        keep_failed: bool = True,
        wal_autocheckpoint: int | None = None,
    ) -> SqliteEventStore:
        """Open the database at ``path``, initialising it when it is missing or blank
        (unless ``create`` is false: then a missing file raises ``DatabaseNotFound``, a
        ``FileNotFoundError``).

        ``read_only``: open through a SQLite ``mode=ro`` URI, for reading only (what the
        CLI's ``inspect``, ``verify``, ``digest`` and ``export`` do): the file is never
        created (a missing one raises ``FileNotFoundError``) nor initialised (a blank
        one raises ``StoreError``), and nothing is written, so a file on a read-only
        mount or without write permission can be read. When SQLite cannot open it so
        and no ``-wal`` file exists (no writer can be in the middle of a commit), it is
        opened ``immutable``. Any write raises ``StoreError``.

        ``keep_failed`` (default): a batch whose group commit fails stays queued and is
        retried (see ``writer``). False: it is dropped and its waiter told that nothing
        of it was stored, so that a caller reporting the failure (``import``) reports
        the truth; only for callers that wait for every batch (durable appends).

        ``wal_autocheckpoint``: SQLite's ``PRAGMA wal_autocheckpoint`` for this
        connection (``None``: SQLite's default, a checkpoint after a commit leaves 1,000
        pages in the WAL; 0: never, for a file replicated by Litestream, which then runs
        every checkpoint itself so that it has read every frame before the WAL restarts;
        see ``surfacelog.store.replica``).

        Raises ``VersionRefused`` for a file of another build (left unmodified),
        ``StoreError`` when SQLite cannot open it, ``InvalidArgument`` (a ``ValueError``)
        for a bad option.
        """
        if synchronous not in ("FULL", "NORMAL"):
            raise InvalidArgument(f"synchronous must be 'FULL' or 'NORMAL', got "
                                  f"{synchronous!r}")
        if busy_timeout_ms < 0:
            raise InvalidArgument(f"busy_timeout_ms must be >= 0, got {busy_timeout_ms}")
        if wal_autocheckpoint is not None and wal_autocheckpoint < 0:
            raise InvalidArgument(f"wal_autocheckpoint must be >= 0, got "
                                  f"{wal_autocheckpoint}")
        path = Path(path)
        if (read_only or not create) and not path.exists():
            raise DatabaseNotFound(f"no database at {path}")
        try:
            await asyncio.to_thread(inspect_file, path)
        except FileBusy:
            if read_only:
                raise
            # A killed writer's stale wal-index: the writable connection below rebuilds
            # it, and _prepare checks the schema before anything is written.
        if read_only:
            conn = await _open_read_only(path, busy_timeout_ms)
        else:
            try:
                conn = await ConnectionThread.open(path)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open {path}: {exc}") from exc
        try:
            if not read_only:
                try:
                    await conn.run(partial(_prepare, str(path), synchronous,
                                           busy_timeout_ms, wal_autocheckpoint))
                except sqlite3.OperationalError as exc:
                    # A file it may not write (a read-only mount, no permission): the
                    # first statement fails, before anything is written.
                    raise StoreError(f"cannot open {path} for writing: {exc}") from exc
            writer = GroupWriter(conn, max_events=group_max_events,
                                 delay=group_delay_ms / 1000, keep_failed=keep_failed)
        except BaseException:
            await conn.close()
            raise
        return cls(path, conn, writer)

    # -- the primitives (see ``EventStore``) ----------------------------------------------

    async def create_stored(self, header: SessionHeader, batch: EncodedBatch) -> int:
        """Store a new session with its first rows in one transaction and take it for
        writing: returns writer epoch 1. Goes through the group writer, so sessions
        created at once share commits. Raises ``SessionExists``, ``BadEvent``,
        ``CommitFailed``, ``StoreError``."""
        self._check_open()
        new = NewSession(JSON_ENCODER.encode(header_to_json(header)).decode(), header.created_at)
        waiter = self._writer.submit(header.id, 1, batch, durable=True, create=new)
        assert waiter is not None
        await waiter
        return 1

    async def create_streamed(self, header: SessionHeader,
                              batches: Iterable[Sequence[Event | PackedRun]], *,
                              source: str | None = None) -> int:
        """``EventStore.create_streamed`` in one transaction kept open across the
        batches (each encoded and inserted as it comes, so memory holds one batch), run
        as one unit of work on the connection thread: ``batches`` is iterated there,
        and the store serves nothing else until the session is committed or rolled
        back. Batches queued before it are committed first. The header is checked
        (``check_header``) once every batch is consumed. Raises ``SessionExists``,
        ``SeqMismatch``, ``BadEvent``, ``surfacelog.schema.DecodeError`` (the header),
        ``StoreError``, and whatever ``batches`` raises."""
        self._check_open()
        await self._writer.drain()
        checked = _checked_at_end(header, batches)
        header_json = JSON_ENCODER.encode(header_to_json(header)).decode()
        return await self._run(partial(_create_streamed, header, header_json, checked,
                                       source),
                               f"import session {header.id!r}")

    async def check_source(self, session_id: str) -> SourceCheck | None:
        """``EventStore.check_source``: the import record and the session's first rows,
        read in one transaction on the connection thread. Raises ``StoreError``."""
        self._check_open()
        return await self._run(partial(check_import, session_id=session_id),
                               f"check session {session_id!r} against its source")

    async def read_stored_or_create(self, header: SessionHeader) -> StoredSession | int:
        """``EventStore.read_stored_or_create`` as one item of the group writer: in the
        group's transaction a stored session is taken for writing (epoch bumped, read
        whole) and a missing one created, so that sessions activated at once share a
        transaction and an fsync, and nothing waits for the queue to drain first (the
        batches queued before it are written before it, in order). Raises
        ``CommitFailed``, ``StoreError``, ``surfacelog.schema.DecodeError`` (a header
        this build cannot read, when the session is missing)."""
        self._check_open()
        try:
            check_header(header)
        except DecodeError:
            # Refused only when the session must be created: the general path says so.
            return await super().read_stored_or_create(header)
        new = NewSession(JSON_ENCODER.encode(header_to_json(header)).decode(),
                         header.created_at, or_open=True)
        item, waiter = self._writer.open_or_create(header.id, new)
        await waiter
        return 1 if item.opened is None else item.opened

    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None:
        """Queue ``batch`` for the group writer (see ``EventStore.append_stored``).

        ``durable``: return once the batch's group is committed (fsynced under
        ``synchronous="FULL"``); otherwise return at once and let ``flush`` report a
        failure. Raises, for the batch itself: ``SeqMismatch``, ``WriterFenced``,
        ``SessionNotFound``, ``BadEvent`` (nothing of the batch written); for its group:
        ``CommitFailed`` (the batch stays queued and is retried)."""
        self._check_open()
        if not batch.rows:
            return
        waiter = self._writer.submit(session_id, epoch, batch, durable=durable,
                                     resend=resend)
        if waiter is not None:
            await waiter

    async def read_stored(self, session_id: str, *, since: int = 0,
                          limit: int | None = None, bump: bool = False) -> StoredSession:
        """One read of the session (see ``EventStore.read_stored``), of committed rows
        only: ``flush()`` first to include queued ones. ``bump`` first commits the
        batches this store queued, then bumps the epoch and reads in one ``BEGIN
        IMMEDIATE`` transaction. Raises ``SessionNotFound``, ``CommitFailed``,
        ``StoreError``."""
        self._check_open()
        if bump:
            await self._writer.drain()
        what = f"{'open' if bump else 'read'} session {session_id!r}"
        stored = await self._run(
            partial(_read_session, session_id, max(since, 0),
                    _NO_LIMIT if limit is None else limit, bump), what)
        if stored is None:
            raise SessionNotFound(f"session {session_id!r} is not stored")
        return stored

    async def flush(self) -> None:
        """Wait until every queued batch is committed. Raises ``CommitFailed`` when a
        commit fails (the batches stay queued), else the oldest unreported failure of a
        non-durable batch (one per call)."""
        self._check_open()
        await self._writer.flush()

    async def flush_session(self, session_id: str) -> None:
        """Wait until every queued batch is committed. Raises ``CommitFailed`` when a
        commit fails, else the oldest unreported failure of a non-durable batch of
        ``session_id`` (other sessions' failures stay for their own flush)."""
        self._check_open()
        await self._writer.flush(session_id)

    async def list_sessions(self) -> list[SessionInfo]:
        """Every stored session, ordered by id (``length`` = committed events)."""
        self._check_open()
        return await self._run(_list_sessions, "list sessions")

    # -- scopes, state, deletion (see ``surfacelog.store.scoped``) ----------------------
    # A version-1 file opened read-only has none of them: it reads as having no scopes,
    # no state and no tombstones.

    async def set_scope(self, session_id: str, app_name: str, user_id: str, *,
                        state: Mapping[str, Any] | None = None, at: int) -> None:
        """See ``ScopedEventStore.set_scope``."""
        self._check_open()
        await self._run(partial(scoped_sql.set_scope, session_id, app_name, user_id,
                                dict(state or {}), at), f"scope session {session_id!r}")

    async def append_with_state(self, session_id: str, events: Sequence[Event],
                                delta: Mapping[str, Any], *, epoch: int, at: int,
                                durable: bool = True) -> None:
        """See ``ScopedEventStore.append_with_state``: the delta is written in the batch's own
        savepoint of its group commit."""
        self._check_open()
        state = scoped_sql.StateWrite(split_delta(delta), at)
        batch = encode_batch(session_id, events) if events else NO_ROWS
        waiter = self._writer.submit(session_id, epoch, batch, durable=durable,
                                     state=state)
        if waiter is not None:
            await waiter

    async def scope_of(self, session_id: str) -> ScopedSession:
        """See ``ScopedEventStore.scope_of``."""
        self._check_open()
        return await self._run(partial(scoped_sql.scope_of, session_id),
                               f"read the scope of session {session_id!r}")

    async def get_state(self, session_id: str) -> ScopedState:
        """See ``ScopedEventStore.get_state``."""
        self._check_open()
        return await self._run(partial(scoped_sql.get_state, session_id),
                               f"read the state of session {session_id!r}")

    async def user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """See ``ScopedEventStore.user_state``."""
        self._check_open()
        return await self._run(partial(scoped_sql.user_state, app_name, user_id),
                               "read user state")

    async def update_state(self, session_id: str, delta: Mapping[str, Any], *,
                           at: int) -> None:
        """See ``ScopedEventStore.update_state``."""
        self._check_open()
        await self._run(partial(scoped_sql.update_state, session_id, dict(delta), at),
                        f"update the state of session {session_id!r}")

    async def list_scoped(self, app_name: str, user_id: str | None = None, *,
                          after: str | None = None, limit: int | None = None
                          ) -> SessionPage:
        """See ``ScopedEventStore.list_scoped``."""
        self._check_open()
        check_page(limit)
        return await self._run(partial(scoped_sql.list_scoped, app_name, user_id, after,
                                       limit), "list scoped sessions")

    async def delete_session(self, session_id: str, *, at: int) -> None:
        """See ``ScopedEventStore.delete_session``: batches queued before it are committed
        first, then the tombstone and the epoch bump in one transaction."""
        self._check_open()
        await self._writer.drain()
        await self._run(partial(scoped_sql.delete_session, session_id, at),
                        f"delete session {session_id!r}")

    async def purge_session(self, session_id: str) -> None:
        """See ``ScopedEventStore.purge_session``."""
        self._check_open()
        await self._writer.drain()
        await self._run(partial(scoped_sql.purge_session, session_id),
                        f"purge session {session_id!r}")

    def stats(self) -> dict[str, int]:
        """The writer's counters (see ``WriterStats``): ``commits`` (group commits),
        ``batches`` and ``events`` they wrote, ``failed_commits``, ``queued_batches``."""
        return msgspec.structs.asdict(self._writer.stats())

    def disk_bytes(self) -> int:
        """The bytes of the database file with its side files (those that exist), on
        the disk of the process that opened it."""
        total = 0
        for path in (self.path, *side_files(self.path)):
            with contextlib.suppress(FileNotFoundError):  # a side file gone since
                total += path.stat().st_size
        return total

    def observe_commits(self, observer: CommitObserver | None) -> None:
        """Tell ``observer`` about each group commit of the writer."""
        self._writer.observer = observer

    async def close(self) -> None:
        """Flush and release the database. The connection is closed even when the flush
        fails; that failure is then raised (batches it left queued are dropped, never
        having been acknowledged as durable). Closing twice is a no-op."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._writer.close()
        finally:
            await self._conn.close()

    # -- internals -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store of {self.path} is closed")

    async def _run(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        try:
            return await self._conn.run(fn)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {what} failed: {exc}") from exc


async def _open_read_only(path: Path, busy_timeout_ms: int) -> ConnectionThread:
    """A ``mode=ro`` connection to ``path``, checked to hold our store; ``immutable``
    when the plain read-only open fails and no ``-wal`` file exists. Raises
    ``StoreError``, ``VersionRefused``."""
    prepare = partial(_prepare_read_only, str(path), busy_timeout_ms)
    wal = path.with_name(path.name + "-wal")
    try:
        conn = await ConnectionThread.open(path, read_only=True)
        try:
            await conn.run(prepare)
            return conn
        except BaseException:
            await conn.close()
            raise
    except sqlite3.Error as exc:
        if wal.exists():
            raise StoreError(f"cannot open {path} read-only: {exc}") from exc
        first = exc
    try:
        conn = await ConnectionThread.open(path, read_only=True, immutable=True)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path} read-only: {first}; {exc}") from exc
    try:
        await conn.run(prepare)
    except sqlite3.Error as exc:
        await conn.close()
        raise StoreError(f"cannot open {path} read-only: {exc}") from exc
    except BaseException:
        await conn.close()
        raise
    return conn


def sqlite_backend(path: str | Path, **options: Any) -> Callable[[], Awaitable[EventStore]]:
    """A picklable opener of ``SqliteEventStore.open(path, **options)``: what a journal
    actor is built with (it opens the store in its own process, and again after a
    restart). Nothing is opened or checked until it is called."""
    return partial(SqliteEventStore.open, path, **options)


__all__ = ["SqliteEventStore", "Synchronous", "sqlite_backend"]
