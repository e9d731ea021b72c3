"""Making a directory entry durable: after a file is created, renamed or removed, its
directory must be fsynced too, or a crash can forget the name while keeping the data."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries to disk. Raises ``OSError`` (the folder is missing or
    cannot be opened or synced)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["fsync_dir"]
