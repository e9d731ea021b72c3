"""A shard's disk lost under durable load, and the shard restored from its Litestream
replica on another node of a local multi-node cluster.

The cluster is ``surfacelog.cli.localcluster.LocalCluster``: a head node and one worker
node offering shard ``s0``'s resource, so the shard's owner actor (``writer="owner"``)
and its supervised ``litestream replicate`` run there. The shard's file sits in its own
folder (the node's "disk"); its replica is a directory elsewhere (a file replica).

Drivers (``cluster_scenario.drive``) append durably to D sessions, recording every
acknowledged event. Mid-run the disk is lost, as at once as one machine can make it:
the writer and its Litestream are frozen (SIGSTOP: no more acknowledgements, nothing
more shipped), the acknowledged events are snapshotted, the disk folder is deleted
(file, WAL, shm, Litestream's local state), both processes are killed and the node is
removed. A new worker node offering the resource is added (another node: a new node
id); the shard's owner restarts there, finds no file, restores it from the replica,
verifies every session, and serves. The restored file is read as the owner restored it
and compared with the snapshot: every acknowledged event is either in it, identical,
at its seq, or counted lost (the tail not yet shipped: only a suffix of each session
may be missing); nothing else may differ. The drivers then resume and must be served.

Prints ONE JSON object on stdout (the checks, the failed ones, counts: ``lost`` is the
number of acknowledged events lost) and exits 0 when every check holds, 1 otherwise.
Every wait has a deadline; the cluster is always shut down; at the end no
``litestream`` process of the run may be left.

Before each loss the load runs until every session's events have reached the replica
(two Litestream syncs after each session acknowledged ``--warmup-events``), for at least
``--warmup-s``; after the last restore, until every session acknowledged a turn more.
The drivers' requests in flight at a loss, which can only be refused, are refused after
``LOSS_RETRY_FOR_S`` instead of the client's ``RETRY_FOR_S``, and the GCS finds the lost
node dead in about a second (``NODE_LOSS_ENV``): nothing waits out a fixed time.

    .venv/bin/python tests/support/disk_loss_scenario.py [--sessions 4] [--warmup-s 0] [--losses 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

from cluster_scenario import TURN_EVENTS, Driver, drive, session_ids

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import NAMESPACE, HostingConfig
from surfacelog.actors.replication import litestream_processes
from surfacelog.cli.localcluster import LocalCluster
from surfacelog.store.replica import ReplicaPlan
from surfacelog.store.shardmap import Shard, ShardMap, default_resource
from surfacelog.store.sqlite import SqliteEventStore
from surfacelog.store.verify import verify_shards

NODE_LOSS_ENV = {
    # A 1-CPU node starts one worker process at a time by default: the owner and the
    # actors that come back with it would start one after another.
    "RAY_worker_maximum_startup_concurrency": "4",
    # The lost node found dead by the GCS (which only then restarts the owner on the
    # new node) in about 1 s, not LocalCluster's 5 s (1 s x 5) after Ray's 5 s initial
    # delay: a killed raylet fails each check at once; a live one keeps Ray's 10 s
    # timeout per check.
    "RAY_health_check_period_ms": "200",
    "RAY_health_check_initial_delay_ms": "500",
}
"""Ray's settings of this scenario's cluster (read by ``LocalCluster.start`` and the
processes it starts), set by ``main`` unless already set (as in ``NODE_LOSS_ENV`` of
``tests/support/cli_runs.py``, which the suite's runs of ``surfacelog run`` are given)."""

T0 = time.monotonic()
DEADLINE_S = 60.0
RETRY_FOR_S = 5.0
"""The client's retry window."""
LOSS_RETRY_FOR_S = 1.0
"""The window of the drivers' requests in flight when the disk is lost: the shard's
owner is gone, so each is refused once the window has passed."""


def log(message: str) -> None:
    print(f"[{time.monotonic() - T0:7.2f}s] {message}", file=sys.stderr, flush=True)


async def _ask(call: Any, timeout_s: float = DEADLINE_S) -> Any:
    """A Ray call with a deadline."""
    return await asyncio.wait_for(asyncio.wrap_future(call.future()), timeout_s)


async def _read_file(path: str) -> dict[str, list[tuple[str, Any]]]:
    """Every session of the shard file, as (type, data) per seq, read-only."""
    from msgspec import to_builtins

    store = await SqliteEventStore.open(path, read_only=True)
    try:
        out = {}
        for info in await store.list_sessions():
            session = await store.load(info.id)
            out[info.id] = [(e.type, to_builtins(e.data)) for e in session.log]
        return out
    finally:
        await store.close()


async def _until(done: Any, what: str, timeout_s: float = DEADLINE_S) -> None:
    """Poll ``done()`` until true; raises ``TimeoutError`` naming ``what`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        await asyncio.sleep(0.05)


def _replica_files(replica: Path) -> dict[str, float]:
    """Every file of a file replica (Litestream's LTX files), with its modification
    time."""
    out = {}
    for path in replica.rglob("*"):
        try:
            if path.is_file():
                out[str(path)] = path.stat().st_mtime
        except FileNotFoundError:  # compacted away meanwhile
            continue
    return out


def compare(acked: dict[str, dict[int, tuple[str, Any]]],
            restored: dict[str, list[tuple[str, Any]]]) -> dict[str, Any]:
    """What the restored file holds against what was acknowledged before the loss:
    ``lost`` acknowledged events missing (each session may miss only a suffix),
    ``differs`` acknowledged events stored differently (must be none), ``gaps`` a
    missing event followed by a stored one (must be none), ``unacked_stored`` events
    committed whose acknowledgement never arrived (allowed: in flight at the loss)."""
    lost = differs = gaps = unacked = 0
    per_session = {}
    for sid, events in acked.items():
        log_ = restored.get(sid, [])
        missing = sorted(seq for seq in events if seq >= len(log_))
        lost += len(missing)
        differs += sum(1 for seq, ev in events.items() if seq < len(log_) and log_[seq] != ev)
        top = max(events, default=-1)
        unacked += max(0, len(log_) - (top + 1))
        if missing and any(seq < len(log_) for seq in events if seq > missing[0]):
            gaps += 1
        per_session[sid] = {"acked": len(events), "restored": len(log_),
                            "lost": len(missing)}
    return {"lost": lost, "differs": differs, "gaps": gaps, "unacked_stored": unacked,
            "per_session": per_session}


def _watchers() -> list[str]:
    """The command lines of this process's Ray log monitors and autoscaler monitors."""
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            args = proc.cmdline()
        except psutil.Error:
            continue
        if any(a.endswith(("/_private/log_monitor.py", "/autoscaler/_private/monitor.py"))
               for a in args[:3]):
            found.append(" ".join(args[:3]))
    return found


class Run:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.disk = folder / "disk0"
        self.replica = folder / "replica" / "s0"
        self.disk.mkdir(parents=True)
        self.shard = Shard("s0", str(self.disk / "s0.db"), default_resource("s0"),
                           replica=str(self.replica), replica_sync_s=args.sync_s)
        self.shards = ShardMap((self.shard,))
        self.cluster: LocalCluster | None = None
        self.client: Client | None = None
        self.report: dict[str, Any] = {"losses": []}
        self.checks: dict[str, bool] = {}

    async def run(self) -> None:
        import ray

        started = time.monotonic()
        self.cluster = LocalCluster.start(self.shards, 1)
        log("cluster up")
        # LocalCluster's head (UNWATCHED_HEAD): nothing reads the workers' output, and
        # the cluster never scales.
        self.checks["no_log_or_autoscaler_monitor"] = not _watchers()
        ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False,
                 configure_logging=False)
        config = HostingConfig(self.shards, placement="packed", writer="owner",
                               durability="durable", idle_timeout_s=None)
        self.client = connect(config=config, address=self.cluster.address,
                              ready_timeout_s=DEADLINE_S)
        self.client.retry_for_s = RETRY_FOR_S
        log("connected")
        self.report["cluster_start_s"] = round(time.monotonic() - started, 2)
        ids = session_ids(self.shards, self.args.sessions)["s0"]
        drivers = [Driver(sid, "s0") for sid in ids]
        for _ in range(self.args.losses):
            stop = asyncio.Event()
            tasks = [asyncio.ensure_future(drive(d, self.client, stop, 0.0)) for d in drivers]
            await self.warm_up(drivers)
            outcome = await self.lose_disk(drivers, stop, tasks)
            self.report["losses"].append(outcome)
        # Served again: every session, after the last restore, for a turn or more.
        stop = asyncio.Event()
        before = {d.sid: len(d.successes) for d in drivers}
        marks = {d.sid: len(d.ack_times) for d in drivers}
        tasks = [asyncio.ensure_future(drive(d, self.client, stop, 0.0)) for d in drivers]
        started = time.monotonic()
        try:
            await _until(lambda: all(len(d.ack_times) - marks[d.sid] >= TURN_EVENTS
                                     for d in drivers), "a turn after the last restore")
        except TimeoutError as exc:  # the check below fails on its own
            log(str(exc))
        self.report["after_restore_s"] = round(time.monotonic() - started, 3)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S)
        self.checks["served_after_restore"] = all(
            len(d.successes) > before[d.sid] for d in drivers)
        # Only what was acknowledged after the last restore: earlier entries of
        # ``acked`` at seqs beyond the restored length are the lost ones.
        self.final_acked = {d.sid: {seq: d.acked[seq] for _, seq in d.ack_times[marks[d.sid]:]}
                            for d in drivers}

    async def warm_up(self, drivers: list[Driver]) -> None:
        """Until every session acknowledged ``--warmup-events`` events, and Litestream
        shipped two syncs since (the second began after the first was written: it holds
        every event acknowledged before), for at least ``--warmup-s``."""
        started = time.monotonic()
        marks = {d.sid: len(d.ack_times) for d in drivers}
        await _until(lambda: all(len(d.ack_times) - marks[d.sid] >= self.args.warmup_events
                                 for d in drivers), "warm-up: events acknowledged")
        known = _replica_files(self.replica)
        await _until(lambda: len(set(_replica_files(self.replica)) - set(known)) >= 2,
                     "warm-up: two syncs to the replica")
        rest = self.args.warmup_s - (time.monotonic() - started)
        if rest > 0:
            await asyncio.sleep(rest)
        self.report.setdefault("warmup_s", []).append(round(time.monotonic() - started, 3))

    async def lose_disk(self, drivers: list[Driver], stop: asyncio.Event,
                        tasks: list[asyncio.Future[None]]) -> dict[str, Any]:
        assert self.client is not None and self.cluster is not None
        owner = self.client.writers["s0"]
        node_before = await _ask(owner.node_id.remote())
        writer_pid = await _ask(owner.pid.remote())
        status = await _ask(owner.replica_status.remote())
        ls_pid = status.pid
        # The requests in flight at the loss can only be refused: each of the drivers'
        # from now on is, after the short window (the client reads the window when a
        # request starts, and each driver sends one request after another).
        self.client.retry_for_s = LOSS_RETRY_FOR_S
        switched = time.monotonic()
        await _until(lambda: all(d.spans and d.spans[-1][0] >= switched for d in drivers),
                     "a request of every driver under the short window")
        # The disk goes: nothing more acknowledged, nothing more shipped.
        for pid in (ls_pid, writer_pid):
            os.kill(pid, signal.SIGSTOP)
        lost_at = time.monotonic()
        acked = {d.sid: dict(d.acked) for d in drivers}
        acked_total = sum(len(v) for v in acked.values())
        stop.set()
        shutil.rmtree(self.disk)
        for pid in (ls_pid, writer_pid):
            os.kill(pid, signal.SIGKILL)
        self.cluster.remove_node(0, graceful=False)
        log(f"disk lost after {acked_total} acknowledged events; node removed")
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S)
        drained_s = time.monotonic() - lost_at
        self.disk.mkdir(parents=True)  # the new node's empty disk
        self.cluster.add_node(0)
        log(f"drained in {drained_s:.2f} s, node added back")
        restore_started = time.monotonic()
        # The owner restores, verifies, opens (the drivers are stopped: nothing else
        # runs under this window).
        self.client.retry_for_s = DEADLINE_S
        await self.client.shard_ready("s0")
        self.client.retry_for_s = RETRY_FOR_S
        ready_s = time.monotonic() - restore_started
        node_after = await _ask(owner.node_id.remote())
        restored = await _read_file(self.shard.path)
        result = compare(acked, restored)
        for d in drivers:
            # The lost tail is forgotten: its seqs now hold what comes after the restore
            # (the seed marker and repair closers first), compared at the next loss.
            kept = len(restored.get(d.sid, []))
            d.acked = {seq: ev for seq, ev in d.acked.items() if seq < kept}
        # The supervisor starts litestream on its own thread: wait (bounded) for it.
        wait_until = time.monotonic() + 15
        new_status = await _ask(owner.replica_status.remote())
        while (new_status is None or new_status.pid is None) and \
                time.monotonic() < wait_until:
            await asyncio.sleep(0.1)
            new_status = await _ask(owner.replica_status.remote())
        log(f"restored on node {node_after[:8]} in {ready_s:.2f} s: {result['lost']} "
            f"acknowledged events lost of {acked_total}")
        return {"acked": acked_total, **result, "other_node": node_after != node_before,
                "restored_ready_s": round(ready_s, 3), "drained_s": round(drained_s, 3),
                "outage_s": round(time.monotonic() - lost_at, 3),
                "litestream_running_after": new_status is not None
                and new_status.pid is not None,
                "old_litestream_gone": not _alive(ls_pid),
                "litestream_restarts": None if new_status is None else new_status.restarts}

    def stop(self) -> None:
        import ray

        if self.client is not None:
            try:
                self.report["shutdown_failures"] = self.client.shutdown()
            except Exception as exc:
                self.report["shutdown_failures"] = [f"{type(exc).__name__}: {exc}"]
        ray.shutdown()
        if self.cluster is not None:
            self.report["cluster_problems"] = self.cluster.shutdown()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def finish(run: Run) -> None:
    """Checks after every process stopped: the file verifies, every event acknowledged
    after the last restore is stored, no litestream of the run is left."""
    losses = run.report["losses"]
    run.checks["every_loss_restored_on_another_node"] = bool(losses) and all(
        loss["other_node"] for loss in losses)
    run.checks["nothing_else_differs"] = all(
        loss["differs"] == 0 and loss["gaps"] == 0 for loss in losses)
    run.checks["litestream_restarted_with_the_shard"] = all(
        loss["litestream_running_after"] and loss["old_litestream_gone"] for loss in losses)
    verification = await verify_shards(run.shards)
    run.checks["file_verifies"] = verification.ok
    stored = await _read_file(run.shard.path)
    last = compare(run.final_acked, stored)
    run.checks["acked_after_restore_all_stored"] = last["lost"] == 0 and last["differs"] == 0
    run.checks["shutdown_clean"] = not run.report.get("shutdown_failures")
    deadline = time.monotonic() + 15
    while litestream_processes(str(ReplicaPlan.of(run.shard).config_path)) and \
            time.monotonic() < deadline:  # type: ignore[union-attr]
        await asyncio.sleep(0.1)
    run.checks["no_litestream_left"] = not litestream_processes(
        str(ReplicaPlan.of(run.shard).config_path))  # type: ignore[union-attr]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--warmup-s", type=float, default=0.0,
                        help="the least load before each loss (seconds)")
    parser.add_argument("--warmup-events", type=int, default=TURN_EVENTS,
                        help="events each session acknowledges before each loss")
    parser.add_argument("--losses", type=int, default=1)
    parser.add_argument("--sync-s", type=float, default=1.0)
    args = parser.parse_args()
    for name, value in NODE_LOSS_ENV.items():
        os.environ.setdefault(name, value)
    folder = Path(tempfile.mkdtemp(prefix="surfacelog-diskloss-"))
    run = Run(args, folder)
    crashed = None
    try:
        try:
            asyncio.run(run.run())
        finally:
            run.stop()
        asyncio.run(finish(run))
    except Exception:
        crashed = traceback.format_exc()
        log(crashed)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    failed = sorted(name for name, ok in run.checks.items() if not ok)
    report = {"checks": run.checks, "failed": failed, "crashed": crashed,
              "lost": sum(loss["lost"] for loss in run.report["losses"]), **run.report}
    print(json.dumps(report, sort_keys=True, default=str))
    return 1 if failed or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
