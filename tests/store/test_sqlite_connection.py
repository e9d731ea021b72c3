"""aiosqlite's private API stays in ``surfacelog/store/sqlite/connection.py``."""

from __future__ import annotations

import ast
from pathlib import Path

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
