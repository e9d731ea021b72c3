"""aiosqlite's private API stays in ``surfacelog/store/sqlite/connection.py``."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import pytest

import surfacelog
from surfacelog.store.sqlite import connection

PACKAGE = Path(surfacelog.__file__).parent


def test_the_installed_aiosqlite_has_the_private_names_used() -> None:
    connection._check_aiosqlite()


def test_only_the_connection_module_imports_aiosqlite() -> None:
    """Every other module reaches SQLite through ``ConnectionThread``, so aiosqlite's
    private names (``_execute``, ``_conn``, ``_thread``) are used in one place."""
    importers = []
    for file in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "aiosqlite" for name in names):
                importers.append(str(file.relative_to(PACKAGE)))
    assert importers == ["store/sqlite/connection.py"]


def test_a_unit_of_work_commits_rolls_back_and_starts_clean(tmp_path: Path) -> None:
    """``in_transaction`` commits what ``work`` wrote; on an error it rolls back and
    re-raises; and a transaction left open (an earlier unit's ROLLBACK failed too) is
    rolled back before it begins, instead of every later ``BEGIN`` failing inside it."""
    in_transaction = connection.in_transaction
    conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    conn.execute("CREATE TABLE t (v INTEGER)")

    def insert(v: int) -> int:
        conn.execute("INSERT INTO t VALUES (?)", (v,))
        return v

    assert in_transaction(conn, "BEGIN IMMEDIATE", lambda: insert(1)) == 1

    def fails() -> None:
        insert(2)
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        in_transaction(conn, "BEGIN IMMEDIATE", fails)
    assert not conn.in_transaction

    conn.execute("BEGIN")
    insert(3)  # left open, as after a failed ROLLBACK: not to be committed
    assert in_transaction(conn, "BEGIN IMMEDIATE", lambda: insert(4)) == 4
    assert [v for (v,) in conn.execute("SELECT v FROM t ORDER BY v")] == [1, 4]
    conn.close()
