"""DSH-style JSONL import and export of stored sessions (SPEC section 11): a header
line ``{"type":"session",...}`` then one event per line."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from surfacelog.schema.codec import LogFile, encode_log
from surfacelog.schema.dsh import encode_dsh
from surfacelog.schema.errors import InvalidArgument
from surfacelog.schema.events import Event
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session import now_ms, replay, upgrade_legacy
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
    if log.header is not None:
        return log.header
    created = log.events[0].time if log.events else now_ms()
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


async def import_log(store: EventStore, log: LogFile, source: Path, *,
                     legacy: bool = False) -> SessionHeader:
    """Validate ``log`` through the core and store it as a new session, events exactly
    as read (no seed marker or repair: those are added when the session is opened for
    writing). ``legacy`` first marks a markerless log (``upgrade_legacy``).

    Raises ``surfacelog.schema.LogError`` for an invalid log (nothing stored),
    ``SessionExists``, ``StoreError``."""
    header, events = prepare_import(log, source, legacy=legacy)
    await store.create(header, events)
    return header
