"""Where an adapter session's log lives: the embedded store (in process, no Ray) or a
Ray ``SessionHandle``, behind one small interface.

A backend offers a *view* of the session (surface nodes, log length, replace
generation, the event of a node) and two writes that are planned *from* a view: the
planner gets the view and returns the events to append (or a compaction request), and
the backend appends them so that they land exactly after that view, all or nothing.
In process the view is live and the session is ours alone (taken with a writer epoch),
so a plan always fits. Over Ray the write carries ``expected_seq`` = the view's length:
when another writer appended in between the actor answers ``Conflict`` and the backend
reads a new view and plans again.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from surfacelog.schema.events import Event
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session import (
    AppendSpec,
    Session,
    StaleRequest,
    check_compaction,
    compaction_specs,
    now_ms,
)
from surfacelog.session.compaction import CompactionRequest
from surfacelog.store.base import EventStore
from surfacelog.store.errors import SessionDeleted, SessionNotFound

if TYPE_CHECKING:
    from surfacelog.actors.client import SessionHandle

Plan = Callable[["View"], Sequence[AppendSpec]]
CompactionPlan = Callable[["View"], "CompactionRequest | None"]

MAX_REPLANS: Final = 50
"""How many times a Ray write is planned again after a ``Conflict`` before it gives up
(re-raising the last ``Conflict``)."""


class View(abc.ABC):
    """The session as one read saw it."""

    @property
    @abc.abstractmethod
    def nodes(self) -> Sequence[int]:
        """The surface nodes, in order."""

    @property
    @abc.abstractmethod
    def length(self) -> int:
        """The log's length (the seq the next event gets)."""

    @property
    @abc.abstractmethod
    def generation(self) -> int:
        """The surface's ``replace_generation``."""

    @abc.abstractmethod
    def event(self, seq: int) -> Event:
        """The event at ``seq`` (a node of this view)."""


class Backend(abc.ABC):
    """The log of one session, read and written for the adapter."""

    @abc.abstractmethod
    async def view(self) -> View:
        """The session now."""

    @abc.abstractmethod
    async def write(self, plan: Plan) -> list[Event]:
        """Append ``plan(view)`` right after ``view``, all or nothing; nothing when the
        plan is empty. Returns the logged events."""

    @abc.abstractmethod
    async def compact(self, plan: CompactionPlan) -> list[Event]:
        """Apply the compaction request ``plan(view)`` (nothing when ``None``) through the
        core's compaction rules. Returns the logged events."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Wait until every accepted write is durable."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the backend opened."""


# -- in process ------------------------------------------------------------------------

class _LocalView(View):
    __slots__ = ("_session",)

    def __init__(self, session: Session) -> None:
        self._session = session

    @property
    def nodes(self) -> Sequence[int]:
        return self._session.surface.nodes

    @property
    def length(self) -> int:
        return len(self._session)

    @property
    def generation(self) -> int:
        return self._session.surface.replace_generation

    def event(self, seq: int) -> Event:
        return self._session.event(seq)


