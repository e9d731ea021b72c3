"""The client API: ``connect`` -> ``Client``; ``client.session(id)`` -> ``SessionHandle``.

The directory is Ray's: session actors are named actors in the ``surfacelog`` namespace,
got or created by name (``get_if_exists``), so any process of the cluster reaches the
same actor for the same session. Handles unwrap Ray's task errors, so a caller catches
``SurfaceError``, ``Conflict``, ``WriterFenced``... exactly as the actor raised them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import zlib
from collections.abc import Sequence
from typing import Any, Final

import ray
from msgspec import UNSET
from ray.exceptions import RayActorError, RayTaskError

from surfacelog.actors.journal import (
    NAMESPACE,
    RemoteJournal,
    db_key,
    flush_journal,
    journal_name,
)
from surfacelog.actors.protocol import (
    ActorStats,
    CompactionRequest,
    Durability,
    LoggedEvents,
    Placement,
    PruneRequest,
    SessionStats,
    decode_events,
    decode_messages,
    encode_append,
    failure_line,
)
from surfacelog.actors.retry import Backoff
from surfacelog.actors.session_actor import RemoteSessionActor
from surfacelog.schema.events import Event
from surfacelog.session import AppendSpec, Replacement, SurfaceSnapshot
from surfacelog.store.base import CommitFailed, SessionInfo, StoreError
from surfacelog.store.sqlite import sqlite_backend

RETRY_FOR_S = 30.0
"""How long a handle keeps resending an idempotent request whose actor died or is
restarting (Ray restarts it; a dedicated actor's new process takes about a second)."""
_MAX_CONCURRENCY = 10_000


async def _shutdown_actor(actor: Any) -> list[str]:
    """Passivate every session of ``actor``; the write failures it found, by session."""
    # A dedicated actor exits after passivating its idle session: it has nothing left to
    # flush. A crashed one lost its buffered writes, which its drivers see as missing.
    with contextlib.suppress(RayActorError):
        failures: list[str] = await actor.shutdown.remote()
        return failures
    return []


def _run_sync(coro: Any) -> None:
    """Run ``coro`` to completion from sync code, inside or outside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


_UNKNOWN_OUTCOME: Final = (RayActorError, CommitFailed)
"""Errors a session actor may relay after which its write may or may not have happened."""


def _unwrap(exc: RayTaskError) -> BaseException:
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


class Client:
    """A connection to the sessions of one database file on a Ray cluster."""

    def __init__(self, db: str, placement: Placement, packs: int, durability: Durability,
                 idle_timeout_s: float | None, journal: Any) -> None:
        self.db = db
        self.placement: Placement = placement
        self.packs = packs
        self.durability: Durability = durability
        self.idle_timeout_s = idle_timeout_s
        self.journal = journal
        self._actors: dict[str, Any] = {}
        self._key = db_key(db)
        self.resent = 0
        """Requests this client's handles sent again after their actor died."""
        self.retry_for_s = RETRY_FOR_S

    def actor_name(self, session_id: str) -> str:
        """The Ray actor name that serves ``session_id`` in this placement."""
        key = self._key
        if self.placement == "dedicated":
            return f"session:{key}:{session_id}"
        shard = zlib.crc32(session_id.encode()) % self.packs
        return f"pack:{key}:{shard}"

    def actor(self, session_id: str) -> Any:
        """Get or create the actor serving ``session_id``."""
        name = self.actor_name(session_id)
        actor = self._actors.get(name)
        if actor is None:
            actor = RemoteSessionActor.options(
                name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
                max_restarts=-1, max_task_retries=0, num_cpus=0,
                max_concurrency=_MAX_CONCURRENCY,
            ).remote(self.db, self.placement, self.durability, self.idle_timeout_s)
            self._actors[name] = actor
        return actor

    def forget(self, session_id: str) -> None:
        """Drop the cached actor handle (after the actor died) to resolve it again."""
        self._actors.pop(self.actor_name(session_id), None)

    def session(self, session_id: str) -> SessionHandle:
        """A handle on ``session_id`` (created on its first request if missing)."""
        return SessionHandle(self, session_id)

    async def list_sessions(self) -> list[SessionInfo]:
        sessions: list[SessionInfo] = await self.journal.list_sessions.remote()
        return sessions

    async def journal_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = await self.journal.stats.remote()
        return stats

    async def actor_stats(self) -> list[ActorStats]:
        """One entry per session actor this client has resolved."""
        return list(await asyncio.gather(*(a.actor_stats.remote()
                                           for a in self._actors.values())))

    async def passivate_all(self) -> list[str]:
        """Passivate (flush) every session of every actor this client has resolved,
        then flush the journal. Returns the write failures found, one line per session
        (``session: error``); with buffered durability each means acknowledged events
        that are not stored. Every session is passivated either way."""
        found = await asyncio.gather(*(_shutdown_actor(a) for a in list(self._actors.values())))
        failures = [line for lines in found for line in lines]
        try:
            await flush_journal(self.journal)
        except (RayActorError, RayTaskError) as exc:
            error = _unwrap(exc) if isinstance(exc, RayTaskError) else exc
            failures.append(failure_line("(journal flush)", error))
        return failures

    async def flush(self) -> None:
        """``passivate_all``, raising ``StoreError`` when a write failed."""
        failures = await self.passivate_all()
        if failures:
            raise StoreError(f"{len(failures)} session(s) have writes that failed: "
                             + "; ".join(failures[:5]))

    def shutdown(self) -> list[str]:
        """Passivate (flush) and kill every actor this client resolved, and the journal.
        Returns ``passivate_all``'s write failures (the actors are stopped regardless)."""
        failures: list[str] = []

        async def passivate() -> None:
            failures.extend(await self.passivate_all())

        try:
            _run_sync(passivate())
        finally:
            for actor in self._actors.values():
                ray.kill(actor, no_restart=True)
            with contextlib.suppress(RayActorError):
                ray.get(self.journal.close.remote())
            ray.kill(self.journal, no_restart=True)
            self._actors.clear()
        return failures


def connect(address: str | None = None, db: str = "surfacelog.db", *,
            placement: Placement = "dedicated", packs: int = 8,
            durability: Durability = "durable", idle_timeout_s: float | None = 600.0,
            store_options: dict[str, Any] | None = None,
            journal_resources: dict[str, float] | None = None,
            **ray_init: Any) -> Client:
    """Connect to (or start) Ray and the journal of ``db``; returns a ``Client``.

    ``address=None`` starts an embedded local Ray unless one is initialised already.
    The journal's backend is ``SqliteEventStore.open(db, **store_options)``.
    ``journal_resources`` pins the journal actor to the node that holds the database
    file (give that node a custom resource). Raises ``VersionRefused`` when ``db`` was
    written by another build.
    """
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, **ray_init)
    path = os.path.abspath(db)
    journal = RemoteJournal.options(
        name=journal_name(path), namespace=NAMESPACE, get_if_exists=True,
        lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=0,
        max_concurrency=_MAX_CONCURRENCY, resources=journal_resources or {},
    ).remote(sqlite_backend(path, **(store_options or {})))
    try:
        ray.get(journal.ready.remote())
    except RayTaskError as exc:
        ray.kill(journal, no_restart=True)
        raise _unwrap(exc) from None
    return Client(path, placement, packs, durability, idle_timeout_s, journal)


