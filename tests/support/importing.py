"""Import into and verify a SQLite database file, in process, as ``surfacelog import`` and
``surfacelog verify`` do (the pipeline and the check below the command line)."""

from __future__ import annotations

from pathlib import Path

from surfacelog.store import SqliteEventStore
from surfacelog.store.importing import Outcome, StoreTarget, import_sources
from surfacelog.store.verify import VerifyFailure, verify_store


async def import_files(db: Path, *paths: Path) -> list[Outcome]:
    """Import ``paths`` into ``db`` (created when missing); each outcome."""
    target = StoreTarget(await SqliteEventStore.open(db))
    try:
        return [o async for o in import_sources(target, paths)]
    finally:
        await target.close()


async def verified(db: Path) -> tuple[int, list[VerifyFailure]]:
    """``verify_store`` of ``db``, read-only: the sessions checked and the failures."""
    store = await SqliteEventStore.open(db, read_only=True)
    try:
        return await verify_store(store)
    finally:
        await store.close()