class EmbeddedBackend(Backend):
    """The session in an ``EventStore`` of this process (``SqliteEventStore``: one file,
    no Ray). Reading loads the session without taking it (``load``: no epoch bump,
    nothing written); the first write takes it for writing (``take``, or
    ``open_or_create`` when it was not stored: writer epoch bump, seed marker, crash
    repair). From then on a second writer of the same session, in this or another
    process, fences this one (``WriterFenced`` on its next write).

    ``durable``: each write returns once committed (fsynced with the store's
    ``synchronous="FULL"``, the SDK's ``SQLiteSession`` guarantee); ``False``: once
    queued, ``flush()``/``close()`` being the barrier. ``path`` opens a store this
    backend owns and closes; ``store`` shares one the caller owns."""

    def __init__(self, session_id: str, *, path: str | Path | None = None,
                 store: EventStore | None = None, durable: bool = True,
                 store_options: dict[str, Any] | None = None) -> None:
        if (path is None) == (store is None):
            raise ValueError("give exactly one of path and store")
        self.session_id = session_id
        self._path = path
        self._store = store
        self._owns_store = store is None
        self._durable = durable
        self._store_options = dict(store_options or {})
        self._session: Session | None = None
        self._stored = False  # whether _session was loaded from the store
        self._epoch: int | None = None  # set once the session is taken for writing
        self._lock = asyncio.Lock()

    async def _get_store(self) -> EventStore:
        if self._store is None:
            from surfacelog.store.sqlite import SqliteEventStore

            assert self._path is not None
            self._store = await SqliteEventStore.open(self._path, **self._store_options)
        return self._store

    def _header(self) -> SessionHeader:
        return SessionHeader(version=SESSION_FORMAT_VERSION, id=self.session_id,
                             created_at=now_ms())

    async def _read(self) -> Session:
        """The session as stored (an empty one, not stored, when there is none), loaded
        once and kept live; not taken for writing."""
        if self._session is None:
            store = await self._get_store()
            try:
                self._session, self._stored = await store.load(self.session_id), True
            except SessionDeleted:
                raise
            except SessionNotFound:
                self._session, self._stored = Session(header=self._header()), False
        return self._session

    async def _open(self) -> tuple[Session, int]:
        """The session taken for writing, and its epoch."""
        if self._epoch is None:
            store = await self._get_store()
            if self._session is not None and self._stored:
                opened = await store.take(self.session_id, self._session)
            else:
                opened = await store.open_or_create(self._header())
            self._session, self._stored, self._epoch = opened.session, True, opened.epoch
        assert self._session is not None
        return self._session, self._epoch

    async def view(self) -> View:
        return _LocalView(await self._read())

    async def _append(self, session: Session, epoch: int, specs: Sequence[AppendSpec]
                      ) -> list[Event]:
        store = self._store
        assert store is not None
        with session.atomic():  # a refused or failed write leaves the session as it was
            events = session.append_batch(list(specs))
            await store.append(self.session_id, events, epoch=epoch, durable=self._durable)
        return events

    async def write(self, plan: Plan) -> list[Event]:
        async with self._lock:
            session, epoch = await self._open()
            specs = plan(_LocalView(session))
            return await self._append(session, epoch, specs) if specs else []

    async def compact(self, plan: CompactionPlan) -> list[Event]:
        async with self._lock:
            session, epoch = await self._open()
            request = plan(_LocalView(session))
            if request is None:
                return []
            check_compaction(session, request)
            specs = compaction_specs(request, at=len(session), turn=session.open_turn())
            return await self._append(session, epoch, specs)

    async def flush(self) -> None:
        if self._store is not None:
            await self._store.flush_session(self.session_id)

    async def close(self) -> None:
        """Flush, and close the store when this backend opened it. Using the backend
        again afterwards opens the session again (and the store, when it owns one)."""
        store, self._session, self._stored, self._epoch = self._store, None, False, None
        if store is None:
            return
        if self._owns_store:
            self._store = None
            await store.close()
        else:
            await store.flush_session(self.session_id)


# -- over Ray ----------------------------------------------------------------------------

class _RemoteView(View):
    __slots__ = ("_events", "_generation", "_length", "_nodes")

    def __init__(self, nodes: Sequence[int], length: int, generation: int,
                 events: Sequence[Event]) -> None:
        self._nodes = tuple(nodes)
        self._length = length
        self._generation = generation
        self._events = dict(zip(self._nodes, events, strict=True))

    @property
    def nodes(self) -> Sequence[int]:
        return self._nodes

    @property
    def length(self) -> int:
        return self._length

    @property
    def generation(self) -> int:
        return self._generation

    def event(self, seq: int) -> Event:
        return self._events[seq]


class HandleBackend(Backend):
    """The session behind a Ray ``SessionHandle`` (``surfacelog.connect(...).session(id)``).
    Each write carries ``expected_seq``, so a resend after an actor restart lands exactly
    once and a write planned on a stale view is planned again."""

    def __init__(self, handle: SessionHandle) -> None:
        self.handle = handle
        self.session_id = handle.session_id

    async def view(self) -> View:
        snap, events = await self.handle.surface_events()
        return _RemoteView(snap.nodes, snap.length, snap.replace_generation, events)

    async def write(self, plan: Plan) -> list[Event]:
        for attempt in range(MAX_REPLANS + 1):
            view = await self.view()
            specs = plan(view)
            if not specs:
                return []
            try:
                return list(await self.handle.append_batch(list(specs),
                                                           expected_seq=view.length))
            except StaleRequest:  # Conflict: someone appended since the view
                if attempt == MAX_REPLANS:
                    raise
        raise AssertionError("unreachable")

    async def compact(self, plan: CompactionPlan) -> list[Event]:
        for attempt in range(MAX_REPLANS + 1):
            request = plan(await self.view())
            if request is None:
                return []
            try:
                return await self.handle.compact(request)
            except StaleRequest:
                if attempt == MAX_REPLANS:
                    raise
        raise AssertionError("unreachable")

    async def flush(self) -> None:
        await self.handle.flush()

    async def close(self) -> None:
        """Flush; the handle's client stays the caller's."""
        await self.handle.flush()


__all__ = ["Backend", "EmbeddedBackend", "HandleBackend", "View"]
