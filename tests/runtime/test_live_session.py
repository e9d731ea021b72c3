"""LiveSession taken for writing at activation (as the session actor hosts it) on a real
SQLite store, without Ray: ordering, exactly-once appends, compaction and prune
requests, staleness, fencing, reloading after a write of unknown outcome."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.runtime import RELOAD, Conflict, LiveSession, SessionUnavailable
from surfacelog.schema.errors import SurfaceError
from surfacelog.session import AppendSpec, replay
from surfacelog.session.compaction import CompactionRequest
from surfacelog.session.compaction_policy import (
    SUMMARY_NOT_SMALLER,
    choose_range,
    compaction_request,
    extractive_summary,
    prune_requests,
    safe_cuts,
)
from surfacelog.store.errors import CommitFailed, WriterFenced
from surfacelog.store.sqlite import SqliteEventStore

from support.failing_stores import LostAckStore


@pytest.fixture
async def store(sqlite_store: SqliteEventStore) -> SqliteEventStore:
    return sqlite_store


async def drive_turns(host: LiveSession, turns: int, config: ScriptConfig | None = None) -> None:
    """Scripted turns straight through the host (no conflicts expected)."""
    script = AgentScript(host.session_id, config or ScriptConfig())
    cfg = script.config
    for turn in range(1, turns + 1):
        await host.append_batch(script.turn_open(turn))
        for step in range(1, cfg.steps + 1):
            stream = script.stream(turn, step, step == cfg.steps)
            logged = await host.append_batch([script.step_start(turn, step), *stream.chunks])
            chunk_seqs = [e.seq for e in logged[1:]]
            logged = await host.append_batch(
                [script.message(turn, step, stream, chunk_seqs),
                 *(script.tool_call(turn, step, c) for c in stream.calls)])
            calls = [e.seq for e in logged[1:]]
            await host.append_batch(
                [*(script.tool_result(turn, step, c, s)
                   for c, s in zip(stream.calls, calls, strict=True)),
                 script.step_end(turn, step)])
        await host.append_batch([script.turn_end(turn)])


async def test_expected_seq_retry_returns_the_logged_events(store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s1", store)
    specs = AgentScript("s1", ScriptConfig()).turn_open(1)
    first = await host.append_batch(specs, expected_seq=0)
    again = await host.append_batch(specs, expected_seq=0)
    assert again == first
    assert len(host.session) == 2
    other = AgentScript("s1", ScriptConfig(seed=9)).turn_open(1)
    with pytest.raises(Conflict):
        await host.append_batch(other, expected_seq=0)
    with pytest.raises(Conflict):
        await host.append_batch(other, expected_seq=5)
    assert len(host.session) == 2
    assert [e.seq for e in await store.read_since("s1")] == [0, 1]


async def test_concurrent_mutations_apply_in_acceptance_order(store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s2", store)
    specs = [AppendSpec("todo/write", {"todos": [{"content": f"t{k}", "status": "pending"}]})
             for k in range(50)]
    results = await asyncio.gather(*(host.append_batch([s]) for s in specs))
    seqs = [r[0].seq for r in results]
    assert sorted(seqs) == list(range(50))
    stored = await store.read_since("s2")
    assert [e.data for e in stored] == [e.data for e in host.session.log]


async def test_rejected_batch_leaves_memory_and_store_unchanged(
        store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s3", store)
    await drive_turns(host, 1)
    before = host.session.snapshot()
    bad = [AppendSpec("turn/start", {"turn": 2}),
           AppendSpec("user/message", {"id": "u", "role": "user", "source": {"kind": "user"},
                                       "content": []},
                      surface_op={"op": "replace", "start": 999, "end": 999},
                      source_event_seqs=[0])]
    with pytest.raises(SurfaceError, match="not found in surface"):
        await host.append_batch(bad)
    assert host.session.snapshot() == before
    assert len(await store.read_since("s3")) == before.length


async def test_compaction_request_appends_the_whole_batch(store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s4", store)
    await drive_turns(host, 3)
    snap, events = host.surface_events()
    choice = choose_range(snap.nodes, events, compact_at=100, retain_tokens=50)
    assert choice is not None
    request = compaction_request(snap, choice, events[: len(choice.shadowed)],
                                 extractive_summary(events[: len(choice.shadowed)]))
    assert request.error is None
    logged = await host.compact(request)
    assert [e.type for e in logged] == ["compaction/start", "compaction/summary",
                                        "user/message", "compaction/end"]
    checkpoint = logged[2]
    assert checkpoint.source_event_seqs[:2] == (logged[0].seq, logged[1].seq)
    assert set(choice.shadowed) <= set(checkpoint.source_event_seqs)
    assert host.session.surface.nodes[0] == checkpoint.seq
    assert host.session.surface.replace_generation == 1
    # The same request again is stale.
    with pytest.raises(Conflict):
        await host.compact(request)
    # The store replays to the same surface.
    stored = replay(await store.read_since("s4"))
    assert list(stored.surface.nodes) == list(host.session.surface.nodes)
    assert stored.derive_messages() == host.session.derive_messages()


async def test_compaction_never_splits_a_call_from_its_result(
        store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s5", store)
    await drive_turns(host, 2)
    snap, events = host.surface_events()
    cuts = safe_cuts(events)
    for k in range(1, len(events)):
        choice = choose_range(snap.nodes, events, compact_at=0, retain_tokens=0,
                              min_nodes=k)
        if choice is not None:
            assert cuts[len(choice.shadowed)]
    # A cut right after an assistant message with tool calls is never safe.
    for k, e in enumerate(events):
        if e.type == "assistant/message" and any(
                b["type"] == "tool-call" for b in e.data["message"]["content"]):
            assert not cuts[k + 1]


async def test_failed_compaction_is_recorded(store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s6", store)
    await drive_turns(host, 1)
    snap, events = host.surface_events()
    choice = choose_range(snap.nodes, events, compact_at=0, retain_tokens=0)
    assert choice is not None
    huge = [{"type": "text", "text": "x" * (choice.tokens * 4 + 4)}]
    request = compaction_request(snap, choice, events, huge)
    assert request.error == SUMMARY_NOT_SMALLER
    logged = await host.compact(request)
    assert [e.type for e in logged] == ["compaction/start", "compaction/end"]
    assert logged[1].data["error"] == SUMMARY_NOT_SMALLER
    assert host.session.surface.replace_generation == 0


async def test_prune_rewrites_only_the_content(store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s7", store)
    await drive_turns(host, 2, ScriptConfig(big_result_every=1, big_result_chars=5000))
    snap, events = host.surface_events()
    requests = prune_requests(snap, events, max_chars=1000, keep_chars=200)
    assert requests
    # What a pruner reads instead of the surface names the same results.
    assert host.oversized_results(1000).nodes == tuple(r.target for r in requests)
    for request in requests:
        await host.prune(request)
    _, events2 = host.surface_events()
    assert host.session.surface.replace_generation == len(requests)
    for e in events2:
        if e.type == "tool/result":
            text = e.data["message"]["content"][0]["content"][0]["text"]
            assert len(text) < 1000
    assert host.oversized_results(1000).nodes == ()
    pruned = [e for e in events2 if e.seq not in snap.nodes]
    assert all("characters pruned" in e.data["message"]["content"][0]["content"][0]["text"]
               for e in pruned)


async def test_stale_writer_is_fenced(store: SqliteEventStore) -> None:
    old = await LiveSession.activate("s8", store)
    await drive_turns(old, 1)
    new = await LiveSession.activate("s8", store)
    assert new.epoch > old.epoch
    length = len(new.session)
    with pytest.raises(WriterFenced):
        await old.append_batch([AppendSpec("todo/write", {"todos": []})])
    assert len(await store.read_since("s8")) == length
    await new.append_batch([AppendSpec("todo/write", {"todos": []})])
    assert len(await store.read_since("s8")) == length + 1


async def test_activation_repairs_an_open_turn(store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s9", store)
    script = AgentScript("s9", ScriptConfig())
    await host.append_batch(script.turn_open(1))
    stream = script.stream(1, 1, False)
    logged = await host.append_batch([script.step_start(1, 1), *stream.chunks])
    logged = await host.append_batch([script.message(1, 1, stream, [e.seq for e in logged[1:]]),
                                      script.tool_call(1, 1, stream.calls[0])])
    again = await LiveSession.activate("s9", store)
    tail = [e.type for e in again.session.log[-5:]]
    assert tail[-1] == "turn/end"
    assert again.session.log[-1].data["reason"] == {"kind": "interrupted"}
    results = [e for e in again.session.log if e.type == "tool/result"]
    assert {r.data["error"]["code"] for r in results} == {"TOOL_OUTCOME_UNKNOWN",
                                                          "TOOL_NOT_STARTED"}
    stored = await store.read_since("s9")
    assert len(stored) == len(again.session)


async def test_unknown_compaction_range_is_a_conflict(store: SqliteEventStore) -> None:
    host = await LiveSession.activate("s10", store)
    await drive_turns(host, 1)
    req = CompactionRequest(compaction_id="c", generation=0, shadowed=(999,), summary=[],
                            shadowed_token_count=1, checkpoint_id="x")
    with pytest.raises(Conflict):
        await host.compact(req)


async def test_a_write_with_an_unknown_outcome_reloads_the_session(tmp_path: Path) -> None:
    store = await LostAckStore.open(str(tmp_path / "lost.db"))
    try:
        host = await LiveSession.activate("s", store)
        script = AgentScript("s", ScriptConfig())
        opened = await host.append_batch(script.turn_open(1), expected_seq=0)
        stream = script.stream(1, 1, final=True)
        specs = [script.step_start(1, 1), *stream.chunks]
        store.lose_next = True
        with pytest.raises(CommitFailed):
            await host.append_batch(specs, expected_seq=len(opened))
        # The session rolled back, but the store has the batch: the host must not go on.
        assert len(host.session) == len(opened) and host.closed == RELOAD
        assert len(await store.read_since("s")) == len(opened) + len(specs)
        with pytest.raises(SessionUnavailable):
            await host.append_batch(specs, expected_seq=len(opened))

        again = await LiveSession.activate("s", store)  # what the actor does next
        retried = await again.append_batch(specs, expected_seq=len(opened))
        assert [e.seq for e in retried] == list(range(len(opened), len(opened) + len(specs)))
        assert list(again.session.log) == await store.read_since("s")
        assert again.session.log[len(opened):len(opened) + len(specs)] == retried
        await again.append_batch([AppendSpec("x/ok", {"n": 1}, ignorable=True)])
        assert list(again.session.log) == await store.read_since("s")
    finally:
        await store.close()


class FailedFlushStore(SqliteEventStore):
    """The real store, except that the next flush reports a failed buffered write."""

    fail_next = False

    async def flush_session(self, session_id: str) -> None:
        await super().flush_session(session_id)
        if self.fail_next:
            self.fail_next = False
            raise CommitFailed("a buffered write of this session failed")


async def test_a_flush_that_reports_a_failed_write_reloads_the_session(tmp_path: Path
                                                                      ) -> None:
    """The failure is raised once; the host must not go on as if its state were
    stored, or a second flush would report success over the loss."""
    store = await FailedFlushStore.open(str(tmp_path / "flush.db"))
    try:
        host = await LiveSession.activate("f", store, durability="buffered")
        await host.append_batch([AppendSpec("turn/start", {"turn": 1})])
        store.fail_next = True
        with pytest.raises(CommitFailed):
            await host.flush()
        assert host.closed == RELOAD
        with pytest.raises(SessionUnavailable):
            await host.flush()
        again = await LiveSession.activate("f", store, durability="buffered")
        await again.flush()
        assert list(again.session.log) == await store.read_since("f")
    finally:
        await store.close()
