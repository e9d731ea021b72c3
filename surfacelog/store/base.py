"""The storage interface every event store implements (in-process, or a proxy to a
journal actor). Its error types are in ``surfacelog.store.errors``.

An event store is an ordered list of event rows per session plus one header and one
writer epoch per session. Like a recorder in the ``eventsourcing`` library, a backend
provides only a few primitives on rows (``EventStore``'s abstract methods): create a
session, append a batch under an epoch, read a session (optionally bumping its epoch),
list, flush, close. Everything above rows is built once on those primitives and is the
same for every backend: encoding events to rows and back (``rows``), activation
(``activation``: validate, seed marker, crash repair, epoch bump). The store validates
nothing about surface rules itself: activation and ``load`` hand the events to the core.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast, final

from msgspec import Struct

from surfacelog.schema.dsh import PackedRun
from surfacelog.schema.errors import InvalidArgument
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader, check_header
from surfacelog.session.session import Session
from surfacelog.store import activation
from surfacelog.store.activation import OpenedSession
from surfacelog.store.errors import (
    SeqMismatch,
    SessionDeleted,
    SessionNotFound,
    Unsupported,
)
from surfacelog.store.rows import (
    NO_ROWS,
    EncodedBatch,
    SourceCheck,
    decode_rows,
    encode_batch,
)
from surfacelog.store.scoped import ScopedSession, ScopedState, SessionPage
from surfacelog.store.stored import StoredSession, decode_header

if TYPE_CHECKING:
    from surfacelog.store.sqlite.group_commit import CommitObserver


class SessionInfo(Struct, frozen=True):
    """One row of ``list_sessions``."""

    id: str
    created_at: int
    length: int
    last_time: int | None
    writer_epoch: int


class EventStore(abc.ABC):
    """Async storage of session logs.

    A backend implements the primitives (the abstract methods, plus the optional ones
    with a default: ``read_stored_or_create``, ``flush_session``, ``stats``). The
    methods below them (``create``, ``append``, ``header``, ``read_since``, ``load``,
    ``open_session``, ``open_or_create``) are built on the primitives, final, the same
    for every backend.
    """

    # -- the primitives a backend provides -----------------------------------------------

    @abc.abstractmethod
    async def create_stored(self, header: SessionHeader, batch: EncodedBatch) -> int:
        """Store a new session: its header and its first rows (``batch`` starts at seq 0
        and may be empty; ``create`` checks both), in one transaction, taking it for
        writing. Returns the writer epoch (1). Raises ``SessionExists``, ``BadEvent`` (a
        row the backend cannot store; nothing written), ``StoreError``."""

    @abc.abstractmethod
    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None:
        """Persist ``batch`` (contiguous rows, as ``encode_batch`` makes them), all or
        nothing, if it starts at the stored next seq and ``epoch`` is the session's
        writer epoch; an empty batch does nothing.

        ``durable``: return once the batch is committed; otherwise return once it is
        queued (its failure then surfaces at the session's next ``flush_session``).
        ``resend``: the same batch was sent before with an unknown outcome; if that send
        stored it (the session holds its seqs under ``epoch``) it counts as written.
        Raises ``SeqMismatch``, ``WriterFenced``, ``SessionNotFound``, ``BadEvent``
        (nothing of the batch written), ``CommitFailed`` (stays queued, retried)."""

    @abc.abstractmethod
    async def read_stored(self, session_id: str, *, since: int = 0,
                          limit: int | None = None, bump: bool = False) -> StoredSession:
        """One consistent read of the session: its header, writer epoch, next seq and
        committed rows with ``seq >= since`` (at most ``limit`` of them), undecoded.

        ``bump`` takes the session for writing: batches this store accepted earlier are
        committed (or failed) first, then the epoch bump and the read happen in one
        transaction, so the read is final and any older writer is fenced from then on.
        Raises ``SessionNotFound``, ``StoreError``."""

    async def read_stored_or_create(self, header: SessionHeader) -> StoredSession | int:
        """``read_stored(header.id, bump=True)``; when it is not stored, store it new with
        ``header`` and no events and return its writer epoch (a deleted one raises
        ``SessionDeleted``). A backend behind a
        connection overrides it to answer in one round trip. Raises ``SessionExists``
        (created by someone else in between), ``surfacelog.schema.DecodeError`` (a
        header this build cannot read), the store's errors."""
        try:
            return await self.read_stored(header.id, bump=True)
        except SessionDeleted:
            raise  # its id stays taken until a purge
        except SessionNotFound:
            return await self.create_stored(check_header(header), NO_ROWS)

    @abc.abstractmethod
    async def list_sessions(self) -> list[SessionInfo]:
        """Every stored session, ordered by id (``length`` = committed events)."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Wait until every queued batch is committed; raise the first commit error."""

    async def flush_session(self, session_id: str) -> None:
        """Wait until ``session_id``'s accepted batches are committed; raise only an
        error that belongs to that session. Stores that report every error to its own
        waiter can keep this default."""
        await self.flush()

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush and release the database."""

    def stats(self) -> dict[str, int]:
        """The backend's counters (commits, events written...); none by default."""
        return {}

    def disk_bytes(self) -> int | None:
        """The bytes the store takes on its disk now, as seen from the process that
        holds it (``None``: the backend does not say; the default)."""
        return None

    def observe_commits(self, observer: CommitObserver | None) -> None:  # noqa: B027
        """Tell ``observer`` about each group commit from now on (``None``: stop). A
        backend without group commits reports none (the default)."""

    # -- built on the primitives, once for every backend ---------------------------------

    @final
    async def create(self, header: SessionHeader, events: Sequence[Event] = ()) -> int:
        """Store a new session (optionally with initial events from seq 0, e.g. a fork's
        seed; not validated here: ``import`` and ``fork`` validate first) and take it for
        writing. Returns the writer epoch. Raises ``SessionExists``, ``SeqMismatch``
        (events not contiguous from 0), ``BadEvent``, ``surfacelog.schema.DecodeError``
        (a header this build cannot read), ``StoreError``."""
        check_header(header)
        batch = encode_batch(header.id, events) if events else NO_ROWS
        if batch.start != 0:
            raise SeqMismatch(f"session {header.id!r}: initial events start at seq "
                              f"{batch.start}, expected 0")
        return await self.create_stored(header, batch)

    async def create_streamed(self, header: SessionHeader,
                              batches: Iterable[Sequence[Event | PackedRun]], *,
                              source: str | None = None) -> int:
        """Store a new session whose events (from seq 0, contiguous; not validated here)
        come in ``batches``, all or nothing, and return how many were stored. Every
        batch is consumed before anything is refused for the store's reasons, so an
        error raised by ``batches`` itself (an import's reading or validation) always
        wins: it is raised, and nothing is stored. Then ``SessionExists`` when the id is
        taken (nothing stored), ``SeqMismatch``, ``BadEvent``, ``StoreError``.

        A batch may hold a packed row's ``PackedRun`` for its events. ``source``: the
        session is an import of that source, which a backend that keeps import records
        (SQLite: ``check_source``) records with it. This default collects the batches
        (runs expanded) and calls ``create``, keeping no record: memory holds the whole
        log. A backend that can keep one transaction open across batches (SQLite)
        overrides it so that memory holds one batch."""
        events: list[Event] = []
        for batch in batches:
            for item in batch:
                if type(item) is PackedRun:
                    events.extend(item.events())
                else:
                    events.append(cast(Event, item))
        await self.create(header, events)
        return len(events)

    async def check_source(self, session_id: str) -> SourceCheck | None:
        """``session_id`` checked against the record of its import: whether it still
        holds every event of its source as imported (``SourceCheck``). ``None`` when it
        was not imported, or when the backend keeps no import records (this default).
        Raises ``StoreError``."""
        return None

    @final
    async def append(self, session_id: str, events: Sequence[Event], *, epoch: int,
                     durable: bool = True, resend: bool = False) -> None:
        """Persist a batch of events that starts at the stored next seq, all or nothing
        (see ``append_stored`` for ``durable`` and ``resend``); an empty batch does
        nothing. The events are encoded to rows here, in the caller's process: a value
        that cannot be stored raises ``BadEvent`` before anything is queued or sent.
        Raises ``SeqMismatch``, ``WriterFenced``, ``SessionNotFound``, ``BadEvent``,
        ``CommitFailed``."""
        if events:
            await self.append_stored(session_id, encode_batch(session_id, events),
                                     epoch=epoch, durable=durable, resend=resend)

    @final
    async def header(self, session_id: str) -> SessionHeader:
        """The session's header. Raises ``SessionNotFound``, ``CorruptStore``."""
        stored = await self.read_stored(session_id, limit=0)
        return decode_header(session_id, stored.header)

    @final
    async def read_since(self, session_id: str, since_seq: int = 0,
                         limit: int | None = None) -> list[Event]:
        """Committed events with ``seq >= since_seq``, at most ``limit`` of them, in seq
        order (decoded, not validated). Raises ``SessionNotFound``, ``CorruptStore``,
        ``ValueError`` for a negative limit."""
        if limit is not None and limit < 0:
            raise InvalidArgument(f"limit must be >= 0, got {limit}")
        since = max(since_seq, 0)
        stored = await self.read_stored(session_id, since=since, limit=limit)
        return decode_rows(session_id, stored.rows, since)

    @final
    async def load(self, session_id: str) -> Session:
        """The stored log replayed through the core, read-only (no seed marker, no
        repair, no epoch bump). Raises ``SessionNotFound``, ``CorruptStore``."""
        return await activation.load(self, session_id)

    @final
    async def open_session(self, session_id: str) -> OpenedSession:
        """Take a stored session for writing (see ``activation.open_session``): bump its
        writer epoch, validate its log through the core, append and persist the seed
        marker and crash-repair closers. Raises ``SessionNotFound``, ``CorruptStore``,
        ``WriterFenced``, the store's errors."""
        return await activation.open_session(self, session_id)

    @final
    async def take(self, session_id: str, loaded: Session) -> OpenedSession:
        """Take for writing a session read with ``load`` and not written to since (see
        ``activation.take``): the epoch bump fences any earlier writer; ``loaded``
        itself is returned when nothing was stored since the load, else a session
        activated from a whole read. Raises ``SessionNotFound``, ``CorruptStore``,
        ``WriterFenced``, the store's errors."""
        return await activation.take(self, session_id, loaded)

    @final
    async def open_or_create(self, header: SessionHeader) -> OpenedSession:
        """``open_session(header.id)``; when it is not stored, ``create(header)`` and the
        new empty session. Raises ``CorruptStore``, ``SessionExists`` (created by
        someone else in between), the store's errors."""
        return await activation.open_or_create(self, header)


class ScopedEventStore(EventStore):
    """An ``EventStore`` that also keeps scopes, state and deletion
    (``surfacelog.store.scoped``): the capability Google ADK's session service needs.

    A capability as a type, the way the ``eventsourcing`` library's
    ``ApplicationRecorder`` extends its ``AggregateRecorder``: a backend that has it
    derives from this class and implements every method below (the SQLite and memory
    backends; the journal's proxies forward them to the shard's writer), a backend that
    has not (the DSH root) stays a plain ``EventStore``, and a caller that needs it asks
    for it by type (``require_scoped``) before it starts, instead of failing on its
    first call.
    """

    @abc.abstractmethod
    async def set_scope(self, session_id: str, app_name: str, user_id: str, *,
                        state: Mapping[str, Any] | None = None, at: int) -> None:
        """Give a stored session its app and user (once) and apply ``state`` as a delta
        (``scoped.split_delta``), in one transaction; ``at`` (ms) is its update time.
        Setting the same scope again only applies ``state``. Raises ``SessionNotFound``
        (``SessionDeleted``), ``ScopeConflict`` (scoped to another app or user),
        ``InvalidArgument`` (a value that is not JSON), ``StoreError``."""

    @abc.abstractmethod
    async def append_with_state(self, session_id: str, events: Sequence[Event],
                                delta: Mapping[str, Any], *, epoch: int, at: int,
                                durable: bool = True) -> None:
        """``append`` and ``update_state(delta, at=at)`` as one write, all or nothing:
        the events are never stored without their state delta nor the other way round.
        Raises what ``append`` raises, ``ScopeConflict`` (the session has no scope;
        nothing written), ``InvalidArgument`` (a value that is not JSON; before
        anything is queued)."""

    @abc.abstractmethod
    async def scope_of(self, session_id: str) -> ScopedSession:
        """The session's scope row. Raises ``SessionNotFound`` (``SessionDeleted``),
        ``ScopeConflict`` (the session has no scope)."""

    @abc.abstractmethod
    async def get_state(self, session_id: str) -> ScopedState:
        """The scoped session's app, user and session state. Raises as ``scope_of``."""

    @abc.abstractmethod
    async def user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """The state of ``user_id`` in ``app_name`` (keys without ``user:``); ``{}`` when
        none is stored."""

    @abc.abstractmethod
    async def update_state(self, session_id: str, delta: Mapping[str, Any], *,
                           at: int) -> None:
        """Apply ``delta`` (``scoped.split_delta``: ``app:``, ``user:``, session keys;
        ``temp:`` dropped) to the scoped session's state in one transaction, and set its
        update time to ``at`` (ms). Raises as ``scope_of``, ``InvalidArgument``."""

    @abc.abstractmethod
    async def list_scoped(self, app_name: str, user_id: str | None = None, *,
                          after: str | None = None, limit: int | None = None
                          ) -> SessionPage:
        """The live sessions of ``app_name`` (of ``user_id`` only, when given), ordered
        by id, those with ``id > after``, at most ``limit`` (>= 1) of them. Raises
        ``InvalidArgument`` for a limit below 1."""

    @abc.abstractmethod
    async def delete_session(self, session_id: str, *, at: int) -> None:
        """Tombstone the session (``scoped``: hidden from loading and listing, writer
        fenced, rows kept until ``purge_session``). Raises ``SessionNotFound``
        (``SessionDeleted`` when deleted already)."""

    @abc.abstractmethod
    async def purge_session(self, session_id: str) -> None:
        """Remove a deleted session's rows: events, header, scope, session state and the
        tombstone (its id is free again). Raises ``SessionNotFound`` (not stored),
        ``StoreError`` (stored but not deleted: delete it first)."""


def require_scoped(store: EventStore, needed_by: str = "this caller") -> ScopedEventStore:
    """``store`` itself when it keeps scopes, state and deletion (a
    ``ScopedEventStore``). Raises ``Unsupported`` naming the store's type otherwise."""
    if isinstance(store, ScopedEventStore):
        return store
    raise Unsupported(f"{type(store).__name__} does not support scopes, state and "
                      f"deletion (it is not a ScopedEventStore), which {needed_by} needs")


__all__ = [
    "EventStore",
    "OpenedSession",
    "ScopedEventStore",
    "ScopedSession",
    "ScopedState",
    "SessionInfo",
    "SessionPage",
    "require_scoped",
]
