"""``surfacelog fork``'s work: a child session seeded with a prefix of a stored one
(docs/rules.md §10), and the exit status of each of the fork's error codes (the command
is registered with the database commands)."""

from __future__ import annotations

from pathlib import Path

from surfacelog.cli.common import open_store
from surfacelog.session.errors import ForkError
from surfacelog.session.fork import (
    INVALID_BOUNDARY,
    OPEN_TURN,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
    fork,
)
from surfacelog.store.errors import SessionNotFound

FORK_EXIT: dict[str, int] = {SESSION_ALREADY_EXISTS: 3, SESSION_NOT_FOUND: 4,
                             INVALID_BOUNDARY: 5, OPEN_TURN: 6}
"""The exit status of each fork error code."""


async def fork_stored(db: Path, source: str, at: int | None, child_id: str | None) -> str:
    """Store in ``db`` a new session seeded with ``source``'s log up to seq ``at``
    (inclusive; ``None``: all of it), with id ``child_id`` (``None``: a new UUID);
    the child's id. Raises ``ForkError`` (its ``code`` one of ``FORK_EXIT``'s),
    ``CannotOpen``, ``StoreError``."""
    store = await open_store(db)
    try:
        if child_id is not None:
            try:
                await store.header(child_id)
            except SessionNotFound:
                pass
            else:
                raise ForkError(SESSION_ALREADY_EXISTS, f"session {child_id!r} already exists")
        try:
            session = await store.load(source)
        except SessionNotFound:
            raise ForkError(SESSION_NOT_FOUND, f"session {source!r} not found") from None
        child = fork({source: session}, source, at, child_id)
        assert child.header is not None
        await store.create(child.header, list(child.log))
        await store.flush()
        return child.header.id
    finally:
        await store.close()
