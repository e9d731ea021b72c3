"""``SessionLike``: the async operations on one session that the framework adapters
need, which both the Ray ``SessionHandle`` (``surfacelog.actors.client``) and the
in-process ``EmbeddedHandle`` below provide; and writes planned from a view
(``append_planned``, ``compact_planned``), which work the same over either.

A write planned from a read carries ``expected_seq`` = the length the read saw, so it
lands exactly after that read, all or nothing, and exactly once when it is sent again
after an unknown outcome. When anything was appended in between (another writer, or
the seed marker and crash-repair closers that taking a loaded session adds), the
session refuses it with ``Conflict`` and the planner reads again and plans anew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from surfacelog.runtime.choices import Durability
from surfacelog.runtime.errors import SessionUnavailable
from surfacelog.runtime.live import RELOAD, LiveSession, StateDelta
from surfacelog.schema.events import Event
from surfacelog.session import AppendSpec, Session, SurfaceSnapshot
from surfacelog.session.compaction import CompactionRequest, PruneRequest
from surfacelog.session.errors import StaleRequest
from surfacelog.store.base import EventStore

T = TypeVar("T")

MAX_REPLANS: Final = 50
"""How many times a planned write is planned again after a ``Conflict`` before it gives
up (re-raising the last ``Conflict``)."""


@runtime_checkable
class SessionLike(Protocol):
    """One session, wherever it lives: the operations an adapter builds on.

    Reads see what the session accepted (and, for a session only loaded, what was
    stored when it was loaded). Writes are all or nothing; with ``expected_seq`` they
    land exactly at that seq or raise ``Conflict`` (nothing appended), and a resend of
    the same request after an unknown outcome returns the events logged the first time.
    """

    session_id: str

    async def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The logged events with ``seq >= since_seq``, at most ``limit``."""
        ...

    async def surface(self) -> SurfaceSnapshot:
        """The surface: its nodes, replace generation and the log's length."""
        ...

    async def surface_events(self) -> tuple[SurfaceSnapshot, list[Event]]:
        """The surface and the event of each of its nodes, from one read."""
        ...

    async def derive_messages(self, as_of: int | None = None) -> list[dict[str, Any]]:
        """The messages the model sees (as of seq ``as_of``)."""
        ...

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> Sequence[Event]:
        """Append ``specs`` all or nothing; returns the logged events. Raises
        ``SurfaceError``, ``Conflict``, the store's errors."""
        ...

    async def append_with_state(self, specs: Sequence[AppendSpec],
                                delta: Mapping[str, Any], *, at: int,
                                expected_seq: int | None = None) -> Sequence[Event]:
        """``append_batch`` with a state delta written in the same write, all or nothing
        (``ScopedEventStore.append_with_state``; ``at``: its update time, ms). Raises as
        ``append_batch``, ``InvalidArgument`` (a value that is not JSON),
        ``Unsupported`` (the store keeps no state), ``ScopeConflict`` (no scope)."""
        ...

    async def compact(self, request: CompactionRequest) -> list[Event]:
        """Apply a compaction request. Raises ``Conflict`` when it is stale."""
        ...

    async def prune(self, request: PruneRequest) -> list[Event]:
        """Apply a prune request. Raises ``Conflict`` when it is stale."""
        ...

    async def flush(self) -> None:
        """Wait until every accepted write is durable; raise the failure of one that
        is not."""
        ...

    async def passivate(self) -> bool:
        """Flush and stop holding the session where it is served (the next request
        loads it again); whether it was held."""
        ...


