"""``SurfacelogSessionService``: Google ADK's ``BaseSessionService`` over surfacelog,
embedded (one SQLite file or an event store of this process, no Ray) or over a Ray
deployment (a ``Client``).

- A session is a surfacelog session scoped to ADK's app and user (``set_scope``); its
  ADK events are events of its append-only log, one each (``mapping``), and what
  ``get_session`` returns is rebuilt from the log exactly (cached per session, so a
  read decodes only the events logged since the last one), in the order of ADK's
  database services: by timestamp, events of one timestamp by id (the log keeps them
  in the order they were appended).
- Its log is read and written through a ``SessionLike`` (``surfacelog.runtime``): an
  ``EmbeddedHandle`` over the store, or the Ray ``SessionHandle`` of the deployment's
  session actor. Each append carries ``expected_seq`` (the log's length as the service
  last read it), so it lands once, after what the service has seen; when anything was
  appended in between (another writer; the seed marker that taking a loaded session
  adds) the service reads the new events and maps the event again.
- Scopes, state, listing and deletion are the store's (``ScopedEventStore``): the
  embedded store itself, or over Ray the shard's store reached through its writer
  (``Client.shard_store``). A store without them is refused when the service is built
  (``Unsupported``, naming its type).
- State: ``app:`` keys app-wide, ``user:`` keys per user of the app, other keys per
  session, ``temp:`` keys never stored (ADK's own rules; the base class applies
  ``temp:`` keys to the in-memory session for the invocation). An event and its
  ``actions.stateDelta`` are written as one (``append_with_state``: in the same
  transaction, all or nothing); the delta is also kept verbatim in the log (the
  event's residual). A state value JSON cannot carry exactly (a set, a tuple, bytes)
  is refused with ``InvalidArgument`` and nothing is appended.
- An ADK compaction event (``App(events_compaction_config=...)``) replaces the events
  it summarises on the session's *surface* and cites them (``mapping``): the surface
  is what ADK shows the model; ``get_session`` still returns every event, as ADK
  expects, and the log keeps them.
- ``delete_session`` tombstones the session (the store's deletion): ADK no longer sees
  it, the log and its state stay in the database until ``purge`` (``store.
  purge_session``); ``surfacelog export`` it before deleting when you want a copy.
- ``list_sessions`` pages through the store's scoped listing and returns sessions
  without events, ordered like ADK's services by (last update, user, id).

Operations of one service run one at a time (one lock). Embedded, one service per store
is the single writer of its sessions: it takes each for writing at its first append,
fencing any earlier writer (reading a session does not take it). Over Ray the session
actors are the writers, and any number of services (in any process) share them.
"""

from __future__ import annotations

import asyncio
import bisect
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession
from typing_extensions import override

from surfacelog.runtime.handle import MAX_REPLANS, EmbeddedHandle, SessionLike
from surfacelog.schema.codec import encode_json
from surfacelog.schema.events import Event
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.schema.limits import gc_paused
from surfacelog.session import AppendSpec, now_ms
from surfacelog.session.errors import StaleRequest
from surfacelog.store.base import EventStore, ScopedEventStore, require_scoped
from surfacelog.store.errors import (
    ScopeConflict,
    SessionExists,
    SessionNotFound,
    Unsupported,
)
from surfacelog.store.scoped import ScopedSession

from .mapping import adk_event_of, compaction_span, map_event, tool_call_ids

if TYPE_CHECKING:
    from surfacelog.actors.client import Client

PAGE: Final = 500
"""Sessions per page of the store's scoped listing read by ``list_sessions``."""


class SessionAlreadyExists(AlreadyExistsError, SessionExists):
    """``create_session`` with the id of a stored session: the store's ``SessionExists``,
    as ADK's ``AlreadyExistsError`` (the type ADK's callers catch)."""


class SessionMissing(SessionNotFoundError, SessionNotFound):
    """``append_event`` to a session that is not stored for that app and user, or was
    deleted: the store's ``SessionNotFound``, as ADK's ``SessionNotFoundError``."""


