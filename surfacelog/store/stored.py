"""A session as one read of a store returns it, and how it is decoded and validated.

``StoredSession`` is plain data: the header's JSON text, the writer epoch, the next seq
and the event rows, all strings and integers. So it can cross processes cheaply: the
journal actor reads it and the session actor that will serve the session decodes and
validates it, instead of receiving a pickled ``Session``, which costs several times the
read itself. Every store goes through these functions (see ``activation``), so every
path accepts and refuses exactly the same stored logs.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from surfacelog.schema.codec import JSON_DECODER
from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader, header_from_json
from surfacelog.session import Session, replay
from surfacelog.store.errors import CorruptStore
from surfacelog.store.rows import StoredRow, decode_rows


class StoredSession(NamedTuple):
    """One consistent read of a session: ``epoch`` and ``next_seq`` as stored with the
    rows, which are in seq order from ``since`` (0 for a whole session)."""

    header: str
    epoch: int
    next_seq: int
    rows: list[StoredRow]


def stored_page(header: str, epoch: int, rows: list[StoredRow], since: int,
                limit: int | None) -> StoredSession:
    """A read of a session whose every row is held in ``rows`` (seq ``k`` at index
    ``k``), as ``EventStore.read_stored`` returns it: the rows from ``since`` (a
    negative one reads from 0), at most ``limit`` of them (``None``: all), and
    ``next_seq`` the number of rows held. Raises nothing."""
    since = max(since, 0)
    stop = None if limit is None else since + limit
    return StoredSession(header, epoch, len(rows), rows[since:stop])


def decode_header(session_id: str, text: str) -> SessionHeader:
    """The header of ``session_id`` from its stored JSON text. Raises ``CorruptStore``
    when it cannot be read or names another session."""
    try:
        value = JSON_DECODER.decode(text)
        if not isinstance(value, dict):
            raise CorruptStore(f"session {session_id!r}: stored header is not a JSON object",
                               session_id)
        header = header_from_json(value)
    except (msgspec.DecodeError, LogError) as exc:
        raise CorruptStore(f"session {session_id!r}: stored header cannot be read: {exc}",
                           session_id) from exc
    if header.id != session_id:
        raise CorruptStore(f"session {session_id!r}: stored header names session "
                           f"{header.id!r}", session_id)
    return header


def decode_stored(session_id: str, stored: StoredSession) -> tuple[SessionHeader, list[Event]]:
    """The header and every event of a whole-session read (decoded, not validated).
    Raises ``CorruptStore`` for a row that cannot be decoded or is missing."""
    header = decode_header(session_id, stored.header)
    events = decode_rows(session_id, stored.rows, 0)
    if len(events) != stored.next_seq:
        raise CorruptStore(f"session {session_id!r}: {len(events)} events are stored but "
                           f"the session's next seq is {stored.next_seq}", session_id)
    return header, events


def corrupt(session_id: str, exc: LogError) -> CorruptStore:
    """The ``CorruptStore`` for a stored log that breaks the rule ``exc`` names."""
    seq = exc.seq if type(exc.seq) is int else None
    return CorruptStore(f"session {session_id!r} seq {exc.seq}: stored log is invalid: {exc}",
                        session_id, seq)


def replay_stored(session_id: str, stored: StoredSession) -> Session:
    """The stored log replayed through the core, as stored: no seed marker, no repair.
    Raises ``CorruptStore`` naming the session and seq of the first bad row or event."""
    header, events = decode_stored(session_id, stored)
    try:
        return replay(events, header)
    except LogError as exc:
        raise corrupt(session_id, exc) from exc


__all__ = ["StoredSession", "corrupt", "decode_header", "decode_stored", "replay_stored",
           "stored_page"]