class SessionHandle:
    """Async methods mirroring the session actor's requests, for one session.

    A request that failed because the actor died (or is restarting) is sent again to the
    actor Ray restarts (or a newly created one), with backoff for up to
    ``Client.retry_for_s``, only when resending cannot apply it twice: reads, flushes,
    appends that carry ``expected_seq``, and replace requests (which are refused as stale
    once applied).
    """

    def __init__(self, client: Client, session_id: str) -> None:
        self.client = client
        self.session_id = session_id

    async def _call(self, method: str, *args: Any, idempotent: bool,
                    keyed: bool = True, relayed: bool = True) -> Any:
        """Call ``method`` with the session id first (unless not ``keyed``: the
        arguments then name the session themselves). ``relayed``: an idempotent request
        is also resent after the session actor relays a write of unknown outcome (not
        for a flush, whose caller must learn that a write failed)."""
        backoff = Backoff(self.client.retry_for_s)
        while True:
            actor = self.client.actor(self.session_id)
            try:
                if keyed:
                    return await getattr(actor, method).remote(self.session_id, *args)
                return await getattr(actor, method).remote(*args)
            except RayTaskError as exc:
                error = _unwrap(exc)
                # The session actor's journal died or its commit failed: the session
                # reloads from the store, and an idempotent request may be sent again.
                if not (idempotent and relayed and isinstance(error, _UNKNOWN_OUTCOME)) \
                        or backoff.exhausted():
                    raise error from None
            except RayActorError:  # died, or restarting (ActorUnavailableError)
                self.client.forget(self.session_id)
                if not idempotent or backoff.exhausted():
                    raise
            self.client.resent += 1
            await backoff.wait()

    async def append(self, type: str, data: Any = UNSET, *, surface_op: Any = UNSET,
                     source_event_seqs: Any = UNSET, ignorable: Any = UNSET,
                     expected_seq: int | None = None) -> Event:
        """Append one event; returns it as logged. Raises ``SurfaceError``,
        ``Conflict`` (``expected_seq`` taken), store errors."""
        spec = AppendSpec(type, data, surface_op, source_event_seqs, ignorable)
        request = encode_append(self.session_id, (spec,), expected_seq)
        if request is None:
            event: Event = await self._call("append", spec, expected_seq,
                                            idempotent=expected_seq is not None)
            return event
        reply = await self._call("append_wire", request, keyed=False,
                                 idempotent=expected_seq is not None)
        return LoggedEvents.from_reply(request, 1, reply)[0]

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> LoggedEvents:
        """Append several events, all or nothing; returns them as logged (usually a
        ``LoggedEvents``: its ``seqs`` are known at once, its events made on first
        use). Raises as ``append``."""
        request = encode_append(self.session_id, specs, expected_seq)
        if request is None:
            events: list[Event] = await self._call("append_batch", list(specs),
                                                   expected_seq,
                                                   idempotent=expected_seq is not None)
            return LoggedEvents.of(events)
        reply = await self._call("append_wire", request, keyed=False,
                                 idempotent=expected_seq is not None)
        return LoggedEvents.from_reply(request, len(specs), reply)

    async def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        return decode_events(await self._call("events_wire", since_seq, limit,
                                              idempotent=True))

    async def surface(self) -> SurfaceSnapshot:
        snap: SurfaceSnapshot = await self._call("surface", idempotent=True)
        return snap

    async def surface_events(self) -> tuple[SurfaceSnapshot, list[Event]]:
        out: tuple[SurfaceSnapshot, list[Event]] = await self._call("surface_events",
                                                                    idempotent=True)
        return out

    async def derive_messages(self, as_of: int | None = None) -> list[dict[str, Any]]:
        return decode_messages(await self._call("derive_wire", as_of, idempotent=True))

    async def fold(self) -> list[Replacement]:
        replacements: list[Replacement] = await self._call("fold", idempotent=True)
        return replacements

    async def compact(self, request: CompactionRequest) -> list[Event]:
        events: list[Event] = await self._call("compact", request, idempotent=True)
        return events

    async def prune(self, request: PruneRequest) -> list[Event]:
        events: list[Event] = await self._call("prune", request, idempotent=True)
        return events

    async def replace(self, request: CompactionRequest | PruneRequest) -> list[Event]:
        """Send a replace request (compaction or prune); ``Conflict`` when stale."""
        events: list[Event] = await self._call("replace", request, idempotent=True)
        return events

    async def fork(self, boundary: int | None = None,
                   child_id: str | None = None) -> SessionHandle:
        """Fork a child seeded with ``log[0..boundary]``; returns its handle."""
        header = await self._call("fork", boundary, child_id, idempotent=False)
        return SessionHandle(self.client, header.id)

    async def flush(self) -> None:
        await self._call("flush", idempotent=True, relayed=False)

    async def stats(self) -> SessionStats:
        stats: SessionStats = await self._call("stats", idempotent=True)
        return stats

    async def passivate(self) -> bool:
        done: bool = await self._call("passivate", idempotent=True, relayed=False)
        return done
