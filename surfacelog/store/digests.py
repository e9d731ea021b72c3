"""Replay digests of every stored session: what a fresh process reads back."""

from __future__ import annotations

from surfacelog.session.digest import SessionDigest, digest
from surfacelog.store.sqlite import SqliteEventStore


async def store_digests(db: str) -> dict[str, SessionDigest]:
    """Open ``db``, replay each session through the core, and digest it. Raises
    ``VersionRefused``, ``CorruptStore``."""
    store = await SqliteEventStore.open(db)
    try:
        out = {}
        for info in await store.list_sessions():
            session = await store.load(info.id)
            snap = session.snapshot()
            out[info.id] = digest(snap.length, snap.nodes, snap.replace_generation,
                                  session.derive_messages())
        return out
    finally:
        await store.close()
