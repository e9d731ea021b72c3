"""The load driver's ``stream`` mode (``run --mode stream``): a model stream's chunks
written through an ``AppendStream`` as they arrive. It logs what ``chunk`` mode logs, in
fewer appends when the chunks come faster than appends are answered, counts each chunk
as an append, and gets through a conflict in the middle of a stream with every chunk
logged once. The driver over a ``LiveSession`` on a real SQLite store, in this process:
no Ray."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from surfacelog.actors.driver import DriverProgress, LocalHandle, SessionDriver
from surfacelog.actors.protocol import LoggedEvents
from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.runtime import LiveSession
from surfacelog.session import AppendSpec
from surfacelog.store.sqlite import SqliteEventStore

from support.driving import OneShardClient

CHUNKS = 6


class _CountingHandle(LocalHandle):
    """The driver's calls on ``live``, each append's specs kept; once, before the
    append that carries chunk number ``intrude_before`` of the first stream, another
    writer appends an event of its own (as a compactor's replace would land)."""

    def __init__(self, live: LiveSession, intrude_before: int | None = None) -> None:
        super().__init__(live, OneShardClient())
        self.sent: list[list[str]] = []
        self._intrude_before = intrude_before
        self._chunks_sent = 0
        self.arrivals = 0
        """Appends the driver took as arrived (``SessionDriver._arrival``)."""

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> LoggedEvents:
        self.sent.append([s.type for s in specs])
        chunks = sum(s.type == "assistant/chunk" for s in specs)
        if (self._intrude_before is not None and chunks
                and self._chunks_sent <= self._intrude_before < self._chunks_sent + chunks):
            self._intrude_before = None
            await self._live.append_batch(
                [AppendSpec("x-test/marker", {"by": "other"}, ignorable=True)])
        self._chunks_sent += chunks
        return await super().append_batch(specs, expected_seq)


class _CountingDriver(SessionDriver):
    """A driver that counts its appends' arrivals on its ``_CountingHandle``."""

    async def _arrival(self) -> float | None:
        self.handle.arrivals += 1  # type: ignore[attr-defined]
        return await super()._arrival()


@pytest.fixture
async def store(sqlite_store: SqliteEventStore) -> SqliteEventStore:
    return sqlite_store


async def drive(store: SqliteEventStore, session: str, mode: str,
                intrude_before: int | None = None, every_ms: float = 0.0
                ) -> tuple[LiveSession, _CountingHandle, DriverProgress]:
    live = await LiveSession.activate(session, store)
    handle = _CountingHandle(live, intrude_before)
    progress = DriverProgress()
    config = ScriptConfig(mode=mode, steps=2, chunks=CHUNKS,  # type: ignore[arg-type]
                          chunk_every_ms=every_ms)
    driver = _CountingDriver(handle, AgentScript("agent", config), progress, time.time())
    await driver.run(2)
    assert progress.errors == 0 and progress.turns_done == 2
    log = list(live.session.log)
    for message in (e for e in log if e.type == "assistant/message"):
        cited = message.source_event_seqs  # each cites exactly its stream's chunks
        assert cited and all(log[s].type == "assistant/chunk" for s in cited)
    return live, handle, progress


def content(live: LiveSession) -> list[tuple[str, object]]:
    """The log without seqs, times and the other writer's marker."""
    return [(e.type, e.data) for e in live.session.log if e.type != "x-test/marker"]


async def test_stream_mode_logs_what_chunk_mode_logs_in_fewer_appends(
        store: SqliteEventStore) -> None:
    chunked, chunk_handle, chunk_progress = await drive(store, "a", "chunk")
    streamed, stream_handle, stream_progress = await drive(store, "b", "stream")
    assert content(streamed) == content(chunked)
    assert [e.seq for e in streamed.session.log] == [e.seq for e in chunked.session.log]
    # each chunk is an append of the agent's, answered with its latency
    assert stream_progress.appends == chunk_progress.appends
    assert stream_progress.events == chunk_progress.events
    assert len(stream_progress.latencies_ms) == stream_progress.appends
    # unpaced, a model attempt's start and chunks all arrive before its first append
    # leaves: one append an attempt (2 turns x 2 steps) carrying all of them
    streams = [types for types in stream_handle.sent if "assistant/chunk" in types]
    chunk_events = [e for e in streamed.session.log if e.type == "assistant/chunk"]
    assert len(streams) == 2 * 2
    assert all(t[0] == "step/start" and set(t[1:]) == {"assistant/chunk"} for t in streams)
    assert sum(len(t) - 1 for t in streams) == len(chunk_events) > 2 * 2 * CHUNKS
    assert len(stream_handle.sent) == len(chunk_handle.sent) - len(chunk_events)


async def test_a_conflict_in_the_middle_of_a_stream_loses_and_repeats_nothing(
        store: SqliteEventStore) -> None:
    reference, _, _ = await drive(store, "a", "chunk")
    live, _, progress = await drive(store, "b", "stream", intrude_before=3)
    assert progress.conflicts >= 1
    assert [e.type for e in live.session.log].count("x-test/marker") == 1
    assert content(live) == content(reference)


async def test_paced_stream_sends_each_chunk_as_it_arrives(store: SqliteEventStore) -> None:
    """Chunks 20 ms apart, answered far sooner: one chunk per append, as chunk mode."""
    live, handle, progress = await drive(store, "a", "stream", every_ms=20.0)
    streams = [types for types in handle.sent if types[0] in ("step/start", "assistant/chunk")]
    chunk_events = [e for e in live.session.log if e.type == "assistant/chunk"]
    assert all(len(t) == 1 for t in streams)
    assert len(streams) == len(chunk_events) + 2 * 2
    assert len(progress.latencies_ms) == progress.appends


async def test_a_paced_stream_broken_midway_paces_each_chunk_once(
        store: SqliteEventStore) -> None:
    """Chunks 5 ms apart, another writer's event before chunk 3: the stream stops
    taking writes once broken, the chunks it did not log are sent again counted from
    their first arrival, and no append arrives twice."""
    _, clean, _ = await drive(store, "a", "stream", every_ms=5.0)
    live, broken, progress = await drive(store, "b", "stream", intrude_before=3,
                                         every_ms=5.0)
    assert progress.conflicts >= 1
    assert [e.type for e in live.session.log].count("x-test/marker") == 1
    assert broken.arrivals == clean.arrivals
    assert len(progress.latencies_ms) == progress.appends
