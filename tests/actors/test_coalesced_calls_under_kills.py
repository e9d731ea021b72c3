"""Coalesced calls on a real local Ray: one packed actor (the shard's owner, so its
death is also the writer's) hosts every session, the sessions' requests share calls,
and the actor is killed while a coalesced call of many sessions is in flight. Each
request's outcome is then checked against what the store holds: an acknowledged batch
is stored once at its seq; a batch sent with ``expected_seq`` is resent by its handle
and either lands exactly once or is refused as a ``Conflict`` (the actor's restart
logged a seed marker at that seq: the batch is not stored, and the caller resends it at
the new end); a batch sent without it either failed with an unknown outcome (the
caller is told, and finds it stored once or not at all) or was acknowledged.

Rounds 0 and 2 hold the file's write lock (another SQLite connection's ``BEGIN
IMMEDIATE``) from before the round's requests are sent until their call has failed: it
cannot commit, so the kill lands while it is in flight, however fast the machine.
Unlocked, a quiet machine committed and answered the whole call before ``ray.kill`` took
effect in six of seven runs of this test alone (4 December 2026). Round 1 runs
unhindered: there the kill may also land after a commit, before its answer."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.actors.protocol import Conflict
from surfacelog.session import AppendSpec
from surfacelog.store.sqlite import SqliteEventStore

SESSIONS = 12
WAIT_S = 60.0
"""The longest a locked round waits for its call to fail (a bound against hanging)."""


def closed_turn(session: int, turn: int) -> list[AppendSpec]:
    """A whole turn in one batch: nothing is left open for crash repair to close."""
    return [AppendSpec("turn/start", {"turn": turn}),
            AppendSpec("turn/end", {"turn": turn, "reason": {"kind": "completed"}})]


async def wait_for_coalesced_call(client: Client, before: int) -> None:
    for _ in range(10_000):
        if client.call_stats().coalesced_calls > before:
            return
        await asyncio.sleep(0)
    raise AssertionError("no coalesced call was sent")


@pytest.mark.usefixtures("ray_local")
async def test_killing_the_actor_mid_call_keeps_each_requests_outcome(tmp_path: Path) -> None:
    db = tmp_path / "coalesced.db"
    client = connect(config=HostingConfig.single(str(db), placement="packed", packs=1,
                                                 writer="owner", idle_timeout_s=None))
    assert client.coalesce
    ids = [f"c{k:02d}" for k in range(SESSIONS)]
    handles = {sid: client.session(sid) for sid in ids}
    turns = dict.fromkeys(ids, 0)
    acked: dict[str, list[Any]] = {sid: [] for sid in ids}
    unknown: dict[str, list[int]] = {sid: [] for sid in ids}
    refused: dict[str, list[int]] = {sid: [] for sid in ids}
    try:
        for sid in ids:  # created and activated before the kills
            await handles[sid].append("session/title", {"title": sid}, expected_seq=0)
        for round_no in range(3):
            lengths = {sid: (await handles[sid].surface()).length for sid in ids}
            before = client.call_stats().coalesced_calls
            resent_before = client.resent
            lock = None
            if round_no % 2 == 0:
                lock = sqlite3.connect(db, isolation_level=None)
                lock.execute("BEGIN IMMEDIATE")
            tasks = {}
            for k, sid in enumerate(ids):
                turns[sid] += 1
                # Half the sessions resend themselves (expected_seq), half cannot.
                expected = lengths[sid] if k % 2 == 0 else None
                tasks[sid] = asyncio.ensure_future(handles[sid].append_batch(
                    closed_turn(k, turns[sid]), expected_seq=expected))
            try:
                await wait_for_coalesced_call(client, before)
                ray.kill(await client.actor(ids[0]), no_restart=False)
                if lock is not None:
                    # ray.kill returns before the actor is dead: the lock is held until
                    # the call has failed, as a request that cannot be resent then does.
                    unsendable = [tasks[sid] for k, sid in enumerate(ids) if k % 2 == 1]
                    done, _ = await asyncio.wait(unsendable, timeout=WAIT_S,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    assert done, f"round {round_no}: the call outlived the kill"
            finally:
                if lock is not None:
                    lock.close()  # rolls the empty transaction back: the lock is free
            results = await asyncio.gather(*tasks.values(), return_exceptions=True)
            failed = 0
            for k, (sid, result) in enumerate(zip(tasks, results, strict=True)):
                if isinstance(result, Conflict) and k % 2 == 0:
                    refused[sid].append(turns[sid])  # resendable at the new end
                    failed += 1
                elif isinstance(result, BaseException):
                    # Only a request that cannot be resent may fail otherwise, and only
                    # as an unknown outcome (its call died with the actor).
                    assert k % 2 == 1, (sid, repr(result))
                    assert isinstance(result, RayActorError), (sid, repr(result))
                    unknown[sid].append(turns[sid])
                    failed += 1
                else:
                    assert [e.type for e in result] == ["turn/start", "turn/end"]
                    assert result[0].seq == lengths[sid] or k % 2 == 1
                    acked[sid].extend(result)
            # A locked round's call cannot have committed before the kill.
            assert failed > 0 or client.resent > resent_before or lock is None, \
                f"round {round_no}: the kill landed after the call"
    finally:
        client.shutdown()

    # What the store holds, read by a fresh process-local store (the truth).
    store = await SqliteEventStore.open(db)
    try:
        for sid in ids:
            log = list((await store.load(sid)).log)
            for event in acked[sid]:
                assert log[event.seq] == event, (sid, event.seq)
            starts = [e.data["turn"] for e in log if e.type == "turn/start"]
            # Every turn is stored at most once; an acknowledged one exactly once.
            assert len(starts) == len(set(starts)), (sid, starts)
            for event in acked[sid]:
                if event.type == "turn/start":
                    assert starts.count(event.data["turn"]) == 1
            # A refused turn is not stored; one whose outcome was unknown is stored
            # once or not at all; every other turn is stored.
            assert not set(refused[sid]) & set(starts), (sid, refused[sid], starts)
            assert set(starts) <= set(range(1, turns[sid] + 1))
            assert set(range(1, turns[sid] + 1)) - set(starts) <= \
                set(unknown[sid]) | set(refused[sid])
    finally:
        await store.close()
