"""``LiveSession``: one live session and its writer lifecycle — the core ``Session``, its
writer epoch, and the lock that applies its mutations one at a time.

The lifecycle, written once for every host (the Ray session actor, the embedded handle
the adapters use in-process):

1. **Loaded, not taken** (``LiveSession.load``): the stored log replayed through the
   core with ``EventStore.load`` — no writer epoch bump, no seed marker, nothing written,
   nobody fenced. A session that is not stored yet is an empty one, stored by the first
   write.
2. **Taken** at the first write (``take``, or ``open_or_create`` when it was not
   stored): the writer epoch is bumped, which fences every earlier writer, and the seed
   marker and crash-repair closers are stored durably under the new epoch. A session
   stored further since the load is read again whole first (the write is then refused
   as a ``Conflict`` when it expected the old length, and re-planned by its caller).
   ``LiveSession.activate`` loads and takes in one step (what a session actor does: it
   is the session's writer in the deployment and repairs a crashed turn before it
   serves).
3. **Writing**: a mutation is applied to the core inside ``Session.atomic()`` and
   persisted under the epoch before the block ends, so a refused or failed write leaves
   the in-memory session exactly as it was. ``WriterFenced`` closes the session as
   fenced; a write of unknown outcome closes it as ``RELOAD`` (its host loads it again
   from the store, the truth).

It is plain asyncio (no Ray). Every mutation holds the lock from validation to
persistence: Ray async actors (and any asyncio caller) interleave calls at every
``await``, and the lock is what keeps acceptance order equal to log order.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from msgspec import UNSET, Struct, to_builtins

from surfacelog.runtime.choices import Durability
from surfacelog.runtime.errors import Conflict, SessionUnavailable
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
    check_compaction,
    check_prune,
    compaction_specs,
    prune_specs,
)
from surfacelog.session.compaction_policy import PruneCandidates, measure_result, oversized_among
from surfacelog.session.context import context_spec
from surfacelog.session.errors import ForkError, StaleRequest
from surfacelog.session.fork import SESSION_ALREADY_EXISTS
from surfacelog.session.jsonvalue import json_equal
from surfacelog.session.pressure import ContextPressure, PressureTracker, count_tokens
from surfacelog.session.surface import SurfaceTally
from surfacelog.store.base import EventStore, require_scoped
from surfacelog.store.errors import BadEvent, SessionDeleted, SessionNotFound, WriterFenced
from surfacelog.store.scoped import split_delta

RELOAD = "reloading: a write's outcome is unknown"
"""``LiveSession.closed`` after a failed write: load the session again."""

FENCED = "fenced by a newer writer"
"""``LiveSession.closed`` after ``WriterFenced``: another writer took the session."""


def _same_event(session: Session, spec: AppendSpec, event: Event) -> bool:
    """True when ``event`` is what appending ``spec`` produced (a retried request):
    the spec is built the way the append built it, at the logged seq and time, and the
    two compared as JSON values (``true != 1``)."""
    built = session.build(spec, seq=event.seq, time=event.time)
    return json_equal(to_builtins(built), to_builtins(event))


def new_header(session_id: str, cwd: str | None = None) -> SessionHeader:
    """The header of a session created now by a live session's first write."""
    return SessionHeader(version=SESSION_FORMAT_VERSION, id=session_id,
                         created_at=now_ms(), cwd=UNSET if cwd is None else cwd)


class Appended(NamedTuple):
    """The events of an append request; ``appended``: logged by it (else a retried
    request found them in the log)."""

    events: list[Event]
    appended: bool


class StateDelta(NamedTuple):
    """A state delta written with an append, all or nothing
    (``ScopedEventStore.append_with_state``): ``delta`` (``app:``, ``user:``, session
    keys; ``temp:`` dropped) and its update time ``at`` (ms)."""

    delta: Mapping[str, Any]
    at: int


class SessionStats(Struct, frozen=True):
    """What a host reports about one live session (``epoch`` is 0 while it is loaded,
    not taken)."""

    session_id: str
    length: int
    nodes: int
    replace_generation: int
    epoch: int
    appends: int
    replaces: int
    conflicts: int
    activated_at_ms: int
    last_activity_ms: int
    activation_ms: float
    pid: int


