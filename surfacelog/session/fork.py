"""Fork: a child session seeded with a prefix of a source session (docs/rules.md §10)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from msgspec import UNSET

from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session.errors import ForkError
from surfacelog.session.session import Session, now_ms
from surfacelog.session.turns import open_turn_start

SESSION_ALREADY_EXISTS = "SESSION_ALREADY_EXISTS"
SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
INVALID_BOUNDARY = "INVALID_BOUNDARY"
OPEN_TURN = "OPEN_TURN"


def fork(
    sessions: Mapping[str, Session],
    source_id: str,
    boundary: int | None = None,
    child_id: str | None = None,
    *,
    created_at: int | None = None,
) -> Session:
    """A new child session whose seed is ``log[0..boundary]`` of ``sessions[source_id]``
    (inclusive; default the last event). The caller registers the child.

    Raises ``ForkError`` with, checked in this order: ``SESSION_ALREADY_EXISTS`` (child
    id taken), ``SESSION_NOT_FOUND``, ``INVALID_BOUNDARY`` (not a seq of the log),
    ``OPEN_TURN`` (the boundary falls inside a turn).
    """
    child = child_id if child_id is not None else str(uuid.uuid4())
    if child in sessions:
        raise ForkError(SESSION_ALREADY_EXISTS, f"session {child!r} already exists")
    source = sessions.get(source_id)
    if source is None:
        raise ForkError(SESSION_NOT_FOUND, f"session {source_id!r} not found")
    log = source.log
    last = len(log) - 1 if boundary is None else boundary
    if type(last) is not int or not 0 <= last < len(log):
        raise ForkError(INVALID_BOUNDARY,
                        f"boundary {boundary!r} is not a seq of a log of {len(log)} events")
    opened = open_turn_start(log, end=last + 1)
    if opened is not None:
        raise ForkError(OPEN_TURN,
                        f"boundary {last} is inside the turn opened at seq {opened.seq}")
    parent = source.header
    header = SessionHeader(
        version=SESSION_FORMAT_VERSION,
        id=child,
        created_at=now_ms() if created_at is None else created_at,
        cwd=UNSET if parent is None else parent.cwd,
        parent_session=source_id,
        seed_length=last + 1,
    )
    return Session(log[: last + 1], header=header)
