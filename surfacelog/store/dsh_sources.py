"""DeepSeek Harness's session stores, read as they are (``../shared/DSH-FORMATS.md``):
a JSONL sessions root (``<root>/--<cwd>--/<session id>/session.jsonl[.zstd]``,
``_no-cwd/`` when the header has no cwd) and a SQLite session database (DSH's schema
version 17, application id "DSHP").

Both give ``LogFile`` values (header and events, packed rows expanded) for ``import``;
nothing here writes. A DSH database is opened read-only and never modified.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec

from surfacelog.schema.codec import JSON_DECODER, JSON_ENCODER, LogFile, decode_records
from surfacelog.schema.dsh import PACKED_TYPES, ReadNotes
from surfacelog.schema.errors import LogError
from surfacelog.store.errors import DshSourceError
from surfacelog.store.sqlite.file_format import DSH_APPLICATION_ID

DSH_SCHEMA_VERSION: Final = 17
SESSION_FILES: Final = ("session.jsonl", "session.jsonl.zstd")
_MAX_SAFE: Final = 2**53 - 1
_PACKED_MAX_MEMBERS: Final = 1024
_PACKED_MAX_BYTES: Final = 1 << 20


class _Members(msgspec.Struct):
    texts: list[Any] | None = None
    args: list[Any] | None = None


_MEMBERS: Final = msgspec.json.Decoder(_Members)


# -- the JSONL sessions root --------------------------------------------------------------


def session_files(root: Path) -> list[Path]:
    """Every session file of a DSH sessions root, in a stable order (cwd directory, then
    session directory, by name): ``<root>/--<cwd>--/<id>/session.jsonl[.zstd]`` and
    ``<root>/_no-cwd/<id>/...``. Other entries are ignored, as DSH's listing ignores
    them. Raises ``DshSourceError`` when the root holds both encodings (DSH refuses
    such a root: it holds one encoding only), ``OSError``."""
    found: list[Path] = []
    suffixes: set[str] = set()
    for cwd_dir in sorted(root.iterdir()):
        name = cwd_dir.name
        if not cwd_dir.is_dir() or not (name == "_no-cwd" or
                                        (name.startswith("--") and name.endswith("--"))):
            continue
        for session_dir in sorted(cwd_dir.iterdir()):
            if not session_dir.is_dir():
                continue
            for file_name in SESSION_FILES:
                candidate = session_dir / file_name
                if candidate.is_file():
                    found.append(candidate)
                    suffixes.add(file_name)
    if len(suffixes) > 1:
        raise DshSourceError(f"{root}: DSH sessions root holds both session.jsonl and "
                             f"session.jsonl.zstd files; a root holds one encoding only")
    return found


# -- the SQLite database --------------------------------------------------------------------


_SESSIONS_COLUMNS: Final = ["id", "version", "created_at", "cwd", "parent_session",
                            "seed_length", "origin", "delegation_depth", "agent_preset",
                            "incarnation", "revision"]
_EVENTS_COLUMNS: Final = ["session_id", "seq", "type", "time", "data", "source_event_seqs",
                          "surface_op", "ignorable"]


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    (app_id,) = conn.execute("PRAGMA application_id").fetchone()
    if app_id != DSH_APPLICATION_ID:
        raise DshSourceError(f"{path}: not a DSH session database (application id "
                             f"{app_id}, DSH's is {DSH_APPLICATION_ID})")
    if version != DSH_SCHEMA_VERSION:
        raise DshSourceError(f"{path}: DSH session database has schema version {version}, "
                             f"incompatible with this build ({DSH_SCHEMA_VERSION})")
    for table, columns in (("sessions", _SESSIONS_COLUMNS), ("events", _EVENTS_COLUMNS)):
        found = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        if found != columns:
            raise DshSourceError(f"{path}: DSH table {table} has columns {found}, "
                                 f"expected {columns}")


def decode_varints(blob: bytes) -> list[int]:
    """DSH's ``source_event_seqs`` BLOB: the first value as an unsigned LEB128 varint,
    each later one as the zig-zag varint of its delta from the previous value. Raises
    ``ValueError`` for a non-canonical varint (a final 0x00 byte), one longer than 9
    bytes, truncation, or a value outside 0 .. 2^53-1."""
    values: list[int] = []
    pos = 0
    while pos < len(blob):
        value = shift = 0
        start = pos
        while True:
            if pos >= len(blob):
                raise ValueError(f"truncated varint at byte {start}")
            byte = blob[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                if byte == 0 and pos - start > 1:
                    raise ValueError(f"non-canonical varint at byte {start}")
                break
            if pos - start >= 9:
                raise ValueError(f"varint longer than 9 bytes at byte {start}")
        if values:
            delta = value >> 1 if not value & 1 else -((value + 1) >> 1)
            value = values[-1] + delta
        if not 0 <= value <= _MAX_SAFE:
            raise ValueError(f"value {value} out of range at byte {start}")
        values.append(value)
    return values


def _data_text(data: Any, zstd: Any) -> bytes:
    if isinstance(data, bytes):
        return bytes(zstd.ZstdDecompressor().decompressobj().decompress(data))
    if isinstance(data, str):
        return data.encode()
    raise ValueError(f"data is a {type(data).__name__}, not TEXT or a zstd BLOB")


def _header_json(row: tuple[Any, ...]) -> dict[str, Any]:
    """A DSH ``sessions`` row as the header line DSH's JSONL backend would write.
    ``origin`` and ``agent_preset`` are TEXT: a JSON object or array there is taken as
    that value, any other text as a string."""
    (sid, version, created_at, cwd, parent, seed_length, origin, depth, preset) = row[:9]
    header: dict[str, Any] = {"type": "session", "version": version, "id": sid,
                              "createdAt": created_at}
    if cwd is not None:
        header["cwd"] = cwd
    if parent is not None:
        header["parentSession"] = parent
    if seed_length is not None:
        header["seedLength"] = seed_length
    if origin is not None:
        header["origin"] = _text_value(origin)
    header["delegationDepth"] = 0 if depth is None else depth
    if preset is not None:
        header["agentPreset"] = _text_value(preset)
    return header


def _text_value(text: Any) -> Any:
    if isinstance(text, str) and text[:1] in ("{", "["):
        try:
            return JSON_DECODER.decode(text)
        except msgspec.DecodeError:
            return text
    return text


def _record(row: tuple[Any, ...], zstd: Any) -> bytes:
    """One ``events`` row as the JSONL storage record it stands for."""
    seq, etype, time, data, seqs, surface_op, ignorable = row
    text = _data_text(data, zstd)
    if ignorable == 0:  # the packed-row discriminator
        if etype not in PACKED_TYPES:
            raise ValueError(f"packed row of type {etype!r}")
        if seqs is not None or surface_op is not None:
            raise ValueError("packed row with source_event_seqs or surface_op")
        if len(text) > _PACKED_MAX_BYTES:
            raise ValueError(f"packed row data of {len(text)} bytes (at most "
                             f"{_PACKED_MAX_BYTES})")
        try:
            members = _MEMBERS.decode(text)
        except msgspec.DecodeError as exc:
            raise ValueError(f"packed row data: {exc}") from exc
        count = len(members.texts if members.texts is not None else members.args or [])
        if not 3 <= count <= _PACKED_MAX_MEMBERS:
            raise ValueError(f"packed row of {count} members (3..{_PACKED_MAX_MEMBERS})")
        return (b'{"type":%s,"seq0":%d,"time0":%d,"data":%s}'
                % (JSON_ENCODER.encode(etype), seq, time, text))
    parts = [b'{"type":', JSON_ENCODER.encode(etype), b',"seq":%d,"time":%d,"data":' % (
        seq, time), text]
    if seqs is not None:
        if not isinstance(seqs, bytes):
            raise ValueError("source_event_seqs is not a BLOB")
        parts += [b',"sourceEventSeqs":', JSON_ENCODER.encode(decode_varints(seqs))]
    if surface_op is not None:
        parts += [b',"surfaceOp":', surface_op.encode()]
    if ignorable is not None:
        if ignorable != 1:
            raise ValueError(f"ignorable is {ignorable!r}")
        parts.append(b',"ignorable":true')
    parts.append(b"}")
    return b"".join(parts)


class DatabaseSession(NamedTuple):
    """One session of a DSH database: its id and its log, or why it cannot be read."""

    session_id: str
    log: LogFile | None
    error: str | None


def read_database(path: Path) -> Iterator[DatabaseSession]:
    """Every session of a DSH SQLite database, by id, read-only (``mode=ro``): the
    header as DSH's JSONL backend writes it and the events, packed rows expanded and
    checked (3..1024 members, at most 1 MiB of data). A session whose rows cannot be
    decoded is given with its error (the others are still read).

    Raises ``DshSourceError`` before yielding anything for a database that is not DSH's
    or has another schema version (refused, never upgraded), ``sqlite3.Error``."""
    import zstandard

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        _check_schema(conn, path)
        ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")]
        for sid in ids:
            conn.execute("BEGIN")
            try:
                head = conn.execute(
                    "SELECT id, version, created_at, cwd, parent_session, seed_length, "
                    "origin, delegation_depth, agent_preset FROM sessions WHERE id = ?",
                    (sid,)).fetchone()
                rows = conn.execute(
                    "SELECT seq, type, time, data, source_event_seqs, surface_op, "
                    "ignorable FROM events WHERE session_id = ? ORDER BY seq", (sid,))
                yield _session(sid, head, rows, zstandard)
            finally:
                conn.execute("COMMIT")
    finally:
        conn.close()


def _session(sid: str, head: tuple[Any, ...], rows: Any, zstd: Any) -> DatabaseSession:
    notes = ReadNotes()
    where = {"row": 0}

    def records() -> Iterator[tuple[int, bytes]]:
        yield 0, JSON_ENCODER.encode(_header_json(head))
        for n, row in enumerate(rows, 1):
            where["row"] = row[0]
            try:
                record = _record(tuple(row), zstd)
            except (ValueError, zstd.ZstdError) as exc:
                raise _RowError(f"invalid committed physical row at seq {row[0]}: "
                                f"{exc}") from exc
            yield n, record

    try:
        log = decode_records(records(), notes, unit="row")
    except _RowError as exc:
        return DatabaseSession(sid, None, str(exc))
    except LogError as exc:
        return DatabaseSession(sid, None, f"({exc.rule}) {exc}")
    return DatabaseSession(sid, log, None)


class _RowError(DshSourceError):
    """A DSH ``events`` row that cannot be turned into a storage record (reported as
    its session's error)."""
