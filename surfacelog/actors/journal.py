"""The journal: one Ray actor per database file owns the SQLite connection and commits
the batches of every session together (group commit), like Akka Persistence's journal.

``JournalActor`` wraps the in-process ``SqliteEventStore``; ``JournalStore`` is the
``EventStore`` a session actor uses to reach it. Durable appends await the journal's
commit. Buffered appends return at once: they are queued in the session actor's process
and shipped to the journal in order by one sender task, batches of many sessions in one
call; a failure is kept for its session and raised by that session's next append or
flush. The sender lingers up to ``ship_delay_s`` so that one call carries many appends
(each Ray call costs the actor about as much CPU as serving a request); a flush, a durable
append or ``SHIP_EVENTS`` queued events ship at once. Past ``MAX_BUFFERED_EVENTS``
uncommitted events a buffered append waits for the journal (backpressure).

When the journal dies, Ray restarts it and every write it had not answered is sent again,
marked as a resend: the new journal takes a batch the old one committed as written and
commits one it lost. A journal crash so loses nothing a session actor still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import ray

from surfacelog.actors.protocol import (
    EventsPayload,
    decode_events,
    decode_stored,
    encode_events,
    encode_stored,
)
from surfacelog.actors.retry import through_restarts
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.session.session import Session
from surfacelog.store.base import EventStore, OpenedSession, SessionInfo, SessionNotFound
from surfacelog.store.sqlite import SqliteEventStore
from surfacelog.store.stored import StoredSession, reopen, replay_stored

T = TypeVar("T")
NAMESPACE = "surfacelog"
SHIP_DELAY_S = 0.05
"""How long buffered batches wait in a session actor for company before shipping."""
SHIP_EVENTS = 4096
"""Queued events that ship at once, without waiting for ``SHIP_DELAY_S``."""
MAX_BUFFERED_EVENTS = 65_536
"""Buffered events (queued, or shipped and not yet committed) at which a buffered append
waits for the journal before it is queued: a producer faster than the disk is slowed
down instead of filling the session actor's memory."""


JOURNAL_RESTART_S = 30.0
"""How long a write or a flush waits for a journal that Ray is restarting."""


async def flush_journal(journal: Any) -> None:
    """``journal.flush``, sent again while the journal is restarting (a flush is a
    barrier: sending it twice is harmless). Raises the last ``RayActorError`` after
    ``JOURNAL_RESTART_S``, and the journal's own errors at once."""
    await through_restarts(lambda _resend: journal.flush.remote(), JOURNAL_RESTART_S)


async def _resending(send: Callable[[bool], Awaitable[T]]) -> T:
    """A write to the journal, sent again while it is dead or restarting. A write sent
    to a journal that died has an unknown outcome, and the resend (``send(True)``)
    settles it: the restarted journal takes a batch it already committed as written
    (same epoch, seqs stored) and commits one it lost. Raises the last ``RayActorError``
    after ``JOURNAL_RESTART_S``, and the journal's own errors at once."""
    return await through_restarts(send, JOURNAL_RESTART_S)


def db_key(db: str) -> str:
    """A short stable key for a database path (names the actors that serve it)."""
    return hashlib.sha1(os.path.abspath(db).encode()).hexdigest()[:10]


def journal_name(db: str) -> str:
    return f"journal:{db_key(db)}"


