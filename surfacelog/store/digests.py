"""Replay digests of every stored session: what a store reads back (a fresh process's
read-only open, or a shard's writer on its own node: ``replay_store``)."""

from __future__ import annotations

from msgspec import Struct

from surfacelog.session.digest import SessionDigest, digest
from surfacelog.store.base import EventStore
from surfacelog.store.errors import CorruptStore, StoreError
from surfacelog.store.shardmap import ShardMap
from surfacelog.store.shardset import ShardedStores
from surfacelog.store.sqlite import SqliteEventStore
from surfacelog.store.verify import VerifyFailure


class StoreReplay(Struct, frozen=True):
    """What one store replays to, read where the store is (``replay_store``): the
    digest of every session that loads, one failure per session that does not, and the
    bytes the store takes on its disk (``None``: its backend does not say)."""

    digests: dict[str, SessionDigest]
    failures: list[VerifyFailure]
    disk_bytes: int | None


class ShardDigest(Struct, frozen=True):
    """The digest of one session and the name of the shard that holds it."""

    session: str
    shard: str
    digest: SessionDigest


async def session_digest(store: EventStore, session_id: str) -> SessionDigest:
    """Replay ``session_id`` through the core and digest it. Raises
    ``SessionNotFound``, ``CorruptStore``."""
    session = await store.load(session_id)
    snap = session.snapshot()
    return digest(snap.length, snap.nodes, snap.replace_generation, session.derive_messages())


async def store_digest_report(store: EventStore
                              ) -> tuple[dict[str, SessionDigest], list[VerifyFailure]]:
    """The digest of every session of ``store`` that can be read, and one failure per
    session that cannot (``CorruptStore``, or a ``StoreError`` of the database such
    as a corrupted page): the others are still digested. Raises ``StoreError`` when
    the sessions cannot be listed."""
    digests: dict[str, SessionDigest] = {}
    failures: list[VerifyFailure] = []
    for info in await store.list_sessions():
        try:
            digests[info.id] = await session_digest(store, info.id)
        except CorruptStore as exc:
            failures.append(VerifyFailure(info.id, exc.seq, str(exc)))
        except StoreError as exc:
            failures.append(VerifyFailure(info.id, None, f"cannot be read: {exc}"))
    return digests, failures


async def replay_store(store: EventStore) -> StoreReplay:
    """Replay every committed session of ``store`` through the core, in this process
    (a shard's writer calls it on its own node, on its own store: the rows read are the
    committed ones, never queued or in-memory state). Raises ``StoreError`` when the
    sessions cannot be listed; a session that cannot be read is a failure of the
    result, not raised."""
    digests, failures = await store_digest_report(store)
    return StoreReplay(digests, failures, store.disk_bytes())


async def store_digests(db: str) -> dict[str, SessionDigest]:
    """Open ``db``, replay each session through the core, and digest it. Raises
    ``VersionRefused``, ``CorruptStore``."""
    store = await SqliteEventStore.open(db, read_only=True)
    try:
        return {info.id: await session_digest(store, info.id)
                for info in await store.list_sessions()}
    finally:
        await store.close()


async def shard_digests(shard_map: ShardMap) -> list[ShardDigest]:
    """The digest of every session of every shard of ``shard_map`` (each file opened
    from this machine, never created), ordered by session id then shard name (an id on
    two shards, a broken invariant, has one entry per shard). Raises
    ``ShardFileError`` naming a shard whose file cannot be opened, ``CorruptStore``,
    ``StoreError``."""
    async with ShardedStores(shard_map) as stores:
        return [ShardDigest(entry.info.id, entry.shard,
                            await session_digest(await stores.store(shard_map.get(entry.shard)),
                                                 entry.info.id))
                for entry in await stores.list_sessions()]
