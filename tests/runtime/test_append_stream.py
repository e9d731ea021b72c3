"""``AppendStream`` over an in-process session (``EmbeddedHandle``), without Ray: writes
that arrive while an append is in flight go together in the next one; each write is its
own event and gets its own outcome; a failure breaks the stream and nothing after it is
logged; an append resent after an unknown outcome lands exactly once. A property checks
the stream against writes awaited one at a time."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.runtime import AppendStream, Conflict, EmbeddedHandle, StreamBroken
from surfacelog.schema.errors import SurfaceError
from surfacelog.session import AppendSpec
from surfacelog.store.errors import CommitFailed
from surfacelog.store.memory import MemoryEventStore
from surfacelog.store.sqlite import SqliteEventStore

from support.failing_stores import LostAckStore

BAD = AppendSpec("turn/end", {"turn": 1})
"""Refused by the session's rules (``turn/end`` without its ``reason``)."""


def chunks(n: int, offset: int = 0) -> list[AppendSpec]:
    return [AppendSpec("assistant/chunk", {"turn": 1, "step": 1, "chunk": {
        "type": "text-delta", "index": 0, "text": f"piece {offset + k}"}})
        for k in range(n)]


async def opened(handle: EmbeddedHandle) -> int:
    """Open turn 1 and step 1; returns the log's length."""
    script = AgentScript(handle.session_id, ScriptConfig())
    await handle.append_batch([*script.turn_open(1), script.step_start(1, 1)])
    return len(await handle.events())


def logged(events: list[Any]) -> list[tuple[str, Any]]:
    return [(e.type, e.data) for e in events]


Streaming = tuple[EmbeddedHandle, int, AppendStream]
"""A session with its turn and step open, its length, and a stream chained there."""


@pytest.fixture
async def store(sqlite_store: SqliteEventStore) -> SqliteEventStore:
    return sqlite_store


@pytest.fixture
async def streaming(store: SqliteEventStore) -> Streaming:
    handle = EmbeddedHandle("s", store)
    start = await opened(handle)
    return handle, start, AppendStream(handle, start)


async def test_writes_made_while_an_append_is_in_flight_go_in_the_next(
        streaming: Streaming) -> None:
    handle, start, stream = streaming
    specs = chunks(12)
    first = stream.write(specs[0])
    await asyncio.sleep(0)  # the first append leaves alone
    later = [stream.write(s) for s in specs[1:]]
    seqs = await stream.drain()
    assert seqs == list(range(start, start + 12))
    assert await first == start and [await f for f in later] == seqs[1:]
    assert stream.appends == 2 and stream.writes == 12
    assert stream.next_seq == start + 12
    events = await handle.events(start)
    assert logged(events) == [(s.type, s.data) for s in specs]
    assert [e.seq for e in events] == seqs


async def test_a_write_alone_is_an_append_alone(streaming: Streaming) -> None:
    _, start, stream = streaming
    for k, spec in enumerate(chunks(5)):
        assert await stream.write(spec) == start + k
        assert stream.pending == 0
    assert stream.appends == 5


async def test_a_refused_write_is_refused_alone_and_breaks_the_stream(
        streaming: Streaming) -> None:
    handle, start, stream = streaming
    good = chunks(4)
    stream.write(good[0])
    await asyncio.sleep(0)
    futures = [stream.write(s) for s in (good[1], good[2], BAD, good[3])]
    with pytest.raises(SurfaceError, match=r"turn/end"):
        await stream.drain()
    assert [await f for f in futures[:2]] == [start + 1, start + 2]
    with pytest.raises(SurfaceError):
        await futures[2]
    with pytest.raises(StreamBroken, match=r"SurfaceError") as broken:
        await futures[3]
    assert isinstance(broken.value.__cause__, SurfaceError)
    # the merged append was refused whole, then its writes went one at a time
    assert stream.appends == 5
    assert logged(await handle.events(start)) == [(s.type, s.data) for s in good[:3]]
    after = stream.write(good[3])
    with pytest.raises(StreamBroken):
        await after
    assert len(await handle.events()) == start + 3


async def test_another_writer_in_between_refuses_the_chain_with_conflict(
        streaming: Streaming) -> None:
    handle, start, stream = streaming
    specs = chunks(6)
    assert await stream.write(specs[0]) == start
    await handle.append_batch(chunks(1, offset=100))  # not the stream's
    futures = [stream.write(s) for s in specs[1:]]
    with pytest.raises(Conflict):
        await stream.drain()
    for future in futures:  # one append of five writes: each has its outcome
        with pytest.raises(Conflict):
            await future
    assert stream.appends == 2  # a conflict is not resent write by write
    assert len(await handle.events()) == start + 2


