"""The Litestream process of a replicated shard, run and supervised beside its writer.

A shard's writer (its journal actor, or with ``writer="owner"`` the session actor that
owns the file) opens the shard through ``open_replicated``: when the file is missing it
is restored from the replica and verified first (``store.replica.restore_if_missing``),
then the store is opened with the options Litestream needs, then a
``LitestreamSupervisor`` starts ``litestream replicate`` for the file.

The supervisor is a thread of the writer's process that owns the child process:

- it starts the child with ``PR_SET_PDEATHSIG`` (Linux), so that the child gets SIGTERM
  the moment the thread that started it ends, which is when the writer's process dies,
  however it dies (a Ray restart, a node removed, ``kill -9``): no orphan keeps
  replicating a file another writer now owns;
- before starting, it ends any process still running this shard's configuration (a
  previous incarnation's child finishing its last sync), so there is one replicator per
  file;
- when the child exits while it should run, it is started again after a short pause
  (0.5 s, doubling to 10 s while it keeps exiting within ``HEALTHY_S`` of its start:
  the project's ``Backoff``), and counted;
- ``stop`` (the writer closing) sends SIGTERM, which makes Litestream ship what it has
  not shipped yet, and SIGKILL after ``STOP_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Final

import msgspec
import psutil

from surfacelog.actors.retry import Backoff
from surfacelog.store.backends import node_backend, store_backend
from surfacelog.store.base import EventStore
from surfacelog.store.errors import ReplicaError, StoreError
from surfacelog.store.replica import (
    REPLICATED_STORE_OPTIONS,
    ReplicaPlan,
    litestream_binary,
    restore_if_missing,
)
from surfacelog.store.shardmap import Shard

log = logging.getLogger("surfacelog.actors.replication")

STOP_TIMEOUT_S: Final = 10.0
"""How long ``stop`` lets Litestream finish its last sync before SIGKILL."""
RESTART_DELAY_S: Final = 0.5
"""The pause before a child that exited is started again (doubled while it keeps
exiting within ``HEALTHY_S``, up to ``MAX_RESTART_DELAY_S``)."""
MAX_RESTART_DELAY_S: Final = 10.0
HEALTHY_S: Final = 5.0
"""A child that ran this long before it exited was healthy: its restart pause starts
again from ``RESTART_DELAY_S``."""
_PR_SET_PDEATHSIG: Final = 1


def _pdeathsig() -> Any:
    """A ``preexec_fn`` that asks Linux to send the child SIGTERM when the thread that
    forked it ends (``None`` elsewhere: the supervisor's ``stop`` is then the only
    guard). The C function is looked up here, before any fork."""
    name = ctypes.util.find_library("c")
    if not name or not hasattr(os, "sched_getaffinity"):  # not Linux
        return None
    prctl = ctypes.CDLL(name, use_errno=True).prctl

    def set_deathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    return set_deathsig


class ReplicaStatus(msgspec.Struct, frozen=True):
    """What a supervisor reports: the shard, the child's pid (``None`` between starts),
    how many times it was started again after exiting, the last exit status, and
    whether it is stopped."""

    shard: str
    pid: int | None
    restarts: int
    last_exit: int | None
    stopped: bool


def litestream_processes(config_path: str) -> list[psutil.Process]:
    """The running processes whose command line names ``config_path`` (the
    ``litestream replicate`` of one shard), zombies excluded."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if (proc.info["status"] != psutil.STATUS_ZOMBIE and proc.info["cmdline"]
                    and config_path in proc.info["cmdline"]
                    and "replicate" in proc.info["cmdline"]):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _end(procs: list[psutil.Process], timeout_s: float) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=timeout_s)


