"""Activation: how a stored session becomes live, written once for every store.

Taking a session for writing is: one read that bumps its writer epoch (fencing any
earlier writer) and returns its rows; decode and validate them through the core; add
the seed marker and the closers of a turn a crash left open; store those durably under
the new epoch; then serve. Only the read and the write are the backend's (its
``EventStore`` primitives ``read_stored``, ``read_stored_or_create`` and
``append_stored``); everything else is here, so the in-process store (CLI, tests) and a
session actor writing through the journal accept, repair and refuse exactly the same
stored logs, and a new backend gets all of it by providing the primitives.

A reader need not take the session: ``load`` reads it without the bump, and ``take``
later takes that loaded session for writing (the bump, then a check that nothing was
stored since the load; if anything was, a full activation), so that a framework reading
history after a restart writes nothing and fences nobody until it writes.
"""

from __future__ import annotations

from typing import Protocol

from msgspec import Struct

from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.session import Session, interrupted_turn_closers, replay
from surfacelog.store.rows import EncodedBatch, decode_rows, encode_batch
from surfacelog.store.stored import (
    StoredSession,
    corrupt,
    decode_header,
    decode_stored,
    replay_stored,
)


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


def _seal(session: Session) -> tuple[Event, ...]:
    """Append to a replayed ``session`` what taking it for writing adds, as
    ``Session(seed)`` does: the seed marker (unless the log ends with one) and the
    closers of a turn a crash left open. Returns them. Raises ``LogError``."""
    n = len(session)
    session.mark_seed_end()
    for closer in interrupted_turn_closers(session.log):
        session.append_event(closer)
    return tuple(session.log[n:])


def reopen(session_id: str, stored: StoredSession) -> tuple[Session, tuple[Event, ...]]:
    """The live session of a whole-session read, with what taking it for writing adds:
    the seed marker (when the log has live events) and the closers of a turn a crash
    left open. Returns the session and those added events, which the caller must store
    (under ``stored.epoch``) before serving it. Raises ``CorruptStore``."""
    header, events = decode_stored(session_id, stored)
    try:
        # ``replay`` is the batch path of the checks ``Session(seed)`` runs one event at a
        # time (the same rules, in log order, the same errors).
        session = replay(events, header)
        added = _seal(session)
    except LogError as exc:
        raise corrupt(session_id, exc) from exc
    session.first_live_seq = len(events)
    return session, added


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


async def take(store: Rows, session_id: str, loaded: Session) -> OpenedSession:
    """Take for writing a session read earlier with ``load`` (``loaded``, not written to
    since): bump its writer epoch and, in the same transaction, read its header, next
    seq and last row; when they are still what ``loaded`` holds, add the seed marker and
    crash-repair closers to ``loaded`` itself, store them durably under the new epoch
    and return it (nothing is read or validated again). When anything was stored since
    the load, the session is activated from a whole read instead (``open_session``),
    and ``loaded`` is left as it was.

    The bump is what fences an earlier writer, exactly as ``open_session``: it happens
    before any of this writer's batches, and every batch of an earlier epoch is refused
    from then on. Raises ``SessionNotFound`` (``SessionDeleted``), ``CorruptStore``,
    ``WriterFenced``, the store's errors; on failure ``loaded`` is unchanged."""
    n = len(loaded)
    stored = await store.read_stored(session_id, since=max(n - 1, 0), bump=True)
    if not _unchanged(session_id, stored, loaded):
        return await open_session(store, session_id)
    with loaded.atomic():  # a failure (a newer writer, a failed commit) undoes the seal
        try:
            repaired = _seal(loaded)
        except LogError as exc:
            raise corrupt(session_id, exc) from exc
        if repaired:
            await store.append_stored(session_id, encode_batch(session_id, repaired),
                                      epoch=stored.epoch, durable=True)
    loaded.first_live_seq = n
    return OpenedSession(loaded, stored.epoch, repaired)


def _unchanged(session_id: str, stored: StoredSession, loaded: Session) -> bool:
    """Whether the read ``stored`` (rows from the loaded log's last seq) finds the log
    as ``loaded`` holds it: same length, same header, same last event. A log only grows,
    so this holds unless another writer appended (or the session was deleted, purged
    and created again with the same header and as many events, down to the last one)."""
    n = len(loaded)
    if stored.next_seq != n or decode_header(session_id, stored.header) != loaded.header:
        return False
    return not n or decode_rows(session_id, stored.rows, n - 1) == [loaded.log[n - 1]]


async def load(store: Rows, session_id: str) -> Session:
    """The stored log replayed through the core, read-only: no seed marker, no repair, no
    epoch bump. Raises ``SessionNotFound``, ``CorruptStore`` (naming the session and
    seq of the first row that cannot be decoded or breaks a rule)."""
    return replay_stored(session_id, await store.read_stored(session_id))


__all__ = ["OpenedSession", "activate", "load", "open_or_create", "open_session", "reopen",
           "take"]
