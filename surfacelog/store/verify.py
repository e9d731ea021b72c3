"""Full re-validation of every stored session (``surfacelog verify``), of one store or of
every shard of a deployment."""

from __future__ import annotations

from msgspec import Struct

from surfacelog.store.base import EventStore
from surfacelog.store.errors import CorruptStore, StoreError
from surfacelog.store.shardmap import ShardMap
from surfacelog.store.shardset import (
    Misplaced,
    ShardedSession,
    ShardedStores,
    duplicates,
    misplaced,
)


class VerifyFailure(Struct, frozen=True):
    """A session that does not load: where (``seq`` is ``None`` when the problem is not
    one event's) and why."""

    session_id: str
    seq: int | None
    message: str


async def verify_store(store: EventStore) -> tuple[int, list[VerifyFailure]]:
    """Load every stored session through the core's full validation (header, row
    decoding, contiguity, row count, every rule of the log), read-only, and check an
    imported session against the record of its import (``check_source``): one that no
    longer holds every event of its source as imported fails, cut short or changed.

    Returns how many sessions were checked and one failure per session that does not
    load or is not its whole source, in session id order (the first failing seq of a
    session hides later ones). A session the database cannot read (a corrupted page:
    ``StoreError``) is a failure too, and the others are still checked. Raises
    ``StoreError`` when the sessions cannot even be listed.
    """
    failures = []
    sessions = await store.list_sessions()
    for info in sessions:
        try:
            await store.load(info.id)
            check = await store.check_source(info.id)
        except CorruptStore as exc:
            failures.append(VerifyFailure(info.id, exc.seq, str(exc)))
            continue
        except StoreError as exc:
            failures.append(VerifyFailure(info.id, None, f"cannot be read: {exc}"))
            continue
        if check is not None and (problem := check.problem()) is not None:
            seq = check.stored if check.stored < check.events else None
            failures.append(VerifyFailure(info.id, seq, problem))
    return len(sessions), failures


class ShardVerification(Struct, frozen=True):
    """``verify_store`` of one shard: how many sessions were checked and which failed,
    or ``error`` when the shard's file could not be opened or listed (nothing checked)."""

    shard: str
    path: str
    checked: int
    failures: list[VerifyFailure]
    error: str | None = None


class ShardsVerification(Struct, frozen=True):
    """``verify_shards``: one report per shard in configuration order, the ids stored on
    more than one shard (with those shards), and the sessions stored on a shard that is
    not one of their candidates."""

    shards: list[ShardVerification]
    duplicates: dict[str, list[str]]
    misplaced: list[Misplaced]

    @property
    def ok(self) -> bool:
        """Every shard opened, every session loaded, no id on two shards, none
        misplaced."""
        return (not self.duplicates and not self.misplaced
                and all(r.error is None and not r.failures for r in self.shards))


async def verify_shards(shard_map: ShardMap) -> ShardsVerification:
    """``verify_store`` on every shard of ``shard_map`` (each file opened read-only from
    this machine, never created), then the routing invariants over the shards that
    could be read: no id on two shards, none on a shard outside its candidates.

    A shard that cannot be opened or fails as a database is reported in its
    ``ShardVerification.error`` and the others are still checked. Raises nothing of its
    own."""
    reports: list[ShardVerification] = []
    entries: list[ShardedSession] = []
    async with ShardedStores(shard_map) as stores:
        for shard in shard_map.shards:
            try:
                infos = await stores.shard_sessions(shard)
                checked, failures = await verify_store(await stores.store(shard))
            except StoreError as exc:
                reports.append(ShardVerification(shard.name, shard.path, 0, [], str(exc)))
                continue
            entries.extend(ShardedSession(shard.name, info) for info in infos)
            reports.append(ShardVerification(shard.name, shard.path, checked, failures))
    entries.sort(key=lambda e: (e.info.id, e.shard))
    return ShardsVerification(reports, duplicates(entries), misplaced(shard_map, entries))
