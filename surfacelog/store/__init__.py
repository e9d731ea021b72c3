"""Persistence: the EventStore interface, activation built on it, and its aiosqlite
implementation."""

from surfacelog.store.base import (
    BadEvent,
    CommitFailed,
    CorruptStore,
    EventStore,
    OpenedSession,
    ScopeConflict,
    ScopedSession,
    ScopedState,
    SeqMismatch,
    SessionDeleted,
    SessionExists,
    SessionInfo,
    SessionNotFound,
    SessionPage,
    StoreError,
    Unsupported,
    VersionRefused,
    WriterFenced,
)
from surfacelog.store.jsonl import StreamedImport, export_session, import_log, import_stream
from surfacelog.store.schema_check import APPLICATION_ID, SCHEMA_VERSION
from surfacelog.store.sqlite import SqliteEventStore, sqlite_backend
from surfacelog.store.verify import VerifyFailure, verify_store
from surfacelog.store.writer import WriterStats

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
