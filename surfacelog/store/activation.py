"""Activation: how a stored session becomes live, written once for every store.

Taking a session for writing is: one read that bumps its writer epoch (fencing any
earlier writer) and returns its rows; decode and validate them through the core; add
the seed marker and the closers of a turn a crash left open; store those durably under
the new epoch; then serve. Only the read and the write are the backend's (its
``EventStore`` primitives ``read_stored``, ``read_stored_or_create`` and
``append_stored``); everything else is here, so the in-process store (CLI, tests) and a
session actor writing through the journal accept, repair and refuse exactly the same
stored logs, and a new backend gets all of it by providing the primitives.
"""

from __future__ import annotations

from typing import Protocol

from msgspec import Struct

from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.session import Session, interrupted_turn_closers
from surfacelog.store.rows import EncodedBatch, encode_batch
from surfacelog.store.stored import StoredSession, corrupt, decode_stored, replay_stored


class Rows(Protocol):
    """The backend primitives activation uses (every ``EventStore`` has them; spelled
    here as a protocol so that ``base``, whose convenience methods call activation, is
    not imported back)."""

    async def read_stored(self, session_id: str, *, since: int = 0,
                          limit: int | None = None, bump: bool = False) -> StoredSession: ...

    async def read_stored_or_create(self, header: SessionHeader) -> StoredSession | int: ...

    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None: ...


class OpenedSession(Struct, frozen=True):
    """A session taken for writing: the live core object and the writer's epoch.

    ``repaired`` holds the events the activation appended (seed marker, crash-repair
    closers); they are durable before this is returned.
    """

    session: Session
    epoch: int
    repaired: tuple[Event, ...]


def reopen(session_id: str, stored: StoredSession) -> tuple[Session, tuple[Event, ...]]:
    """The live session of a whole-session read, with what taking it for writing adds:
    the seed marker (when the log has live events) and the closers of a turn a crash
    left open. Returns the session and those added events, which the caller must store
    (under ``stored.epoch``) before serving it. Raises ``CorruptStore``."""
    header, events = decode_stored(session_id, stored)
    try:
        session = Session(events, header=header)
        for closer in interrupted_turn_closers(session.log):
            session.append_event(closer)
    except LogError as exc:
        raise corrupt(session_id, exc) from exc
    return session, tuple(session.log[len(events):])


async def activate(store: Rows, session_id: str, stored: StoredSession
                   ) -> OpenedSession:
    """The session of a read that took it for writing (``bump``), with its seed marker
    and crash-repair closers stored durably under the read's epoch first. Raises
    ``CorruptStore`` (nothing is written then), ``WriterFenced`` (an even newer writer
    took the session meanwhile), the store's write errors."""
    session, repaired = reopen(session_id, stored)
    if repaired:
        await store.append_stored(session_id, encode_batch(session_id, repaired),
                                  epoch=stored.epoch, durable=True)
    return OpenedSession(session, stored.epoch, repaired)


async def open_session(store: Rows, session_id: str) -> OpenedSession:
    """Take ``session_id`` for writing: bump its writer epoch and read it in one step,
    validate it through the core, store the seed marker and crash-repair closers
    durably, and return it. Raises ``SessionNotFound``, ``CorruptStore``,
    ``WriterFenced``, the store's errors."""
    return await activate(store, session_id, await store.read_stored(session_id, bump=True))


async def open_or_create(store: Rows, header: SessionHeader) -> OpenedSession:
    """``open_session(header.id)``; when it is not stored, create it with ``header`` and
    return the new empty session (writer epoch 1). Raises ``CorruptStore``,
    ``SessionExists`` (created by someone else in between),
    ``surfacelog.schema.DecodeError`` (a header this build cannot read, when creating),
    the store's errors."""
    got = await store.read_stored_or_create(header)
    if isinstance(got, int):
        return OpenedSession(Session(header=header), got, ())
    return await activate(store, header.id, got)


async def load(store: Rows, session_id: str) -> Session:
    """The stored log replayed through the core, read-only: no seed marker, no repair, no
    epoch bump. Raises ``SessionNotFound``, ``CorruptStore`` (naming the session and
    seq of the first row that cannot be decoded or breaks a rule)."""
    return replay_stored(session_id, await store.read_stored(session_id))


__all__ = ["OpenedSession", "activate", "load", "open_or_create", "open_session", "reopen"]
