"""``surfacelog run``'s workload: the actors it starts, the chaos it adds, and the
verification of the database against the live actors.

It hosts N sessions through the chosen placement, drives them with agent-loop driver
actors, keeps a compaction actor and a pruner actor watching them, then reopens the
database in a fresh process and checks that every session replays to exactly the surface
and messages the live actors reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import Client, connect
from surfacelog.actors.compactor import RemoteCompactor, RemotePruner
from surfacelog.actors.config import HostingConfig
from surfacelog.actors.driver import DriverProgress, RemoteDriver
from surfacelog.actors.protocol import failure_line
from surfacelog.actors.retry import Backoff, through_restarts
from surfacelog.actors.script import ScriptConfig
from surfacelog.cli.runmodel import RunConfig, RunResult, Sample
from surfacelog.session.digest import SessionDigest, digest
from surfacelog.store.base import StoreError


def store_bytes(db: str) -> int:
    """Size of the database with its WAL and shared-memory files."""
    return sum(os.path.getsize(p) for p in (db, db + "-wal", db + "-shm") if os.path.exists(p))


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
    """Flush every session; the write failures found (``session: error``)."""
    async def one(sid: str) -> str | None:
        try:
            await client.session(sid).flush()
        except (StoreError, RayActorError) as exc:
            return failure_line(sid, exc)
        return None
    return [line for line in await asyncio.gather(*(one(s) for s in ids)) if line]


def replay_digests(db: str) -> dict[str, SessionDigest]:
    """Replay every stored session in a fresh process (``surfacelog digest``)."""
    out = subprocess.run(
        [sys.executable, "-m", "surfacelog.cli", "digest", db, "--json"],
        check=True, capture_output=True, text=True)
    raw = json.loads(out.stdout)
    return {sid: msgspec.convert(d, SessionDigest) for sid, d in raw.items()}


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
                on_sample: Callable[[Sample, dict[str, Any]], None], done: asyncio.Event
                ) -> list[Sample]:
    samples: list[Sample] = []
    while not done.is_set():
        progress = await asyncio.gather(*(d.progress.remote() for d in drivers))
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
                                               if p["last_error"]), None)})
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
        out.errors += p.errors
        out.finished += p.finished
        out.last_error = out.last_error or p.last_error
        out.latencies_ms.extend(p.latencies_ms)
        out.append_times_ms.extend(p.append_times_ms)
        out.surface_points.extend(p.surface_points)
    return out


async def run_workload(cfg: RunConfig,
                       on_sample: Callable[[Sample, dict[str, Any]], None]) -> RunResult:
    """Run the workload on an initialised Ray; returns the measured result, verified."""
    db = os.path.abspath(cfg.db)
    hosting = HostingConfig.single(db, placement=cfg.placement, packs=cfg.packs,
                                   durability=cfg.durability, idle_timeout_s=None,
                                   writer=cfg.hosting_writer)
    client = connect(config=hosting)
    ids = session_ids(cfg.sessions)
    script = ScriptConfig(seed=cfg.seed, mode=cfg.mode)
    opts = {"num_cpus": 0, "max_concurrency": 1000}
    compactor = RemoteCompactor.options(**opts).remote(
        hosting, compact_at=cfg.compact_at, prune_over=cfg.prune_over)
    pruner = RemotePruner.options(**opts).remote(
        hosting, compact_at=cfg.compact_at, prune_over=cfg.prune_over)
    await asyncio.gather(compactor.manage.remote(ids), pruner.manage.remote(ids))
    n_drivers = max(1, min(cfg.drivers, len(ids)))
    drivers = [RemoteDriver.options(**opts).remote(hosting, script) for _ in range(n_drivers)]
    started = time.time()
    cpu_before = cpu_by_process() if cfg.address is None else None
    await asyncio.gather(compactor.start.remote(0.3), pruner.start.remote(0.3))
    done = asyncio.Event()
    poller = asyncio.ensure_future(_poll(drivers, compactor, pruner, started, on_sample, done))
    chaos = asyncio.ensure_future(_chaos(client, ids, cfg, done))
    shares = [ids[k::n_drivers] for k in range(n_drivers)]
    try:
        try:
            parts = await asyncio.gather(*(d.run.remote(share, cfg.turns, started)
                                           for d, share in zip(drivers, shares, strict=True)))
        finally:
            done.set()
            kills = await chaos
            cstats, pstats = await asyncio.gather(compactor.stop.remote(),
                                                  pruner.stop.remote())
            samples = await poller
        wall = time.time() - started
        cpu_s = None if cpu_before is None else cpu_spent(cpu_before, cpu_by_process())
        # Flush before reading the live state: a session whose buffered writes failed
        # reports it here and reloads from the store, so what is read next is what
        # survived, and the failure is counted instead of showing up as a mismatch.
        write_failures = await flush_sessions(client, ids)
        live = await live_digests(client, ids)
        journal = await client.journal_stats()
        write_failures += await client.passivate_all()
        replayed = await asyncio.get_running_loop().run_in_executor(None, replay_digests, db)
    finally:
        for actor in (*drivers, compactor, pruner):
            ray.kill(actor)
        await asyncio.get_running_loop().run_in_executor(None, client.shutdown)
    problems = compare(live, replayed)
    merged = _merge(list(parts))
    if cfg.durability == "durable":
        if merged.lost:
            problems.append(f"{merged.lost} acknowledged durable events are missing from "
                            "the logs")
        problems += [f"a durable write failed: {line}" for line in write_failures]
    return RunResult(cfg, wall, merged, cstats, pstats, store_bytes(db), live,
                     not problems, problems, samples, journal, kills, write_failures, cpu_s)


def cpu_by_process() -> dict[int, float]:
    """CPU seconds (user + system) of this process and every process below it: with an
    embedded Ray, all of Ray's (GCS, raylet, workers, actors)."""
    import psutil

    me = psutil.Process()
    out: dict[int, float] = {}
    for proc in (me, *me.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # ended between listing and reading: its time is not counted
        out[proc.pid] = times.user + times.system
    return out


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two ``cpu_by_process`` readings by the processes alive
    at the second (a process that ended in between is not counted)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


async def _chaos(client: Client, ids: list[str], cfg: RunConfig, done: asyncio.Event) -> int:
    """Until ``done``, kill the actor serving a random session (seeded) the way a crash
    would, ``kill_every_s`` seconds after the previous victim serves again: Ray
    restarts it, its sessions activate again through crash repair, and the drivers
    resend. With ``kill_journal`` every second kill is the writer's (the journal, or the
    owner): the session actors send it again the writes it had not answered.

    The interval counts from the previous recovery, not from the previous kill: killing
    an actor again before it has come back (a loaded machine restarts slowly) would
    keep it down for good, which tests nothing but the retry window. Returns how many
    kills were made, once the last victim serves again (so that nothing read afterwards
    comes from an incarnation about to die)."""
    if cfg.kill_every_s <= 0:
        return 0
    rng = random.Random(cfg.seed)
    kills = 0
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=cfg.kill_every_s)
        if done.is_set():
            return kills
        victim = client.journal if cfg.kill_journal and (kills + 1) % 2 == 0 \
            else await client.actor(rng.choice(ids))
        await kill_and_await_restart(victim)
        kills += 1


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