class SurfaceView:
    """The session as one read saw it: its surface, and the event of each node.

    Consume it before the next ``await``: a view of an ``EmbeddedHandle`` is the live
    session itself (nothing copied, ``live``), which the next write may change; any
    other is a copy from one ``surface_events`` read (``of``)."""

    __slots__ = ("_event", "generation", "length", "nodes")

    def __init__(self, nodes: Sequence[int], length: int, generation: int,
                 event: Callable[[int], Event]) -> None:
        self.nodes = nodes
        """The surface nodes, in order."""
        self.length = length
        """The log's length (the seq the next event gets)."""
        self.generation = generation
        """The surface's ``replace_generation``."""
        self._event = event

    @classmethod
    def of(cls, snapshot: SurfaceSnapshot, events: Sequence[Event]) -> SurfaceView:
        """The view of one ``surface_events`` read: ``events`` are the nodes' events."""
        by_seq = dict(zip(snapshot.nodes, events, strict=True))
        return cls(snapshot.nodes, snapshot.length, snapshot.replace_generation,
                   by_seq.__getitem__)

    @classmethod
    def live(cls, session: Session) -> SurfaceView:
        """A view of an in-process ``session`` itself, nothing copied (a long surface
        costs nothing to view): valid until the session next changes."""
        surface = session.surface
        return cls(surface.nodes, len(session), surface.replace_generation, session.event)

    @classmethod
    async def read(cls, session: SessionLike) -> SurfaceView:
        """A view of ``session`` now: one ``surface_events`` read, or for an
        ``EmbeddedHandle`` its live session (``EmbeddedHandle.view``)."""
        if isinstance(session, EmbeddedHandle):
            return await session.view()
        return cls.of(*await session.surface_events())

    def event(self, seq: int) -> Event:
        """The event at ``seq``, a node of this view."""
        return self._event(seq)


async def append_planned(session: SessionLike,
                         plan: Callable[[SurfaceView], Sequence[AppendSpec]], *,
                         max_replans: int = MAX_REPLANS) -> Sequence[Event]:
    """Append ``plan(view)`` right after the ``view`` it was planned on, all or nothing
    (``expected_seq=view.length``); nothing when the plan is empty. On ``Conflict``
    (something was appended since the view) read a new view and plan again, up to
    ``max_replans`` times; then the last ``Conflict`` is raised. Raises what the plan
    and ``append_batch`` raise."""
    for attempt in range(max_replans + 1):
        view = await SurfaceView.read(session)
        specs = plan(view)
        if not specs:
            return []
        try:
            return await session.append_batch(list(specs), expected_seq=view.length)
        except StaleRequest:  # Conflict: someone appended since the view
            if attempt == max_replans:
                raise
    raise AssertionError("unreachable")


async def compact_planned(session: SessionLike,
                          plan: Callable[[SurfaceView], CompactionRequest | None], *,
                          max_replans: int = MAX_REPLANS) -> list[Event]:
    """Apply the compaction request ``plan(view)`` (nothing when ``None``) through the
    core's rules. A stale request (``Conflict``: the surface moved since the view) is
    planned again from a new view, up to ``max_replans`` times; then the last
    ``Conflict`` is raised."""
    for attempt in range(max_replans + 1):
        request = plan(await SurfaceView.read(session))
        if request is None:
            return []
        try:
            return await session.compact(request)
        except StaleRequest:
            if attempt == max_replans:
                raise
    raise AssertionError("unreachable")