async def test_an_append_resent_after_an_unknown_outcome_lands_once(tmp_path: Path) -> None:
    store = await LostAckStore.open(str(tmp_path / "lost.db"))
    try:
        handle = EmbeddedHandle("s", store)
        start = await opened(handle)
        specs = chunks(5)
        stream = AppendStream(handle, start)
        store.lose_next = True
        futures = [stream.write(s) for s in specs]
        with pytest.raises(CommitFailed):
            await stream.drain()
        for future in futures:
            with pytest.raises(CommitFailed):
                await future
        # committed but not acknowledged: the same writes again from the same seq
        again = AppendStream(handle, start)
        for s in specs:
            again.write(s)
        assert await again.drain() == list(range(start, start + 5))
        # once: taking the session again after the failure logged its own markers
        # after them, and no copy of the writes
        events = await handle.events(start)
        assert logged(events[:5]) == [(s.type, s.data) for s in specs]
        assert [e.type for e in events].count("assistant/chunk") == 5
    finally:
        await store.close()


async def test_a_cancelled_write_is_left_out(streaming: Streaming) -> None:
    handle, start, stream = streaming
    specs = chunks(3)
    stream.write(specs[0])
    await asyncio.sleep(0)
    dropped = stream.write(specs[1])
    kept = stream.write(specs[2])
    dropped.cancel()
    assert await kept == start + 1
    assert logged(await handle.events(start)) == [(s.type, s.data) for s in (specs[0], specs[2])]


async def test_an_unchained_stream_appends_where_the_log_ends(store: SqliteEventStore) -> None:
    handle = EmbeddedHandle("s", store)
    start = await opened(handle)
    stream = AppendStream(handle)
    assert stream.next_seq is None
    await stream.write(chunks(1)[0])
    await handle.append_batch(chunks(1, offset=100))
    async with stream:
        stream.write(chunks(1, offset=1)[0])
    assert [e.data["chunk"]["text"] for e in await handle.events(start)] == [
        "piece 0", "piece 100", "piece 1"]


def test_bounds_are_checked() -> None:
    handle = EmbeddedHandle("s", MemoryEventStore())
    with pytest.raises(ValueError, match="max_events"):
        AppendStream(handle, max_events=0)
    with pytest.raises(ValueError, match="expected_seq"):
        AppendStream(handle, -1)


Plan = list[tuple[bool, int]]
"""Writes as (bad?, loop turns to let pass after it, -1: await it)."""


async def one_at_a_time(plan: Plan) -> tuple[list[Any], list[str]]:
    """The reference: each write awaited alone, chained, none after the first refused."""
    handle = EmbeddedHandle("s", MemoryEventStore())
    start = await opened(handle)
    outcomes: list[str] = []
    seq, failed = start, False
    for k, (bad, _) in enumerate(plan):
        if failed:
            outcomes.append("broken")
            continue
        try:
            await handle.append_batch([BAD if bad else chunks(1, k)[0]], seq)
        except SurfaceError:
            outcomes.append("refused")
            failed = True
            continue
        outcomes.append(f"seq {seq}")
        seq += 1
    return logged(await handle.events()), outcomes


async def streamed(plan: Plan, max_events: int) -> tuple[list[Any], list[str]]:
    handle = EmbeddedHandle("s", MemoryEventStore())
    start = await opened(handle)
    stream = AppendStream(handle, start, max_events=max_events)
    futures = []
    for k, (bad, wait) in enumerate(plan):
        future = stream.write(BAD if bad else chunks(1, k)[0])
        futures.append(future)
        if wait < 0:
            await asyncio.gather(future, return_exceptions=True)
        for _ in range(wait):
            await asyncio.sleep(0)
    outcomes = []
    for result in await asyncio.gather(*futures, return_exceptions=True):
        if isinstance(result, StreamBroken):
            outcomes.append("broken")
        elif isinstance(result, SurfaceError):
            outcomes.append("refused")
        else:
            assert isinstance(result, int), result
            outcomes.append(f"seq {result}")
    return logged(await handle.events()), outcomes


@settings(max_examples=60, deadline=None)
@given(plan=st.lists(st.tuples(st.integers(0, 9).map(lambda n: n == 0), st.integers(-1, 3)),
                     max_size=24),
       max_events=st.integers(1, 6))
def test_a_stream_logs_and_answers_as_writes_awaited_one_at_a_time(
        plan: Plan, max_events: int) -> None:
    assert asyncio.run(streamed(plan, max_events)) == asyncio.run(one_at_a_time(plan))
