"""The store's error types: what every event store raises, in process or across Ray
(each pickles to the same class and message). ``StoreError``, their base, is a
``SurfacelogError``."""

from __future__ import annotations

from surfacelog.schema.errors import SurfacelogError


class StoreError(SurfacelogError):
    """Base of every store error."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class CorruptStore(StoreError):
    """Stored rows cannot be decoded or break the log's rules.

    ``session_id`` and ``seq`` name where (``seq`` is ``None`` when the problem is not
    about one event, e.g. an unreadable header or a wrong row count).
    """

    def __init__(self, message: str, session_id: str | None = None,
                 seq: int | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.seq = seq

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.session_id, self.seq))


class DatabaseNotFound(StoreError, FileNotFoundError):
    """No database file where one must already exist (a read, a read-only open, or
    ``create=False``); nothing was created. Still a ``FileNotFoundError``."""


class VersionRefused(StoreError):
    """The database file was written by another build (bump-and-reject: left untouched)."""


class FileBusy(VersionRefused):
    """The read-only schema check could not read the file for as long as it waited: the
    wal-index a killed writer left is stale and only a writable connection rebuilds it
    (SQLite reports SQLITE_PROTOCOL or BUSY meanwhile). Opening for writing goes on past
    it (the writable open recovers the file and checks its schema before any write); a
    read-only open refuses."""


class SeqMismatch(StoreError):
    """A batch does not start at the stored next seq of its session (gap or duplicate)."""


class WriterFenced(StoreError):
    """The writer's epoch is stale: another writer took the session; nothing was written."""


class BadEvent(StoreError):
    """An event cannot be stored as a row (a value that is not JSON, a field of the wrong
    type or out of range). Raised where the batch is encoded to rows, before anything of
    it is queued or sent, or by the backend for a row it refuses. The store does not
    validate surface rules: events are expected to come from a ``Session``. Nothing of
    the batch was written."""


class CommitFailed(StoreError):
    """A group commit failed (disk I/O error, database locked past the busy timeout...).

    The batches of that group are not durable but not lost either: they stay queued in
    order and are tried again at the next append or ``flush``. The SQLite error is the
    ``__cause__``.
    """


class SessionExists(StoreError):
    """A session with this id is already stored."""


class ImportAbandoned(StoreError):
    """A streamed import was interrupted (its task cancelled, Ctrl-C) while the store
    was reading the file: raised to the store's reader so that it rolls the session
    back instead of committing the part it read (``store.importing``)."""


class SessionNotFound(StoreError):
    """No session with this id is stored."""


class SessionDeleted(SessionNotFound):
    """The session was deleted (it has a tombstone): it is hidden from loading and
    listing, its rows are kept until ``purge_session``, its id stays taken until then."""


class ScopeConflict(StoreError):
    """The session is scoped to another app or user than the one given, or is not scoped
    at all where a scope is required."""


class Unsupported(StoreError):
    """The backend does not implement this optional store feature."""


class DshFileCorrupt(CorruptStore):
    """A DSH session file whose committed part cannot be read (a bad line before a later
    ``turn/end``, a corrupt zstd frame, a frame ending mid-line)."""


class ReplicaError(StoreError):
    """Base of the replica errors: each names the shard or file and what went wrong."""


class LitestreamNotFound(ReplicaError):
    """The ``litestream`` command is neither beside the interpreter nor on ``PATH``."""


class ReplicaEmpty(ReplicaError):
    """The replica holds no backup of the shard (nothing was ever replicated there, or
    the URL or directory is wrong)."""


class RestoreRefused(ReplicaError):
    """A restore would overwrite something: the target, or a ``-wal``/``-shm`` left
    beside it (SQLite would apply a stale WAL to the restored file). Nothing changed."""


class RestoreFailed(ReplicaError):
    """``litestream restore`` failed or timed out; nothing was written at the target."""


class RestoreVerificationFailed(ReplicaError):
    """The restored file is not a readable surfacelog store, or a session of it does not
    load through the full validation; it was discarded and the target left as it was."""


class DshSourceError(StoreError):
    """A DSH sessions root or database this build cannot read as a whole (a root
    holding both encodings, a database of another schema version or not DSH's)."""


class ShardConfigError(ValueError, SurfacelogError):
    """A shard configuration is malformed: names the file, the JSON path of the bad field
    (``$.shards[1].path``), its value, the shard and the rule."""


class ShardFileError(StoreError):
    """A shard's database cannot be opened from this machine (missing file, another
    build's file, unreadable): the message names the shard, its path and why."""


__all__ = [
    "BadEvent",
    "CommitFailed",
    "CorruptStore",
    "DatabaseNotFound",
    "DshFileCorrupt",
    "DshSourceError",
    "FileBusy",
    "ImportAbandoned",
    "LitestreamNotFound",
    "ReplicaEmpty",
    "ReplicaError",
    "RestoreFailed",
    "RestoreRefused",
    "RestoreVerificationFailed",
    "ScopeConflict",
    "SeqMismatch",
    "SessionDeleted",
    "SessionExists",
    "SessionNotFound",
    "ShardConfigError",
    "ShardFileError",
    "StoreError",
    "Unsupported",
    "VersionRefused",
    "WriterFenced",
]
