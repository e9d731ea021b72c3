"""``surfacelog run``'s workload: the actors it starts, the chaos it adds, and the
verification of the database against the live actors.

It hosts N sessions through the chosen placement, drives them with agent-loop driver
actors, keeps a compaction actor and a pruner actor watching them, then has each
shard's writer replay the shard's committed sessions on its own node
(``Client.replay_digests``) and checks that every session replays to exactly the
surface and messages the live actors reported, on its home shard. No shard file is
opened by this process: on a cluster (``--shard-map``) the files are the nodes'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import secrets
import socket
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from surfacelog.actors.client import Client, connect
from surfacelog.actors.compactor import (
    CompactorStats,
    RemoteCompactor,
    RemotePruner,
    load_summariser,
)
from surfacelog.actors.config import HostingConfig
from surfacelog.actors.driver import DriverProgress, RemoteDriver
from surfacelog.actors.protocol import error_line, failure_line
from surfacelog.actors.retry import Backoff, through_restarts
from surfacelog.actors.script import ScriptConfig
from surfacelog.cli.localcluster import LocalCluster, disk_chaos, node_chaos, shard_files
from surfacelog.cli.nodewatch import NodeWatch
from surfacelog.cli.runmodel import NodeKill, RunConfig, RunResult, Sample, driver_cpus
from surfacelog.gateway.auth import AuthConfig, parse_grants
from surfacelog.schema.errors import SurfacelogError
from surfacelog.session.digest import SessionDigest, digest
from surfacelog.store.digests import StoreReplay
from surfacelog.store.errors import StoreError
from surfacelog.store.shardmap import ShardMap

log = logging.getLogger("surfacelog.cli")
"""The CLI layer's logger."""


def session_ids(n: int) -> list[str]:
    """Stable ids, so a second run against the same database resumes the same sessions."""
    return [f"run-{k:04d}" for k in range(n)]


async def live_digests(client: Client, ids: list[str]) -> dict[str, SessionDigest]:
    """What the live actors report for each session."""
    async def one(sid: str) -> tuple[str, SessionDigest]:
        handle = client.session(sid)
        snap, messages = await asyncio.gather(handle.surface(), handle.derive_messages())
        return sid, digest(snap.length, snap.nodes, snap.replace_generation, messages)
    return dict(await asyncio.gather(*(one(s) for s in ids)))


async def flush_sessions(client: Client, ids: list[str]) -> list[str]:
    """Flush every session; the write failures found (``session: error``), a session
    whose shard did not answer included."""
    async def one(sid: str) -> str | None:
        try:
            await client.session(sid).flush()
        except (StoreError, RayActorError, SurfacelogError) as exc:
            return failure_line(sid, exc)
        return None
    return [line for line in await asyncio.gather(*(one(s) for s in ids)) if line]


class Replayed:
    """What the shards' writers replayed (``Client.replay_digests``), merged: each
    session's digest and the shard that stores it, the problems found on the way (a
    session on two shards, or one that cannot be read), and the shards' bytes on their
    nodes' disks."""

    def __init__(self, replays: dict[str, StoreReplay]) -> None:
        self.digests: dict[str, SessionDigest] = {}
        self.stored_on: dict[str, str] = {}
        self.problems: list[str] = []
        self.disk_bytes = 0
        for shard, replay in sorted(replays.items()):
            self.disk_bytes += replay.disk_bytes or 0
            self.problems += [f"{f.session_id}: cannot be replayed from shard {shard}"
                              + ("" if f.seq is None else f" (seq {f.seq})")
                              + f": {f.message}" for f in replay.failures]
            for sid, found in replay.digests.items():
                other = self.stored_on.setdefault(sid, shard)
                if other != shard:
                    self.problems.append(f"{sid}: stored on shards {other} and {shard}")
                    continue
                self.digests[sid] = found

    def misplaced(self, shards: ShardMap) -> list[str]:
        """A line for each session stored on a shard other than its home."""
        return [f"{sid}: stored on shard {shard}, not on its home {shards.home(sid).name}"
                for sid, shard in sorted(self.stored_on.items())
                if shard != shards.home(sid).name]


