"""Units of work of ``SqliteEventStore``'s scopes, state and deletion (see
``surfacelog.store.scoped``), run on the store's connection thread, each in one
transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from surfacelog.store.errors import ScopeConflict, SessionDeleted, SessionNotFound, StoreError
from surfacelog.store.scoped import (
    ScopedSession,
    ScopedState,
    SessionPage,
    StateScope,
    decode_state,
    split_delta,
)
from surfacelog.store.sqlite.connection import in_transaction

_SCOPED: Final = (
    "SELECT s.id, c.app_name, c.user_id, s.created_at, c.update_time, s.next_seq,"
    " s.last_time FROM scopes AS c JOIN sessions AS s ON s.id = c.session_id"
)
_UPSERT: Final = (
    "INSERT INTO state (scope, app_name, user_id, session_id, key, value)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope, app_name, user_id, session_id, key)"
    " DO UPDATE SET value = excluded.value"
)


class StateWrite(NamedTuple):
    """A state delta queued with a batch of events: ``split_delta``'s parts and the
    session's new update time (ms)."""

    parts: dict[StateScope, dict[str, str]]
    at: int


def write_state(conn: sqlite3.Connection, session_id: str, state: StateWrite
                ) -> ScopeConflict | None:
    """Apply ``state`` to the session's scope (in the caller's transaction); the
    refusal when the session has no scope."""
    row = conn.execute("SELECT app_name, user_id FROM scopes WHERE session_id = ?",
                       (session_id,)).fetchone()
    if row is None:
        return ScopeConflict(f"session {session_id!r} has no app and user scope; nothing "
                             f"written")
    app, user = row
    owners = {"app": ("", ""), "user": (user, ""), "session": (user, session_id)}
    for level, values in state.parts.items():
        owner_user, sid = owners[level]
        conn.executemany(_UPSERT, [(level, app, owner_user, sid, key, text)
                                   for key, text in values.items()])
    conn.execute("UPDATE scopes SET update_time = ? WHERE session_id = ?",
                 (state.at, session_id))
    return None