class JournalActor:
    """Owns the database file's one writer connection. Every method forwards to the
    in-process store; errors cross Ray as the store's own exception types."""

    def __init__(self, db: str, store_options: dict[str, Any]) -> None:
        self._db = db
        self._options = store_options
        self._store: SqliteEventStore | None = None
        self._opening = asyncio.Lock()

    async def _get(self) -> SqliteEventStore:
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    self._store = await SqliteEventStore.open(self._db, **self._options)
        return self._store

    async def ready(self) -> str:
        """Open the database (bump-and-reject happens here); returns its path."""
        await self._get()
        return self._db

    async def pid(self) -> int:
        """The process serving this actor: a new one after Ray restarts it."""
        return os.getpid()

    async def create(self, header: SessionHeader, events: Sequence[Event]) -> int:
        result = await (await self._get()).create(header, events)
        return result

    async def open_stored(self, session_id: str) -> bytes:
        """Take ``session_id`` for writing (the epoch bump) and read it whole, as
        ``encode_stored`` bytes: the session actor decodes, validates and repairs it
        itself (a pickled ``Session`` would cost more than the read)."""
        store = await self._get()
        return encode_stored(await store.read_stored(session_id, bump=True))

    async def open_or_create_stored(self, header: SessionHeader) -> bytes | int:
        """``open_stored(header.id)``; when it is not stored, ``create(header)``'s
        writer epoch. One round trip for a session actor's activation."""
        store = await self._get()
        try:
            return encode_stored(await store.read_stored(header.id, bump=True))
        except SessionNotFound:
            return await store.create(header)

    async def append(self, session_id: str, events: EventsPayload, epoch: int,
                     durable: bool, resend: bool = False) -> None:
        """Append one batch (``encode_events`` bytes or the events). ``resend``: sent
        again after the journal died (see ``SqliteEventStore.append``)."""
        await (await self._get()).append(session_id, decode_events(events), epoch=epoch,
                                         durable=durable, resend=resend)

    async def append_many(
        self, batches: list[tuple[str, EventsPayload, int]], resend: bool = False,
    ) -> list[BaseException | None]:
        """Commit several sessions' batches (in order per session); one result each."""
        store = await self._get()
        results = await asyncio.gather(
            *(store.append(sid, decode_events(events), epoch=epoch, durable=True,
                           resend=resend)
              for sid, events, epoch in batches),
            return_exceptions=True,
        )
        return list(results)

    async def flush(self) -> None:
        await (await self._get()).flush()

    async def header(self, session_id: str) -> SessionHeader:
        result = await (await self._get()).header(session_id)
        return result

    async def read_since(self, session_id: str, since_seq: int,
                         limit: int | None) -> list[Event]:
        result = await (await self._get()).read_since(session_id, since_seq, limit)
        return result

    async def load_stored(self, session_id: str) -> bytes:
        """The whole session as stored (no epoch bump), as ``encode_stored`` bytes."""
        store = await self._get()
        return encode_stored(await store.read_stored(session_id))

    async def list_sessions(self) -> list[SessionInfo]:
        result = await (await self._get()).list_sessions()
        return result

    async def stats(self) -> dict[str, Any]:
        """The store's commit counters (commits, events committed...)."""
        store = await self._get()
        return dict(store.stats())

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None


