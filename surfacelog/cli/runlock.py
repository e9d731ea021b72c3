"""One ``surfacelog run`` per database: the run holds an exclusive lock on its
``--db`` file (its shard map with ``--local-nodes``) from before Ray starts until it
ends, and a second run on the same file is refused before it starts anything.

The lock is a BSD ``flock`` on the file itself. SQLite locks with POSIX ``fcntl``
locks, which on Linux are independent of ``flock``: the run's own actors read and
write the database as usual while the run holds it. The lock goes with the process
(a run killed with SIGKILL frees it), so a stale lock never needs cleaning up.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from surfacelog.cli.errors import DatabaseInUse


class RunLock:
    """The exclusive lock of one run on ``path``; ``release`` it (or use ``with``)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: Path) -> RunLock:
        """Lock ``path`` (created, empty, when missing: an empty file is a new SQLite
        database). Raises ``DatabaseInUse`` when another run holds it, ``OSError``
        when it cannot be opened (a directory, no permission...)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise DatabaseInUse(f"{path} is in use by another surfacelog run; wait for "
                                "it to end (or stop it) and run again") from exc
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def release(self) -> None:
        """Unlock (closing the file releases the lock); idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
