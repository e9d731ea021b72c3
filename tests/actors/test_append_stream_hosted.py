"""``AppendStream`` through the Ray ``SessionHandle`` on a real local Ray, one packed
actor owning the shard's file: many sessions stream at once, their writes travel in
few appends and few calls, and each log holds every chunk once, in order. Then the
owner is killed while streams are in flight: each write is acknowledged at its seq or
refused (``Conflict``: the restarted owner logged its seed marker there; the writes
after it ``StreamBroken``), and the store holds every acknowledged write once and no
write after one that was not logged."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import ray

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.runtime import AppendStream, Conflict, StreamBroken
from surfacelog.session import AppendSpec
from surfacelog.store.sqlite import SqliteEventStore

SESSIONS = 12
CHUNKS = 40
WAIT_S = 60.0


def chunk(k: int) -> AppendSpec:
    return AppendSpec("assistant/chunk", {"turn": 1, "step": 1, "chunk": {
        "type": "text-delta", "index": 0, "text": f"piece {k}"}})


def hosted(db: Path) -> Client:
    return connect(config=HostingConfig.single(str(db), placement="packed", packs=1,
                                               writer="owner", idle_timeout_s=None))


async def opened(client: Client, ids: list[str]) -> dict[str, int]:
    """Each session with turn 1 and step 1 open; their lengths."""
    lengths = {}
    for sid in ids:
        handle = client.session(sid)
        await handle.append_batch([AppendSpec("turn/start", {"turn": 1}),
                                   AppendSpec("step/start", {"turn": 1, "step": 1})], 0)
        lengths[sid] = (await handle.surface()).length
    return lengths


async def stream_all(client: Client, lengths: dict[str, int]
                     ) -> tuple[dict[str, AppendStream], dict[str, list[Any]]]:
    """Each session's ``CHUNKS`` chunks written at once, the first awaited alone."""
    streams = {sid: AppendStream(client.session(sid), n) for sid, n in lengths.items()}
    futures: dict[str, list[asyncio.Future[int]]] = {sid: [] for sid in lengths}
    for sid, stream in streams.items():
        futures[sid].append(stream.write(chunk(0)))
    await asyncio.sleep(0)
    for k in range(1, CHUNKS):
        for sid, stream in streams.items():
            futures[sid].append(stream.write(chunk(k)))
    outcomes = {sid: list(await asyncio.gather(*f, return_exceptions=True))
                for sid, f in futures.items()}
    return streams, outcomes


async def until_resent(client: Client) -> None:
    while not client.resent:
        await asyncio.sleep(0.01)


@pytest.mark.usefixtures("ray_local")
async def test_streams_of_many_sessions_travel_together(tmp_path: Path) -> None:
    client = hosted(tmp_path / "streams.db")
    ids = [f"s{k:02d}" for k in range(SESSIONS)]
    try:
        lengths = await opened(client, ids)
        before = client.call_stats()
        calls, requests = before.calls, before.requests
        streams, outcomes = await stream_all(client, lengths)
        for sid in ids:
            assert outcomes[sid] == list(range(lengths[sid], lengths[sid] + CHUNKS))
            assert streams[sid].appends == 2  # the first chunk alone, then the rest
        after = client.call_stats()
        assert after.requests - requests == 2 * SESSIONS
        assert after.calls - calls <= 2 * SESSIONS / 2  # sessions' appends share calls
        for sid in ids:
            events = await client.session(sid).events(lengths[sid])
            assert [e.data["chunk"]["text"] for e in events] == [
                f"piece {k}" for k in range(CHUNKS)]
    finally:
        client.shutdown()


@pytest.mark.usefixtures("ray_local")
async def test_killing_the_owner_mid_stream_logs_each_write_once_and_no_hole(
        tmp_path: Path) -> None:
    """Chunks 0-9 acknowledged; chunks 10-39 written while the file is locked, the owner
    killed under them; each session then resends what was not logged in a new stream
    from its log's new length."""
    db = tmp_path / "killed.db"
    client = hosted(db)
    ids = [f"k{k:02d}" for k in range(SESSIONS)]
    first = 10
    try:
        lengths = await opened(client, ids)
        streams = {sid: AppendStream(client.session(sid), n) for sid, n in lengths.items()}
        acked = {sid: [streams[sid].write(chunk(k)) for k in range(first)] for sid in ids}
        for sid in ids:
            assert await streams[sid].drain() == list(range(lengths[sid],
                                                           lengths[sid] + first))
        before = client.call_stats().coalesced_calls
        # The file's write lock held: the streams' appends cannot commit, so the kill
        # lands while they are in flight (see test_coalesced_calls_under_kills.py).
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            written = {sid: [streams[sid].write(chunk(k)) for k in range(first, CHUNKS)]
                       for sid in ids}
            for _ in range(10_000):
                if client.call_stats().coalesced_calls > before:
                    break
                await asyncio.sleep(0)
            ray.kill(await client.actor(ids[0]), no_restart=False)
            # ray.kill returns before the actor is dead: the lock is held until a
            # handle has seen its call fail (and resends, as a chained append may).
            await asyncio.wait_for(until_resent(client), WAIT_S)
        finally:
            lock.close()
        outcomes = {sid: await asyncio.wait_for(
            asyncio.gather(*written[sid], return_exceptions=True), WAIT_S) for sid in ids}
        refused = 0
        for sid in ids:
            logged = [k for k, o in enumerate(outcomes[sid], first) if isinstance(o, int)]
            assert logged == list(range(first, first + len(logged))), (sid, "a hole")
            rest = outcomes[sid][len(logged):]
            if rest:  # the first append not logged was refused, each after not sent
                refused += 1
                kinds = [type(o) for o in rest]
                assert kinds[0] is Conflict, (sid, rest[0])
                assert kinds == sorted(kinds, key=lambda k: k is StreamBroken), (sid, kinds)
                assert set(kinds) <= {Conflict, StreamBroken}, (sid, kinds)
                assert streams[sid].broken is rest[0]
                handle = client.session(sid)
                again = AppendStream(handle, (await handle.surface()).length)
                for k in range(first + len(logged), CHUNKS):
                    again.write(chunk(k))
                await again.drain()
        assert refused, "the kill landed after every stream's commit"
        assert all(isinstance(f.result(), int) for fs in acked.values() for f in fs)
    finally:
        client.shutdown()

    store = await SqliteEventStore.open(str(db))
    try:
        for sid in ids:
            log = list((await store.load(sid)).log)
            texts = [e.data["chunk"]["text"] for e in log if e.type == "assistant/chunk"]
            assert texts == [f"piece {k}" for k in range(CHUNKS)], (sid, texts)
            for k, future in enumerate(acked[sid]):
                assert log[future.result()].data["chunk"]["text"] == f"piece {k}"
    finally:
        await store.close()
