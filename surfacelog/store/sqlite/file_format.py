"""Bump-and-reject: recognise our own database files, refuse every other one untouched,
and initialise new ones (docs/rules.md §12).

A file is *ours* when its ``application_id`` is ``APPLICATION_ID``, its ``user_version``
is ``SCHEMA_VERSION`` and its tables, columns and indexes are exactly those that
``surfacelog/store/sqlite/schema.sql`` creates. A file is *new* when it does not exist, is
empty, or is a SQLite database with no schema objects and both pragmas zero. Anything
else is refused with ``VersionRefused`` before a single byte of it is written: the first
look goes through a read-only connection that cannot create journal files either.
"""

from __future__ import annotations

import functools
import sqlite3
import stat
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final, Literal

from surfacelog.store.errors import FileBusy, VersionRefused
from surfacelog.store.sqlite.connection import in_transaction

SCHEMA_VERSION: Final = 3
"""Bump with every change of ``schema.sql``."""

APPLICATION_ID: Final = 0x53664C67
"""``PRAGMA application_id`` of surfacelog databases ("SfLg")."""

FileState = Literal["new", "ours"]

LITESTREAM_TABLES: Final = frozenset({"_litestream_seq", "_litestream_lock"})
"""Tables Litestream creates in a database it replicates (its own bookkeeping: a
sequence it bumps to force a WAL write, and a lock table); not part of our schema."""

SQLITE_MAGIC: Final = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""
DSH_APPLICATION_ID: Final = 0x44534850  # "DSHP"
"""``PRAGMA application_id`` of DeepSeek Harness's session databases."""
SIDE_FILES: Final = ("-wal", "-shm", "-journal")
"""What SQLite keeps beside a database file ``X``: ``X-wal``, ``X-shm``, ``X-journal``."""


def side_files(db: Path) -> list[Path]:
    """The ``-wal``, ``-shm`` and ``-journal`` files of ``db`` that exist."""
    return [p for p in (db.with_name(db.name + s) for s in SIDE_FILES) if p.exists()]


def _head(path: Path, size: int) -> bytes | None:
    """The first ``size`` bytes (or fewer) of the regular file ``path``; ``None`` when it
    is not one or cannot be read (nothing else is opened: a FIFO would block the read)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError:
        return None


def is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is a readable regular file that starts like a SQLite database."""
    return _head(path, len(SQLITE_MAGIC)) == SQLITE_MAGIC


def sqlite_identity(path: Path) -> tuple[int, int] | None:
    """``(user_version, application_id)`` read from a SQLite file's header, or ``None``
    when ``path`` is not a readable SQLite file."""
    head = _head(path, 100)
    if head is None or len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        return None
    return int.from_bytes(head[60:64], "big"), int.from_bytes(head[68:72], "big")


def is_dsh_database(path: Path) -> bool:
    """Whether ``path`` is a SQLite file carrying DSH's application id (whether DSH's
    schema is one this build reads is ``dsh_sources.read_database``'s check)."""
    identity = sqlite_identity(path)
    return identity is not None and identity[1] == DSH_APPLICATION_ID


def schema_sql() -> str:
    """The DDL of this build (``surfacelog/store/sqlite/schema.sql``)."""
    return resources.files("surfacelog.store.sqlite").joinpath("schema.sql").read_text("utf-8")


@dataclass(frozen=True)
class SchemaObject:
    """One entry of ``sqlite_schema``: its kind, table, SQL and (for tables) columns."""

    kind: str
    table: str
    sql: str | None
    columns: tuple[str, ...]


@dataclass(frozen=True)
class SchemaShape:
    """What a database file holds, as far as bump-and-reject looks."""

    application_id: int
    user_version: int
    objects: dict[str, SchemaObject]

    @property
    def is_blank(self) -> bool:
        """No schema objects and both pragmas zero: a database nobody has claimed."""
        return not self.objects and self.application_id == 0 and self.user_version == 0


def _column(row: tuple[object, ...]) -> str:
    _cid, name, ctype, notnull, default, pk, hidden = row
    parts = [str(name), str(ctype) or "(no type)"]
    if notnull:
        parts.append("NOT NULL")
    if default is not None:
        parts.append(f"DEFAULT {default}")
    if pk:
        parts.append(f"PK{pk}")
    if hidden:
        parts.append(f"hidden{hidden}")
    return " ".join(parts)


