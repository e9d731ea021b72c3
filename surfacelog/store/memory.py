"""``MemoryEventStore``: the ``EventStore`` primitives over plain dicts and lists.

A reference backend, not a durable one: it keeps rows in its process and loses them
with it. It exists to show (and test) that the primitives are all a backend provides:
creating, appending, activation, repair, fencing and the journal actor work over it
unchanged. It checks what the SQLite backend's tables check (``STRICT`` column types,
``ignorable`` 1 or NULL), so both refuse the same rows with ``BadEvent``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from surfacelog.schema.codec import JSON_ENCODER
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader, header_to_json
from surfacelog.store.base import ScopedEventStore, SessionInfo
from surfacelog.store.deferred_errors import DeferredErrors
from surfacelog.store.errors import (
    ScopeConflict,
    SeqMismatch,
    SessionDeleted,
    SessionExists,
    SessionNotFound,
    StoreError,
    WriterFenced,
)
from surfacelog.store.rows import NO_ROWS, EncodedBatch, StoredRow, encode_batch, stored_rows
from surfacelog.store.scoped import (
    ScopedSession,
    ScopedState,
    SessionPage,
    check_page,
    decode_state,
    split_delta,
)
from surfacelog.store.stored import StoredSession, stored_page


@dataclass
class _Stored:
    header: str
    created_at: int
    epoch: int = 1
    rows: list[StoredRow] = field(default_factory=list)
    last_time: int | None = None
    scope: tuple[str, str] | None = None
    update_time: int = 0
    state: dict[str, str] = field(default_factory=dict)
    deleted_at: int | None = None


class MemoryEventStore(DeferredErrors, ScopedEventStore):
    """Session rows in memory (see the module's docstring), with scopes, state and
    deletion (a ``ScopedEventStore``). Every write is applied at once; a non-durable
    batch's failure is kept for ``flush``/``flush_session``, as the SQLite store
    reports it (``DeferredErrors``). Closing drops the rows."""

    def __init__(self) -> None:
        super().__init__()
        self._sessions: dict[str, _Stored] = {}
        self._app_state: dict[str, dict[str, str]] = {}
        self._user_state: dict[tuple[str, str], dict[str, str]] = {}

    @classmethod
    async def open(cls) -> MemoryEventStore:
        """A new empty store (an opener for a journal actor: ``MemoryEventStore.open``)."""
        return cls()

    def _store_name(self) -> str:
        """How errors name this store."""
        return "the memory store"

    def _session(self, session_id: str) -> _Stored:
        stored = self._sessions.get(session_id)
        if stored is None:
            raise SessionNotFound(f"session {session_id!r} is not stored")
        if stored.deleted_at is not None:
            raise SessionDeleted(f"session {session_id!r} is deleted")
        return stored

    def _scoped(self, session_id: str) -> tuple[_Stored, str, str]:
        stored = self._session(session_id)
        if stored.scope is None:
            raise ScopeConflict(f"session {session_id!r} has no app and user scope")
        return stored, *stored.scope

    def _info(self, session_id: str, stored: _Stored) -> ScopedSession:
        assert stored.scope is not None
        return ScopedSession(session_id, stored.scope[0], stored.scope[1], stored.created_at,
                             stored.update_time, len(stored.rows), stored.last_time)

    def _apply(self, stored: _Stored, app: str, user: str, delta: Mapping[str, Any]) -> None:
        parts = split_delta(delta)  # all checked before anything changes
        self._app_state.setdefault(app, {}).update(parts["app"])
        self._user_state.setdefault((app, user), {}).update(parts["user"])
        stored.state.update(parts["session"])

    # -- scopes, state, deletion (see ``surfacelog.store.scoped``) ----------------------

    async def set_scope(self, session_id: str, app_name: str, user_id: str, *,
                        state: Mapping[str, Any] | None = None, at: int) -> None:
        """See ``ScopedEventStore.set_scope``."""
        self._check_open()
        stored = self._session(session_id)
        if stored.scope is not None and stored.scope != (app_name, user_id):
            raise ScopeConflict(f"session {session_id!r} belongs to app {stored.scope[0]!r}, "
                                f"user {stored.scope[1]!r}, not app {app_name!r}, user "
                                f"{user_id!r}")
        split_delta(state or {})  # refuse a bad value before the scope is set
        stored.scope = (app_name, user_id)
        stored.update_time = at
        self._apply(stored, app_name, user_id, state or {})

    async def append_with_state(self, session_id: str, events: Sequence[Event],
                                delta: Mapping[str, Any], *, epoch: int, at: int,
                                durable: bool = True) -> None:
        """See ``ScopedEventStore.append_with_state``."""
        self._check_open()
        split_delta(delta)  # refuse a bad value before anything is applied
        batch = encode_batch(session_id, events) if events else NO_ROWS
        with self._reported(session_id, durable):
            stored = self._sessions.get(session_id)
            if stored is not None and stored.scope is None:
                raise ScopeConflict(f"session {session_id!r} has no app and user scope; "
                                    f"nothing written")
            if batch.rows:
                self._append(session_id, batch, epoch, False)
            else:
                self._session(session_id)
            stored = self._sessions[session_id]
            assert stored.scope is not None
            self._apply(stored, *stored.scope, delta)
            stored.update_time = at

    async def scope_of(self, session_id: str) -> ScopedSession:
        """See ``ScopedEventStore.scope_of``."""
        self._check_open()
        stored, _app, _user = self._scoped(session_id)
        return self._info(session_id, stored)

    async def get_state(self, session_id: str) -> ScopedState:
        """See ``ScopedEventStore.get_state``."""
        self._check_open()
        stored, app, user = self._scoped(session_id)
        return ScopedState(decode_state(sorted(self._app_state.get(app, {}).items())),
                           decode_state(sorted(self._user_state.get((app, user), {}).items())),
                           decode_state(sorted(stored.state.items())))

    async def user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """See ``ScopedEventStore.user_state``."""
        self._check_open()
        return decode_state(sorted(self._user_state.get((app_name, user_id), {}).items()))

    async def update_state(self, session_id: str, delta: Mapping[str, Any], *,
                           at: int) -> None:
        """See ``ScopedEventStore.update_state``."""
        self._check_open()
        stored, app, user = self._scoped(session_id)
        self._apply(stored, app, user, delta)
        stored.update_time = at

    async def list_scoped(self, app_name: str, user_id: str | None = None, *,
                          after: str | None = None, limit: int | None = None
                          ) -> SessionPage:
        """See ``ScopedEventStore.list_scoped``."""
        self._check_open()
        check_page(limit)
        rows = [self._info(sid, s) for sid, s in sorted(self._sessions.items())
                if s.deleted_at is None and s.scope is not None and s.scope[0] == app_name
                and (user_id is None or s.scope[1] == user_id)
                and (after is None or sid > after)]
        if limit is not None and len(rows) > limit:
            return SessionPage(rows[:limit], rows[limit - 1].id)
        return SessionPage(rows, None)

    async def delete_session(self, session_id: str, *, at: int) -> None:
        """See ``ScopedEventStore.delete_session``."""
        self._check_open()
        stored = self._session(session_id)
        stored.deleted_at = at
        stored.epoch += 1

    async def purge_session(self, session_id: str) -> None:
        """See ``ScopedEventStore.purge_session``."""
        self._check_open()
        stored = self._sessions.get(session_id)
        if stored is None:
            raise SessionNotFound(f"session {session_id!r} is not stored")
        if stored.deleted_at is None:
            raise StoreError(f"session {session_id!r} is not deleted: delete it before "
                             f"purging it")
        del self._sessions[session_id]

    async def create_stored(self, header: SessionHeader, batch: EncodedBatch) -> int:
        """Store a new session with its first rows. Raises ``SessionExists``,
        ``BadEvent``."""
        self._check_open()
        if header.id in self._sessions:
            raise SessionExists(f"session {header.id!r} is already stored")
        rows = stored_rows(header.id, batch)
        self._sessions[header.id] = _Stored(
            JSON_ENCODER.encode(header_to_json(header)).decode(), header.created_at,
            rows=rows, last_time=batch.last_time)
        return 1

    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None:
        """Append ``batch`` at once (see ``EventStore.append_stored``). Raises, when
        ``durable`` (else at the next flush): ``SessionNotFound``, ``WriterFenced``,
        ``SeqMismatch``, ``BadEvent``."""
        self._check_open()
        if not batch.rows:
            return
        with self._reported(session_id, durable):
            self._append(session_id, batch, epoch, resend)

    def _append(self, session_id: str, batch: EncodedBatch, epoch: int, resend: bool
                ) -> None:
        stored = self._sessions.get(session_id)  # a deleted one: fenced, as in SQLite
        if stored is None:
            raise SessionNotFound(f"session {session_id!r} is not stored")
        if stored.epoch != epoch:
            raise WriterFenced(f"session {session_id!r}: writer epoch {epoch} is stale, "
                               f"the session was taken by epoch {stored.epoch}; nothing "
                               f"written")
        end = batch.start + len(batch.rows)
        if resend and len(stored.rows) >= end:
            return  # this very batch, stored by the send whose answer was lost
        if batch.start != len(stored.rows):
            raise SeqMismatch(f"session {session_id!r}: batch starts at seq {batch.start}, "
                              f"the stored next seq is {len(stored.rows)}; nothing written")
        rows = stored_rows(session_id, batch)
        stored.rows.extend(rows)
        stored.last_time = batch.last_time
        self._count_batch(len(rows))

    async def read_stored(self, session_id: str, *, since: int = 0,
                          limit: int | None = None, bump: bool = False) -> StoredSession:
        """The session's rows from ``since`` (at most ``limit``); ``bump`` first takes it
        for writing. Raises ``SessionNotFound``."""
        self._check_open()
        stored = self._session(session_id)
        if bump:
            stored.epoch += 1
        return stored_page(stored.header, stored.epoch, stored.rows, since, limit)

    async def list_sessions(self) -> list[SessionInfo]:
        """Every stored session, ordered by id."""
        self._check_open()
        return [SessionInfo(sid, s.created_at, len(s.rows), s.last_time, s.epoch)
                for sid, s in sorted(self._sessions.items()) if s.deleted_at is None]


__all__ = ["MemoryEventStore"]
