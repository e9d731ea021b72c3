"""The SQL statements of the ``events`` table that the SQLite backend runs on its
connection thread (the table itself: ``schema.sql``)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from itertools import chain
from typing import Final

from surfacelog.store.rows import Row

INSERT_EVENTS: Final = (
    "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op,"
    " ignorable) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
ROWS_PER_STATEMENT: Final = 64
"""Rows per multi-row INSERT: 512 parameters, well under SQLite's limit of 32766."""
SELECT_EVENTS: Final = (
    "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events"
    " WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT ?"
)

@functools.cache
def _insert_sql(rows: int) -> str:
    """``INSERT_EVENTS`` with ``rows`` value tuples."""
    return INSERT_EVENTS + ", (?, ?, ?, ?, ?, ?, ?, ?)" * (rows - 1)


def insert_rows(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """Insert ``rows`` (inside the caller's transaction) with multi-row INSERT
    statements of ``ROWS_PER_STATEMENT`` rows: one statement step per 64 rows instead of
    one per row, which costs less than ``executemany``'s per-row loop by about as much
    as encoding the rows costs. Raises ``sqlite3.Error`` (rows inserted before the error
    stay in the transaction: the caller rolls back)."""
    per = ROWS_PER_STATEMENT
    full = len(rows) - len(rows) % per
    if full:
        sql = _insert_sql(per)
        params = list(chain.from_iterable(rows[:full]))
        width = per * len(rows[0])
        for start in range(0, len(params), width):
            conn.execute(sql, params[start:start + width])
    if full < len(rows):
        conn.execute(_insert_sql(len(rows) - full), list(chain.from_iterable(rows[full:])))


__all__ = ["INSERT_EVENTS", "ROWS_PER_STATEMENT", "SELECT_EVENTS", "insert_rows"]
