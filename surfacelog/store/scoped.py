"""Scoped sessions, state and deletion: the store features Google ADK's session service
needs (issue 14), shared by every backend that implements them.

- **Scope**: a session may belong to an app and a user (``set_scope``, once; a session
  created without one is never listed by ``list_scoped``).
- **State**: key/value JSON at three levels, with ADK's prefixes (``split_delta``): a
  key ``app:k`` is ``k`` of the app's state (shared by every session of the app),
  ``user:k`` is ``k`` of the user's state in that app (shared by the user's sessions),
  ``temp:k`` is never stored, any other key belongs to the session. A delta sets keys
  (a ``None`` value is stored as JSON ``null``, as ADK does); nothing removes a key.
- **Listing**: ``list_scoped(app, user=None, after=, limit=)``, by session id, one page
  at a time (keyset: ``after`` = the previous page's ``next_after``).
- **Deletion** (``delete_session``): a tombstone, not a removal. The deleted session is
  hidden from loading (``SessionDeleted``, a ``SessionNotFound``), ``list_sessions`` and
  ``list_scoped``; its writer is fenced (the epoch is bumped); its events, header, scope
  and session state stay in the database until ``purge_session`` removes them, and its
  id stays taken until then. Export a session before deleting it: ``export`` reads
  through ``load``, which refuses a deleted session. App and user state are never
  removed by deleting a session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from msgspec import Struct

from surfacelog.schema.codec import decode_json, encode_json
from surfacelog.schema.errors import InvalidArgument, LogError
from surfacelog.schema.limits import own_json

APP_PREFIX: Final = "app:"
USER_PREFIX: Final = "user:"
TEMP_PREFIX: Final = "temp:"

StateScope = Literal["app", "user", "session"]


class ScopedSession(Struct, frozen=True):
    """One row of ``list_scoped`` (and ``scope_of``)."""

    id: str
    app_name: str
    user_id: str
    created_at: int
    update_time: int
    """ms of the last ``set_scope``/``update_state`` of this session."""
    length: int
    last_time: int | None


class SessionPage(Struct, frozen=True):
    """A page of ``list_scoped``; ``next_after`` is ``None`` on the last page."""

    sessions: list[ScopedSession]
    next_after: str | None


class ScopedState(Struct, frozen=True):
    """A session's state: its app's, its user's and its own (keys without prefixes)."""

    app: dict[str, Any]
    user: dict[str, Any]
    session: dict[str, Any]

    def merged(self) -> dict[str, Any]:
        """ADK's view: session keys, then ``app:k`` and ``user:k`` keys."""
        out = dict(self.session)
        out.update({APP_PREFIX + k: v for k, v in self.app.items()})
        out.update({USER_PREFIX + k: v for k, v in self.user.items()})
        return out


def split_delta(delta: Mapping[str, Any]) -> dict[StateScope, dict[str, str]]:
    """``delta`` split by scope, prefixes removed, ``temp:`` keys dropped, each value
    encoded as JSON text. Raises ``InvalidArgument`` for a key that is not a string or a
    value JSON does not carry exactly (a set, a tuple, NaN, bytes...: the package's
    exact-JSON rule, nothing silently converted)."""
    out: dict[StateScope, dict[str, str]] = {"app": {}, "user": {}, "session": {}}
    for key, value in delta.items():
        if not isinstance(key, str):
            raise InvalidArgument(f"state keys must be strings, got {key!r}")
        try:
            text = encode_json(own_json(value, "state", None)).decode()
        except LogError as exc:  # JsonValueError, NestingError
            raise InvalidArgument(f"state value of {key!r} is not JSON: {exc}") from exc
        if key.startswith(APP_PREFIX):
            out["app"][key.removeprefix(APP_PREFIX)] = text
        elif key.startswith(USER_PREFIX):
            out["user"][key.removeprefix(USER_PREFIX)] = text
        elif not key.startswith(TEMP_PREFIX):
            out["session"][key] = text
    return out


def decode_state(rows: list[tuple[str, str]]) -> dict[str, Any]:
    """``(key, JSON text)`` rows as a dict."""
    return {key: decode_json(text) for key, text in rows}


def check_page(limit: int | None) -> None:
    """Raise ``InvalidArgument`` for a page size below 1."""
    if limit is not None and limit < 1:
        raise InvalidArgument(f"limit must be >= 1, got {limit}")


__all__ = ["APP_PREFIX", "TEMP_PREFIX", "USER_PREFIX", "ScopedSession", "ScopedState",
           "SessionPage", "StateScope", "check_page", "decode_state", "split_delta"]