def compare(live: dict[str, SessionDigest], replayed: dict[str, SessionDigest]) -> list[str]:
    """Every difference between the live and the replayed digests."""
    problems = []
    for sid, want in sorted(live.items()):
        got = replayed.get(sid)
        if got is None:
            problems.append(f"{sid}: missing from the database")
        elif got != want:
            fields = [f for f in SessionDigest.__struct_fields__
                      if getattr(got, f) != getattr(want, f)]
            problems.append(f"{sid}: replay differs in {', '.join(fields)} (live: "
                            f"{want.length} events, generation {want.replace_generation}; "
                            f"stored: {got.length} events, generation "
                            f"{got.replace_generation})")
    return problems


async def _poll(drivers: list[Any], compactor: Any, pruner: Any, started: float,
                on_sample: Callable[[Sample, dict[str, Any]], None], done: asyncio.Event,
                node_kills: list[NodeKill]) -> list[Sample]:
    samples: list[Sample] = []
    while not done.is_set():
        progress = await asyncio.gather(*(d.progress.remote() for d in drivers))
        by_shard: dict[str, dict[str, int]] = {}
        for part in progress:
            for name, figures in part["by_shard"].items():
                mine = by_shard.setdefault(name, {"events": 0, "unavailable": 0})
                mine["events"] += figures["events"]
                mine["unavailable"] += figures["unavailable"]
        cstats, pstats = await asyncio.gather(compactor.stats.remote(), pruner.stats.remote())
        recent = [x for p in progress for x in p["recent_latencies_ms"]]
        sample = Sample(
            t=time.time() - started,
            turns=sum(p["turns_done"] + p["turns_interrupted"] for p in progress),
            events=sum(p["events"] for p in progress),
            errors=sum(p["errors"] for p in progress) + cstats.errors + pstats.errors,
            conflicts=sum(p["conflicts"] for p in progress) + cstats.conflicts
            + pstats.conflicts,
            compactions=cstats.committed,
            prunes=pstats.prunes,
            p50_ms=statistics.median(recent) if recent else None,
        )
        samples.append(sample)
        on_sample(sample, {"last_error": next((p["last_error"] for p in progress
                                               if p["last_error"]), None),
                           "shards": by_shard, "node_kills": len(node_kills),
                           "node_down": next((k.node for k in node_kills
                                              if k.added_at is None), None)})
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=0.25)
    return samples


def _merge(parts: list[DriverProgress]) -> DriverProgress:
    out = DriverProgress()
    for p in parts:
        out.sessions += p.sessions
        out.turns_done += p.turns_done
        out.turns_interrupted += p.turns_interrupted
        out.events += p.events
        out.appends += p.appends
        out.conflicts += p.conflicts
        out.lost += p.lost
        out.resent += p.resent
        out.ray_calls += p.ray_calls
        out.errors += p.errors
        out.finished += p.finished
        out.last_error = out.last_error or p.last_error
        out.latencies_ms.extend(p.latencies_ms)
        out.append_times_ms.extend(p.append_times_ms)
        out.surface_points.extend(p.surface_points)
        for name, record in p.by_shard.items():
            out.shard(name).merge(record)
    return out


CLUSTER_RETRY_FOR_S = 5.0
"""The retry window of the run's own actors on a multi-node cluster (``--local-nodes``,
``--shard-map``): a request whose shard's node is lost is refused with
``ShardUnavailable`` (counted, then sent again) after this long instead of
``Client.retry_for_s``'s 30 s, so that the report sees the outage."""


