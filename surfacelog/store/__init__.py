"""Persistence: the EventStore interface, activation built on it, and its aiosqlite
implementation."""

from surfacelog.store.base import (
    EventStore,
    OpenedSession,
    ScopedEventStore,
    ScopedSession,
    ScopedState,
    SessionInfo,
    SessionPage,
    require_scoped,
)
from surfacelog.store.errors import (
    BadEvent,
    CommitFailed,
    CorruptStore,
    ScopeConflict,
    SeqMismatch,
    SessionDeleted,
    SessionExists,
    SessionNotFound,
    StoreError,
    Unsupported,
    VersionRefused,
    WriterFenced,
)
from surfacelog.store.jsonl import StreamedImport, export_session, import_log, import_stream
from surfacelog.store.sqlite import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    SqliteEventStore,
    WriterStats,
    sqlite_backend,
)
from surfacelog.store.verify import VerifyFailure, verify_store

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "BadEvent",
    "CommitFailed",
    "CorruptStore",
    "EventStore",
    "OpenedSession",
    "ScopeConflict",
    "ScopedEventStore",
    "ScopedSession",
    "ScopedState",
    "SeqMismatch",
    "SessionDeleted",
    "SessionExists",
    "SessionInfo",
    "SessionNotFound",
    "SessionPage",
    "SqliteEventStore",
    "StoreError",
    "StreamedImport",
    "Unsupported",
    "VerifyFailure",
    "VersionRefused",
    "WriterFenced",
    "WriterStats",
    "export_session",
    "import_log",
    "import_stream",
    "require_scoped",
    "sqlite_backend",
    "verify_store",
]
