"""The import pipeline: session logs from files, DSH sessions roots and DSH session
databases stored as new sessions, into one store or onto shards alike.

``import_sources`` walks the paths it is given and yields one outcome per session as it
goes (``Imported``, ``AlreadyStored``, ``Refused`` with the rule and its text), and one
per DSH root or database read whole (``SourceRead``) or not at all
(``SourceUnreadable``). Where the sessions go is an ``ImportTarget``: ``StoreTarget``
wraps one ``EventStore``; ``ShardedStores`` (``store.shardset``) puts each session on
its home shard. The pipeline never asks which one it has.

A plain file is streamed (validated and stored block by block in one transaction:
memory holds one block of it, not the file), except with ``legacy`` and when its home
shard has no file yet (that shard is created only for a log known valid, so the file
is read whole first). A file that is refused leaves nothing stored. A session of a DSH
root or database whose id already holds the same events is reported already stored,
so that running an import again resumes it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

from msgspec import Struct

from surfacelog.schema.codec import LogFile, LogStream, Record, read_log, reading
from surfacelog.schema.errors import LogError, UnreadableLog
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import MAX_LINE_BYTES
from surfacelog.session import upgrade_legacy
from surfacelog.store.base import EventStore
from surfacelog.store.dsh_sources import read_database, session_files
from surfacelog.store.errors import DshSourceError, ImportAbandoned, SessionExists, StoreError
from surfacelog.store.jsonl import import_log, import_stream, prepare_import
from surfacelog.store.sqlite.file_format import is_dsh_database

Origin: TypeAlias = Literal["file", "root", "database"]
"""Where a session came from: a log file given by itself, a session file of a DSH
sessions root, a session of a DSH session database."""


class Stored(Struct, frozen=True):
    """A session an ``ImportTarget`` created: its header, its number of events, and
    the shard that holds it (``None`` for a single store)."""

    header: SessionHeader
    events: int
    shard: str | None = None


class ImportTarget(Protocol):
    """Where an import creates sessions: one store (``StoreTarget``) or a set of
    shards (``ShardedStores``). Each method stores all of a session or nothing."""

    async def store_log(self, log: LogFile, source: Path) -> Stored:
        """Validate ``log`` (read from ``source``, whose stem is the id of a log
        without a header line) through the core and create it as a new session.
        Raises ``LogError`` (invalid log), ``SessionExists``, ``StoreError``."""
        ...

    async def store_stream(self, stream: LogStream, source: Path,
                           batches: Iterable[Sequence[Record]]) -> Stored | None:
        """Create the session ``stream`` reads, validating and storing ``batches`` (the
        stream's records as the caller wraps them) block by block in one transaction.
        ``None``, having read nothing past the header, when it cannot be streamed (the
        caller then reads the file whole and calls ``store_log``). Raises what
        ``batches`` raise, ``LogError``, ``SessionExists``, ``StoreError``; nothing is
        stored when it raises."""
        ...

    async def stored_events(self, session_id: str) -> list[Event]:
        """The events stored under ``session_id``. Raises ``SessionNotFound``,
        ``StoreError``."""
        ...

    async def close(self) -> None:
        """Close every store the target opened."""
        ...


class StoreTarget:
    """One ``EventStore`` as an ``ImportTarget``: every session is created in it."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def store_log(self, log: LogFile, source: Path) -> Stored:
        """``jsonl.import_log`` into the store (see ``ImportTarget.store_log``)."""
        header = await import_log(self.store, log, source)
        return Stored(header, len(log.events))

    async def store_stream(self, stream: LogStream, source: Path,
                           batches: Iterable[Sequence[Record]]) -> Stored:
        """``jsonl.import_stream`` into the store: a single store always streams (see
        ``ImportTarget.store_stream``)."""
        done = await import_stream(self.store, stream, source, batches=batches)
        return Stored(done.header, done.events)

    async def stored_events(self, session_id: str) -> list[Event]:
        """``read_since(session_id, 0)`` of the store."""
        return await self.store.read_since(session_id, 0)

    async def close(self) -> None:
        """Close the store."""
        await self.store.close()


# -- outcomes ------------------------------------------------------------------------------


class Imported(Struct, frozen=True):
    """``label`` (the file, or ``DATABASE session ID``) was stored as session
    ``session_id``: ``events`` events, on ``shard`` (``None``: a single store), after
    the reader dropped the torn tail ``torn`` (``None``: none)."""

    label: str
    origin: Origin
    session_id: str
    events: int
    shard: str | None = None
    torn: str | None = None


class AlreadyStored(Struct, frozen=True):
    """``label`` holds a valid log whose id ``session_id`` already holds the same
    ``events`` events: an earlier import stored it (DSH roots and databases only)."""

    label: str
    origin: Origin
    session_id: str
    events: int


class Refused(Struct, frozen=True):
    """``label`` was not stored, nothing of it is: ``rule`` says why (``unreadable``,
    the ``LogError``'s rule, ``exists``, ``row`` for a DSH row that cannot be decoded,
    ``store``) and ``reason`` is the rule's text."""

    label: str
    origin: Origin
    rule: str
    reason: str


class SourceRead(Struct, frozen=True):
    """The DSH root or database at ``path`` was read to its end: it held ``sessions``
    session files (a root) or sessions (a database), each reported before this."""

    path: Path
    origin: Literal["root", "database"]
    sessions: int


class SourceUnreadable(Struct, frozen=True):
    """The DSH root or database at ``path`` cannot be read (on), ``reason`` says why:
    what it held after the sessions already reported is not imported."""

    path: Path
    reason: str


SessionOutcome: TypeAlias = Imported | AlreadyStored | Refused
Outcome: TypeAlias = SessionOutcome | SourceRead | SourceUnreadable


class ImportOptions(Struct, frozen=True):
    """How files are read: ``legacy`` marks a markerless log first (``upgrade_legacy``;
    plain files only, never streamed); a line longer than ``max_line_bytes`` makes the
    file unreadable, its message naming ``limit_option`` (the option that raises the
    limit) when given."""

    legacy: bool = False
    max_line_bytes: int = MAX_LINE_BYTES
    limit_option: str | None = None


# -- the pipeline ----------------------------------------------------------------------------


async def import_sources(target: ImportTarget, paths: Iterable[Path],
                         options: ImportOptions | None = None) -> AsyncGenerator[Outcome]:
    """Import each of ``paths`` into ``target``, in order, yielding each outcome as it
    is known: a directory is a DSH sessions root (each session file, then
    ``SourceRead``), a SQLite file with DSH's application id a DSH session database
    (each session, then ``SourceRead``), anything else one log file (one outcome).

    A file's own errors come first: one that cannot be read is ``Refused`` with rule
    ``unreadable``, an invalid log with the ``LogError``'s rule, whatever the target
    would have said about its id. A plain file whose id is stored is refused
    (``exists``); a session of a root or database is ``AlreadyStored`` when the same
    events are stored under its id, else refused (``exists``, "with other events than
    this file's"). A session the target fails to store otherwise (a shard file that
    cannot be opened, a failed commit) is refused with rule ``store``, and the import
    goes on with the next, as for log files. ``options``: how files are read (default
    ``ImportOptions()``)."""
    how = ImportOptions() if options is None else options
    for path in paths:
        if path.is_dir():
            async for outcome in _import_root(target, path, how):
                yield outcome
        elif is_dsh_database(path):
            async for outcome in _import_database(target, path):
                yield outcome
        else:
            yield await _import_file(target, path, how)


async def _import_file(target: ImportTarget, path: Path,
                       options: ImportOptions) -> SessionOutcome:
    """One log file given by itself: streamed unless ``options.legacy`` or the target
    declines, else read whole. Every error of the file or the target is ``Refused``."""
    label = str(path)
    try:
        if not options.legacy:
            streamed = await _streamed(target, path, options, "file")
            if streamed is not None:
                return streamed
        log = _read(path, options, legacy=options.legacy)
        stored = await target.store_log(log, path)
    except UnreadableLog as exc:
        return Refused(label, "file", "unreadable", str(exc))
    except LogError as exc:
        return Refused(label, "file", exc.rule, str(exc))
    except SessionExists as exc:
        return Refused(label, "file", "exists", str(exc))
    except StoreError as exc:
        return Refused(label, "file", "store", str(exc))
    return _imported(label, "file", stored, log.torn)


async def _import_root(target: ImportTarget, root: Path,
                       options: ImportOptions) -> AsyncGenerator[Outcome]:
    """Every session file of the DSH sessions root ``root`` (``session_files``), then
    ``SourceRead``; ``SourceUnreadable`` alone when the root cannot be listed."""
    try:
        found = session_files(root)
    except OSError as exc:
        yield SourceUnreadable(root, f"cannot read {root}: {exc.strerror or exc}")
        return
    except DshSourceError as exc:
        yield SourceUnreadable(root, str(exc))
        return
    for path in found:
        yield await _root_file(target, path, options)
    yield SourceRead(root, "root", len(found))


async def _root_file(target: ImportTarget, path: Path,
                     options: ImportOptions) -> SessionOutcome:
    """One session file of a DSH root, resumable: streamed, and when its id is stored
    compared with what is (the file is then read whole, only for that comparison).
    ``legacy`` does not apply: DSH writes marked logs."""
    label = str(path)
    try:
        try:
            streamed = await _streamed(target, path, options, "root")
        except SessionExists as exc:
            return await _already_stored(target, label, "root", _read(path, options),
                                         path, exc)
        if streamed is None:  # a new shard: created only once the whole file is valid
            return await _resumable(target, label, "root", _read(path, options), path)
        return streamed
    except UnreadableLog as exc:
        return Refused(label, "root", "unreadable", str(exc))
    except LogError as exc:
        return Refused(label, "root", exc.rule, str(exc))
    except StoreError as exc:  # a shard that cannot be opened, a failed commit...
        return Refused(label, "root", "store", str(exc))


async def _import_database(target: ImportTarget, path: Path) -> AsyncGenerator[Outcome]:
    """Every session of the DSH session database at ``path`` (``read_database``), then
    ``SourceRead``; ``SourceUnreadable`` when the database is refused (another schema
    version, not DSH's) or a read fails, after the sessions read before."""
    count = 0
    try:
        for found in read_database(path):
            count += 1
            label = f"{path} session {found.session_id}"
            if found.log is None:
                yield Refused(label, "database", "row", found.error or "")
                continue
            yield await _resumable(target, label, "database", found.log, path)
    except DshSourceError as exc:
        yield SourceUnreadable(path, str(exc))
        return
    except sqlite3.Error as exc:
        yield SourceUnreadable(path, f"cannot read DSH database {path}: {exc}")
        return
    yield SourceRead(path, "database", count)


async def _resumable(target: ImportTarget, label: str, origin: Origin, log: LogFile,
                     source: Path) -> SessionOutcome:
    """``log`` stored whole: imported, already stored (the same events under its id),
    or refused with the rule (``store`` when the target fails otherwise)."""
    try:
        try:
            stored = await target.store_log(log, source)
        except SessionExists as exc:
            return await _already_stored(target, label, origin, log, source, exc)
    except LogError as exc:
        return Refused(label, origin, exc.rule, str(exc))
    except StoreError as exc:  # a shard that cannot be opened, a failed commit...
        return Refused(label, origin, "store", str(exc))
    return _imported(label, origin, stored, log.torn)


async def _already_stored(target: ImportTarget, label: str, origin: Origin, log: LogFile,
                          source: Path, exc: SessionExists) -> SessionOutcome:
    """The outcome of the valid ``log`` whose id ``exc`` says is stored: already
    stored when the same events are, else refused. Raises ``StoreError``."""
    header, events = prepare_import(log, source)
    if await target.stored_events(header.id) == events:
        return AlreadyStored(label, origin, header.id, len(events))
    return Refused(label, origin, "exists", f"{exc}, with other events than this file's")


async def _streamed(target: ImportTarget, path: Path, options: ImportOptions,
                    origin: Origin) -> Imported | None:
    """The file at ``path`` stored through ``target.store_stream`` (memory: one block
    of it; packed rows are checked and stored as runs, not expanded); ``None`` when the
    target declines. Interrupted (cancelled, ``KeyboardInterrupt``), nothing of the
    file is stored (see ``_Feed``). Raises ``UnreadableLog``, ``LogError``,
    ``SessionExists``, ``StoreError``."""
    with reading(path, limit_option=options.limit_option):
        stream = LogStream(path, max_line_bytes=options.max_line_bytes, runs=True)
    feed = _Feed(path, stream, options.limit_option)
    try:
        stored = await target.store_stream(stream, path, feed)
    except Exception:
        stream.close()  # the target is done with the stream: it raised
        raise
    except BaseException:
        feed.abandon()  # the store's thread may still be reading: it closes the stream
        raise
    torn = stream.notes.torn
    stream.close()
    if stored is None:
        return None
    return _imported(str(path), origin, stored, torn)


class _Feed:
    """The records of ``stream`` for ``store_stream``, which may read them on the
    store's own thread (SQLite's connection thread), where reading goes on after the
    importing task was interrupted.

    The stream must not be closed under that reader: a closed stream's records just
    end, and the store would take that end for the file's and commit the part read as
    a whole session. ``abandon`` instead makes the reader's next step raise
    ``ImportAbandoned``, and the store rolls the session back; the stream is closed on
    the reader's side then."""

    def __init__(self, path: Path, stream: LogStream, limit_option: str | None) -> None:
        self._stream = stream
        self._records = _records(path, stream, limit_option)
        self._abandoned = False

    def abandon(self) -> None:
        """Stop the reader at its next batch (or at the end, before the store commits)."""
        self._abandoned = True

    def __iter__(self) -> Iterator[list[Record]]:
        for batch in self._records:
            self._check()
            yield batch
        self._check()

    def _check(self) -> None:
        if self._abandoned:
            self._stream.close()
            raise ImportAbandoned(f"import of {self._stream.path} interrupted: nothing "
                                  f"of it is stored")


def _records(path: Path, stream: LogStream, limit_option: str | None
             ) -> Iterator[list[Record]]:
    """``stream.records()``, its errors translated by ``reading`` as ``_read``'s are."""
    with reading(path, limit_option=limit_option):
        yield from stream.records()


def _read(path: Path, options: ImportOptions, *, legacy: bool = False) -> LogFile:
    """The whole log file at ``path`` (marked first with ``legacy``). Raises
    ``UnreadableLog``, ``LogError``."""
    with reading(path, limit_option=options.limit_option):
        log = read_log(path, max_line_bytes=options.max_line_bytes)
    if legacy:
        return LogFile(log.header, upgrade_legacy(log.events))
    return log


def _imported(label: str, origin: Origin, stored: Stored, torn: str | None) -> Imported:
    return Imported(label, origin, stored.header.id, stored.events, stored.shard, torn)


__all__ = ["AlreadyStored", "ImportOptions", "ImportTarget", "Imported", "Origin",
           "Outcome", "Refused", "SessionOutcome", "SourceRead", "SourceUnreadable",
           "StoreTarget", "Stored", "import_sources"]
