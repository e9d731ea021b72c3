"""Which backend a store path names: an existing directory is a DeepSeek Harness JSONL
sessions root (``DshRootEventStore``), anything else a SQLite file
(``SqliteEventStore``). The actors build their writers through ``store_backend`` so
that ``connect(db=...)`` can point at either."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from surfacelog.store.dsh_root import dsh_root_backend
from surfacelog.store.sqlite import sqlite_backend


def store_backend(path: str | Path, **options: Any) -> Any:
    """A picklable opener of the store at ``path``: ``dsh_root_backend(path,
    **options)`` (``compression``: ``"zstd"`` or ``"none"``, for new sessions of an
    empty root) when ``path`` is an existing directory, else ``sqlite_backend(path,
    **options)``. Decided where it is called (the writer's node)."""
    if Path(path).is_dir():
        return dsh_root_backend(str(path), **options)
    return sqlite_backend(path, **options)


__all__ = ["store_backend"]