@dataclass
class _Open:
    """A session this service has read: its handle, how much of its log it has read
    (``length``), and the ADK events among those."""

    handle: SessionLike
    length: int = 0
    events: list[AdkEvent] = field(default_factory=list)
    """In ADK's order (its database services'): by timestamp, ties by event id; the
    log's (append) order where those are equal."""
    call_seqs: dict[str, int] = field(default_factory=dict)
    spans: dict[int, tuple[float, float]] = field(default_factory=dict)
    """The time span of each of the adapter's events: its timestamp, or a compaction's
    start and end."""

    def index(self, events: Sequence[Event]) -> None:
        """Add the ADK events among ``events`` (the log's next, from seq ``length``) to
        ``events``, and count them all as read."""
        with gc_paused():  # thousands of acyclic models at a reload: see limits.gc_paused
            self._index(events)
        if events:
            self.length = events[-1].seq + 1

    def _index(self, events: Sequence[Event]) -> None:
        for event in events:
            dumped = adk_event_of(event)
            if dumped is None:
                continue
            # From JSON text: the same validators run (the result is equal), about 3x
            # faster than from the dict (pydantic's Python-mode path for genai types).
            self.add(AdkEvent.model_validate_json(encode_json(dumped)))
            self.note(event.seq, dumped)
            if event.type == "assistant/message":
                for block in event.data["message"]["content"]:
                    if block.get("type") == "tool-call":
                        self.call_seqs[block["id"]] = event.seq

    def add(self, event: AdkEvent) -> None:
        """Put ``event`` in ``events`` in ADK's order (module docstring): at the end
        unless an earlier one sorts after it (a timestamp from the past, or a tie on
        the timestamp with a larger id)."""
        events = self.events
        key = _order(event)
        if not events or _order(events[-1]) <= key:
            events.append(event)
        else:
            events.insert(bisect.bisect_right(events, key, key=_order), event)

    def note(self, seq: int, dumped: dict[str, Any]) -> None:
        span = compaction_span(dumped)
        stamp = dumped.get("timestamp")
        if span is not None:
            self.spans[seq] = span
        elif isinstance(stamp, (int, float)):
            self.spans[seq] = (float(stamp), float(stamp))

    def compacted(self, nodes: Sequence[int], span: tuple[float, float]) -> list[int]:
        """The surface ``nodes`` inside ``span`` when they are one run of them, else
        ``[]``."""
        inside = [i for i, n in enumerate(nodes) if n in self.spans
                  and span[0] <= self.spans[n][0] and self.spans[n][1] <= span[1]]
        if not inside or inside[-1] - inside[0] != len(inside) - 1:
            return []
        return [nodes[i] for i in inside]


def _order(event: AdkEvent) -> tuple[float, str]:
    return event.timestamp, event.id or ""


def _dump(event: AdkEvent) -> dict[str, Any]:
    return event.model_dump(mode="json", by_alias=True, exclude_none=True)


