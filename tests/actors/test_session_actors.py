"""Sessions as Ray actors on a real local Ray, for both placements."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from surfacelog.actors.client import Client, connect
from surfacelog.actors.compactor import CompactionActor, RemoteCompactor, RemotePruner
from surfacelog.actors.config import GC_YOUNG_THRESHOLD, HostingConfig
from surfacelog.actors.driver import DriverProgress, RemoteDriver, SessionDriver
from surfacelog.actors.journal import JournalActor
from surfacelog.actors.protocol import Conflict
from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.actors.session_actor import (
    WRITER_METHODS,
    OwnerActor,
    RemoteSessionActor,
    SessionActor,
)
from surfacelog.cli.loadrun import compare, live_digests
from surfacelog.schema.errors import SurfaceError
from surfacelog.schema.events import Event
from surfacelog.session import AppendSpec, oversized_results
from surfacelog.session.compaction import CompactionRequest
from surfacelog.store.digests import store_digests
from surfacelog.store.errors import WriterFenced

pytestmark = pytest.mark.usefixtures("ray_local")

PLACEMENTS = ["packed", "dedicated", "owner"]
"""``owner``: packed, with the one pack of the shard owning its file (no journal)."""


def make_host(tmp_path: Path, placement: str, **kw: Any) -> Client:
    if placement == "owner":
        kw = {**kw, "writer": "owner"}
        return connect(config=HostingConfig.single(
            str(tmp_path / "actors.db"), placement="packed", packs=2, **kw))
    return connect(db=str(tmp_path / "actors.db"), placement=placement,  # type: ignore[arg-type]
                   packs=2, **kw)


@pytest.fixture(scope="class")
def hosts() -> Iterator[dict[str, Client]]:
    """The shared hosts of a class's tests by placement, each started by the first test
    that asks."""
    made: dict[str, Client] = {}
    try:
        yield made
    finally:
        for host in made.values():
            host.shutdown()


@pytest.fixture
def shared_host(hosts: dict[str, Client], placement: str,
                tmp_path_factory: pytest.TempPathFactory) -> Client:
    """A host of ``placement`` shared by tests that neither kill nor stop its actors and
    read only their own session (each names its own): a host's start and stop cost
    about a second of CPU, its writer's and its actors' processes."""
    if placement not in hosts:
        hosts[placement] = make_host(tmp_path_factory.mktemp(placement), placement)
    return hosts[placement]


@pytest.mark.parametrize("placement", PLACEMENTS)
class TestOnOneHostPerPlacement:
    """Tests that neither kill nor stop a host's actors and read only their own session
    share one host per placement, stopped after the last of them."""

    async def test_errors_cross_ray_intact(self, shared_host: Client) -> None:
        host = shared_host
        s = host.session("errs")
        first = await s.append("turn/start", {"turn": 1}, expected_seq=0)
        assert isinstance(first, Event) and first.seq == 0
        with pytest.raises(SurfaceError) as err:
            await s.append("user/message", {"id": "u", "role": "user",
                                            "source": {"kind": "user"}, "content": []},
                           surface_op={"op": "replace", "start": 7, "end": 7},
                           source_event_seqs=[0])
        assert type(err.value) is SurfaceError
        assert "start seq 7 not found in surface" in str(err.value)
        assert err.value.rule == "range" and err.value.seq == 1
        with pytest.raises(Conflict):
            await s.append("turn/start", {"turn": 2}, expected_seq=0)
        again = await s.append("turn/start", {"turn": 1}, expected_seq=0)
        assert again == first
        assert (await s.surface()).length == 1
        stale = CompactionRequest(compaction_id="c", generation=3, shadowed=(0,),
                                  summary=[], shadowed_token_count=1, checkpoint_id="k")
        with pytest.raises(Conflict, match="stale"):
            await s.replace(stale)

    async def test_returned_events_are_the_logged_ones(self, shared_host: Client) -> None:
        """A fresh append is answered with its first seq and time and the client makes the
        events from its own request; a retried one is answered with the logged events.
        Either way they equal what the log holds."""
        host = shared_host
        s = host.session("returned")
        script = AgentScript("returned", ScriptConfig(tool_calls=2))
        opened = await s.append_batch(script.turn_open(1), expected_seq=0)
        stream = script.stream(1, 1, final=False)
        specs = [script.step_start(1, 1), *stream.chunks]
        logged = await s.append_batch(specs)
        assert logged.seqs == range(len(opened), len(opened) + len(specs))
        assert len(logged) == len(specs)
        retried = await s.append_batch(specs, expected_seq=logged.seqs[0])
        stored = await s.events(logged.seqs[0], len(specs))
        assert logged == stored and retried == stored and logged == retried
        assert [e.seq for e in logged] == list(logged.seqs)
        assert len({e.time for e in logged}) == 1
        assert (await s.surface()).length == logged.seqs.stop

    async def test_hosting_processes_collect_young_garbage_less_often(
            self, shared_host: Client) -> None:
        """The session actor's and the shard writer's processes run the cycle collector's
        youngest generation at ``GC_YOUNG_THRESHOLD``, not the interpreter's 700; the older
        generations keep their defaults."""
        host = shared_host
        await host.session("gc").append("turn/start", {"turn": 1})
        # The interpreter's own setting: this process may have built an actor's object
        # (a test of the hosted code in process), which tunes its collector too.
        young, *older = json.loads(subprocess.run(
            [sys.executable, "-c", "import gc, json; print(json.dumps(gc.get_threshold()))"],
            capture_output=True, text=True, check=True, timeout=60).stdout)
        assert young != GC_YOUNG_THRESHOLD
        for actor in (await host.actor("gc"), host.writer):
            # A lambda crosses by value (this module is not importable in the actor).
            threshold = await actor.__ray_call__.remote(lambda _: gc.get_threshold())
            assert threshold == (GC_YOUNG_THRESHOLD, *older)


async def test_a_pruner_reads_only_the_oversized_results_and_prunes_them(
        tmp_path: Path) -> None:
    """The pruner's read, ``oversized_results``, answers where the session lives what the
    pure filter finds in the whole surface; a pass prunes exactly those results, after
    which there are none left to read."""
    host = make_host(tmp_path, "owner")
    ids = ["p0", "p1"]
    pruner = RemotePruner.options(num_cpus=0).remote(host.config, prune_over=3000)
    driver = RemoteDriver.options(num_cpus=0).remote(
        host.config, ScriptConfig(steps=2, big_result_every=2, big_result_chars=5000))
    try:
        progress: DriverProgress = await driver.run.remote(ids, 2)
        assert progress.errors == 0, progress.last_error
        expected = 0
        for sid in ids:
            handle = host.session(sid)
            snap, events = await handle.surface_events()
            found = await handle.oversized_results(3000)
            assert found == oversized_results(snap.replace_generation,
                                              zip(snap.nodes, events, strict=True),
                                              max_chars=3000)
            assert found.nodes and all(e.type == "tool/result" for e in found.events)
            assert (await handle.oversized_results(10**9)).nodes == ()
            expected += len(found.nodes)
        # Asked once for all of its sessions, the actor names those it holds with
        # something to prune; one it does not hold is None (nothing is loaded).
        assert await host.held("held_oversized", [*ids, "never"], 3000) == {
            "p0": True, "p1": True, "never": None}
        await pruner.manage.remote(ids)
        stats = await pruner.run_once.remote()
        assert stats.errors == 0, stats.last_error
        assert stats.prunes == expected
        for sid in ids:
            left = await host.session(sid).oversized_results(3000)
            assert left.nodes == () and left.replace_generation > 0
        assert await host.held("held_oversized", ids, 3000) == {"p0": False, "p1": False}
    finally:
        ray.kill(pruner)
        ray.kill(driver)
        host.shutdown()


async def test_a_watchers_pass_asks_each_actor_once_and_skips_sessions_with_no_work(
        tmp_path: Path) -> None:
    """Held sessions under no pressure cost a pass one request per actor, none of their
    own; a session the actors do not hold still gets its own pass (which loads it)."""
    host = make_host(tmp_path, "packed")
    ids = [f"w{k}" for k in range(6)]
    driver = RemoteDriver.options(num_cpus=0).remote(host.config, ScriptConfig(steps=1))
    watcher = CompactionActor(host.config, compact_at=10**6)
    try:
        progress: DriverProgress = await driver.run.remote(ids, 1)
        assert progress.errors == 0, progress.last_error
        pressures = await host.held("held_pressures", ids)
        assert pressures == {sid: await host.session(sid).pressure() for sid in ids}
        actors = len({host.actor_name(await host.shard_of(s), s) for s in ids})
        assert actors == 2  # packs=2: the sessions are spread over both

        watcher.manage(ids)
        before = watcher._client.call_stats().requests
        stats = await watcher.run_once()
        assert stats.errors == 0 and stats.committed == 0, stats
        assert watcher._client.call_stats().requests - before == actors

        stored = "w-stored"  # on the store, held by no actor: it gets its own pass
        await host.session(stored).append("turn/start", {"turn": 1})
        assert await host.session(stored).passivate()
        before = watcher._client.call_stats().requests
        await watcher.run_once([*ids, stored])
        # One held_pressures per actor, then the stored session's own pressure.
        assert watcher._client.call_stats().requests - before == actors + 1
    finally:
        ray.kill(driver)
        host.shutdown()


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_driven_sessions_with_compaction_replay_to_the_live_state(
        tmp_path: Path, placement: str) -> None:
    host = make_host(tmp_path, placement)
    # Dedicated placement starts a process per session: 8 are enough to interleave.
    ids = [f"d{k:02d}" for k in range(8)]
    db = host.db
    compactor = RemoteCompactor.options(num_cpus=0).remote(
        host.config, compact_at=900, prune_over=3000)
    driver = RemoteDriver.options(num_cpus=0).remote(
        host.config, ScriptConfig(steps=2, chunks=4))
    try:
        await compactor.manage.remote(ids)
        await compactor.start.remote(0.05)
        progress: DriverProgress = await driver.run.remote(ids, 3)
        stats = await compactor.stop.remote()
        assert progress.errors == 0, progress.last_error
        assert progress.turns_done == 3 * len(ids)
        if stats.committed == 0:
            # On a loaded machine the drive can end before a pass finds a surface over
            # the threshold: one pass now, with nothing appending, must compact.
            stats = await compactor.run_once.remote()
        assert stats.committed > 0, stats
        assert stats.errors == 0, stats.last_error
        live = await live_digests(host, ids)
        assert sum(d.replace_generation for d in live.values()) >= stats.committed
        await host.flush()
        # The writer's replay on its node, and a fresh read-only open of the file here:
        # the same sessions, the same digests, both equal to the live ones.
        (replay,) = (await host.replay_digests()).values()
        assert replay.failures == [] and replay.disk_bytes == os.path.getsize(db) + sum(
            os.path.getsize(db + side) for side in ("-wal", "-shm")
            if os.path.exists(db + side))
        assert compare(live, replay.digests) == []
        assert replay.digests == await store_digests(db)
    finally:
        ray.kill(compactor)
        ray.kill(driver)
        host.shutdown()


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_killed_actor_comes_back_and_nothing_acknowledged_is_lost(
        tmp_path: Path, placement: str) -> None:
    host = make_host(tmp_path, placement)
    acked: list[Event] = []
    try:
        handle = host.session("victim")
        progress = DriverProgress()
        driver = SessionDriver(handle, AgentScript("victim", ScriptConfig(mode="chunk")),
                               progress, 0.0)
        send = driver.send

        async def recording_send(specs: Any) -> list[Event]:
            events = await send(specs)
            acked.extend(events)
            return events

        driver.send = recording_send  # type: ignore[method-assign]
        task = asyncio.ensure_future(driver.run(6))
        while len(acked) < 40:
            await asyncio.sleep(0.01)
        ray.kill(await host.actor("victim"), no_restart=False)
        await asyncio.wait_for(task, timeout=120)
        assert progress.turns_interrupted >= 1
        assert progress.turns_done + progress.turns_interrupted == 6
        log = await handle.events()
        for event in acked:
            assert log[event.seq] == event
        interrupted = [e for e in log if e.type == "turn/end"
                       and e.data["reason"] == {"kind": "interrupted"}]
        assert interrupted
        # The turn after the crash completed normally.
        assert log[-1].type == "turn/end" and log[-1].data["reason"]["kind"] == "completed"
    finally:
        host.shutdown()


@pytest.mark.parametrize("placement", PLACEMENTS)
async def test_passivation_and_reactivation_keep_everything(
        tmp_path: Path, placement: str) -> None:
    host = make_host(tmp_path, placement, idle_timeout_s=0.5)
    try:
        s = host.session("idle")
        script = AgentScript("idle", ScriptConfig())
        await s.append_batch(script.turn_open(1), expected_seq=0)
        if placement != "dedicated":
            # Inside a turn the session is not idle yet: it stays active.
            await asyncio.sleep(1.0)
            stats = await (await host.actor("idle")).actor_stats.remote()
            assert stats.active_sessions == 1 and stats.passivations == 0
        await s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}},
                       expected_seq=2)
        before = await s.derive_messages()
        length = (await s.surface()).length
        actor = await host.actor("idle")
        for _ in range(150):  # the reaper runs every 0.25 s; allow a loaded machine
            await asyncio.sleep(0.1)
            if placement != "dedicated":
                stats = await actor.actor_stats.remote()
                if stats.passivations >= 1 and stats.active_sessions == 0:
                    break
            elif not await _alive(actor):
                break
        else:
            raise AssertionError("the idle session was never passivated")
        assert await s.derive_messages() == before
        snap = await s.surface()
        # Reactivation adds a seed marker (the log had live events) and nothing else.
        assert snap.length == length + 1
        assert (await s.events(length))[0].type == "session/end-seed"
        logged = await s.append_batch(script.turn_open(2), expected_seq=snap.length)
        assert logged[0].seq == snap.length
    finally:
        host.shutdown()


async def _alive(actor: Any) -> bool:
    try:
        await actor.ping.remote()
    except ray.exceptions.RayActorError:
        return False
    return True


async def test_stale_incarnation_is_fenced(tmp_path: Path) -> None:
    host = make_host(tmp_path, "packed")
    try:
        s = host.session("fence")
        await s.append("turn/start", {"turn": 1})
        # A second incarnation (as a restarted actor would be) takes the session.
        other = RemoteSessionActor.options(num_cpus=0).remote(
            host.config, host.config.shards.names[0])
        await other.append.remote("fence", AppendSpec("todo/write", {"todos": []}))
        with pytest.raises(WriterFenced):
            await s.append("todo/write", {"todos": [{"content": "late", "status": "x"}]})
        events = await other.events.remote("fence")
        assert all(e.data != {"todos": [{"content": "late", "status": "x"}]} for e in events)
        ray.kill(other)
    finally:
        host.shutdown()


def test_the_writer_role_is_its_own_class() -> None:
    """A journal-mode session actor has no writer methods at all; the owner and the
    journal answer the same ones (``Client`` calls them by name)."""
    for method in WRITER_METHODS:
        assert not hasattr(SessionActor, method), method
        assert callable(getattr(OwnerActor, method)), method
        assert callable(getattr(JournalActor, method)), method


def test_each_class_refuses_the_other_writer(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    with pytest.raises(ValueError, match="OwnerActor"):
        SessionActor(HostingConfig.single(db, placement="packed", writer="owner"), "default")
    with pytest.raises(ValueError, match="only with writer 'owner'"):
        OwnerActor(HostingConfig.single(db, placement="packed"), "default")


async def test_the_owner_is_its_shards_writer_and_a_session_actor_is_not(
        tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    (tmp_path / "owner").mkdir()
    journal_host = make_host(tmp_path / "journal", "packed")
    owner_host = make_host(tmp_path / "owner", "owner")
    try:
        for host in (journal_host, owner_host):
            await host.session("w").append("turn/start", {"turn": 1})
            assert await host.writer.holds.remote("w")
            assert not await host.writer.holds.remote("nobody")
            assert [info.id for info in await host.list_sessions()] == ["w"]
            assert (await host.writer_stats())["commits"] >= 1
        with pytest.raises(AttributeError):
            (await journal_host.actor("w")).holds  # noqa: B018 - no such method
        owner = await owner_host.actor("w")
        assert await owner.pid.remote() == await owner_host.writer.pid.remote()
        assert await owner.replica_status.remote() is None
    finally:
        journal_host.shutdown()
        owner_host.shutdown()