class EmbeddedHandle:
    """A ``SessionLike`` over a ``LiveSession`` of this process, on an ``EventStore``
    the caller owns (no Ray).

    The first request loads the session without taking it (``LiveSession.load``:
    nothing written, nobody fenced); its first write takes it for writing (writer epoch
    bump, seed marker, crash repair), and from then on a newer writer of the session, in
    this or another process, fences this one: the write raises ``WriterFenced`` and
    every later request ``SessionUnavailable``, until ``passivate`` (a fenced handle
    never takes the session back by itself). A write of unknown outcome closes the live
    session as ``RELOAD``: the next request loads it again from the store.

    ``durability``: ``durable`` acknowledges a write once committed, ``buffered`` once
    queued (``flush`` is the barrier). ``create``: a session that is not stored reads
    as empty and is stored by the first write; else reading it raises
    ``SessionNotFound``. Use one handle from one event loop.
    """

    def __init__(self, session_id: str, store: EventStore, *,
                 durability: Durability = "durable", create: bool = True,
                 cwd: str | None = None) -> None:
        self.session_id = session_id
        self.store = store
        self.durability: Durability = durability
        self._create = create
        self._cwd = cwd
        self._live: LiveSession | None = None
        self._loading = asyncio.Lock()

    @property
    def live(self) -> LiveSession | None:
        """The live session (``None`` before the first request and after
        ``passivate``)."""
        return self._live

    async def _current(self) -> LiveSession:
        """The live session, loaded on first use and again after it closed to reload
        or was passivated. A fenced one is kept: it answers ``SessionUnavailable``."""
        live = self._live
        if live is not None and live.closed not in (RELOAD, "passivated"):
            return live
        async with self._loading:
            live = self._live
            if live is None or live.closed in (RELOAD, "passivated"):
                live = await LiveSession.load(self.session_id, self.store,
                                              durability=self.durability,
                                              create=self._create, cwd=self._cwd)
                self._live = live
            return live

    async def _run(self, op: Callable[[LiveSession], Awaitable[T]]) -> T:
        for attempt in (0, 1):
            live = await self._current()
            try:
                return await op(live)
            except SessionUnavailable:
                # Closed to reload by a write that failed between the lookup and this
                # request taking the lock: load again, once.
                if live.closed != RELOAD or attempt:
                    raise
        raise AssertionError("unreachable")

    async def _read(self, op: Callable[[LiveSession], T]) -> T:
        async def call(live: LiveSession) -> T:
            async with live.lock:  # never observe a batch whose write may roll back
                return op(live)
        return await self._run(call)

    async def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        """See ``SessionLike.events``."""
        return await self._read(lambda live: live.events(since_seq, limit))

    async def surface(self) -> SurfaceSnapshot:
        """See ``SessionLike.surface``."""
        return await self._read(lambda live: live.surface())

    async def surface_events(self) -> tuple[SurfaceSnapshot, list[Event]]:
        """See ``SessionLike.surface_events``."""
        return await self._read(lambda live: live.surface_events())

    async def view(self) -> SurfaceView:
        """The surface of the live session itself (``SurfaceView.live``): consume it
        before the next ``await``."""
        return await self._read(lambda live: SurfaceView.live(live.current()))

    async def derive_messages(self, as_of: int | None = None) -> list[dict[str, Any]]:
        """See ``SessionLike.derive_messages``."""
        return await self._read(lambda live: live.derive_messages(as_of))

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> list[Event]:
        """See ``SessionLike.append_batch``; takes the session at its first write."""
        return await self._run(lambda live: live.append_batch(specs, expected_seq))

    async def append_with_state(self, specs: Sequence[AppendSpec],
                                delta: Mapping[str, Any], *, at: int,
                                expected_seq: int | None = None) -> list[Event]:
        """See ``SessionLike.append_with_state``; takes the session at its first
        write."""
        async def append(live: LiveSession) -> list[Event]:
            return (await live.append_request(specs, expected_seq,
                                              state=StateDelta(delta, at))).events
        return await self._run(append)

    async def compact(self, request: CompactionRequest) -> list[Event]:
        """See ``SessionLike.compact``."""
        return await self._run(lambda live: live.compact(request))

    async def prune(self, request: PruneRequest) -> list[Event]:
        """See ``SessionLike.prune``."""
        return await self._run(lambda live: live.prune(request))

    async def flush(self) -> None:
        """See ``SessionLike.flush``; nothing to wait for before the first request."""
        if self._live is not None:
            await self._run(lambda live: live.flush())

    async def passivate(self) -> bool:
        """See ``SessionLike.passivate``: flush, then forget the live session (fenced
        or not); the next request loads it again."""
        live, self._live = self._live, None
        if live is None:
            return False
        await live.passivate()
        return True


__all__ = ["MAX_REPLANS", "EmbeddedHandle", "SessionLike", "SurfaceView", "append_planned",
           "compact_planned"]