async def run_workload(cfg: RunConfig,
                       on_sample: Callable[[Sample, dict[str, Any]], None],
                       cluster: LocalCluster | None = None,
                       shards: ShardMap | None = None) -> RunResult:
    """Run the workload on an initialised Ray; returns the measured result, verified.

    ``cluster``: the local cluster Ray runs on (``--local-nodes``): the sessions live on
    its shards, the run's own actors (drivers, compactor, pruner) on its head node, so
    that losing a worker node cannot take them, and ``--kill-node-every`` removes and
    adds back its worker nodes meanwhile. ``shards``: the shard map of the joined
    cluster (``--shard-map``): the sessions live on its shards, whose writers are
    placed by the shards' resources. Either way (and on the embedded one-node Ray) the
    run is verified by the shards' writers, on their nodes: this process opens no shard
    file. Once the drivers started, every failure (a driver actor lost, verification
    cut short by a lost node...) is reported in the result, whose verification then
    fails, rather than raised. Raises what starting the actors raises (Ray's errors,
    ``VersionRefused``)."""
    options: dict[str, Any] = {"placement": cfg.placement, "packs": cfg.packs,
                               "durability": cfg.durability, "idle_timeout_s": None,
                               "writer": cfg.hosting_writer}
    shard_map_file: str | None = None
    if shards is not None:
        hosting = HostingConfig(shards, **options)
        shard_map_file = None if cfg.shard_map is None else str(cfg.shard_map)
        shard_nodes: dict[str, int | None] = {name: None for name in hosting.shards.names}
    elif cluster is None:
        hosting = HostingConfig.single(os.path.abspath(cfg.db_path), **options)
        shard_nodes = {name: None for name in hosting.shards.names}
    else:
        db = os.path.abspath(cfg.db_path)
        hosting = HostingConfig(cluster.shards, **options)
        shard_map_file = str(shard_files(Path(db), len(cluster.shards.shards))[1])
        shard_nodes = {name: cluster.node_of(name) for name in hosting.shards.names}
    client = connect(config=hosting)
    ids = session_ids(cfg.sessions)
    script = ScriptConfig(seed=cfg.seed, mode=cfg.mode, chunk_every_ms=cfg.chunk_every_ms,
                          outage_budget_s=cfg.outage_budget_s)
    opts: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1000}
    retry_for_s: float | None = None
    run_node: str | None = None  # where the run's actors are pinned, if anywhere
    if cluster is not None:
        # On the head node, which is never removed: a worker node's loss takes the
        # shards it hosts, never the actors that drive and measure them.
        run_node = cluster.head_node_id
    elif shards is not None:
        # On this driver's own node (a KubeRay RayJob's driver runs on the head, which
        # holds no shard): a shard node lost takes its shards, never the run's actors,
        # which would otherwise land on any node, a shard's among them.
        run_node = ray.get_runtime_context().get_node_id()
    if run_node is not None:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(run_node, soft=False)
        retry_for_s = CLUSTER_RETRY_FOR_S
    compactor = RemoteCompactor.options(**opts).remote(
        hosting, retry_for_s, compact_at=cfg.compact_at, prune_over=cfg.prune_over,
        summariser=load_summariser(cfg.summariser))
    pruner = RemotePruner.options(**opts).remote(
        hosting, retry_for_s, compact_at=cfg.compact_at, prune_over=cfg.prune_over)
    await asyncio.gather(compactor.manage.remote(ids), pruner.manage.remote(ids))
    n_drivers = cfg.driver_count(len(ids), *driver_cpus(
        ray.nodes(), run_node, hosting.shards.shards))  # type: ignore[no-untyped-call]
    gateway_url: str | None = None
    if cfg.via == "http":
        # Imported only here: the gateway's web stack (FastAPI, uvicorn, the drivers'
        # HTTP client) is about 0.3 s of CPU that every other run would pay at its start.
        from surfacelog.gateway.httpclient import RemoteHttpDriver

        gateway_url, token = await asyncio.get_running_loop().run_in_executor(
            None, start_run_gateway, hosting)
        drivers = [RemoteHttpDriver.options(**opts).remote(hosting, script, gateway_url,
                                                           token, retry_for_s)
                   for _ in range(n_drivers)]
    else:
        drivers = [RemoteDriver.options(**opts).remote(hosting, script, retry_for_s)
                   for _ in range(n_drivers)]
    # The agents' clock and CPU count start once their drivers are up: a driver's start
    # (a Ray worker importing Ray and surfacelog, about half a second of CPU here) is not
    # the hosting of their sessions, and it weighed most in the shortest runs. A driver
    # that could not start fails its ``run`` call below, reported there as before.
    await asyncio.gather(*(driver.ready.remote() for driver in drivers),
                         return_exceptions=True)
    started = time.time()
    cpu_before = cpu_by_process() if cfg.address is None else None
    await asyncio.gather(compactor.start.remote(0.3), pruner.start.remote(0.3))
    done = asyncio.Event()
    node_kills: list[NodeKill] = []
    problems: list[str] = []
    broken: list[str] = []  # why the run could not complete: it exits 4, not 1
    kill_times: list[float] = []
    poller = asyncio.ensure_future(_poll(drivers, compactor, pruner, started, on_sample,
                                         done, node_kills))
    chaos = asyncio.ensure_future(_chaos(client, ids, cfg, done, started, kill_times))
    node_chaos_task = None
    if cluster is not None and cfg.kill_node_every_s > 0:
        node_chaos_task = asyncio.ensure_future(node_chaos(
            cluster, cfg.kill_node_every_s, cfg.node_down, cfg.seed,
            _prober(client, ids), done, node_kills, max_kills=cfg.max_kills))
    elif cluster is not None and cfg.kill_disk_every_s > 0:
        node_chaos_task = asyncio.ensure_future(disk_chaos(
            cluster, dict(client.writers), cfg.kill_disk_every_s, cfg.node_down,
            cfg.seed, _prober(client, ids), done, node_kills, max_kills=cfg.max_kills))
    watch: NodeWatch | None = None
    watch_task = None
    if cluster is not None or cfg.address is not None:
        # A node lost without the chaos removing it (a raylet killed from outside, a
        # machine gone) is found in Ray's node table and named in the report.
        watch = NodeWatch(hosting.shards,
                          lambda: {kill.node_id for kill in node_kills if kill.node_id})
        watch_task = asyncio.ensure_future(watch.run(done, ray.nodes))
    shares = [ids[k::n_drivers] for k in range(n_drivers)]
    cstats, pstats = CompactorStats(), CompactorStats()
    size = 0
    live: dict[str, SessionDigest] = {}
    journal: dict[str, Any] = {}
    write_failures: list[str] = []
    try:
        try:
            results = await _drive(drivers, shares, cfg.turns, started, poller)
        finally:
            done.set()
            kills = await _outcome(chaos, "actor chaos", 0, broken)
            if node_chaos_task is not None:
                await _outcome(node_chaos_task, "node chaos", None, broken)
            if watch_task is not None:
                await _outcome(watch_task, "node watch", None, broken)
            stopped = await asyncio.gather(compactor.stop.remote(), pruner.stop.remote(),
                                           return_exceptions=True)
            samples: list[Sample] = await _outcome(poller, "progress polling", [],
                                                   broken)
        parts = [r for r in results if isinstance(r, DriverProgress)]
        broken += [f"a driver actor failed: {describe_error(r)}"[:300]
                   for r in results if not isinstance(r, DriverProgress)]
        for k, got in enumerate(stopped):
            if isinstance(got, CompactorStats):
                cstats, pstats = (got, pstats) if k == 0 else (cstats, got)
            else:
                broken.append(f"the {('compactor', 'pruner')[k]} actor failed: "
                              f"{describe_error(got)}"[:300])
        wall = time.time() - started
        cpu_s, by_kind = None, {}
        if cpu_before is not None:
            titles: dict[int, str] = {}
            cpu_after = cpu_by_process(titles)
            cpu_s = cpu_spent(cpu_before, cpu_after)
            by_kind = cpu_by_kind(cpu_before, cpu_after, titles, os.getpid())
        unrecovered_losses = [] if watch is None else [
            loss for loss in watch.losses if loss.unrecovered()]
        broken += [f"{loss.describe(started)}; shard(s) {', '.join(loss.unrecovered())} "
                   f"not verified" for loss in unrecovered_losses]
        # A shard whose node was lost and did not come back cannot be replayed by its
        # writer: the run claims nothing about it (each is in ``broken`` already).
        if not unrecovered_losses:
            try:
                # Flush before reading the live state: a session whose buffered writes
                # failed reports it here and reloads from the store, so what is read next is
                # what survived, and the failure is counted instead of showing up as a
                # mismatch.
                write_failures = await flush_sessions(client, ids)
                live = await live_digests(client, ids)
                journal = await client.writer_stats()
                write_failures += await client.passivate_all()
                # Each shard's writer replays its committed sessions on its own node: the
                # files are never opened here (on a cluster they are not on this machine).
                replayed = Replayed(await client.replay_digests())
                size = replayed.disk_bytes
                problems += replayed.problems + replayed.misplaced(hosting.shards)
                problems += compare(live, replayed.digests)
            except Exception as exc:  # e.g. a node lost meanwhile: reported, never raised
                broken.append(f"verification could not complete: {describe_error(exc)}")
    finally:
        for actor in (*drivers, compactor, pruner):
            ray.kill(actor)
        if gateway_url is not None:
            from surfacelog.gateway.deployment import stop_gateway

            await asyncio.get_running_loop().run_in_executor(None, stop_gateway)
        # The writers' last commits happen as they close: a failure there (a full disk)
        # is a write failure of the run like any other.
        write_failures += await asyncio.get_running_loop().run_in_executor(
            None, client.shutdown)
    merged = _merge(parts)
    merged.errors += n_drivers - len(parts)
    if cfg.durability == "durable":
        # A shard that lost its disk loses the tail its asynchronous replica had not
        # received: counted (``lost_to_disk_loss``), expected. Anything else is a bug.
        disk_lost = {shard for kill in node_kills if kill.disk for shard in kill.shards}
        unexpected = merged.lost - sum(record.lost for name, record in merged.by_shard.items()
                                       if name in disk_lost)
        if unexpected:
            problems.append(f"{unexpected} acknowledged durable events are missing from "
                            "the logs" + (" (besides those lost with a disk)"
                                          if disk_lost else ""))
        problems += [f"a durable write failed: {line}" for line in write_failures]
    problems = broken + problems
    return RunResult(cfg, wall, merged, cstats, pstats, size, live,
                     not problems, problems, samples, journal, kills or 0, write_failures,
                     cpu_s, cpu_by_kind=by_kind, shard_nodes=shard_nodes,
                     shard_map=shard_map_file,
                     node_kills=node_kills,
                     auth_mode=None if cluster is None else cluster.auth_mode,
                     incomplete=broken, actor_kill_times=kill_times, started_at=started,
                     node_losses=[] if watch is None else watch.losses)


