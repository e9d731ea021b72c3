"""The journal: one Ray actor per database file owns its one writer and commits the
batches of every session together (group commit), like Akka Persistence's journal.

``JournalActor`` wraps an in-process backend (any ``EventStore``; ``SqliteEventStore``
for a SQLite file), which it opens through the picklable opener it is built with;
``JournalStore`` is the ``EventStore`` a session actor uses to reach it. Both deal in
rows only: a session actor encodes each batch to rows once, in its own process, ships
them as msgpack bytes, and the journal inserts them without decoding events; a read
comes back as rows that the session actor decodes (and activates) itself.

Durable appends await the journal's commit. Buffered appends return at once: they are
queued in the session actor's process and shipped to the journal in order by one sender
task, batches of many sessions in one call; a failure is kept for its session and raised
by that session's next append or flush. The sender lingers up to ``ship_delay_s`` so that
one call carries many appends (each Ray call costs the actor about as much CPU as
serving a request); a flush, a durable append or ``SHIP_EVENTS`` queued events ship at
once. Past ``MAX_BUFFERED_EVENTS`` uncommitted events a buffered append waits for the
journal (backpressure).

When the journal dies, Ray restarts it and every write it had not answered is sent again,
marked as a resend: the new journal takes a batch the old one committed as written and
commits one it lost. A journal crash so loses nothing a session actor still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import ray

from surfacelog.actors.config import NAMESPACE as NAMESPACE
from surfacelog.actors.config import db_key, tune_gc
from surfacelog.actors.metrics import Recorder
from surfacelog.actors.protocol import (
    BatchPayload,
    decode_stored,
    encode_stored,
    pack_batch,
    unpack_batch,
)
from surfacelog.actors.replication import LitestreamSupervisor, ReplicaStatus, open_replicated
from surfacelog.actors.retry import through_restarts
from surfacelog.actors.shard_store import SCOPED_CALLS, STORE_CALLS, ForwardedScopes
from surfacelog.schema.errors import InvalidArgument
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.store.base import EventStore, SessionInfo, require_scoped
from surfacelog.store.digests import StoreReplay, replay_store
from surfacelog.store.errors import SessionNotFound
from surfacelog.store.replica import ReplicaPlan
from surfacelog.store.rows import EncodedBatch, encode_batch
from surfacelog.store.stored import StoredSession

T = TypeVar("T")
A = TypeVar("A")
BackendOpener = Callable[[], Awaitable[EventStore]]
"""What a journal is built with: a picklable callable that opens its backend."""
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


class Gathered(Generic[A, T]):
    """Concurrent requests of one kind to the journal, sent as few calls: a request sent
    while no call of its kind is in flight goes at once (with whatever joined it in the
    same turn of the event loop); those that arrive while a call is in flight go
    together in one call when it returns. A call costs both processes about as much CPU
    as serving a request, so sessions activated or appending durably at once share
    calls, and the journal commits what a call carries in one group.

    ``send`` makes one call of a list of requests and returns one outcome each, in
    order: a result, or the exception to raise to that request's caller."""

    def __init__(self, send: Callable[[list[A]], Awaitable[list[T | BaseException]]]
                 ) -> None:
        self._send = send
        self._queue: list[tuple[A, asyncio.Future[T]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def __call__(self, request: A) -> T:
        """The outcome of ``request``; raises its exception, or the call's own error
        (e.g. ``RayActorError``) when the whole call failed."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_all())
        return await future

    async def _send_all(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                outcomes = await self._send([request for request, _ in batch])
            except BaseException as exc:  # the call failed: so did each request of it
                outcomes = [exc] * len(batch)
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():  # its caller was cancelled
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)


def journal_name(db: str) -> str:
    return f"journal:{db_key(db)}"


class JournalActor:
    """Owns the database's one writer: the backend its opener returns, any
    ``EventStore``. Every method forwards to a primitive of that backend; rows cross
    Ray as bytes (``pack_batch``, ``encode_stored``), errors as the store's own
    exception types.

    ``open_backend`` is called (once, on first use) in the journal's process, and again
    in a new process when Ray restarts the journal, so it must pickle: e.g.
    ``functools.partial(SqliteEventStore.open, path, **options)`` (see
    ``sqlite_backend``). The journal never names a backend class: a second backend
    plugs in through the opener alone.
    """

    def __init__(self, open_backend: BackendOpener,
                 metrics: Recorder | None = None, replica: ReplicaPlan | None = None) -> None:
        """``metrics``: where the backend's group commits are recorded (commit batch
        size and latency, queued batches, failed commits). ``replica``: the shard is
        replicated by Litestream (``actors.replication``): on first use its file is
        restored when missing (and verified) before it is opened, and a supervised
        ``litestream replicate`` runs beside this writer until ``close``."""
        tune_gc()
        self._open_backend = open_backend
        self._replica = replica
        self._supervisor: LitestreamSupervisor | None = None
        self._store: EventStore | None = None
        self._opening = asyncio.Lock()
        self._metrics = metrics

    async def _get(self) -> EventStore:
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    if self._replica is None:
                        store = await self._open_backend()
                    else:
                        opened = await open_replicated(self._replica, self._open_backend)
                        store, self._supervisor = opened.store, opened.supervisor
                    store.observe_commits(self._metrics)
                    self._store = store
        return self._store

    async def backend(self) -> EventStore:
        """The backend, opened on first use (for an owner session actor, which runs the
        journal's code in its own process)."""
        return await self._get()

    async def ready(self) -> None:
        """Open the backend (for SQLite, bump-and-reject happens here)."""
        await self._get()

    async def pid(self) -> int:
        """The process serving this actor: a new one after Ray restarts it."""
        return os.getpid()

    async def node_id(self) -> str:
        """The Ray node this actor runs on (hex id), to check where it was placed."""
        return str(ray.get_runtime_context().get_node_id())

    async def create_stored(self, header: SessionHeader, batch: BatchPayload) -> int:
        """``EventStore.create_stored``."""
        result = await (await self._get()).create_stored(header, unpack_batch(batch))
        return result

    async def read_stored(self, session_id: str, since: int, limit: int | None,
                          bump: bool) -> bytes:
        """``EventStore.read_stored``, as ``encode_stored`` bytes: the session actor
        decodes (and, activating, validates and repairs) the rows itself, since a
        pickled ``Session`` or events would cost more than the read."""
        store = await self._get()
        return encode_stored(await store.read_stored(session_id, since=since, limit=limit,
                                                     bump=bump))

    async def read_stored_or_create(self, header: SessionHeader) -> bytes | int:
        """``EventStore.read_stored_or_create``: the read as ``encode_stored`` bytes, or
        the new session's writer epoch. One round trip for a session actor's
        activation."""
        got = await (await self._get()).read_stored_or_create(header)
        return got if isinstance(got, int) else encode_stored(got)

    async def read_stored_or_create_many(self, headers: list[SessionHeader]
                                         ) -> list[bytes | int | BaseException]:
        """``read_stored_or_create`` of each header, concurrently (so the backend may
        serve them in one transaction); one outcome each, in order: the read as
        ``encode_stored`` bytes, the new session's writer epoch, or the error."""
        store = await self._get()
        results = await asyncio.gather(*(store.read_stored_or_create(h) for h in headers),
                                       return_exceptions=True)
        return [r if isinstance(r, (int, BaseException)) else encode_stored(r)
                for r in results]

    async def append(self, session_id: str, batch: BatchPayload, epoch: int,
                     durable: bool, resend: bool = False) -> None:
        """``EventStore.append_stored`` of one batch of rows (``pack_batch``), inserted
        as they are. ``resend``: sent again after the journal died."""
        await (await self._get()).append_stored(session_id, unpack_batch(batch),
                                                epoch=epoch, durable=durable,
                                                resend=resend)

    @ray.method(enable_task_events=False)  # see SessionActor.call_many
    async def append_many(
        self, batches: list[tuple[str, BatchPayload, int]], resend: bool = False,
    ) -> list[BaseException | None]:
        """Commit several sessions' batches (in order per session); one result each."""
        store = await self._get()
        results = await asyncio.gather(
            *(store.append_stored(sid, unpack_batch(batch), epoch=epoch, durable=True,
                                  resend=resend)
              for sid, batch, epoch in batches),
            return_exceptions=True,
        )
        return list(results)

    async def flush(self) -> None:
        await (await self._get()).flush()

    async def list_sessions(self) -> list[SessionInfo]:
        result = await (await self._get()).list_sessions()
        return result

    async def store_call(self, method: str, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:
        """The backend's ``method(*args, **kwargs)``, for a store proxy in another
        process (``shard_store``: a client's ``ShardStore``, a session actor's
        ``JournalStore`` scopes); ``method`` one of ``STORE_CALLS``. Raises
        ``InvalidArgument`` for another name, ``Unsupported`` (naming the backend's
        type) for a scoped method of a backend that keeps no scopes, and what the
        method raises."""
        if method not in STORE_CALLS:
            raise InvalidArgument(f"a shard's writer does not answer {method!r}")
        store = await self._get()
        if method in SCOPED_CALLS:
            store = require_scoped(store, f"{method!r} through the shard's writer")
        return await getattr(store, method)(*args, **kwargs)

    async def holds(self, session_id: str) -> bool:
        """True when ``session_id`` is stored here (committed, or accepted for creation
        before this call: creation is a durable write)."""
        try:
            await (await self._get()).read_stored(session_id, limit=0)
        except SessionNotFound:
            return False
        return True

    async def stats(self) -> dict[str, Any]:
        """The backend's counters (for SQLite: commits, events committed...)."""
        store = await self._get()
        return dict(store.stats())

    async def writer_stats(self) -> dict[str, Any]:
        """``stats`` under the name a shard's writer answers to, journal or owner."""
        return await self.stats()

    async def replica_status(self) -> ReplicaStatus | None:
        """The shard's Litestream process (``None``: no replica, or not opened yet)."""
        return None if self._supervisor is None else self._supervisor.status()

    async def replay_digests(self) -> StoreReplay:
        """Every session committed to the shard replayed through the core here, on the
        shard's node, from the rows its store reads back (committed rows only: what a
        caller has not flushed is not in them), with the bytes the shard takes on that
        node's disk. What the load run verifies the live actors against, so that no
        other machine ever opens the shard's file. Raises the store's ``StoreError``
        when the sessions cannot be listed; a session that cannot be read is a failure
        of the result."""
        return await replay_store(await self._get())

    async def close(self) -> None:
        """Close the backend, then stop the shard's Litestream (which first ships the
        last commits to the replica)."""
        try:
            if self._store is not None:
                await self._store.close()
                self._store = None
        finally:
            if self._supervisor is not None:
                supervisor, self._supervisor = self._supervisor, None
                await asyncio.to_thread(supervisor.stop)


class JournalStore(ForwardedScopes):
    """The ``EventStore`` primitives over a journal actor handle, for use inside session
    actors; activation and the encoding of events to rows come from ``EventStore`` and
    so run here, in the session actor, not in the journal. Scopes, state and deletion
    (``ScopedEventStore``) are forwarded to the journal's backend by name
    (``JournalActor.store_call``)."""

    def __init__(self, journal: Any, ship_delay_s: float = SHIP_DELAY_S,
                 max_buffered_events: int = MAX_BUFFERED_EVENTS,
                 metrics: Recorder | None = None) -> None:
        """``metrics``: where the buffered backlog and refused buffered batches are
        recorded."""
        self._journal = journal
        self._metrics = metrics
        self._ship_delay_s = ship_delay_s
        self._max_buffered = max_buffered_events
        self._queue: list[tuple[str, BatchPayload, int, int]] = []
        self._queued_resend = False
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
        self._opens: Gathered[SessionHeader, bytes | int] = Gathered(self._open_many)
        self._durable: Gathered[tuple[str, BatchPayload, int, bool], None] = \
            Gathered(self._append_durable)

    async def _open_many(self, headers: list[SessionHeader]
                         ) -> list[bytes | int | BaseException]:
        outcomes: list[bytes | int | BaseException] = \
            await self._journal.read_stored_or_create_many.remote(headers)
        return outcomes

    async def _append_durable(self, batches: list[tuple[str, BatchPayload, int, bool]]
                              ) -> list[BaseException | None]:
        """Durable batches of several sessions in one ``append_many`` call, sent again
        while the journal restarts (see ``_resending``)."""
        wire = [(sid, payload, epoch) for sid, payload, epoch, _ in batches]
        resend = any(again for *_, again in batches)
        results: list[BaseException | None] = await _resending(
            partial(self._append_many, wire, resend))
        return results

    async def create_stored(self, header: SessionHeader, batch: EncodedBatch) -> int:
        epoch: int = await self._journal.create_stored.remote(header, pack_batch(batch))
        return epoch

    async def _settle(self, session_id: str) -> None:
        """Before taking ``session_id`` for writing: let every batch still buffered here
        reach the journal (a reload after a failed write may leave some), then forget
        its failures, which the store's state now accounts for."""
        await self.flush_session_queue()
        self._failed.pop(session_id, None)

    async def read_stored(self, session_id: str, *, since: int = 0,
                          limit: int | None = None, bump: bool = False) -> StoredSession:
        if bump:
            await self._settle(session_id)
        payload: bytes = await self._journal.read_stored.remote(session_id, since, limit,
                                                                bump)
        return decode_stored(payload)

    async def read_stored_or_create(self, header: SessionHeader) -> StoredSession | int:
        """One round trip to the journal (see ``EventStore.read_stored_or_create``),
        shared with the activations of other sessions of this actor at the same time."""
        await self._settle(header.id)
        answer = await self._opens(header)
        return answer if isinstance(answer, int) else decode_stored(answer)

    async def _forward(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                       idempotent: bool) -> Any:
        """``JournalActor.store_call``; an idempotent call is sent again while the
        journal restarts (for up to ``JOURNAL_RESTART_S``)."""
        if idempotent:
            return await _resending(
                lambda _again: self._journal.store_call.remote(method, args, kwargs))
        return await self._journal.store_call.remote(method, args, kwargs)

    async def append_with_state(self, session_id: str, events: Sequence[Event],
                                delta: Mapping[str, Any], *, epoch: int, at: int,
                                durable: bool = True) -> None:
        """See ``ScopedEventStore.append_with_state``: after this session's buffered
        batches (one order), sent once (a journal that dies leaves its outcome unknown:
        the live session then reloads, and an ``expected_seq`` resend finds the events,
        written with their delta, or writes both). The rows are encoded here first, so
        a value that cannot be stored raises ``BadEvent`` before anything is sent."""
        self._raise_failed(session_id)
        if events:
            encode_batch(session_id, events)
        await self.flush_session_queue()
        await super().append_with_state(session_id, events, delta, epoch=epoch, at=at,
                                        durable=durable)

    def _raise_failed(self, session_id: str) -> None:
        exc = self._failed.pop(session_id, None)
        if exc is not None:
            raise exc

    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None:
        """Ship ``batch``'s rows to the journal: ``durable``, at once, awaiting the
        commit; otherwise queue them for the sender (see the module's docstring), which
        may first wait for room. Raises the failure of an earlier buffered batch of the
        session, else the journal's errors for a durable batch."""
        self._raise_failed(session_id)
        count = len(batch.rows)
        if not count:
            return
        if not durable:
            # Wait before queueing, never after: a caller cancelled while waiting rolls
            # its events back, and they must not be on their way to the journal.
            while self._buffered_events >= self._max_buffered:
                self._room.clear()
                self._urgent.set()
                await self._room.wait()
        payload = pack_batch(batch)
        if durable:
            await self.flush_session_queue()
            # Shared with the durable batches of other sessions of this actor sent at
            # the same time (a resend marks the whole call, as for buffered batches).
            await self._durable((session_id, payload, epoch, resend))
            return
        self._queue.append((session_id, payload, epoch, count))
        # A resend marks its whole shipment, which is harmless for the others: a writer
        # sends each seq once, so seqs stored under its epoch can only be that batch.
        self._queued_resend = self._queued_resend or resend
        self._queued_events += count
        self._buffered_events += count
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
            if self._metrics is not None:
                self._metrics.buffered(len(batches))
            resend, self._queued_resend = self._queued_resend, False
            self._queued_events = 0
            wire = [(sid, payload, epoch) for sid, payload, epoch, _ in batches]
            try:
                results = await _resending(partial(self._append_many, wire, resend))
            except Exception as exc:  # the journal is unreachable: fail every batch
                results = [exc] * len(batches)
            for (sid, _payload, _epoch), result in zip(wire, results, strict=True):
                if result is not None:
                    if self._metrics is not None:
                        self._metrics.failed("buffered", sid, result)
                    if sid not in self._failed:
                        self._failed[sid] = result
            if self._metrics is not None:
                self._metrics.buffered(len(self._queue))
            self._buffered_events -= sum(count for *_, count in batches)
            if self._buffered_events < self._max_buffered:
                self._room.set()

    def _append_many(self, wire: list[tuple[str, BatchPayload, int]], resend: bool,
                     again: bool) -> Any:
        """The journal call that ships queued batches (``again``: sent again after the
        journal died)."""
        return self._journal.append_many.remote(wire, resend or again)

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

    async def list_sessions(self) -> list[SessionInfo]:
        sessions: list[SessionInfo] = await self._journal.list_sessions.remote()
        return sessions

    async def close(self) -> None:
        await self.flush_session_queue()
        if self._sender is not None:
            self._sender.cancel()


RemoteJournal: Any = ray.remote(JournalActor)