class SurfacelogSessionService(BaseSessionService):
    """ADK sessions in surfacelog (see the module's docstring). Exactly one of:

    - ``path``: a ``SqliteEventStore`` this service opens on first use and closes;
    - ``store``: an open ``ScopedEventStore`` the caller owns (SQLite, memory);
    - ``client``: a Ray deployment (``surfacelog.connect(...)``) of one shard: session
      events go through its session actors, scopes, state, listing and deletion through
      its shard's writer. Several shards are refused (``Unsupported``): ``app:`` and
      ``user:`` state is shared by sessions that would live in different files.

    ``durable`` (embedded; over Ray the deployment's durability holds): ``append_event``
    returns once the event is committed (fsynced with ``synchronous="FULL"``);
    ``False``: once queued, ``flush()``/``close()`` being the barrier. Raises
    ``ValueError`` unless exactly one is given, ``Unsupported`` for a store without
    scopes, state and deletion (naming its type) or a deployment of several shards.
    """

    def __init__(self, *, path: str | Path | None = None, store: EventStore | None = None,
                 client: Client | None = None, durable: bool = True,
                 store_options: dict[str, Any] | None = None) -> None:
        if sum(x is not None for x in (path, store, client)) != 1:
            raise ValueError("give exactly one of path, store and client")
        self._path = path
        self._store: ScopedEventStore | None = None
        if store is not None:
            self._store = require_scoped(store, "SurfacelogSessionService")
        self._client = client
        if client is not None:
            if len(client.writers) != 1:
                raise Unsupported(
                    f"SurfacelogSessionService over Ray needs a deployment of one shard "
                    f"(this one has {len(client.writers)}): ADK's app: and user: state "
                    f"is shared by sessions that would be stored on different shards")
            self._store = client.shard_store()
        self._owns_store = path is not None
        self._durable = durable
        self._store_options = dict(store_options or {})
        self._open: dict[str, _Open] = {}
        self._lock = asyncio.Lock()

    async def _get_store(self) -> ScopedEventStore:
        if self._store is None:
            from surfacelog.store.sqlite import SqliteEventStore

            assert self._path is not None
            self._store = await SqliteEventStore.open(self._path, **self._store_options)
        return self._store

    async def _handle(self, session_id: str) -> SessionLike:
        """A handle on ``session_id``'s log: the deployment's session actor, or an
        ``EmbeddedHandle`` over the store (which never creates a session: ADK's
        ``create_session`` stores it with its scope first)."""
        if self._client is not None:
            return self._client.session(session_id)
        return EmbeddedHandle(session_id, await self._get_store(),
                              durability="durable" if self._durable else "buffered",
                              create=False)

    async def _release(self, handle: SessionLike) -> None:
        """Done with ``handle``: flush it; embedded, also drop its live session (over Ray
        the session actor keeps serving other clients)."""
        if self._client is None:
            await handle.passivate()
        else:
            await handle.flush()

    async def _scope(self, app_name: str, user_id: str, session_id: str
                     ) -> ScopedSession | None:
        store = await self._get_store()
        try:
            scope = await store.scope_of(session_id)
        except (SessionNotFound, ScopeConflict):
            return None
        if (scope.app_name, scope.user_id) != (app_name, user_id):
            return None
        return scope

    async def _held(self, session_id: str) -> _Open:
        """The session as read so far, with what was logged since read now (embedded:
        the log as it was loaded, not taken for writing, so a read writes nothing and
        fences nobody)."""
        held = self._open.get(session_id)
        if held is None:
            held = _Open(await self._handle(session_id))
            self._open[session_id] = held
        await self._catch_up(held)
        return held

    @staticmethod
    async def _catch_up(held: _Open) -> None:
        held.index(await held.handle.events(held.length))

    async def _merged_state(self, session_id: str) -> dict[str, Any]:
        store = await self._get_store()
        return (await store.get_state(session_id)).merged()

    # -- BaseSessionService ---------------------------------------------------------------

    @override
    async def create_session(self, *, app_name: str, user_id: str,
                             state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> AdkSession:
        async with self._lock:
            store = await self._get_store()
            session_id = (session_id.strip() if session_id else None) or uuid.uuid4().hex
            created = now_ms()
            try:
                await store.create(SessionHeader(version=SESSION_FORMAT_VERSION,
                                                 id=session_id, created_at=created))
            except SessionExists as exc:
                raise SessionAlreadyExists(
                    f"Session with id {session_id} already exists.") from exc
            await store.set_scope(session_id, app_name, user_id, state=state or {},
                                  at=created)
            return AdkSession(id=session_id, app_name=app_name, user_id=user_id,
                              state=await self._merged_state(session_id), events=[],
                              last_update_time=created / 1000)

    @override
    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> AdkSession | None:
        async with self._lock:
            session_id = session_id.strip() if session_id else session_id
            scope = await self._scope(app_name, user_id, session_id)
            if scope is None:
                return None
            held = await self._held(session_id)
            events = held.events
            if config is not None:
                if config.num_recent_events is not None:
                    events = events[-config.num_recent_events:] \
                        if config.num_recent_events else []
                if config.after_timestamp is not None:
                    first = len(events)
                    while first > 0 and events[first - 1].timestamp >= config.after_timestamp:
                        first -= 1
                    events = events[first:]
            last = held.events[-1].timestamp if held.events else scope.update_time / 1000
            return AdkSession(id=session_id, app_name=app_name, user_id=user_id,
                              state=await self._merged_state(session_id),
                              events=list(events), last_update_time=last)

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None
                            ) -> ListSessionsResponse:
        async with self._lock:
            store = await self._get_store()
            found: list[AdkSession] = []
            after: str | None = None
            while True:
                page = await store.list_scoped(app_name, user_id, after=after, limit=PAGE)
                for row in page.sessions:
                    last = max(row.update_time, row.last_time or 0) / 1000
                    held = self._open.get(row.id)
                    if held is not None and held.events:
                        last = held.events[-1].timestamp
                    found.append(AdkSession(id=row.id, app_name=app_name, user_id=row.user_id,
                                            state=await self._merged_state(row.id),
                                            events=[], last_update_time=last))
                if page.next_after is None:
                    break
                after = page.next_after
            found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
            return ListSessionsResponse(sessions=found)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Tombstone the session (see the module's docstring); nothing when it is not
        stored for that app and user. Its live writer (this service's, or over Ray its
        session actor) is passivated first, flushing it: the tombstone then fences
        nothing that still serves."""
        async with self._lock:
            session_id = session_id.strip() if session_id else session_id
            if await self._scope(app_name, user_id, session_id) is None:
                return
            held = self._open.pop(session_id, None)
            handle = held.handle if held is not None else await self._handle(session_id)
            await handle.passivate()
            await (await self._get_store()).delete_session(session_id, at=now_ms())

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        async with self._lock:
            return await (await self._get_store()).user_state(app_name, user_id)

    @override
    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        async with self._lock:
            if await self._scope(session.app_name, session.user_id, session.id) is None:
                raise SessionMissing(f"Session {session.id} not found.")
            self._apply_temp_state(session, event)
            event = self._trim_temp_delta_state(event)
            held = await self._held(session.id)
            dumped = _dump(event)
            delta: Mapping[str, Any] = event.actions.state_delta if event.actions else {}
            spec, logged = await self._append(held, dumped, delta,
                                              int(event.timestamp * 1000))
            first = logged[0].seq
            for call_id in tool_call_ids(spec):
                held.call_seqs[call_id] = first
            held.note(first, dumped)
            held.add(event.model_copy(deep=True))
            held.length = first + 1
            session.last_update_time = event.timestamp
            return self._commit_event_to_session(session, event)

    async def _append(self, held: _Open, dumped: dict[str, Any],
                      delta: Mapping[str, Any], at: int
                      ) -> tuple[AppendSpec, Sequence[Event]]:
        """Log the ADK event ``dumped`` (and its state ``delta``, in the same write)
        right after the log as ``held`` has read it. When anything was appended since,
        the session answers ``Conflict``: read what was, map the event again (its call
        provenance and compacted nodes may have changed) and resend, up to
        ``MAX_REPLANS`` times. Returns the spec sent and the logged event."""
        span = compaction_span(dumped)
        for attempt in range(MAX_REPLANS + 1):
            replace: Sequence[int] = ()
            if span is not None:
                snap = await held.handle.surface()
                if snap.length != held.length:  # the surface of another log than read
                    await self._catch_up(held)
                    continue
                replace = held.compacted(snap.nodes, span)
            spec = map_event(dumped, call_seqs=held.call_seqs, replace=replace)
            try:
                if delta:  # the event and its state delta, all or nothing
                    return spec, await held.handle.append_with_state(
                        [spec], delta, at=at, expected_seq=held.length)
                return spec, await held.handle.append_batch([spec],
                                                            expected_seq=held.length)
            except StaleRequest:  # Conflict: appended since the read
                if attempt == MAX_REPLANS:
                    raise
                await self._catch_up(held)
        raise StaleRequest(f"session {held.handle.session_id!r}: the log kept growing "
                           f"while {MAX_REPLANS + 1} compaction events were mapped")

    # -- beyond ADK ------------------------------------------------------------------------

    @property
    def store(self) -> ScopedEventStore | None:
        """The store (``None`` before first use of a service that opens its own; over
        Ray, the shard's store through its writer)."""
        return self._store

    async def flush(self) -> None:
        """Wait until every accepted event is durable."""
        async with self._lock:
            for held in self._open.values():
                await held.handle.flush()
            if self._store is not None:
                await self._store.flush()

    async def close(self) -> None:
        """Flush, and close the store when this service opened it. Using the service
        again afterwards opens it again (embedded, sessions are loaded anew and taken
        for writing anew)."""
        async with self._lock:
            opened, self._open = self._open, {}
            for held in opened.values():
                await self._release(held.handle)
            store = self._store
            if store is None:
                return
            if self._owns_store:
                self._store = None
                await store.close()
            else:
                await store.flush()


__all__ = ["SessionAlreadyExists", "SessionMissing", "SurfacelogSessionService"]
