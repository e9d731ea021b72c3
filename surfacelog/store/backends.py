"""Which backend a store path names: an existing directory is a DeepSeek Harness JSONL
sessions root (``DshRootEventStore``), anything else a SQLite file
(``SqliteEventStore``). The actors build their writers through ``store_backend`` so
that ``connect(db=...)`` can point at either."""

from __future__ import annotations

from functools import partial
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


async def open_backend_here(path: str, options: dict[str, Any]) -> Any:
    """Open the store at ``path`` with the backend ``store_backend`` chooses, choosing it
    now, in this process: call it on the machine whose disk holds ``path``. Raises what
    the chosen backend's ``open`` raises."""
    return await store_backend(path, **options)()


def node_backend(path: str | Path, **options: Any) -> Any:
    """A picklable opener of the store at ``path`` whose backend (``store_backend``) is
    chosen when it is called, not when it is built: a shard's writer calls it on the
    shard's node, while the client that builds it may run on a machine that has no such
    path (a cluster's driver). Nothing is read from any disk until it is called."""
    return partial(open_backend_here, str(path), dict(options))


__all__ = ["node_backend", "open_backend_here", "store_backend"]