async def _drive(drivers: list[Any], shares: list[list[str]], turns: int, started: float,
                 poller: asyncio.Future[list[Sample]]) -> list[Any]:
    """Run the drivers; each one's ``DriverProgress``, or the error it failed with.
    When one fails, or the polling does (a driver, the compactor or the pruner lost),
    the run cannot complete: the other drivers are told to stop after their current
    turn, so that the run ends with what it did instead of going on without them."""
    async def one(driver: Any, share: list[str]) -> Any:
        return await driver.run.remote(share, turns, started)

    runs = [asyncio.ensure_future(one(d, share))
            for d, share in zip(drivers, shares, strict=True)]
    pending: set[asyncio.Future[Any]] = {*runs, poller}
    stopping = False
    while pending - {poller}:
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if not stopping and any(f.exception() is not None for f in finished):
            stopping = True
            # A driver already lost answers with its error, collected with its run's.
            await asyncio.gather(*(d.stop.remote() for d in drivers),
                                 return_exceptions=True)
    return [r.exception() or r.result() for r in runs]


def start_run_gateway(hosting: HostingConfig) -> tuple[str, str]:
    """Start the HTTP gateway over ``hosting`` on a free loopback port, with a token
    made for this run (never printed); returns its URL and the token. Raises what
    ``start_gateway`` raises."""
    from surfacelog.gateway.deployment import start_gateway

    token = secrets.token_hex(24)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    auth = AuthConfig(parse_grants(token, "the run's generated token"))
    url = start_gateway(hosting, auth, host="127.0.0.1", port=port)
    log.info("gateway of the run at %s", url)
    return url, token


