"""Persistence: the EventStore interface, activation built on it, and its aiosqlite
implementation."""

from surfacelog.store.base import (
    EventStore,
    OpenedSession,
    ScopedSession,
    ScopedState,
    SessionInfo,
    SessionPage,
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
    "sqlite_backend",
    "verify_store",
]
