"""The store's one aiosqlite connection, used as a worker thread that runs whole units of
work (a group commit, a read of one session) as single calls.

aiosqlite forwards each statement to its thread separately, so a transaction of N
statements costs N thread hops and, worse, other coroutines' statements could run in
the middle of it. Running a plain function on the connection thread avoids both: the
function owns the ``sqlite3.Connection`` for its whole duration. aiosqlite exposes no
public call for this, so ``run`` uses ``Connection._execute`` (the method every public
aiosqlite call goes through) on ``Connection._conn`` (the ``sqlite3.Connection``);
``_check_aiosqlite`` fails loudly, when this module is imported, if a release removes
either, and pyproject.toml pins aiosqlite to the releases this was tested with (0.22.x).

**This module is the one place surfacelog uses aiosqlite's private API** (``_execute``,
``_conn``, ``_thread``), and the only module that imports aiosqlite at all: every other
part of the store goes through ``ConnectionThread`` (``tests/store/
test_sqlite_connection.py`` checks both). Ray's private API has its own one place,
``surfacelog/actors/raycompat.py``.

The connection thread is made a daemon before it starts (``Connection._thread``, checked
when a connection is opened). aiosqlite starts an ordinary thread, which keeps the interpreter from
exiting until the connection is closed: a script that dies before ``close`` (or a Ray
worker told to exit while its journal is open) would hang forever holding the database
file. Dying with the process loses nothing committed: SQLite's commit is atomic, and a
batch not yet committed is lost with the process either way.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

T = TypeVar("T")


def _check_aiosqlite() -> None:
    """Raise ``RuntimeError`` naming the private name of aiosqlite this module uses
    that the installed release lacks (``_thread`` is an instance attribute: checked by
    ``ConnectionThread.open``)."""
    if not callable(getattr(aiosqlite.Connection, "_execute", None)):
        raise RuntimeError("this aiosqlite release has no Connection._execute; "
                           "surfacelog.store.sqlite.connection needs updating")
    if not isinstance(getattr(aiosqlite.Connection, "_conn", None), property):
        raise RuntimeError("this aiosqlite release has no Connection._conn property; "
                           "surfacelog.store.sqlite.connection needs updating")


_check_aiosqlite()


class ConnectionThread:
    """One SQLite connection in autocommit mode (``isolation_level=None``: every
    transaction is an explicit ``BEGIN``...``COMMIT``) on aiosqlite's worker thread."""

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, path: Path, *, read_only: bool = False,
                   immutable: bool = False) -> ConnectionThread:
        """Open (creating the file if missing) ``path`` read-write; with ``read_only``,
        through a ``mode=ro`` URI that can neither create nor write the database (with
        ``immutable`` too: SQLite then takes no lock and opens no ``-shm``, for a file
        on a read-only mount or in a directory it may not write). Raises
        ``sqlite3.Error``."""
        target: str | Path = path
        if read_only:
            query = "mode=ro&immutable=1" if immutable else "mode=ro"
            target = f"{path.resolve().as_uri()}?{query}"
        pending = aiosqlite.connect(target, isolation_level=None, cached_statements=256,
                                    uri=read_only)
        thread = getattr(pending, "_thread", None)
        if not isinstance(thread, threading.Thread) or thread.is_alive():
            raise RuntimeError("this aiosqlite release does not create its connection "
                               "thread unstarted as Connection._thread; "
                               "surfacelog.store.sqlite.connection needs updating")
        thread.daemon = True
        conn = await pending
        return cls(conn)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the connection thread and return its result (or raise
        its exception). Calls run one at a time, in the order they were made."""
        execute = cast(Callable[..., Any], self._conn._execute)
        return cast(T, await execute(fn, self._conn._conn))

    async def close(self) -> None:
        """Close the connection and stop its thread."""
        await self._conn.close()


def in_transaction(conn: sqlite3.Connection, begin: str, work: Callable[[], T]) -> T:
    """Run ``work`` between ``begin`` and ``COMMIT``; roll back and re-raise on failure.
    Every unit of work on the connection starts clean: a transaction still open because
    an earlier unit's ``ROLLBACK`` failed too is rolled back first (``begin`` would
    otherwise fail, and keep failing, inside it)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.execute(begin)
    try:
        result = work()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result
