"""Every shard of a deployment opened from one machine: what the CLI's ``--shard-map``
commands (list, find, import, export, verify, digest) are built on.

A ``ShardedStores`` opens each shard's SQLite file itself, so every file of the map
must be readable from this machine (a shared or local disk). It opens a shard only when
a question needs it, and only read-only questions are asked of shards other than a
session's home: a session is created on its home alone, once every other candidate
shard (``ShardMap.candidates``) has said it does not hold the id.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

from msgspec import Struct

from surfacelog.schema.codec import LogFile, LogStream
from surfacelog.schema.dsh import PackedRun
from surfacelog.schema.errors import InvalidArgument
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader, check_header
from surfacelog.store.base import EventStore, SessionInfo
from surfacelog.store.errors import SessionExists, SessionNotFound, ShardFileError, StoreError
from surfacelog.store.importing import Stored
from surfacelog.store.jsonl import (
    ExportFormat,
    StreamedImport,
    export_session,
    prepare_import,
    stream_header,
    validated_stream,
)
from surfacelog.store.shardmap import Shard, ShardMap
from surfacelog.store.sqlite import SqliteEventStore


class ShardedSession(Struct, frozen=True):
    """One stored session and the name of the shard that holds it."""

    shard: str
    info: SessionInfo


class SessionPage(Struct, frozen=True):
    """One page of the merged session list: ``entries`` ordered by (id, shard), and
    ``next_after``, the ``after`` that gives the next page (``None``: this is the last
    one)."""

    entries: list[ShardedSession]
    next_after: str | None


class Misplaced(Struct, frozen=True):
    """A session stored on a shard that is not one of its candidates: the client never
    looks for it there."""

    session_id: str
    shard: str
    candidates: tuple[str, ...]


async def holds(store: EventStore, session_id: str) -> bool:
    """Whether ``store`` has a session ``session_id`` (its rows are not read or
    decoded). Raises ``StoreError``."""
    try:
        await store.read_stored(session_id, limit=0)
    except SessionNotFound:
        return False
    return True


def duplicates(entries: Iterable[ShardedSession]) -> dict[str, list[str]]:
    """The ids of ``entries`` stored on more than one shard (each an invariant broken),
    in id order, with the names of the shards that hold them."""
    where: defaultdict[str, list[str]] = defaultdict(list)
    for entry in entries:
        where[entry.info.id].append(entry.shard)
    return {sid: sorted(shards) for sid, shards in sorted(where.items()) if len(shards) > 1}


def misplaced(shard_map: ShardMap, entries: Iterable[ShardedSession]) -> list[Misplaced]:
    """The ``entries`` stored on a shard that is not one of their candidates in
    ``shard_map`` (the client would not find them there), in the order given."""
    out = []
    for entry in entries:
        candidates = tuple(s.name for s in shard_map.candidates(entry.info.id))
        if entry.shard not in candidates:
            out.append(Misplaced(entry.info.id, entry.shard, candidates))
    return out


class ShardedStores:
    """The ``SqliteEventStore`` of each shard of ``shard_map``, opened on first use and
    closed together (``async with ShardedStores(map) as stores: ...``).

    Reads open a shard's file with ``create=False``: a missing file raises
    ``ShardFileError`` naming the shard and its path. Only ``import_log`` creates
    anything, and only on the session's home shard.
    """

    def __init__(self, shard_map: ShardMap, *, read_only: bool = True,
                 keep_failed: bool = True) -> None:
        """``read_only`` (default): shard files are opened read-only unless created
        (``store(shard, create=True)``); ``import`` passes false, as it may write to
        a shard it has read. ``keep_failed``: see ``SqliteEventStore.open``."""
        self.map = shard_map
        self._read_only = read_only
        self._keep_failed = keep_failed
        self._stores: dict[str, SqliteEventStore] = {}

    async def __aenter__(self) -> ShardedStores:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def store(self, shard: Shard, *, create: bool = False) -> SqliteEventStore:
        """The open store of ``shard``, opening its file now if needed (``create``:
        initialise a missing file; else a missing file is an error). Raises
        ``ShardFileError``."""
        store = self._stores.get(shard.name)
        if store is not None:
            return store
        where = f"shard {shard.name!r} ({shard.path})"
        try:
            store = await SqliteEventStore.open(
                shard.path, create=create, read_only=self._read_only and not create,
                keep_failed=self._keep_failed)
        except FileNotFoundError as exc:
            raise ShardFileError(f"{where}: no database file (shard files must be "
                                 "readable from this machine)") from exc
        except (StoreError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ShardFileError(f"{where}: cannot open: {reason}") from exc
        self._stores[shard.name] = store
        return store

    async def close(self) -> None:
        """Close every store opened so far; raise the first close error after trying
        them all."""
        stores, self._stores = list(self._stores.values()), {}
        first: BaseException | None = None
        for store in stores:
            try:
                await store.close()
            except BaseException as exc:  # every store is closed before raising
                first = first or exc
        if first is not None:
            raise first

    async def shard_sessions(self, shard: Shard) -> list[SessionInfo]:
        """The sessions of one shard, ordered by id. Raises ``ShardFileError``,
        ``StoreError``."""
        return await (await self.store(shard)).list_sessions()

    async def list_sessions(self) -> list[ShardedSession]:
        """Every session of every shard, ordered by id then shard name (an id stored on
        two shards, a broken invariant, appears once per shard). Opens every shard.
        Raises ``ShardFileError``, ``StoreError``."""
        merged = [ShardedSession(shard.name, info) for shard in self.map.shards
                  for info in await self.shard_sessions(shard)]
        merged.sort(key=lambda s: (s.info.id, s.shard))
        return merged

    async def page(self, *, after: str | None = None, limit: int = 50) -> SessionPage:
        """Keyset pagination of ``list_sessions``: the first ``limit`` session ids
        greater than ``after`` (every id when ``after`` is ``None``), each with every
        shard that holds it, so that walking ``next_after`` lists each entry exactly
        once. Raises ``ValueError`` when ``limit`` < 1, ``ShardFileError``,
        ``StoreError``."""
        if limit < 1:
            raise InvalidArgument(f"limit must be >= 1, got {limit}")
        entries: list[ShardedSession] = []
        ids = 0
        for entry in await self.list_sessions():
            if after is not None and entry.info.id <= after:
                continue
            if not entries or entry.info.id != entries[-1].info.id:
                if ids == limit:
                    return SessionPage(entries, entries[-1].info.id)
                ids += 1
            entries.append(entry)
        return SessionPage(entries, None)

    async def find(self, session_id: str) -> Shard:
        """The shard that holds ``session_id``, asking its candidates in order (home
        first). A candidate whose file cannot be opened is passed over while another
        may still hold the id (an id lives on one shard at most).

        Raises ``SessionNotFound`` (no candidate holds it), ``ShardFileError`` (it is
        not on the candidates that could be opened, and one could not: whether it is
        stored is unknown), ``StoreError``."""
        candidates = self.map.candidates(session_id)
        unopened: ShardFileError | None = None
        for shard in candidates:
            try:
                store = await self.store(shard)
            except ShardFileError as exc:
                unopened = unopened or exc
                continue
            if await holds(store, session_id):
                return shard
        if unopened is not None:
            raise unopened
        names = ", ".join(s.name for s in candidates)
        raise SessionNotFound(f"session {session_id!r} is not stored "
                              f"(looked on shard(s) {names})")

    async def duplicates(self) -> dict[str, list[str]]:
        """``duplicates`` of every shard's sessions. Opens every shard. Raises
        ``ShardFileError``, ``StoreError``."""
        return duplicates(await self.list_sessions())

    async def misplaced(self) -> list[Misplaced]:
        """``misplaced`` of every shard's sessions. Opens every shard. Raises
        ``ShardFileError``, ``StoreError``."""
        return misplaced(self.map, await self.list_sessions())

    async def export_session(self, session_id: str, *, fmt: ExportFormat = "jsonl",
                             zstd: bool = False) -> tuple[Shard, bytes]:
        """``export_session`` (``fmt``, ``zstd`` as there) from the shard that holds
        ``session_id`` (see ``find``), and that shard. Raises ``SessionNotFound``,
        ``CorruptStore``, ``ShardFileError``, ``StoreError``."""
        shard = await self.find(session_id)
        return shard, await export_session(await self.store(shard), session_id, fmt=fmt,
                                           zstd=zstd)

    async def import_log(self, log: LogFile, source: Path, *,
                         legacy: bool = False) -> tuple[Shard, SessionHeader]:
        """``import_log`` onto the session's home shard: validate ``log`` through the
        core, check that no other candidate shard holds its id, then create it on its
        home (its file initialised when missing). Never creates anything elsewhere.
        Returns the home and the stored header.

        Raises ``surfacelog.schema.LogError`` (invalid log), ``SessionExists`` naming the
        shard that holds the id, ``ShardFileError`` (a candidate's file cannot be
        opened: whether it holds the id is unknown, so nothing is stored),
        ``StoreError``. Nothing is stored when it raises."""
        header, events = prepare_import(log, source, legacy=legacy)
        home, *others = self.map.candidates(header.id)
        refusal = await self._held_elsewhere(header.id, home, others)
        if refusal is not None:
            raise refusal
        try:
            await (await self.store(home, create=True)).create_streamed(
                header, [events], source=str(source))
        except SessionExists as exc:
            raise SessionExists(f"{exc} (on shard {home.name!r})") from exc
        return home, header

    async def _held_elsewhere(self, session_id: str, home: Shard, others: list[Shard]
                              ) -> SessionExists | ShardFileError | None:
        """Why ``session_id`` must not be created on ``home``: another candidate shard
        (``others``, in lookup order) holds it, or cannot be opened, so might; ``None``
        when none does. Raises ``StoreError`` (reading a shard)."""
        for shard in others:
            try:
                store = await self.store(shard)
            except ShardFileError as exc:
                refused = ShardFileError(f"{exc}; it may hold session {session_id!r}, so "
                                         f"it is not created on shard {home.name!r}")
                refused.__cause__ = exc
                return refused
            if await holds(store, session_id):
                return SessionExists(f"session {session_id!r} is already stored "
                                     f"(on shard {shard.name!r})")
        return None

    async def import_stream(self, stream: LogStream, source: Path, *,
                            batches: Iterable[Sequence[Event | PackedRun]] | None = None
                            ) -> tuple[Shard, StreamedImport] | None:
        """``import_stream`` onto the session's home shard, memory holding one block of
        the file: with the same checks as ``import_log`` (no other candidate shard holds
        the id, nothing created elsewhere) and its errors in ``import_stream``'s order
        (the file's reading error, else its first invalid event, else the header, else
        a shard that cannot be opened or holds the id). Returns ``None``, having read
        nothing past the header, when the home shard's file does not exist yet: a
        streamed import cannot know the file valid before it creates the shard, so the
        caller imports that file whole (``import_log``), which creates the shard only
        for a valid log.

        Raises ``surfacelog.schema.LogError``, ``ShardFileError``, ``SessionExists``
        naming the shard, ``StoreError``, ``OSError``. Nothing is stored when it
        raises."""
        header, items = stream_header(stream, source, batches)
        home, *others = self.map.candidates(header.id)
        if home.name not in self._stores and not Path(home.path).exists():
            return None
        refusal = await self._held_elsewhere(header.id, home, others)
        checked = _refused_at_end(validated_stream(items), header, refusal)
        try:
            store = await self.store(home, create=True)  # it exists: opened for writing
        except ShardFileError:
            for _ in checked:  # the file's own errors first, as import_log's order has it
                pass
            raise
        try:
            stored = await store.create_streamed(header, checked, source=str(source))
        except SessionExists as exc:
            if exc is refusal:
                raise
            raise SessionExists(f"{exc} (on shard {home.name!r})") from exc
        return home, StreamedImport(header, stored, stream.notes.torn)


    # -- ImportTarget (store.importing): what ``import --shard-map`` stores through ----------

    async def store_log(self, log: LogFile, source: Path) -> Stored:
        """``import_log`` as an ``ImportTarget``: the session on its home shard."""
        home, header = await self.import_log(log, source)
        return Stored(header, len(log.events), home.name)

    async def store_stream(self, stream: LogStream, source: Path,
                           batches: Iterable[Sequence[Event | PackedRun]]) -> Stored | None:
        """``import_stream`` as an ``ImportTarget``: ``None`` when the home shard has
        no file yet (the caller imports the file whole, through ``store_log``)."""
        done = await self.import_stream(stream, source, batches=batches)
        if done is None:
            return None
        home, streamed = done
        return Stored(streamed.header, streamed.events, home.name)

    async def stored_events(self, session_id: str) -> list[Event]:
        """The events of ``session_id`` on the shard that holds it (see ``find``).
        Raises ``SessionNotFound``, ``ShardFileError``, ``StoreError``."""
        return await (await self.store(await self.find(session_id))).read_since(
            session_id, 0)


def _refused_at_end(batches: Iterator[Sequence[Event | PackedRun]], header: SessionHeader,
                    refusal: Exception | None) -> Iterator[Sequence[Event | PackedRun]]:
    """``batches``, then ``refusal`` (another shard's reason not to store the session)
    raised after the file's own errors and its header's, which ``import_log`` reports
    first."""
    yield from batches
    if refusal is not None:
        check_header(header)
        raise refusal


__all__ = ["Misplaced", "SessionPage", "ShardFileError", "ShardedSession", "ShardedStores",
           "duplicates", "holds", "misplaced"]