def deleted(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether ``session_id`` has a tombstone."""
    return conn.execute("SELECT 1 FROM tombstones WHERE session_id = ?",
                        (session_id,)).fetchone() is not None


def _live(conn: sqlite3.Connection, session_id: str) -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFound(f"session {session_id!r} is not stored")
    if deleted(conn, session_id):
        raise SessionDeleted(f"session {session_id!r} is deleted")


def _scope(conn: sqlite3.Connection, session_id: str) -> ScopedSession:
    _live(conn, session_id)
    row = conn.execute(_SCOPED + " WHERE c.session_id = ?", (session_id,)).fetchone()
    if row is None:
        raise ScopeConflict(f"session {session_id!r} has no app and user scope")
    return ScopedSession(*row)


def _apply(conn: sqlite3.Connection, scope: ScopedSession, delta: Mapping[str, Any]) -> None:
    parts = split_delta(delta)
    owners = {"app": ("", ""), "user": (scope.user_id, ""),
              "session": (scope.user_id, scope.id)}
    for level, values in parts.items():
        user, sid = owners[level]
        conn.executemany(_UPSERT, [(level, scope.app_name, user, sid, key, text)
                                   for key, text in values.items()])


def set_scope(session_id: str, app_name: str, user_id: str,
              state: Mapping[str, Any] | None, at: int, conn: sqlite3.Connection) -> None:
    def work() -> None:
        _live(conn, session_id)
        row = conn.execute("SELECT app_name, user_id FROM scopes WHERE session_id = ?",
                           (session_id,)).fetchone()
        if row is None:
            conn.execute("INSERT INTO scopes (session_id, app_name, user_id, update_time)"
                         " VALUES (?, ?, ?, ?)", (session_id, app_name, user_id, at))
        elif tuple(row) != (app_name, user_id):
            raise ScopeConflict(f"session {session_id!r} belongs to app {row[0]!r}, user "
                                f"{row[1]!r}, not app {app_name!r}, user {user_id!r}")
        else:
            conn.execute("UPDATE scopes SET update_time = ? WHERE session_id = ?",
                         (at, session_id))
        if state:
            _apply(conn, _scope(conn, session_id), state)

    in_transaction(conn, "BEGIN IMMEDIATE", work)


def scope_of(session_id: str, conn: sqlite3.Connection) -> ScopedSession:
    return in_transaction(conn, "BEGIN", lambda: _scope(conn, session_id))


def _rows(conn: sqlite3.Connection, level: str, app: str, user: str, sid: str
          ) -> dict[str, Any]:
    rows = conn.execute("SELECT key, value FROM state WHERE scope = ? AND app_name = ?"
                        " AND user_id = ? AND session_id = ? ORDER BY key",
                        (level, app, user, sid)).fetchall()
    return decode_state([(k, v) for k, v in rows])


def get_state(session_id: str, conn: sqlite3.Connection) -> ScopedState:
    def work() -> ScopedState:
        scope = _scope(conn, session_id)
        return ScopedState(_rows(conn, "app", scope.app_name, "", ""),
                           _rows(conn, "user", scope.app_name, scope.user_id, ""),
                           _rows(conn, "session", scope.app_name, scope.user_id, scope.id))

    return in_transaction(conn, "BEGIN", work)


def user_state(app_name: str, user_id: str, conn: sqlite3.Connection) -> dict[str, Any]:
    return _rows(conn, "user", app_name, user_id, "")


def update_state(session_id: str, delta: Mapping[str, Any], at: int,
                 conn: sqlite3.Connection) -> None:
    def work() -> None:
        _apply(conn, _scope(conn, session_id), delta)
        conn.execute("UPDATE scopes SET update_time = ? WHERE session_id = ?",
                     (at, session_id))

    in_transaction(conn, "BEGIN IMMEDIATE", work)


def list_scoped(app_name: str, user_id: str | None, after: str | None, limit: int | None,
                conn: sqlite3.Connection) -> SessionPage:
    where = [" WHERE c.app_name = ?",
             " AND NOT EXISTS (SELECT 1 FROM tombstones AS t WHERE t.session_id = s.id)"]
    params: list[Any] = [app_name]
    if user_id is not None:
        where.append(" AND c.user_id = ?")
        params.append(user_id)
    if after is not None:
        where.append(" AND c.session_id > ?")
        params.append(after)
    sql = _SCOPED + "".join(where) + " ORDER BY c.session_id LIMIT ?"
    params.append(-1 if limit is None else limit + 1)
    rows = [ScopedSession(*row) for row in conn.execute(sql, params).fetchall()]
    if limit is not None and len(rows) > limit:
        return SessionPage(rows[:limit], rows[limit - 1].id)
    return SessionPage(rows, None)


def delete_session(session_id: str, at: int, conn: sqlite3.Connection) -> None:
    def work() -> None:
        _live(conn, session_id)
        conn.execute("INSERT INTO tombstones (session_id, deleted_at) VALUES (?, ?)",
                     (session_id, at))
        conn.execute("UPDATE sessions SET writer_epoch = writer_epoch + 1 WHERE id = ?",
                     (session_id,))

    in_transaction(conn, "BEGIN IMMEDIATE", work)


def purge_session(session_id: str, conn: sqlite3.Connection) -> None:
    def work() -> None:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?",
                        (session_id,)).fetchone() is None:
            raise SessionNotFound(f"session {session_id!r} is not stored")
        if not deleted(conn, session_id):
            raise StoreError(f"session {session_id!r} is not deleted: delete it before "
                             f"purging it")
        conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM state WHERE scope = 'session' AND session_id = ?",
                     (session_id,))
        conn.execute("DELETE FROM scopes WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM imports WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        conn.execute("DELETE FROM tombstones WHERE session_id = ?", (session_id,))

    in_transaction(conn, "BEGIN IMMEDIATE", work)


__all__ = [
    "StateWrite",
    "delete_session",
    "deleted",
    "get_state",
    "list_scoped",
    "purge_session",
    "scope_of",
    "set_scope",
    "update_state",
    "user_state",
    "write_state",
]
