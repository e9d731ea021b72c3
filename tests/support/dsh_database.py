"""DSH SQLite session databases built as DeepSeek Harness writes them (schema version
17, application id "DSHP"): ``dsh_database`` writes the given sessions, chunk runs as
packed rows, ``source_event_seqs`` as DSH's varint BLOB, large data as zstd BLOBs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from surfacelog.schema.dsh import pack_records
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader

DSH_DDL = """
CREATE TABLE persistence_state(singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  store_id TEXT NOT NULL) STRICT;
CREATE TABLE sessions(id TEXT PRIMARY KEY, version INTEGER NOT NULL,
  created_at INTEGER NOT NULL, cwd TEXT, parent_session TEXT, seed_length INTEGER,
  origin TEXT, delegation_depth INTEGER, agent_preset TEXT, incarnation TEXT NOT NULL,
  revision INTEGER NOT NULL) STRICT;
CREATE TABLE events(session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data ANY NOT NULL,
  source_event_seqs ANY, surface_op TEXT,
  ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)) STRICT;
"""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_varints(values: list[int]) -> bytes:
    out = bytearray()
    for k, value in enumerate(values):
        if k == 0:
            out += _varint(value)
        else:
            d = value - values[k - 1]
            out += _varint(2 * d if d >= 0 else 2 * -d - 1)
    return bytes(out)


def dsh_database(path: Path, sessions: dict[str, tuple[SessionHeader, list[Event]]],
                  version: int = 17) -> None:
    import sqlite3

    import zstandard
    conn = sqlite3.connect(path)
    conn.executescript(DSH_DDL)
    conn.execute("INSERT INTO persistence_state VALUES (1, 'store-1')")
    for sid, (head, events) in sessions.items():
        conn.execute("INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?)", (
            sid, 0, head.created_at, head.cwd or None, None, None,
            msgspec.json.encode(head.origin).decode() if head.origin is not msgspec.UNSET
            else None, head.delegation_depth, None, "inc-1", 1))
        for record in pack_records(events):
            if isinstance(record, bytes):
                row = msgspec.json.decode(record)
                data = msgspec.json.encode(row["data"])
                conn.execute("INSERT INTO events VALUES (?,?,?,?,?,NULL,NULL,0)",
                             (sid, row["seq0"], row["type"], row["time0"], data.decode()))
                continue
            e = record
            text = msgspec.json.encode(e.data)
            data: Any = text.decode()
            if len(text) >= 4096:
                data = zstandard.ZstdCompressor(level=3).compress(text)
            seqs = (None if e.source_event_seqs is msgspec.UNSET
                    else encode_varints(list(e.source_event_seqs)))
            op = (None if e.surface_op is msgspec.UNSET
                  else msgspec.json.encode(e.surface_op).decode())
            conn.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", (
                sid, e.seq, e.type, e.time, data, seqs, op,
                1 if e.ignorable is True else None))
    conn.execute(f"PRAGMA application_id = {0x44534850}")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
