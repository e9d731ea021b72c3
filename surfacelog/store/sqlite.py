"""``SqliteEventStore``: the event store over one SQLite file (WAL) through aiosqlite."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Final, Literal, TypeVar

import msgspec

from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader, check_header, header_to_json
from surfacelog.session import Session
from surfacelog.store.base import (
    EventStore,
    OpenedSession,
    SeqMismatch,
    SessionInfo,
    SessionNotFound,
    StoreError,
)
from surfacelog.store.connection import ConnectionThread
from surfacelog.store.rows import SELECT_EVENTS, EncodedBatch, decode_rows, encode_batch
from surfacelog.store.schema_check import check_or_initialise, classify, inspect_file, read_shape
from surfacelog.store.stored import StoredSession, decode_header, reopen, replay_stored
from surfacelog.store.writer import GroupWriter, NewSession

Synchronous = Literal["FULL", "NORMAL"]
T = TypeVar("T")

_ENCODER: Final = msgspec.json.Encoder()
_NO_LIMIT: Final = -1


# -- units of work on the connection thread ----------------------------------------------


def _prepare(where: str, synchronous: Synchronous, busy_timeout_ms: int,
             conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    classify(read_shape(conn), where)  # refuse before the first write
    (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if str(mode).lower() != "wal":
        raise StoreError(f"{where}: cannot switch to WAL journal mode (still {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    check_or_initialise(conn, where)


def _in_transaction(conn: sqlite3.Connection, begin: str, work: Callable[[], T]) -> T:
    """Run ``work`` between ``begin`` and ``COMMIT``; roll back and re-raise on failure."""
    conn.execute(begin)
    try:
        result = work()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _read_session(session_id: str, since_seq: int, limit: int, bump: bool,
                  conn: sqlite3.Connection) -> StoredSession | None:
    def work() -> StoredSession | None:
        if bump:
            conn.execute("UPDATE sessions SET writer_epoch = writer_epoch + 1 WHERE id = ?",
                         (session_id,))
        row = conn.execute("SELECT header, writer_epoch, next_seq FROM sessions WHERE id = ?",
                           (session_id,)).fetchone()
        if row is None:
            return None
        rows = conn.execute(SELECT_EVENTS, (session_id, since_seq, limit)).fetchall()
        return StoredSession(row[0], row[1], row[2], rows)

    return _in_transaction(conn, "BEGIN IMMEDIATE" if bump else "BEGIN", work)


def _list_sessions(conn: sqlite3.Connection) -> list[SessionInfo]:
    rows = conn.execute("SELECT id, created_at, next_seq, last_time, writer_epoch"
                        " FROM sessions ORDER BY id").fetchall()
    return [SessionInfo(*row) for row in rows]


# -- the store -------------------------------------------------------------------------


class SqliteEventStore(EventStore):
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
    ) -> SqliteEventStore:
        """Open the database at ``path``, initialising it when it is missing or blank
        (unless ``create`` is false: then a missing file raises ``FileNotFoundError``).

        Raises ``VersionRefused`` for a file of another build (left unmodified),
        ``StoreError`` when SQLite cannot open it, ``ValueError`` for a bad option.
        """
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        if busy_timeout_ms < 0:
            raise ValueError(f"busy_timeout_ms must be >= 0, got {busy_timeout_ms}")
        path = Path(path)
        if not create and not path.exists():
            raise FileNotFoundError(f"no database at {path}")
        await asyncio.to_thread(inspect_file, path)
        try:
            conn = await ConnectionThread.open(path)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc
        try:
            await conn.run(partial(_prepare, str(path), synchronous, busy_timeout_ms))
            writer = GroupWriter(conn, max_events=group_max_events,
                                 delay=group_delay_ms / 1000)
        except BaseException:
            await conn.close()
            raise
        return cls(path, conn, writer)

    # -- writing ---------------------------------------------------------------------

    async def create(self, header: SessionHeader, events: Sequence[Event] = ()) -> int:
        """Store a new session (with ``events`` from seq 0, e.g. a fork's seed) in one
        transaction and take it for writing: returns writer epoch 1.

        The events are not validated here (``import`` and ``fork`` validate first).
        Raises ``SessionExists``, ``SeqMismatch`` (events not contiguous from 0),
        ``BadEvent``, ``surfacelog.schema.DecodeError`` (a header this build cannot
        read), ``StoreError``."""
        self._check_open()
        check_header(header)
        batch = encode_batch(header.id, events) if events else EncodedBatch(0, [], None)
        if batch.start != 0:
            raise SeqMismatch(f"session {header.id!r}: initial events start at seq "
                              f"{batch.start}, expected 0")
        new = NewSession(_ENCODER.encode(header_to_json(header)).decode(), header.created_at)
        # Through the group writer: sessions created at once share commits.
        waiter = self._writer.submit(header.id, 1, batch, durable=True, create=new)
        assert waiter is not None
        await waiter
        return 1

    async def open_session(self, session_id: str) -> OpenedSession:
        """Take ``session_id`` for writing (see ``EventStore.open_session``).

        Batches this store queued earlier are committed first. The epoch bump and the
        read happen in one transaction, so the log read is final: any older writer is
        fenced from then on. The seed marker and crash-repair closers are committed
        durably with the new epoch before the session is returned. Raises
        ``SessionNotFound``, ``CorruptStore``, ``CommitFailed``, ``WriterFenced`` (an
        even newer writer took the session meanwhile)."""
        stored = await self.read_stored(session_id, bump=True)
        session, repaired = reopen(session_id, stored)
        await self.append(session_id, repaired, epoch=stored.epoch, durable=True)
        return OpenedSession(session, stored.epoch, repaired)

    async def read_stored(self, session_id: str, *, bump: bool = False) -> StoredSession:
        """The whole session in one read, undecoded, for a caller that decodes and
        validates it elsewhere (``stored.reopen``, ``stored.replay_stored``). ``bump``
        takes the session for writing as ``open_session`` does: batches queued earlier
        are committed first, and the epoch bump and the read are one transaction.
        Raises ``SessionNotFound``, ``StoreError``."""
        self._check_open()
        if bump:
            await self._writer.drain()
        return await self._read(session_id, 0, bump=bump)

    async def append(self, session_id: str, events: Sequence[Event], *, epoch: int,
                     durable: bool = True, resend: bool = False) -> None:
        """Queue a batch (see ``EventStore.append``); an empty batch does nothing.

        ``durable``: return once the batch's group is committed (fsynced under
        ``synchronous="FULL"``); otherwise return at once and let ``flush`` report a
        failure. ``resend``: the same batch was sent before to a process that died
        before answering; if that send stored it (the session holds its seqs under
        ``epoch``), it counts as written instead of a ``SeqMismatch``. Raises, for
        the batch itself: ``SeqMismatch``, ``WriterFenced``, ``SessionNotFound``,
        ``BadEvent`` (nothing of the batch written); for its group: ``CommitFailed``
        (the batch stays queued and is retried)."""
        self._check_open()
        if not events:
            return
        batch = encode_batch(session_id, events)
        waiter = self._writer.submit(session_id, epoch, batch, durable=durable,
                                     resend=resend)
        if waiter is not None:
            await waiter

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

    # -- reading ---------------------------------------------------------------------

    async def header(self, session_id: str) -> SessionHeader:
        """The session's header. Raises ``SessionNotFound``, ``CorruptStore``."""
        stored = await self._read(session_id, 0, limit=0)
        return decode_header(session_id, stored.header)

    async def read_since(self, session_id: str, since_seq: int = 0,
                         limit: int | None = None) -> list[Event]:
        """Committed events with ``seq >= since_seq``, at most ``limit`` of them, in seq
        order (decoded, not validated). Raises ``SessionNotFound``, ``CorruptStore``."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        since = max(since_seq, 0)
        stored = await self._read(session_id, since,
                                  limit=_NO_LIMIT if limit is None else limit)
        return decode_rows(session_id, stored.rows, since)

    async def load(self, session_id: str) -> Session:
        """The stored log replayed through the core, read-only: no seed marker, no
        repair, no epoch bump. Raises ``SessionNotFound``, ``CorruptStore`` (naming
        the session and seq of the first row that cannot be decoded or breaks a rule)."""
        return replay_stored(session_id, await self._read(session_id, 0))

    async def list_sessions(self) -> list[SessionInfo]:
        """Every stored session, ordered by id (``length`` = committed events)."""
        self._check_open()
        return await self._run(_list_sessions, "list sessions")

    def stats(self) -> dict[str, int]:
        """The writer's counters (see ``WriterStats``): ``commits`` (group commits),
        ``batches`` and ``events`` they wrote, ``failed_commits``, ``queued_batches``."""
        return msgspec.structs.asdict(self._writer.stats())

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

    async def _read(self, session_id: str, since_seq: int, *, limit: int = _NO_LIMIT,
                    bump: bool = False) -> StoredSession:
        self._check_open()
        what = f"{'open' if bump else 'read'} session {session_id!r}"
        stored = await self._run(
            partial(_read_session, session_id, since_seq, limit, bump), what)
        if stored is None:
            raise SessionNotFound(f"session {session_id!r} is not stored")
        return stored


__all__ = ["SqliteEventStore", "Synchronous"]