class LiveSession:
    """One session, loaded (``load``) or taken for writing (``activate``); see the
    module's docstring for its lifecycle."""

    def __init__(self, session: Session, store: EventStore, epoch: int | None,
                 durability: Durability, activation_ms: float, *,
                 stored: bool = True) -> None:
        """Use ``load`` or ``activate``. ``epoch`` ``None``: loaded, not taken;
        ``stored``: whether the store holds the session (a loaded one may not be
        stored yet)."""
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
        self._stored = stored
        self._pressure = PressureTracker()
        # What the watchers ask on every pass, kept up as the surface grows.
        self._surface_tokens = SurfaceTally(int, count_tokens)
        self._result_sizes: SurfaceTally[list[tuple[int, int]]] = SurfaceTally(
            list, measure_result)

    @classmethod
    async def activate(cls, session_id: str, store: EventStore, *,
                       durability: Durability = "durable", create: bool = True,
                       cwd: str | None = None) -> LiveSession:
        """Load ``session_id`` and take it for writing in one step (the shared
        activation, ``surfacelog.store.activation``: epoch bump, validation, seed marker
        and crash-repair closers stored durably), or create it when missing and
        ``create``. Raises ``SessionNotFound`` (``SessionDeleted``), ``CorruptStore``,
        the store's errors."""
        started = time.perf_counter()
        if create:
            opened = await store.open_or_create(new_header(session_id, cwd))
        else:
            opened = await store.open_session(session_id)
        return cls(opened.session, store, opened.epoch, durability,
                   (time.perf_counter() - started) * 1000.0)

    @classmethod
    async def load(cls, session_id: str, store: EventStore, *,
                   durability: Durability = "durable", create: bool = True,
                   cwd: str | None = None) -> LiveSession:
        """Load ``session_id`` without taking it (``EventStore.load``: no epoch bump,
        nothing written, nobody fenced); the first mutation takes it. When it is not
        stored and ``create``: an empty session, stored by the first mutation. Raises
        ``SessionNotFound`` (not stored and not ``create``), ``SessionDeleted`` (always:
        a deleted id stays taken), ``CorruptStore``, the store's errors."""
        started = time.perf_counter()
        try:
            session, stored = await store.load(session_id), True
        except SessionDeleted:
            raise  # its id stays taken until a purge: never created again here
        except SessionNotFound:
            if not create:
                raise
            session, stored = Session(header=new_header(session_id, cwd)), False
        return cls(session, store, None, durability,
                   (time.perf_counter() - started) * 1000.0, stored=stored)

    @property
    def taken(self) -> bool:
        """Whether the session is taken for writing (it has a writer epoch)."""
        return self.epoch is not None

    # -- guarding ----------------------------------------------------------------------

    def _touch(self) -> None:
        if self.closed is not None:
            raise SessionUnavailable(f"session {self.session_id!r} is {self.closed}")
        self.last_activity = time.monotonic()

    async def _take(self) -> int:
        """The writer epoch, taking the session first when it is only loaded (caller
        holds the lock). On failure the session stays loaded as it was (``take`` is all
        or nothing), except ``WriterFenced``: an even newer writer took it meanwhile,
        and this one closes as fenced. Raises ``SessionNotFound`` (``SessionDeleted``),
        ``CorruptStore``, ``WriterFenced``, the store's errors."""
        if self.epoch is not None:
            return self.epoch
        try:
            if self._stored:
                opened = await self.store.take(self.session_id, self.session)
            else:
                assert self.session.header is not None
                opened = await self.store.open_or_create(self.session.header)
        except WriterFenced:
            self.closed = FENCED
            raise
        if opened.session is not self.session:
            # Read again whole (another writer stored events since the load): what the
            # pressure tracker saw may no longer be this log's prefix.
            self.session = opened.session
            self._pressure = PressureTracker()
        self._stored, self.epoch = True, opened.epoch
        return opened.epoch

    async def _persist(self, events: Sequence[Event], state: StateDelta | None = None
                       ) -> None:
        """Write ``events`` (and ``state`` with them, all or nothing) under the writer
        epoch; the caller rolls the session back if this raises.

        Only ``BadEvent`` and ``NestingError`` (this batch refused whole where its rows are
        encoded, nothing written) leave the live session serving. After any other failure
        the store may hold more or less than the rolled-back session: a commit that
        failed stays queued and is retried, a journal that stayed down past
        ``JOURNAL_RESTART_S`` may have committed before it died, an earlier buffered
        batch may have been refused.
        The live session then closes as ``RELOAD``, and its host loads the session
        again from the store, the truth; an ``expected_seq`` retry then finds its events
        or appends them, exactly once."""
        assert self.epoch is not None
        durable = self.durability == "durable"
        try:
            if state is None:
                await self.store.append(self.session_id, events, epoch=self.epoch,
                                        durable=durable)
            else:
                await require_scoped(self.store, "a state delta").append_with_state(
                    self.session_id, events, state.delta, epoch=self.epoch, at=state.at,
                    durable=durable)
        except WriterFenced:
            self.closed = FENCED
            raise
        except (BadEvent, NestingError):  # refused where the rows are encoded: nothing sent
            raise
        except BaseException:
            self.closed = RELOAD
            raise

    async def _commit(self, specs: Sequence[AppendSpec], owned: bool = False,
                      state: StateDelta | None = None) -> list[Event]:
        if self.epoch is None:  # only loaded: the first write takes it
            await self._take()
        with self.session.atomic():
            events = self.session.append_batch(specs, owned=owned)
            await self._persist(events, state)
        self.appends += len(events)
        return events

    # -- mutations ---------------------------------------------------------------------

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None, *,
                           owned: bool = False) -> list[Event]:
        """Append ``specs`` all or nothing and persist them, taking the session first
        when it is only loaded.

        With ``expected_seq``: when the log already holds these very events at that seq
        (a retried request) they are returned and nothing is appended; when that seq is
        taken by other events, or lies past the end, ``Conflict``. Raises
        ``SurfaceError`` for a bad event, store errors for a failed write. ``owned``:
        see ``Session.append_batch``.
        """
        return (await self.append_request(specs, expected_seq, owned=owned)).events

    async def append_request(self, specs: Sequence[AppendSpec],
                             expected_seq: int | None = None, *,
                             owned: bool = False,
                             state: StateDelta | None = None) -> Appended:
        """``append_batch``, telling whether the events were appended now or found in
        the log (a retried request). ``state``: a state delta written with the events,
        all or nothing (a retried request found in the log had its delta written with
        it); raises ``InvalidArgument`` for a value that is not JSON and ``Unsupported``
        when the store keeps no state, before anything is appended."""
        if state is not None:
            require_scoped(self.store, "a state delta")
            split_delta(state.delta)  # a bad value: refused before the session changes
        async with self.lock:
            self._touch()
            await self._take()  # its seal may lengthen the log: checked after it
            if expected_seq is not None:
                length = len(self.session)
                if expected_seq != length:
                    return Appended(self._replayed(specs, expected_seq, length), False)
            return Appended(await self._commit(specs, owned, state), True)

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
            await self._take()
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
            await self._take()
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
            await self._take()
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
    # A host calls them holding ``lock``: a batch whose write is in flight may still be
    # rolled back, and must not be observed before it is kept.

    def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        self._touch()
        return self.session.events(since_seq, limit)

    def surface(self) -> SurfaceSnapshot:
        self._touch()
        return self.session.snapshot()

    def current(self) -> Session:
        """The core session itself, not copied: for a reader in this process that is
        done with it before its next ``await`` (a write may change it then)."""
        self._touch()
        return self.session

    def surface_events(self) -> tuple[SurfaceSnapshot, list[Event]]:
        """The surface and the event of each node, for compactors and pruners."""
        self._touch()
        snap = self.session.snapshot()
        return snap, [self.session.event(s) for s in snap.nodes]

    def oversized_results(self, max_chars: int) -> PruneCandidates:
        """The current tool results over ``max_chars`` characters: what a pruner
        reads, instead of the whole surface (their sizes kept by a ``SurfaceTally``)."""
        self._touch()
        session = self.session
        sizes = session.tally(self._result_sizes)
        return oversized_among(session.surface.replace_generation, sizes, session.event,
                               max_chars=max_chars)

    async def pressure(self) -> ContextPressure:
        """The session's context pressure (``session.pressure``), read incrementally.
        Taken under the lock: a batch whose commit is in flight may still be rolled
        back, and must not be observed before it is kept."""
        async with self.lock:
            return self._read_pressure()

    def pressure_now(self) -> ContextPressure | None:
        """``pressure`` without waiting: ``None`` while a mutation holds the lock (the
        caller then awaits ``pressure``). What a watcher's pass over many sessions
        reads, one session after another with no task each. Raises
        ``SessionUnavailable`` once the session is closed."""
        return None if self.lock.locked() else self._read_pressure()

    def _read_pressure(self) -> ContextPressure:
        self._touch()
        tracker = self._pressure
        tracker.observe(self.session.events(tracker.seen))
        return tracker.pressure(self.session.tally(self._surface_tokens))

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
            epoch=self.epoch or 0,
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


__all__ = ["FENCED", "RELOAD", "Appended", "LiveSession", "SessionStats",
           "StateDelta", "new_header"]
