"""Files a command writes: the rules that keep a user's mistake from destroying data,
and the atomic write. Every CLI output file goes through here (``export -o`` and
``run --report``).

Rules (``check_output``), in order:

1. An output may not be one of the command's databases nor its ``-wal``/``-shm``/
   ``-journal`` file, compared as resolved paths (``./a.db`` and a symlink to it are
   the same file), nor any other name of the same file (same device and inode).
   Refused even with ``--force``.
2. An existing SQLite database is never overwritten, ``--force`` or not: whatever
   its owner, it is data. Nor is any database's ``-wal``, ``-shm`` or ``-journal``
   file (a path with that suffix whose base is a SQLite database, or a file that
   starts as a WAL or a rollback journal does): replacing the WAL under a live
   writer loses what it acknowledged. Judged by what the files are, not by name
   alone.
3. Anything that exists and is not a regular file (a directory, a device such as
   ``/dev/full``, a FIFO, a socket) is refused always: a rename would replace the
   node itself.
4. Any other existing file is refused unless the user says so with ``--force``
   (``force=True``).

Writing (``write_atomic``): the content goes to a temporary file in the output's own
directory (same filesystem), is flushed and fsynced, then renamed over the output in
one step. A full disk or any error leaves the output as it was (absent, or the old
file) and removes the temporary file; the error is raised as ``OutputError``.

Both raise ``OutputError`` (a ``SurfacelogError``) with a one-line message naming the
path; the CLI prints it and exits 2 (a refused output, nothing written) or 1 (the
write itself failed).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from surfacelog.cli.errors import OutputError

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")
_SIDE_MAGICS: Final = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83",  # WAL, either byte order
                       b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7")  # rollback journal


def _starts_with(path: Path, magics: tuple[bytes, ...]) -> bool:
    """Whether the regular file ``path`` starts with one of ``magics`` (never opens
    anything else: a FIFO would block the read)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with path.open("rb") as handle:
            head = handle.read(max(len(m) for m in magics))
    except OSError:
        return False
    return any(head.startswith(m) for m in magics)


def _is_sqlite(path: Path) -> bool:
    return _starts_with(path, (_SQLITE_MAGIC,))


def _database_of_side_file(path: Path) -> Path | None:
    """The database ``path`` belongs to when it is one's ``-wal``/``-shm``/``-journal``
    file: by name (its base is a SQLite database) or by content (a WAL or a journal)."""
    for side in _SIDE_FILES:
        if path.name.endswith(side) and len(path.name) > len(side):
            base = path.with_name(path.name[: -len(side)])
            if _is_sqlite(base):
                return base
    if _starts_with(path, _SIDE_MAGICS):
        return path
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def protected_paths(databases: Iterable[str | Path]) -> list[Path]:
    """Each database of ``databases`` and its ``-wal``, ``-shm`` and ``-journal``
    files, resolved."""
    out: list[Path] = []
    for db in databases:
        path = Path(db).resolve()
        out.append(path)
        out.extend(path.with_name(path.name + side) for side in _SIDE_FILES)
    return out


def check_output(output: str | Path, *, databases: Iterable[str | Path] = (),
                 force: bool = False) -> Path:
    """Apply the module's rules to ``output`` for a command that uses ``databases``;
    returns the resolved output path. Raises ``OutputError`` (``refused``)."""
    path = Path(output)
    resolved = path.resolve()
    for protected in protected_paths(databases):
        if resolved == protected or _same_file(path, protected):
            raise OutputError(f"refusing to write {output}: it is the database "
                              f"{protected} of this command (or one of its files); "
                              f"choose another output path")
    if path.is_dir():
        raise OutputError(f"refusing to write {output}: it is a directory")
    owner = _database_of_side_file(path)
    if owner is not None:
        raise OutputError(f"refusing to write {output}: it is a SQLite write-ahead log, "
                          f"shared-memory or journal file (of {owner}); never replaced, "
                          f"even with --force")
    if path.exists() or path.is_symlink():
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            raise OutputError(f"refusing to write {output}: it is not a regular file "
                              f"(a device, a FIFO or a socket); never replaced, even "
                              f"with --force")
        if _is_sqlite(path):
            raise OutputError(f"refusing to overwrite {output}: it is a SQLite database "
                              f"(never overwritten, even with --force)")
        if not force:
            raise OutputError(f"refusing to overwrite the existing file {output}; "
                              f"give --force to replace it")
    if not resolved.parent.is_dir():
        raise OutputError(f"cannot write {output}: no directory {resolved.parent}")
    return resolved


def write_atomic(output: str | Path, content: bytes | Iterable[bytes]) -> None:
    """Write ``content`` (bytes, or chunks of bytes) to ``output`` through a temporary
    file in the same directory renamed over it; the output is the old file or the
    whole new content, never part of it. Call ``check_output`` first. Raises
    ``OutputError`` (not ``refused``) when writing fails; the temporary file is
    removed."""
    path = Path(output)
    directory = path.resolve().parent
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write {output}: {exc.strerror or exc}",
                          refused=False) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(content, bytes):
                handle.write(content)
            else:
                for chunk in content:
                    handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {output}: {exc.strerror or exc}; "
                              f"{output} was left as it was", refused=False) from exc
        raise
    with contextlib.suppress(OSError):  # make the rename durable where supported
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_output(output: str | Path, content: bytes | Iterable[bytes], *,
                 databases: Iterable[str | Path] = (), force: bool = False) -> None:
    """``check_output`` then ``write_atomic``: what a command calls to write a file."""
    write_atomic(check_output(output, databases=databases, force=force), content)


__all__ = ["OutputError", "check_output", "protected_paths", "write_atomic",
           "write_output"]