class LitestreamSupervisor:
    """Runs ``litestream replicate`` for one shard while started (see the module's
    docstring). ``start`` and ``stop`` may be called from any thread; a stopped
    supervisor cannot be started again."""

    def __init__(self, plan: ReplicaPlan) -> None:
        self.plan = plan
        self._binary = litestream_binary()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._restarts = 0
        self._last_exit: int | None = None
        self._thread: threading.Thread | None = None
        self.final_sync_error: str | None = None
        """Why the last sync of ``stop`` failed (``None``: it did not, or did not run)."""

    def start(self) -> None:
        """Write the shard's Litestream configuration, end any process left running it,
        and start supervising. Raises ``OSError`` when the configuration cannot be
        written, ``StoreError`` when already stopped."""
        if self._stop.is_set():
            raise StoreError(f"shard {self.plan.shard!r}: the replica supervisor is stopped")
        config = str(self.plan.write_config())
        _end(litestream_processes(config), STOP_TIMEOUT_S)
        self._thread = threading.Thread(target=self._run, args=(config,), daemon=True,
                                        name=f"litestream:{self.plan.shard}")
        self._thread.start()

    def status(self) -> ReplicaStatus:
        child = self._child
        pid = child.pid if child is not None and child.poll() is None else None
        return ReplicaStatus(self.plan.shard, pid, self._restarts, self._last_exit,
                             self._stop.is_set())

    def _spawn(self, config: str) -> subprocess.Popen[bytes]:
        with open(self.plan.log_path, "ab") as logfile:
            return subprocess.Popen(
                [self._binary, "replicate", "-config", config, "-no-expand-env"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logfile,
                preexec_fn=_pdeathsig(), close_fds=True)

    def _run(self, config: str) -> None:
        backoff = Backoff(first_s=RESTART_DELAY_S, max_s=MAX_RESTART_DELAY_S)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                with self._lock:
                    if self._stop.is_set():
                        return
                    self._child = self._spawn(config)
            except OSError as exc:  # logged; tried again after the pause
                log.warning("shard %s: cannot start litestream: %s", self.plan.shard, exc)
            else:
                status = self._child.wait()
                if self._stop.is_set():
                    return
                self._last_exit = status
                self._restarts += 1
                log.warning("shard %s: litestream exited with status %s; starting it again",
                            self.plan.shard, status)
            if time.monotonic() - started > HEALTHY_S:
                backoff.reset()
            # On the stop event, not asyncio's sleep: this is the supervisor's own
            # thread, and ``stop`` must end the pause at once.
            self._stop.wait(backoff.next_delay())

    def stop(self, timeout_s: float = STOP_TIMEOUT_S, *, final_sync: bool = True) -> None:
        """Stop supervising and end the child: SIGTERM (Litestream then ships what it
        has not shipped), SIGKILL after ``timeout_s``; then, with ``final_sync``, one
        last ``litestream replicate -once`` so that every commit made before ``stop``
        is on the replica (its failure is logged and kept in ``final_sync_error``, not
        raised: the file itself is intact). Returns once every process has exited."""
        with self._lock:
            self._stop.set()
            child = self._child
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if final_sync:
            self._sync_once(timeout_s)

    def _sync_once(self, timeout_s: float) -> None:
        # The daemon may be stopped before it picked up the last commits (it polls the
        # WAL every monitor interval): one ``replicate -once`` ships whatever is left,
        # so a writer that closes cleanly has everything it committed on the replica.
        try:
            done = subprocess.run(
                [self._binary, "replicate", "-config", str(self.plan.config_path),
                 "-no-expand-env", "-once"], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout_s,
                check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.final_sync_error = f"{type(exc).__name__}: {exc}"
        else:
            if done.returncode != 0:
                tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
                self.final_sync_error = f"exit status {done.returncode}: {' '.join(tail)}"
        if self.final_sync_error is not None:
            log.warning("shard %s: the last sync to the replica failed: %s",
                        self.plan.shard, self.final_sync_error)


class ReplicatedStore:
    """A shard's store and its supervisor, opened together by ``open_replicated``."""

    def __init__(self, store: EventStore, supervisor: LitestreamSupervisor) -> None:
        self.store = store
        self.supervisor = supervisor


def replicated_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of ``SqliteEventStore.open`` with what Litestream needs on top
    (``REPLICATED_STORE_OPTIONS``; an explicit ``busy_timeout_ms`` is kept)."""
    return {**REPLICATED_STORE_OPTIONS, **options, "wal_autocheckpoint": 0}


def shard_writer_parts(shard: Shard, options: dict[str, Any]) -> tuple[Any, ReplicaPlan | None]:
    """What a shard's writer is built with: the picklable opener of its store and its
    replica plan (``None`` without a replica; with one, the opener's options are
    ``replicated_options``). Raises ``ReplicaError`` for a replica on a shard whose path
    is a directory."""
    plan = ReplicaPlan.of(shard)
    if plan is None:
        # Chosen on the writer's node: the client building this (a cluster's driver)
        # may have no such path, and must not look at its own disk for it.
        return node_backend(shard.path, **options), None
    if Path(shard.path).is_dir():
        raise ReplicaError(f"shard {shard.name!r}: {shard.path} is a directory (a DSH "
                           f"sessions root); Litestream replicates a SQLite file only")
    return store_backend(shard.path, **replicated_options(options)), plan


async def open_replicated(plan: ReplicaPlan, open_backend: Any) -> ReplicatedStore:
    """Restore the shard when its file is missing (verified), open it with
    ``open_backend`` (built with ``replicated_options``), and start its supervisor.

    Raises the ``ReplicaError`` of a restore (the shard must not serve), the opener's
    errors, ``OSError``. Nothing keeps running when it raises."""
    # A replicator of an earlier writer of this file may still be shipping (a writer
    # that died sends its Litestream SIGTERM, and Litestream then ships what it holds):
    # a restore reading the replica meanwhile would miss what it ships next, and this
    # writer's replicator would then write over the same transaction ids, so that a
    # later restore mixes pages of both (a restored file that does not load). It is
    # ended, its last shipment done, before the replica is read.
    config = str(plan.config_path)
    await asyncio.to_thread(_end, litestream_processes(config), STOP_TIMEOUT_S)
    await restore_if_missing(plan)
    store: EventStore = await open_backend()
    try:
        supervisor = LitestreamSupervisor(plan)
        supervisor.start()
    except BaseException:
        await store.close()
        raise
    return ReplicatedStore(store, supervisor)


__all__ = ["LitestreamSupervisor", "ReplicaStatus", "ReplicatedStore", "litestream_processes",
           "open_replicated", "replicated_options", "shard_writer_parts"]