def _prober(client: Client, ids: list[str]) -> Callable[[str], Awaitable[None]]:
    """The node chaos's probe of a shard: its writer answers, then (when one of the
    run's sessions lives there) that session serves a read. Raises ``ShardUnavailable``
    (or the actor's error) while the shard does not serve."""
    homes: dict[str, str] = {}
    for sid in ids:
        homes.setdefault(client.config.shards.home(sid).name, sid)

    async def probe(shard: str) -> None:
        await client.shard_ready(shard)
        sid = homes.get(shard)
        if sid is not None:
            await client.session(sid).surface()
    return probe


T = TypeVar("T")


async def _outcome(task: asyncio.Future[T], what: str, default: T,
                   problems: list[str]) -> T:
    """``task``'s result; when it failed, ``default``, with the failure added to
    ``problems``."""
    try:
        return await task
    except Exception as exc:
        problems.append(f"{what} failed: {describe_error(exc)}")
        return default


def describe_error(exc: BaseException, limit: int = 400) -> str:
    """One line naming ``exc``, at most ``limit`` characters; for an error an actor
    raised, that error, not Ray's wrapping of it (``protocol.error_line``)."""
    return error_line(exc).replace("\n", " ")[:limit]


def cpu_by_process(titles: dict[int, str] | None = None) -> dict[int, float]:
    """CPU seconds (user + system) of this process and every process below it: with an
    embedded Ray, all of Ray's (GCS, raylet, workers, actors). ``titles``, when given,
    gets each of those processes' title (its first argument) by pid."""
    import psutil

    me = psutil.Process()
    out: dict[int, float] = {}
    for proc in (me, *me.children(recursive=True)):
        try:
            times = proc.cpu_times()
            if titles is not None:
                titles[proc.pid] = (proc.cmdline() or [""])[0]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between listing and reading: its time is not counted
        out[proc.pid] = times.user + times.system
    return out


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two ``cpu_by_process`` readings by the processes alive
    at the second (a process that ended in between is not counted)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


