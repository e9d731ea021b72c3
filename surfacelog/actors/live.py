"""``LiveSession``: one live session behind an actor — the core ``Session``, its writer
epoch, and the lock that applies its mutations one at a time.

It is plain asyncio (no Ray), so the same code runs in a dedicated actor, in a packed
actor hosting thousands of sessions, or in-process. Every mutation holds the lock from
validation to persistence: Ray async actors interleave calls at every ``await``, and the
lock is what keeps acceptance order equal to log order. A mutation is applied to the
core inside ``Session.atomic()`` and persisted before the block ends, so a refused or
failed write leaves the in-memory session exactly as it was.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from msgspec import UNSET, to_builtins

from surfacelog.actors.protocol import (
    Conflict,
    Durability,
    SessionStats,
    SessionUnavailable,
)
from surfacelog.schema.errors import NestingError
from surfacelog.schema.events import Event
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session import (
    AppendSpec,
    Replacement,
    Session,
    SurfaceSnapshot,
    fork,
    now_ms,
)
from surfacelog.session.compaction import (
    CompactionRequest,
    PruneRequest,
    StaleRequest,
    check_compaction,
    check_prune,
    compaction_specs,
    prune_specs,
)
from surfacelog.session.context import context_spec
from surfacelog.session.fork import SESSION_ALREADY_EXISTS, ForkError
from surfacelog.session.jsonvalue import json_equal
from surfacelog.session.pressure import ContextPressure, PressureTracker
from surfacelog.store.base import EventStore
from surfacelog.store.errors import BadEvent, SessionNotFound, WriterFenced


def _same_event(session: Session, spec: AppendSpec, event: Event) -> bool:
    """True when ``event`` is what appending ``spec`` produced (a retried request):
    the spec is built the way the append built it, at the logged seq and time, and the
    two compared as JSON values (``true != 1``)."""
    built = session.build(spec, seq=event.seq, time=event.time)
    return json_equal(to_builtins(built), to_builtins(event))


RELOAD = "reloading: a write's outcome is unknown"
"""``LiveSession.closed`` after a failed write: activate the session again."""


class Appended(NamedTuple):
    """The events of an append request; ``appended``: logged by it (else a retried
    request found them in the log)."""

    events: list[Event]
    appended: bool


class LiveSession:
    """A session taken for writing. Build it with ``activate``."""

    def __init__(self, session: Session, store: EventStore, epoch: int,
                 durability: Durability, activation_ms: float) -> None:
        if session.id is None:
            raise ValueError("a hosted session needs a header with an id")
        self.session_id: str = session.id
        self.session = session
        self.store = store
        self.epoch = epoch
        self.durability: Durability = durability
        self.lock = asyncio.Lock()
        self.closed: str | None = None
        self.activated_at_ms = now_ms()
        self.last_activity = time.monotonic()
        self.activation_ms = activation_ms
        self.appends = 0
        self.replaces = 0
        self.conflicts = 0
        self._pressure = PressureTracker()

    @classmethod
    async def activate(cls, session_id: str, store: EventStore, *,
                       durability: Durability = "durable", create: bool = True,
                       cwd: str | None = None) -> LiveSession:
        """Take ``session_id`` for writing: load it (the shared activation,
        ``surfacelog.store.activation``, bumps the writer epoch, validates the log and
        appends the seed marker and crash-repair closers durably, over any store), or
        create it when missing and ``create``. Raises ``SessionNotFound``,
        ``CorruptStore``."""
        started = time.perf_counter()
        if create:
            opened = await store.open_or_create(SessionHeader(
                version=SESSION_FORMAT_VERSION, id=session_id, created_at=now_ms(),
                cwd=UNSET if cwd is None else cwd))
        else:
            opened = await store.open_session(session_id)
        return cls(opened.session, store, opened.epoch, durability,
                   (time.perf_counter() - started) * 1000.0)

    # -- guarding ----------------------------------------------------------------------

    def _touch(self) -> None:
        if self.closed is not None:
            raise SessionUnavailable(f"session {self.session_id!r} is {self.closed}")
        self.last_activity = time.monotonic()

    async def _persist(self, events: Sequence[Event]) -> None:
        """Write ``events`` (the caller rolls the session back if this raises).

        Only ``BadEvent`` and ``NestingError`` (this batch refused whole where its rows are
        encoded, nothing written) leave the live session serving. After any other failure
        the store may hold more or less than the rolled-back session: a commit that
        failed stays queued and is retried, a journal that stayed down past
        ``JOURNAL_RESTART_S`` may have committed before it died, an earlier buffered
        batch may have been refused.
        The live session then closes as ``RELOAD``, and the next request activates the session
        again from the store, the truth; an ``expected_seq`` retry then finds its events
        or appends them, exactly once."""
        try:
            await self.store.append(self.session_id, events, epoch=self.epoch,
                                    durable=self.durability == "durable")
        except WriterFenced:
            self.closed = "fenced by a newer writer"
            raise
        except (BadEvent, NestingError):  # refused where the rows are encoded: nothing sent
            raise
        except BaseException:
            self.closed = RELOAD
            raise

    async def _commit(self, specs: Sequence[AppendSpec], owned: bool = False) -> list[Event]:
        with self.session.atomic():
            events = self.session.append_batch(specs, owned=owned)
            await self._persist(events)
        self.appends += len(events)
        return events

    # -- mutations ---------------------------------------------------------------------

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None, *,
                           owned: bool = False) -> list[Event]:
        """Append ``specs`` all or nothing and persist them.

        With ``expected_seq``: when the log already holds these very events at that seq
        (a retried request) they are returned and nothing is appended; when that seq is
        taken by other events, or lies past the end, ``Conflict``. Raises
        ``SurfaceError`` for a bad event, store errors for a failed write. ``owned``:
        see ``Session.append_batch``.
        """
        return (await self.append_request(specs, expected_seq, owned=owned)).events

    async def append_request(self, specs: Sequence[AppendSpec],
                             expected_seq: int | None = None, *,
                             owned: bool = False) -> Appended:
        """``append_batch``, telling whether the events were appended now or found in
        the log (a retried request)."""
        async with self.lock:
            self._touch()
            if expected_seq is not None:
                length = len(self.session)
                if expected_seq != length:
                    return Appended(self._replayed(specs, expected_seq, length), False)
            return Appended(await self._commit(specs, owned), True)

    def _replayed(self, specs: Sequence[AppendSpec], expected_seq: int,
                  length: int) -> list[Event]:
        if expected_seq >= 0 and expected_seq + len(specs) <= length:
            logged = self.session.events(expected_seq, len(specs))
            if all(_same_event(self.session, s, e)
                   for s, e in zip(specs, logged, strict=True)):
                return logged
        self.conflicts += 1
        raise Conflict(
            f"session {self.session_id!r}: expected seq {expected_seq} but the log has "
            f"{length} events and they are not this request's")

    def turn_open(self) -> int | None:
        """The number of the turn the log is inside, or ``None``
        (``Session.open_turn``)."""
        return self.session.open_turn()

    @contextmanager
    def _stale_is_conflict(self) -> Iterator[None]:
        """Raise the core's ``StaleRequest`` to callers as ``Conflict`` (the type they
        catch), naming the session, and count it."""
        try:
            yield
        except StaleRequest as exc:
            self.conflicts += 1
            raise Conflict(f"session {self.session_id!r}: {exc}") from None

    async def compact(self, req: CompactionRequest) -> list[Event]:
        """Append a compaction (start, summary, checkpoint replacing ``req.shadowed``,
        end) as one atomic, persisted unit — or, with ``req.error``, a failed one
        (start, end with the error). Raises ``Conflict`` when stale."""
        async with self.lock:
            self._touch()
            with self._stale_is_conflict():
                check_compaction(self.session, req)
            events = await self._commit(compaction_specs(
                req, at=len(self.session), turn=self.session.open_turn()))
            if req.error is None:
                self.replaces += 1
            return events

    async def prune(self, req: PruneRequest) -> list[Event]:
        """Append ``compaction/prune`` and a content-only rewrite of the tool result at
        ``req.target`` as one unit. Raises ``Conflict`` when the target is no longer a
        current tool result."""
        async with self.lock:
            self._touch()
            with self._stale_is_conflict():
                target = check_prune(self.session, req)
            events = await self._commit(prune_specs(target, req, at=len(self.session)))
            self.replaces += 1
            return events

    async def set_context(self, payload: dict[str, Any]) -> Event | None:
        """Make ``payload`` (a context message from a plugin) the surface's current
        context of its plugin (``session.context.context_spec``), persisted; returns the
        event appended, or ``None`` when it already was (so sending it again is
        harmless). Raises ``ContextError``, ``SurfaceError``, store errors."""
        async with self.lock:
            self._touch()
            spec = context_spec(self.session, payload)
            if spec is None:
                return None
            (event,) = await self._commit([spec])
            if event.source_event_seqs is not UNSET:
                self.replaces += 1
            return event

    async def fork_seed(self, boundary: int | None, child_id: str | None) -> Session:
        """The child a fork at ``boundary`` would store (its header and seed log),
        storing nothing: for a child that goes to another shard. Raises ``ForkError``
        (but not for a child id stored elsewhere: the caller checks that)."""
        async with self.lock:
            self._touch()
            return fork({self.session_id: self.session}, self.session_id, boundary, child_id)

    async def fork(self, boundary: int | None, child_id: str | None) -> SessionHeader:
        """Store a child seeded with ``log[0..boundary]``; returns its header. The
        child is activated like any session when first used. Raises ``ForkError``."""
        async with self.lock:
            self._touch()
            if child_id is not None:
                try:
                    await self.store.header(child_id)
                except SessionNotFound:
                    pass
                else:
                    raise ForkError(SESSION_ALREADY_EXISTS,
                                    f"session {child_id!r} already exists")
            child = fork({self.session_id: self.session}, self.session_id, boundary, child_id)
            assert child.header is not None
            await self.store.create(child.header, list(child.log))
            return child.header

    async def flush(self) -> None:
        """Wait until everything this session accepted is durable. Raises the failure of a
        write that is not: the session then holds events the store lacks, so it
        closes to ``RELOAD`` (the failure is reported once; the next request reloads)."""
        self._touch()
        try:
            await self.store.flush_session(self.session_id)
        except BaseException:
            self.closed = RELOAD
            raise

    # -- reads ---------------------------------------------------------------------------

    def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        self._touch()
        return self.session.events(since_seq, limit)

    def surface(self) -> SurfaceSnapshot:
        self._touch()
        return self.session.snapshot()

    def surface_events(self) -> tuple[SurfaceSnapshot, list[Event]]:
        """The surface and the event of each node, for compactors and pruners."""
        self._touch()
        snap = self.session.snapshot()
        return snap, [self.session.event(s) for s in snap.nodes]

    async def pressure(self) -> ContextPressure:
        """The session's context pressure (``session.pressure``), read incrementally.
        Taken under the lock: a batch whose commit is in flight may still be rolled
        back, and must not be observed before it is kept."""
        async with self.lock:
            self._touch()
            tracker = self._pressure
            tracker.observe(self.session.events(tracker.seen))
            return tracker.pressure(self.session.event(s) for s in self.session.surface.nodes)

    def derive_messages(self, as_of: int | None = None) -> list[dict[str, Any]]:
        self._touch()
        return self.session.derive_messages(as_of).to_list()

    def fold(self) -> list[Replacement]:
        self._touch()
        return list(self.session.replacements())

    def stats(self) -> SessionStats:
        surface = self.session.surface
        return SessionStats(
            session_id=self.session_id,
            length=len(self.session),
            nodes=len(surface.nodes),
            replace_generation=surface.replace_generation,
            epoch=self.epoch,
            appends=self.appends,
            replaces=self.replaces,
            conflicts=self.conflicts,
            activated_at_ms=self.activated_at_ms,
            last_activity_ms=now_ms() - int((time.monotonic() - self.last_activity) * 1000),
            activation_ms=self.activation_ms,
            pid=os.getpid(),
        )

    async def passivate(self) -> None:
        """Flush and stop serving; later requests raise ``SessionUnavailable``."""
        async with self.lock:
            if self.closed is None:
                try:
                    await self.store.flush_session(self.session_id)
                finally:
                    # Closed even when a write failed: the next activation reloads the
                    # session from the store, which is the truth either way.
                    self.closed = "passivated"


__all__ = ["LiveSession"]
