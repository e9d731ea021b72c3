"""DSH-style JSONL import and export of stored sessions (docs/rules.md §11): a header
line ``{"type":"session",...}`` then one event per line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import Literal, cast

from msgspec import Struct

from surfacelog.schema.codec import LogFile, LogStream, encode_log
from surfacelog.schema.dsh import PackedRun, encode_dsh
from surfacelog.schema.errors import InvalidArgument, LogError
from surfacelog.schema.events import Event
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session import now_ms, replay, upgrade_legacy
from surfacelog.session.logcheck import LogCheck
from surfacelog.store.base import EventStore

ExportFormat = Literal["jsonl", "dsh"]


async def export_session(store: EventStore, session_id: str, *,
                         fmt: ExportFormat = "jsonl", zstd: bool = False) -> bytes:
    """The committed log of ``session_id`` as JSONL: its header line (every key kept,
    ``delegationDepth`` always present), then its events exactly as stored.

    ``fmt="dsh"`` writes what DSH's JSONL backend writes: packed chunk rows where DSH
    would pack them (``schema.dsh.pack_records``), and with ``zstd`` one zstd frame for
    the header and one per batch of 1024 events. Raises ``SessionNotFound``,
    ``CorruptStore``, ``InvalidArgument`` (``zstd`` without ``fmt="dsh"``)."""
    if zstd and fmt != "dsh":
        raise InvalidArgument("zstd framing is DSH's format: give fmt='dsh' with zstd")
    header = await store.header(session_id)
    events = await store.read_since(session_id, 0)
    if fmt == "dsh":
        return encode_dsh(header, events, zstd=zstd)
    return encode_log(header, events)


def header_for(log: LogFile, source: Path) -> SessionHeader:
    """The header of an imported log: its own header line, or (for a log without one)
    a header whose id is the file's stem and whose ``createdAt`` is the first event's
    time (now for an empty log)."""
    return _header(log.header, log.events[0] if log.events else None, source)


def _header(header: SessionHeader | None, first: Event | None,
            source: Path) -> SessionHeader:
    if header is not None:
        return header
    created = first.time if first is not None else now_ms()
    if type(created) is not int:
        created = now_ms()
    return SessionHeader(version=SESSION_FORMAT_VERSION, id=source.stem, created_at=created)


def prepare_import(log: LogFile, source: Path, *,
                   legacy: bool = False) -> tuple[SessionHeader, list[Event]]:
    """The header and events ``import_log`` would store for ``log``, validated through
    the core (nothing is stored). ``legacy`` first marks a markerless log
    (``upgrade_legacy``). Raises ``surfacelog.schema.LogError`` for an invalid log."""
    events = upgrade_legacy(log.events) if legacy else log.events
    header = header_for(log, source)
    replay(events, header)
    return header, events


_IMPORT_BATCH = 65_536
"""Events per batch when an import of a log already in memory is validated and stored."""


def _validated(batches: Iterable[Sequence[Event | PackedRun]], check: LogCheck
               ) -> Iterator[Sequence[Event | PackedRun]]:
    """``batches``, each once ``check`` found it valid. At the first invalid event the
    rest is still read (not checked, not yielded) so that a reading error anywhere in
    the file wins, as when the whole file was read before validation; then the
    validation error is raised."""
    failed: LogError | None = None
    for batch in batches:
        if failed is not None:
            continue
        try:
            check.feed(batch)
        except LogError as exc:
            failed = exc
            continue
        yield batch
    if failed is not None:
        raise failed


async def import_log(store: EventStore, log: LogFile, source: Path, *,
                     legacy: bool = False) -> SessionHeader:
    """Validate ``log`` through the core and store it as a new session, events exactly
    as read (no seed marker or repair: those are added when the session is opened for
    writing). ``legacy`` first marks a markerless log (``upgrade_legacy``).

    Raises ``surfacelog.schema.LogError`` for an invalid log (nothing stored),
    ``SessionExists``, ``StoreError``."""
    events = upgrade_legacy(log.events) if legacy else log.events
    header = _header(log.header, events[0] if events else None, source)
    batches = (events[k:k + _IMPORT_BATCH] for k in range(0, len(events), _IMPORT_BATCH))
    await store.create_streamed(header, _validated(batches, LogCheck()), source=str(source))
    return header


class StreamedImport(Struct, frozen=True):
    """What ``import_stream`` stored: the header, the number of events, and the torn
    tail the reader dropped (``None``: none)."""

    header: SessionHeader
    events: int
    torn: str | None


def stream_header(stream: LogStream, source: Path,
                  batches: Iterable[Sequence[Event | PackedRun]] | None = None
                  ) -> tuple[SessionHeader, Iterator[Sequence[Event | PackedRun]]]:
    """The header ``import_stream`` stores the file ``stream`` reads as (its header
    line's, else one made from the file's name and its first event), and the stream's
    batches (``batches``: as the caller wraps them, by default the stream's own), the
    first one read already when there is no header line. Raises what reading the
    first batch raises."""
    if batches is None:
        batches = stream.records() if stream.runs else stream.batches()
    items = iter(batches)
    first: Sequence[Event | PackedRun] | None = None
    if stream.header is None:  # the id is the file's, the time the first event's
        first = next(items, None)
    head = first[0] if first else None
    header = _header(stream.header, head.event(0) if type(head) is PackedRun
                     else cast("Event | None", head), source)
    if first is not None:
        items = chain([first], items)
    return header, items


def validated_stream(items: Iterable[Sequence[Event | PackedRun]]
                     ) -> Iterator[Sequence[Event | PackedRun]]:
    """``items``, each batch once the core found it valid (``LogCheck``: the checks of
    ``replay``); raises the first invalid event's error once every batch was read."""
    return _validated(items, LogCheck())


async def import_stream(store: EventStore, stream: LogStream, source: Path, *,
                        batches: Iterable[Sequence[Event | PackedRun]] | None = None
                        ) -> StreamedImport:
    """``import_log`` of the file ``stream`` reads, without holding its events: each
    block is validated through the core (``LogCheck``, the checks of ``replay``) and
    stored as it is read, in one transaction (SQLite; see ``create_streamed``), so a
    refused file leaves nothing stored. A stream opened with ``runs`` hands packed
    rows over unexpanded: checked and stored as the events they stand for, without
    building each. The errors are ``import_log``'s after ``read_log``'s, in the same
    order: the file's first reading error wherever it is, else its first invalid
    event, else the header, else ``SessionExists``. ``batches``: the stream's
    ``records()`` (or ``batches()``) as the caller wraps it (to translate its errors),
    by default the stream's own.

    Raises ``surfacelog.schema.LogError`` (``DecodeError`` for a bad line), ``OSError``,
    ``SessionExists``, ``StoreError``."""
    header, items = stream_header(stream, source, batches)
    stored = await store.create_streamed(header, validated_stream(items), source=str(source))
    return StreamedImport(header, stored, stream.notes.torn)