def read_shape(conn: sqlite3.Connection) -> SchemaShape:
    """Read the pragmas and schema objects through ``conn`` (reads only).

    SQLite's statistics tables (``sqlite_stat*``, written by ``ANALYZE``) are not schema
    and are ignored, and so are the two tables Litestream keeps in every database it
    replicates (``LITESTREAM_TABLES``; see ``store.replica``). Raises
    ``sqlite3.DatabaseError`` for a file that is not a database.
    """
    (app_id,) = conn.execute("PRAGMA application_id").fetchone()
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    objects: dict[str, SchemaObject] = {}
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name")
    for kind, name, table, sql in rows.fetchall():
        if str(name).startswith("sqlite_stat") or str(name) in LITESTREAM_TABLES:
            continue
        columns: tuple[str, ...] = ()
        if kind == "table":
            info = conn.execute("SELECT * FROM pragma_table_xinfo(?)", (name,)).fetchall()
            columns = tuple(_column(tuple(r)) for r in info)
        objects[str(name)] = SchemaObject(str(kind), str(table), sql, columns)
    return SchemaShape(int(app_id), int(version), objects)


@functools.cache
def expected_shape() -> SchemaShape:
    """The shape of a database this build creates (built once in memory from the DDL)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        _create(conn)
        return read_shape(conn)
    finally:
        conn.close()


def _statements() -> list[str]:
    """The DDL's statements, in order."""
    out = []
    statement = ""
    for line in schema_sql().splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            out.append(statement)
            statement = ""
    rest = [line for line in statement.splitlines() if line.strip()
            and not line.strip().startswith("--")]
    if rest:
        raise RuntimeError(f"schema.sql ends with an incomplete statement: {rest[0]!r}")
    return out


def _create(conn: sqlite3.Connection) -> None:
    """Run the DDL and set both pragmas (inside the caller's transaction, if any)."""
    for statement in _statements():
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def differences(found: SchemaShape, expected: SchemaShape) -> list[str]:
    """Every way ``found`` differs from ``expected``, as readable sentences."""
    out = []
    if found.application_id != expected.application_id:
        out.append(f"application_id is {found.application_id:#010x}, this build expects "
                   f"{expected.application_id:#010x}")
    if found.user_version != expected.user_version:
        out.append(f"user_version (schema version) is {found.user_version}, this build "
                   f"expects {expected.user_version}")
    for name in sorted(found.objects.keys() - expected.objects.keys()):
        obj = found.objects[name]
        out.append(f"unexpected {obj.kind} {name!r}"
                   + (f" with columns ({', '.join(obj.columns)})" if obj.columns else ""))
    for name in sorted(expected.objects.keys() - found.objects.keys()):
        out.append(f"missing {expected.objects[name].kind} {name!r}")
    for name in sorted(found.objects.keys() & expected.objects.keys()):
        got, want = found.objects[name], expected.objects[name]
        if got.kind != want.kind:
            out.append(f"{name!r} is a {got.kind}, this build expects a {want.kind}")
        elif got.columns != want.columns:
            out.append(f"table {name!r} has columns ({', '.join(got.columns)}); this build "
                       f"expects ({', '.join(want.columns)})")
        elif got.sql != want.sql or got.table != want.table:
            out.append(f"{want.kind} {name!r} is defined as {got.sql!r}; this build expects "
                       f"{want.sql!r}")
    return out


def classify(found: SchemaShape, where: str) -> FileState:
    """``"new"`` for a blank database, ``"ours"`` for an exact match; otherwise raise
    ``VersionRefused`` listing what was found and what this build expects."""
    if found.is_blank:
        return "new"
    problems = differences(found, expected_shape())
    if not problems:
        return "ours"
    raise VersionRefused(
        f"{where} was not written by this build of surfacelog (store schema version "
        f"{SCHEMA_VERSION}, application_id {APPLICATION_ID:#010x}); refused and left "
        f"unmodified: " + "; ".join(problems))


# One read can itself spend ~10 s inside SQLite (its wal-index retry loop) before it
# reports SQLITE_PROTOCOL, so the retries are bounded by time, not by count.
_TRANSIENT_DEADLINE_S: Final = 1.5
_TRANSIENT_CODES: Final = frozenset({5, 6, 15})  # SQLITE_BUSY, SQLITE_LOCKED, SQLITE_PROTOCOL


