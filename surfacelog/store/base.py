"""The storage interface every event store implements (in-process or behind a journal
actor), and its error types.

An event store is an ordered list of event records per session plus one header and one
writer epoch per session. It knows SQLite and files, not Ray; it validates nothing about
surface rules itself: ``open_session`` and ``load`` hand the events to the core.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from msgspec import Struct

from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.session.session import Session


class StoreError(Exception):
    """Base of every store error."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class CorruptStore(StoreError):
    """Stored rows cannot be decoded or break the log's rules.

    ``session_id`` and ``seq`` name where (``seq`` is ``None`` when the problem is not
    about one event, e.g. an unreadable header or a wrong row count).
    """

    def __init__(self, message: str, session_id: str | None = None,
                 seq: int | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.seq = seq

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.session_id, self.seq))


class VersionRefused(StoreError):
    """The database file was written by another build (bump-and-reject: left untouched)."""


class SeqMismatch(StoreError):
    """A batch does not start at the stored next seq of its session (gap or duplicate)."""


class WriterFenced(StoreError):
    """The writer's epoch is stale: another writer took the session; nothing was written."""


class BadEvent(StoreError):
    """An event cannot be stored as a row (a value that is not JSON, a field of the wrong
    type or out of range). The store does not validate surface rules: events are
    expected to come from a ``Session``. Nothing of the batch was written."""


class CommitFailed(StoreError):
    """A group commit failed (disk I/O error, database locked past the busy timeout...).

    The batches of that group are not durable but not lost either: they stay queued in
    order and are tried again at the next append or ``flush``. The SQLite error is the
    ``__cause__``.
    """


class SessionExists(StoreError):
    """A session with this id is already stored."""


class SessionNotFound(StoreError):
    """No session with this id is stored."""


class SessionInfo(Struct, frozen=True):
    """One row of ``list_sessions``."""

    id: str
    created_at: int
    length: int
    last_time: int | None
    writer_epoch: int


class OpenedSession(Struct, frozen=True):
    """A session taken for writing: the live core object and the writer's epoch.

    ``repaired`` holds the events the load appended (seed marker, crash-repair closers);
    they are durable before this is returned.
    """

    session: Session
    epoch: int
    repaired: tuple[Event, ...]


class EventStore(abc.ABC):
    """Async storage of session logs."""

    @abc.abstractmethod
    async def create(self, header: SessionHeader, events: Sequence[Event] = ()) -> int:
        """Store a new session (optionally with initial events, e.g. a fork's seed) and
        take it for writing. Returns the writer epoch. Raises ``SessionExists``."""

    @abc.abstractmethod
    async def open_session(self, session_id: str) -> OpenedSession:
        """Take a stored session for writing (bumping its writer epoch, which fences any
        earlier writer), validate its log through the core, append and persist the seed
        marker and crash-repair closers, and return it. Raises ``SessionNotFound``,
        ``CorruptStore``."""

    async def open_or_create(self, header: SessionHeader) -> OpenedSession:
        """``open_session(header.id)``; when it is not stored, ``create(header)`` and the
        new empty session. Raises ``CorruptStore``, ``SessionExists`` (created by someone
        else in between). A store behind a connection answers it in one round trip."""
        try:
            return await self.open_session(header.id)
        except SessionNotFound:
            epoch = await self.create(header)
            return OpenedSession(Session(header=header), epoch, ())

    @abc.abstractmethod
    async def append(self, session_id: str, events: Sequence[Event], *, epoch: int,
                     durable: bool = True) -> None:
        """Persist a batch that starts at the stored next seq, all or nothing.

        ``durable``: wait until the batch is committed; otherwise return once queued
        (errors then surface at the next ``flush``). Raises ``SeqMismatch``,
        ``WriterFenced``, ``SessionNotFound``."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Wait until every queued batch is committed; raise the first commit error."""

    async def flush_session(self, session_id: str) -> None:
        """Wait until ``session_id``'s accepted batches are committed; raise only an
        error that belongs to that session. Stores that report every error to its own
        waiter can keep this default."""
        await self.flush()

    @abc.abstractmethod
    async def header(self, session_id: str) -> SessionHeader:
        """The session's header. Raises ``SessionNotFound``."""

    @abc.abstractmethod
    async def read_since(self, session_id: str, since_seq: int = 0,
                         limit: int | None = None) -> list[Event]:
        """Committed events with ``seq >= since_seq`` in seq order."""

    @abc.abstractmethod
    async def load(self, session_id: str) -> Session:
        """The stored log replayed through the core, read-only (no marker, no repair,
        no epoch bump). Raises ``SessionNotFound``, ``CorruptStore``."""

    @abc.abstractmethod
    async def list_sessions(self) -> list[SessionInfo]:
        """Every stored session, ordered by id."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush and release the database."""
