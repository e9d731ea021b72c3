"""The SQLite backend: one database file (WAL) written through one aiosqlite connection.

- ``store``: ``SqliteEventStore``, the ``EventStore`` primitives over the file.
- ``group_commit``: write-behind, one queue for every session, one transaction per group,
  and the multi-row INSERT of event rows.
- ``connection``: the one connection thread that runs whole units of work, each in one
  transaction.
- ``scoped``: the units of work of scopes, state and deletion.
- ``statements``: reading events back, and the ``imports`` table; ``schema.sql``: the DDL.
- ``file_format``: recognising our files, refusing every other one (bump-and-reject).
"""

from surfacelog.store.sqlite.file_format import APPLICATION_ID, SCHEMA_VERSION
from surfacelog.store.sqlite.group_commit import WriterStats
from surfacelog.store.sqlite.store import SqliteEventStore, sqlite_backend

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SqliteEventStore", "WriterStats",
           "sqlite_backend"]