def _transient(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11
    if code is None:
        return "locking protocol" in str(exc) or "locked" in str(exc)
    return int(code) & 0xFF in _TRANSIENT_CODES


def _wal_state(wal: Path, shm: Path) -> Literal["none", "empty, no index", "wal"]:
    """Which read the file needs: ``"none"`` without a ``-wal`` file; ``"empty, no
    index"`` for an empty ``-wal`` beside no ``-shm``, which a writer killed between
    creating the two leaves (its WAL holds nothing, and a read-only reader cannot open
    a WAL that has no index: SQLITE_CANTOPEN); else ``"wal"``."""
    try:
        size = wal.stat().st_size
    except FileNotFoundError:
        return "none"
    return "empty, no index" if size == 0 and not shm.exists() else "wal"


def inspect_file(path: Path) -> FileState:
    """Classify the file at ``path`` without modifying it or creating any file beside it.

    A missing or zero-length file is ``"new"``. Otherwise the file is read through a
    read-only connection: with ``immutable=1`` when no ``-wal`` file exists (so that
    SQLite creates no ``-wal``/``-shm`` files for a WAL-mode database) or only an empty
    one beside no ``-shm`` (a writer killed as it opened the file), else with
    ``readonly_shm=1`` (the WAL of a crashed writer is read, its ``-shm`` index is not
    rebuilt in place). Only a process that has the database open meanwhile changes its
    ``-shm``, which is shared memory, not content.
    Raises ``VersionRefused`` for a file that is not a SQLite database or not ours, and
    for a path that is not a regular file (a FIFO would block the read forever, a
    device or a directory is no database).
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return "new"
    if not stat.S_ISREG(info.st_mode):
        raise VersionRefused(f"{path} is not a regular file (a database is one); refused "
                             f"and left unmodified")
    if info.st_size == 0:
        return "new"
    with path.open("rb") as handle:
        magic = handle.read(len(SQLITE_MAGIC))
    if magic != SQLITE_MAGIC:
        raise VersionRefused(f"{path} is not a SQLite database (no SQLite header); refused "
                             f"and left unmodified")
    wal = path.with_name(path.name + "-wal")
    shm = path.with_name(path.name + "-shm")
    deadline = time.monotonic() + _TRANSIENT_DEADLINE_S
    attempt = 0
    while True:
        attempt += 1
        wal_state = _wal_state(wal, shm)
        query = "mode=ro&readonly_shm=1" if wal_state == "wal" else "mode=ro&immutable=1"
        uri = f"{path.resolve().as_uri()}?{query}"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            raise VersionRefused(f"{path} cannot be opened read-only to check its schema: "
                                 f"{exc}; refused and left unmodified") from exc
        try:
            shape = read_shape(conn)
        except sqlite3.DatabaseError as exc:
            # A writer that closed meanwhile removed (or one that opened created) the
            # -wal/-shm files the open was chosen for: look again, rather than call a
            # good database unreadable.
            if _wal_state(wal, shm) != wal_state and attempt < 4:
                continue
            # A read-only reader cannot rebuild the -shm index a killed writer left
            # stale, and SQLite reports the race as SQLITE_PROTOCOL or a BUSY code:
            # transient, so wait for whoever is recovering it rather than refuse.
            if _transient(exc):
                pause = min(0.01 * 2 ** attempt, 0.2)
                if time.monotonic() + pause < deadline:
                    time.sleep(pause)
                    continue
                raise FileBusy(f"{path} could not be read by the read-only schema check: "
                               f"{exc} (a killed writer's stale wal-index, or a writer "
                               f"recovering it); left unmodified") from exc
            raise VersionRefused(f"{path} cannot be read as a SQLite database: {exc}; "
                                 f"refused and left unmodified") from exc
        finally:
            conn.close()
        return classify(shape, str(path))


def check_or_initialise(conn: sqlite3.Connection, where: str) -> FileState:
    """On the store's own connection: classify the database again (reads only) and, when
    it is blank, create our schema in one ``BEGIN IMMEDIATE`` transaction (re-checking
    inside it, so two processes initialising the same file at once cannot both create).

    The connection must be in autocommit mode (``isolation_level=None``). Returns what
    the file was before the call. Raises ``VersionRefused``.
    """
    state = classify(read_shape(conn), where)
    if state == "ours":
        return state
    def work() -> None:
        if classify(read_shape(conn), where) == "new":
            _create(conn)

    in_transaction(conn, "BEGIN IMMEDIATE", work)
    return state
