"""A watcher's pass asks an actor once for all of its sessions (``held_pressures``,
``held_oversized``): each idle session is read at once, and one whose write is in
flight is read once that write is kept, never before. The owner actor's class in this
process, on a real SQLite file: no Ray."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from surfacelog.actors.config import HostingConfig
from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.actors.session_actor import OwnerActor
from surfacelog.session import AppendSpec

IDS = ["h0", "h1", "h2"]


@pytest.fixture
async def owner(tmp_path: Path) -> AsyncIterator[OwnerActor]:
    config = HostingConfig.single(os.path.join(tmp_path, "held.db"), placement="packed",
                                  writer="owner")
    actor = OwnerActor(config, config.shards.shards[0].name)
    await actor.ready()
    for sid in IDS:
        script = AgentScript(sid, ScriptConfig(result_chars=5000, big_result_every=0))
        await actor.append_batch(sid, script.turn_open(1))
        stream = script.stream(1, 1, final=False)
        logged = await actor.append_batch(sid, [script.step_start(1, 1), *stream.chunks])
        calls = await actor.append_batch(sid, [
            script.message(1, 1, stream, [e.seq for e in logged[1:]]),
            *(script.tool_call(1, 1, c) for c in stream.calls)])
        await actor.append_batch(sid, [script.tool_result(1, 1, c, e.seq) for c, e
                                       in zip(stream.calls, calls[1:], strict=True)])
    try:
        yield actor
    finally:
        await actor.shutdown()
        await actor.close()


async def test_idle_sessions_answer_as_their_own_reads_do(owner: OwnerActor) -> None:
    pressures = await owner.held_pressures([*IDS, "never"])
    assert pressures == [*[await owner.pressure(sid) for sid in IDS], None]
    assert await owner.held_oversized([*IDS, "never"], 4000) == [True, True, True, None]
    assert await owner.held_oversized(IDS, 10**6) == [False, False, False]


async def test_a_session_whose_lock_is_held_is_read_once_it_is_released(
        owner: OwnerActor) -> None:
    """A write in flight holds its session's lock until its batch is kept or rolled
    back: the pass waits for it, the other sessions read at once."""
    live = owner._host.sessions["h1"]
    await live.lock.acquire()
    try:
        pressures_read = asyncio.ensure_future(owner.held_pressures(IDS))
        oversized_read = asyncio.ensure_future(owner.held_oversized(IDS, 4000))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not pressures_read.done() and not oversized_read.done()
        # The write under the lock (``append_request``'s own step): the pass reads the
        # session after it.
        message = {"id": "u-late", "role": "user", "source": {"kind": "user"},
                   "content": [{"type": "text", "text": "late " * 400}]}
        before = live._read_pressure()
        await live._commit([AppendSpec("user/message", message, surface_op="append")])
    finally:
        live.lock.release()
    pressures, oversized = await pressures_read, await oversized_read
    assert pressures[1] == await owner.pressure("h1") != before
    assert pressures[0] == await owner.pressure("h0")
    assert oversized == [True, True, True]