THIS_COMMAND: Final = "this command"
RAY_PROCESSES: Final = "Ray's own processes"
_ACTOR_TITLE: Final = re.compile(r"ray::([A-Za-z_][A-Za-z0-9_]*)")


def process_kind(title: str, pid: int, me: int) -> str:
    """The kind a process's CPU is counted under: ``THIS_COMMAND`` for ``me``, the class
    of the Ray actor it hosts, as its title names it (``ray::OwnerActor`` or
    ``ray::OwnerActor.call_many``: ``OwnerActor``; Ray's agents are titled the same
    way), else ``RAY_PROCESSES`` (the GCS, the raylet, an idle worker, the monitors)."""
    if pid == me:
        return THIS_COMMAND
    match = _ACTOR_TITLE.match(title)
    if match is None or match.group(1) == "IDLE":
        return RAY_PROCESSES
    return match.group(1)


def cpu_by_kind(before: dict[int, float], after: dict[int, float],
                titles: dict[int, str], me: int) -> dict[str, float]:
    """``cpu_spent(before, after)`` by ``process_kind`` (``titles``: the processes'
    titles at ``after``; ``me``: this process's pid), the largest first."""
    spent: dict[str, float] = {}
    for pid, seconds in after.items():
        kind = process_kind(titles.get(pid, ""), pid, me)
        spent[kind] = spent.get(kind, 0.0) + seconds - before.get(pid, 0.0)
    return dict(sorted(spent.items(), key=lambda item: -item[1]))


async def _chaos(client: Client, ids: list[str], cfg: RunConfig, done: asyncio.Event,
                 started: float, kill_times: list[float]) -> int:
    """Until ``done``, kill the actor serving a random session (seeded) the way a crash
    would, ``kill_every_s`` seconds after the previous victim serves again: Ray
    restarts it, its sessions activate again through crash repair, and the drivers
    resend. With ``kill_journal`` every second kill is the writer's (the journal, or the
    owner): the session actors send it again the writes it had not answered.

    The interval counts from the previous recovery, not from the previous kill: killing
    an actor again before it has come back (a loaded machine restarts slowly) would
    keep it down for good, which tests nothing but the retry window. Stops after
    ``max_kills`` kills if not 0. Returns how many kills were made, once the last
    victim serves again (so that nothing read afterwards comes from an incarnation
    about to die)."""
    if cfg.kill_every_s <= 0:
        return 0
    rng = random.Random(cfg.seed)
    kills = 0
    while not cfg.max_kills or kills < cfg.max_kills:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=cfg.kill_every_s)
        if done.is_set():
            return kills
        if cfg.kill_journal and (kills + 1) % 2 == 0:
            names = sorted(client.writers)
            victim = client.writers[names[0] if len(names) == 1 else rng.choice(names)]
        else:
            victim = await client.actor(rng.choice(ids))
        kill_times.append(round(time.time() - started, 3))
        await kill_and_await_restart(victim)
        kills += 1
    return kills


RESTART_WAIT_S = 60.0
"""How long the chaos waits for a killed actor to serve again."""


async def kill_and_await_restart(actor: Any) -> None:
    """Kill ``actor`` as a crash would (Ray restarts it) and return once a new process
    serves it. ``ray.kill`` only sends the kill: a call made right after it may still
    be served by the old process. Raises ``RayActorError`` when the actor does not
    serve again within ``RESTART_WAIT_S``, ``TimeoutError`` when the old process
    still serves it then."""
    async def serving_pid() -> int:
        pid: int = await through_restarts(lambda _again: actor.pid.remote(), RESTART_WAIT_S)
        return pid

    before = await serving_pid()
    ray.kill(actor, no_restart=False)
    backoff = Backoff(RESTART_WAIT_S)
    while await serving_pid() == before:
        if backoff.exhausted():
            raise TimeoutError(f"actor still served by process {before} after the kill")
        await backoff.wait()

