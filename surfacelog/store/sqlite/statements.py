"""The SQL the SQLite backend runs besides the group commit's inserts
(``group_commit.insert_rows``): reading a session's events back, and the ``imports``
table, an imported session's record written in the import's transaction and checked by
``verify`` (``store.rows.RowDigest``). The tables themselves: ``schema.sql``."""

from __future__ import annotations

import sqlite3
import time
from typing import Final

from surfacelog.store.rows import RowDigest, SourceCheck
from surfacelog.store.sqlite.connection import in_transaction

SELECT_EVENTS: Final = (
    "SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events"
    " WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT ?"
)

_RECORD: Final = ("INSERT INTO imports (session_id, source, events, digest, imported_at)"
                  " VALUES (?, ?, ?, ?, ?)")
_READ: Final = "SELECT source, events, digest FROM imports WHERE session_id = ?"
_ROWS_PER_READ: Final = 2_000


def record_import(conn: sqlite3.Connection, session_id: str, source: str,
                  digest: RowDigest) -> None:
    """Record (inside the caller's transaction) that ``session_id`` was imported from
    ``source`` as the rows ``digest`` digested. Raises ``sqlite3.Error``."""
    conn.execute(_RECORD, (session_id, source, digest.rows, digest.hexdigest(),
                           time.time_ns() // 1_000_000))


def check_import(conn: sqlite3.Connection, session_id: str) -> SourceCheck | None:
    """``session_id`` against its import record (``None``: it was not imported), its
    first rows read in blocks and digested again, in one read transaction. Raises
    ``sqlite3.Error``."""
    def work() -> SourceCheck | None:
        found = conn.execute(_READ, (session_id,)).fetchone()
        if found is None:
            return None
        source, events, recorded = found
        digest = RowDigest()
        while digest.rows < events:
            rows = conn.execute(SELECT_EVENTS, (session_id, digest.rows,
                                                min(_ROWS_PER_READ, events - digest.rows))
                                ).fetchall()
            if not rows or rows[0][0] != digest.rows:
                break  # cut short, or a gap: what follows is not the source's
            digest.add(rows)
        whole = digest.rows == events
        return SourceCheck(session_id, source, events, digest.rows,
                           whole and digest.hexdigest() == recorded)

    return in_transaction(conn, "BEGIN", work)


__all__ = ["SELECT_EVENTS", "check_import", "record_import"]