class JournalStore(EventStore):
    """``EventStore`` over a journal actor handle, for use inside session actors."""

    def __init__(self, journal: Any, ship_delay_s: float = SHIP_DELAY_S,
                 max_buffered_events: int = MAX_BUFFERED_EVENTS) -> None:
        self._journal = journal
        self._ship_delay_s = ship_delay_s
        self._max_buffered = max_buffered_events
        self._queue: list[tuple[str, EventsPayload, int, int]] = []
        self._queued_events = 0
        self._buffered_events = 0  # queued or in flight
        self._room = asyncio.Event()
        self._room.set()
        self._wakeup = asyncio.Event()
        self._urgent = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._sender: asyncio.Task[None] | None = None
        self._failed: dict[str, BaseException] = {}

    async def create(self, header: SessionHeader, events: Sequence[Event] = ()) -> int:
        epoch: int = await self._journal.create.remote(header, list(events))
        return epoch

    async def _settle(self, session_id: str) -> None:
        """Before (re)opening ``session_id``: let every batch still buffered here reach
        the journal (a reload after a failed write may leave some), then forget its
        failures, which the store's state now accounts for."""
        await self.flush_session_queue()
        self._failed.pop(session_id, None)

    async def open_session(self, session_id: str) -> OpenedSession:
        await self._settle(session_id)
        payload: bytes = await self._journal.open_stored.remote(session_id)
        return await self._reopen(session_id, decode_stored(payload))

    async def open_or_create(self, header: SessionHeader) -> OpenedSession:
        await self._settle(header.id)
        answer: bytes | int = await self._journal.open_or_create_stored.remote(header)
        if isinstance(answer, int):
            return OpenedSession(Session(header=header), answer, ())
        return await self._reopen(header.id, decode_stored(answer))

    async def _reopen(self, session_id: str, stored: StoredSession) -> OpenedSession:
        """The session of a read that took it for writing, with its seed marker and
        crash-repair closers stored durably first (as ``SqliteEventStore.open_session``
        does). Raises ``CorruptStore``, ``WriterFenced``, store errors."""
        session, repaired = reopen(session_id, stored)
        if repaired:
            await self.append(session_id, repaired, epoch=stored.epoch, durable=True)
        return OpenedSession(session, stored.epoch, repaired)

    def _raise_failed(self, session_id: str) -> None:
        exc = self._failed.pop(session_id, None)
        if exc is not None:
            raise exc

    async def append(self, session_id: str, events: Sequence[Event], *, epoch: int,
                     durable: bool = True) -> None:
        self._raise_failed(session_id)
        if not durable:
            # Wait before queueing, never after: a caller cancelled while waiting rolls
            # its events back, and they must not be on their way to the journal.
            while self._buffered_events >= self._max_buffered:
                self._room.clear()
                self._urgent.set()
                await self._room.wait()
        payload = self._encode(events)
        if durable:
            await self.flush_session_queue()
            await _resending(partial(self._journal.append.remote, session_id, payload,
                                     epoch, True))
            return
        self._queue.append((session_id, payload, epoch, len(events)))
        self._queued_events += len(events)
        self._buffered_events += len(events)
        if self._queued_events >= SHIP_EVENTS:
            self._urgent.set()
        self._idle.clear()
        self._wakeup.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    @property
    def buffered_events(self) -> int:
        """Buffered events not yet committed (queued or shipped)."""
        return self._buffered_events

    def _encode(self, events: Sequence[Event]) -> EventsPayload:
        return encode_events(events if isinstance(events, list) else list(events))

    async def _send_loop(self) -> None:
        while True:
            if not self._queue:
                self._idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self._ship_delay_s > 0 and not self._urgent.is_set():
                # A timeout only means the delay is over: ship what has gathered.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), self._ship_delay_s)
            self._urgent.clear()
            batches, self._queue = self._queue, []
            self._queued_events = 0
            wire = [(sid, payload, epoch) for sid, payload, epoch, _ in batches]
            try:
                results = await _resending(partial(self._journal.append_many.remote, wire))
            except Exception as exc:  # the journal is unreachable: fail every batch
                results = [exc] * len(batches)
            for (sid, _payload, _epoch), result in zip(wire, results, strict=True):
                if result is not None and sid not in self._failed:
                    self._failed[sid] = result
            self._buffered_events -= sum(count for *_, count in batches)
            if self._buffered_events < self._max_buffered:
                self._room.set()

    async def flush_session_queue(self) -> None:
        """Wait until every buffered batch reached the journal and was committed."""
        if self._queue or not self._idle.is_set():
            self._urgent.set()
            await self._idle.wait()

    async def flush(self) -> None:
        """Everything shipped and committed. A buffered batch's failure is raised by its
        own session's ``flush_session`` or next append, not here."""
        await self.flush_session_queue()
        await flush_journal(self._journal)

    async def flush_session(self, session_id: str) -> None:
        """Flush, raising only a failure that belongs to ``session_id``."""
        await self.flush_session_queue()
        await flush_journal(self._journal)
        self._raise_failed(session_id)

    async def header(self, session_id: str) -> SessionHeader:
        header: SessionHeader = await self._journal.header.remote(session_id)
        return header

    async def read_since(self, session_id: str, since_seq: int = 0,
                         limit: int | None = None) -> list[Event]:
        events: list[Event] = await self._journal.read_since.remote(session_id, since_seq,
                                                                      limit)
        return events

    async def load(self, session_id: str) -> Session:
        payload: bytes = await self._journal.load_stored.remote(session_id)
        return replay_stored(session_id, decode_stored(payload))

    async def list_sessions(self) -> list[SessionInfo]:
        sessions: list[SessionInfo] = await self._journal.list_sessions.remote()
        return sessions

    async def close(self) -> None:
        await self.flush_session_queue()
        if self._sender is not None:
            self._sender.cancel()


RemoteJournal: Any = ray.remote(JournalActor)
