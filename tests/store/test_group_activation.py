"""Activations through the group writer: ``SqliteEventStore.read_stored_or_create`` as
one queued item (bump and read, or create, in the group's transaction), and the journal
store's ``Gathered`` calls (concurrent requests of one kind share one call)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from surfacelog.actors.journal import Gathered
from surfacelog.schema.errors import DecodeError
from surfacelog.schema.header import SessionHeader
from surfacelog.store.sqlite import SqliteEventStore
from surfacelog.store.stored import StoredSession

from support.sessiongen import build_session
from support.sessiongen import header as header_for


async def test_concurrent_activations_share_commits_and_match_one_by_one(
        tmp_path: Path) -> None:
    stored = build_session("old", 2)
    store = await SqliteEventStore.open(tmp_path / "a.db")
    try:
        await store.create(header_for("old"), list(stored.log))
        commits = store.stats()["commits"]
        new = [header_for(f"new-{k}") for k in range(40)]
        got = await asyncio.gather(*(store.read_stored_or_create(h)
                                     for h in [*new, header_for("old")]))
        # Forty creations and one open in far fewer transactions than one each.
        assert store.stats()["commits"] - commits < 10
        assert got[:40] == [1] * 40
        opened = got[40]
        assert isinstance(opened, StoredSession)
        assert (opened.epoch, opened.next_seq, len(opened.rows)) == \
            (2, len(stored.log), len(stored.log))
        # The same as the general path: what a read that bumps gives, one epoch later.
        again = await store.read_stored("old", bump=True)
        assert (again.epoch, again.rows) == (3, opened.rows)
        for h in new:
            assert (await store.open_session(h.id)).epoch == 2
        # A session queued before its open is written first (FIFO, same transaction).
        first = await store.open_or_create(header_for("fresh"))
        assert first.epoch == 1 and len(first.session) == 0
    finally:
        await store.close()


async def test_a_header_this_build_cannot_read_is_refused_only_when_creating(
        tmp_path: Path) -> None:
    store = await SqliteEventStore.open(tmp_path / "b.db")
    try:
        bad = SessionHeader(version=999, id="x", created_at=1)
        with pytest.raises(DecodeError):
            await store.read_stored_or_create(bad)
        assert await store.list_sessions() == []
    finally:
        await store.close()


async def test_gathered_requests_share_calls_and_get_their_own_outcomes() -> None:
    calls: list[list[int]] = []

    async def send(requests: list[int]) -> list[int | BaseException]:
        calls.append(requests)
        await asyncio.sleep(0.05)
        return [ValueError(r) if r % 5 == 0 else r * 10 for r in requests]

    gathered: Gathered[int, int] = Gathered(send)
    outcomes = await asyncio.gather(*(gathered(k) for k in range(1, 21)),
                                    return_exceptions=True)
    assert [o if isinstance(o, int) else -1 for o in outcomes] == \
        [-1 if k % 5 == 0 else k * 10 for k in range(1, 21)]
    assert all(isinstance(outcomes[k - 1], ValueError) for k in (5, 10, 15, 20))
    assert len(calls) < 20 and sorted(r for c in calls for r in c) == list(range(1, 21))


async def test_a_failed_gathered_call_fails_each_of_its_requests() -> None:
    async def send(requests: list[int]) -> list[int | BaseException]:
        raise ConnectionError("down")

    gathered: Gathered[int, int] = Gathered(send)
    outcomes = await asyncio.gather(*(gathered(k) for k in range(3)),
                                    return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes)
