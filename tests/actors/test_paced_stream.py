"""A paced driver (``run --chunk-every``): a session's appends arrive one interval apart
(its model stream's chunks, and between streams its tool calls and results), each sent
no earlier than it arrives and its latency counted from its arrival, so an append that
waited behind its session's slow one says so. The driver over a ``LiveSession`` on a
real SQLite store, in this process: no Ray."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from surfacelog.actors.driver import DriverProgress, LocalHandle, SessionDriver
from surfacelog.actors.protocol import LoggedEvents
from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.runtime import LiveSession
from surfacelog.schema.events import Event
from surfacelog.session import AppendSpec
from surfacelog.store.sqlite import SqliteEventStore

from support.driving import OneShardClient

EVERY_MS = 20.0
SLOW_S = 0.1


class _TimedHandle(LocalHandle):
    """The driver's calls on ``live``, each append's send time kept (all, the
    workspace context's too, and the chunks' per model stream); the append of the
    stream's chunk number ``slow_chunk`` (from 0) answers ``SLOW_S`` late, in the first
    stream only."""

    def __init__(self, live: LiveSession, slow_chunk: int | None) -> None:
        super().__init__(live, OneShardClient())
        self._slow_chunk = slow_chunk
        self.streams: list[list[float]] = []
        self.appends: list[float] = []

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> LoggedEvents:
        self.appends.append(time.perf_counter())
        if specs[0].type == "step/start":
            self.streams.append([])
        elif specs[0].type == "assistant/chunk":
            sends = self.streams[-1]
            sends.append(time.perf_counter())
            if len(self.streams) == 1 and len(sends) - 1 == self._slow_chunk:
                await asyncio.sleep(SLOW_S)
        return await super().append_batch(specs, expected_seq)

    async def set_context(self, body: str | dict[str, Any], *,
                          plugin: str = "workspace") -> Event | None:
        self.appends.append(time.perf_counter())  # paced like an append
        return await super().set_context(body, plugin=plugin)


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[LiveSession]:
    store = await SqliteEventStore.open(str(tmp_path / "paced.db"))
    try:
        yield await LiveSession.activate("s", store)
    finally:
        await store.close()


async def _drive(live: LiveSession, every_ms: float, slow_chunk: int | None = None
                 ) -> tuple[_TimedHandle, DriverProgress, float]:
    """One turn driven through a ``_TimedHandle``; the handle, the progress and the
    time ``run`` was called (before the first append's arrival)."""
    handle = _TimedHandle(live, slow_chunk)
    progress = DriverProgress()
    script = AgentScript("s", ScriptConfig(mode="chunk", steps=2, chunk_every_ms=every_ms))
    driver = SessionDriver(handle, script, progress, time.time())
    await driver.activate()
    started = time.perf_counter()
    await driver.run(1)
    assert progress.errors == 0 and progress.turns_done == 1
    log = list(live.session.log)
    messages = [e for e in log if e.type == "assistant/message"]
    assert len(messages) == 2
    for message in messages:  # each cites exactly its stream's chunks
        cited = message.source_event_seqs
        assert cited and all(log[s].type == "assistant/chunk" for s in cited)
        assert list(cited) == list(range(cited[0], cited[0] + len(cited)))
    return handle, progress, started


async def test_paced_appends_are_sent_no_earlier_than_they_arrive(live: LiveSession) -> None:
    handle, _, started = await _drive(live, EVERY_MS)
    assert len(handle.streams) == 2 and all(len(sends) >= 8 for sends in handle.streams)
    # The session's first append arrives at its phase of the interval, each next one
    # an interval later: the workspace context, chunks, messages, tool calls and
    # results alike.
    phase = AgentScript("s", ScriptConfig()).phase()
    assert len(handle.appends) > 20
    for k, sent in enumerate(handle.appends):
        assert sent - started >= (phase + k) * EVERY_MS / 1000, (k, sent - started)


async def test_a_chunk_behind_a_slow_append_counts_its_wait(live: LiveSession) -> None:
    """Chunk 1's append takes ``SLOW_S`` (100 ms, five intervals): chunks 2 to 5 arrive
    while it is in flight and are sent after it, each then counted from its arrival."""
    handle, progress, _ = await _drive(live, EVERY_MS, slow_chunk=1)
    first = handle.streams[0]
    # The latencies are kept in the order of the appends: the first stream's chunk k
    # follows the workspace context, the turn's opening and the step's start.
    chunk = progress.latencies_ms[3:]
    assert chunk[1] >= SLOW_S * 1000
    for k in range(2, 6):
        # Chunk 1 was sent no earlier than it arrived, one interval after chunk 0, and
        # answered SLOW_S later; chunk k arrived k intervals after chunk 0, was sent
        # after chunk 1's answer, and counts the wait.
        assert first[k] >= first[1] + SLOW_S
        assert chunk[k] >= 1000 * SLOW_S + EVERY_MS - k * EVERY_MS, (k, chunk[k])



def test_paced_sessions_start_out_of_step() -> None:
    """Each session's phase is its own and the same every time: sessions started
    together spread their chunks over the interval instead of sending them at once."""
    config = ScriptConfig(mode="chunk", chunk_every_ms=1000)
    phases = [AgentScript(f"s{k}", config).phase() for k in range(200)]
    assert phases == [AgentScript(f"s{k}", config).phase() for k in range(200)]
    assert all(0 <= p < 1 for p in phases)
    # Every tenth of the interval holds some sessions' starts, none most of them.
    tenths = [sum(1 for p in phases if k / 10 <= p < (k + 1) / 10) for k in range(10)]
    assert min(tenths) >= 5 and max(tenths) <= 50, tenths
    other = [AgentScript(f"s{k}", ScriptConfig(seed=1)).phase() for k in range(200)]
    assert other != phases
    # The phase is drawn apart from the content: the same text with or without pacing.
    assert AgentScript("s1", config).turn_open(1) == AgentScript("s1", ScriptConfig()).turn_open(1)
