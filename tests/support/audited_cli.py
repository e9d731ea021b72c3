"""``surfacelog ARGS`` under a Python audit hook that records what this process opens.

    SURFACELOG_AUDIT_LOG=out.json SURFACELOG_AUDIT_WATCH='["/dir", ...]' \
        python tests/support/audited_cli.py run ...

At exit, writes to ``SURFACELOG_AUDIT_LOG`` a JSON object:

- ``opened``: every path this process opened (``open``, ``os.open``...), listed
  (``os.listdir``, ``os.scandir``) or connected SQLite to (``sqlite3.connect``) that is
  under one of the ``SURFACELOG_AUDIT_WATCH`` folders, or that names a SQLite file
  (``.db``, ``-wal``, ``-shm``);
- ``sqlite``: every ``sqlite3.connect`` of this process, whatever the path;
- ``spawned``: the argument list of every process it started (``subprocess.Popen``,
  ``os.posix_spawn``, ``os.exec*``), so that a file read by a child (``surfacelog digest``
  run as a subprocess) is seen too.

The hook sees this process only: what the Ray cluster's own processes (the shards'
writers on their nodes) open is not recorded, which is the point.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

LOG = os.environ["SURFACELOG_AUDIT_LOG"]
WATCHED = [os.path.realpath(p) for p in json.loads(os.environ.get("SURFACELOG_AUDIT_WATCH",
                                                                   "[]"))]
SQLITE_SUFFIXES = (".db", ".db-wal", ".db-shm", ".sqlite")
found: dict[str, list[Any]] = {"opened": [], "sqlite": [], "spawned": []}


def _path(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return value if isinstance(value, str) else None


def _watched(path: str) -> bool:
    real = os.path.realpath(path)
    return real.endswith(SQLITE_SUFFIXES) or any(
        real == folder or real.startswith(folder + os.sep) for folder in WATCHED)


def hook(event: str, args: tuple[Any, ...]) -> None:
    if event in ("open", "os.listdir", "os.scandir", "sqlite3.connect"):
        path = _path(args[0]) if args else None
        if event == "sqlite3.connect":
            found["sqlite"].append(path)
        if path is not None and path not in (":memory:", "") and _watched(path):
            found["opened"].append([event, path])
    elif event == "subprocess.Popen":
        found["spawned"].append([str(a) for a in (args[1] or [args[0]])])
    elif event in ("os.posix_spawn", "os.exec"):
        found["spawned"].append([str(a) for a in args[1]])


def _write() -> None:
    with open(LOG, "w", encoding="utf-8") as out:
        json.dump(found, out)


sys.addaudithook(hook)
atexit.register(_write)

if __name__ == "__main__":
    from surfacelog.cli.application import main

    sys.argv = ["surfacelog", *sys.argv[1:]]
    main()
