"""Streamed import (issue 13 item 8): ``LogStream`` reads a file block by block,
``LogCheck`` validates it without holding it, ``create_streamed`` stores it in one
transaction. Each is checked against the whole-file path it replaces: the same events,
the same verdict, the same first error, and nothing stored for a refused file."""

from __future__ import annotations

import asyncio
import sqlite3
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.schema.codec import LogStream, encode_log, read_log
from surfacelog.schema.dsh import encode_dsh
from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.session import LogCheck, replay
from surfacelog.store import SqliteEventStore, import_log
from surfacelog.store.jsonl import prepare_import

from support.benchmodules import load_bench
from support.programs import SETTINGS, invalid_variants, materialize, noise_for, programs


def verdict(run: Any) -> tuple[str, str, str] | None:
    try:
        run()
    except LogError as exc:
        return type(exc).__name__, exc.rule, str(exc)
    return None


def fed(events: list[Event], cuts: list[int]) -> LogCheck:
    check = LogCheck()
    bounds = [0, *sorted(cuts), len(events)]
    for a, b in pairwise(bounds):
        check.feed(events[a:b])
    return check


@SETTINGS
@given(program=programs(max_ops=30), data=st.data())
def test_logcheck_in_any_batches_gives_replays_verdict(program: Any, data: Any) -> None:
    log, _ = materialize(program, noise_for(data, program))
    if log and data.draw(st.booleans()):  # break one rule of one event
        k = data.draw(st.integers(0, len(log) - 1))
        _, bad = data.draw(st.sampled_from(
            invalid_variants(log[k], list(replay(log[:k]).surface.nodes))))
        log = [*log[:k], bad, *log[k + 1:]]
    cuts = data.draw(st.lists(st.integers(0, len(log)), max_size=5))
    expected = verdict(lambda: replay(log))
    assert verdict(lambda: fed(log, cuts)) == expected
    if expected is None:
        check, whole = fed(log, cuts), replay(log)
        assert len(check) == len(log)
        assert check.nodes == tuple(whole.surface.nodes)
        assert list(check.replacements) == list(whole.replacements())


def test_logcheck_keeps_the_surface_not_the_log() -> None:
    """Over a log with compactions and tool-result rewrites (each rewrite reads the
    tool/result it shadows), fed in small batches: replay's surface, and an index
    bounded by the surface."""
    events, stats = load_bench("bench_surface").generate_log(20_000)
    assert stats.compactions > 0 and stats.prunes > 0
    check = LogCheck()
    largest = 0
    for k in range(0, len(events), 500):
        check.feed(events[k:k + 500])
        largest = max(largest, len(check._index._kept))
        assert len(check._index._kept) <= 2 * len(check.nodes) + 256
    whole = replay(events)
    assert check.nodes == tuple(whole.surface.nodes)
    assert list(check.replacements) == list(whole.replacements())
    assert largest < len(events) // 10


def test_logcheck_refuses_feeding_after_a_failure() -> None:
    check = LogCheck()
    with pytest.raises(LogError, match=r"invalid seed event at index 0: .*contiguous"):
        check.feed([Event(type="turn/start", seq=1, time=1, data={"turn": 1})])
    with pytest.raises(ValueError, match="already refused"):
        check.feed([Event(type="turn/start", seq=0, time=1, data={"turn": 1})])


def chunk_log(events: int) -> list[Event]:
    return list(load_bench("bench_interop").generate(events))


@pytest.mark.parametrize("fmt", ["plain", "dsh", "zstd"])
def test_logstream_batches_are_read_logs_events_in_bounded_lists(tmp_path: Path,
                                                                  fmt: str) -> None:
    events = chunk_log(40_000)
    header = SessionHeader(version=0, id="s", created_at=1, delegation_depth=0)
    path = tmp_path / "session.jsonl"
    if fmt == "plain":
        path.write_bytes(encode_log(header, events))
    else:
        path.write_bytes(encode_dsh(header, events, zstd=fmt == "zstd"))
    with LogStream(path) as stream:
        batches = list(stream.batches())
        whole = read_log(path)
        assert stream.header == whole.header == header
        assert stream.notes.packed_rows == whole.packed_rows
    assert [e for b in batches for e in b] == whole.events == events
    assert len(batches) > 2 and max(map(len, batches)) <= 16_384 + 1024


def test_logstream_keeps_read_logs_torn_tail(tmp_path: Path) -> None:
    header = SessionHeader(version=0, id="s", created_at=1, delegation_depth=0)
    content = encode_dsh(header, chunk_log(5_000), zstd=True)
    path = tmp_path / "session.jsonl.zstd"
    path.write_bytes(content[:-7])
    whole = read_log(path)
    assert whole.torn is not None
    with LogStream(path) as stream:
        assert [e for b in stream.batches() for e in b] == whole.events
        assert stream.notes.torn == whole.torn


def stored(db: Path) -> tuple[list[Any], int]:
    with sqlite3.connect(db) as conn:
        sessions = conn.execute("SELECT id, next_seq FROM sessions").fetchall()
        (rows,) = conn.execute("SELECT count(*) FROM events").fetchone()
    return sessions, rows


def write_jsonl(path: Path, events: list[Event], *, bad_line: int | None = None) -> None:
    lines = encode_log(None, events).splitlines()
    if bad_line is not None:
        lines[bad_line - 1] = b"{not json"
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_streamed_import_refused_late_leaves_nothing(tmp_path: Path) -> None:
    """The first invalid event comes after several batches were inserted: the one
    transaction is rolled back, and the error is the whole-file path's."""
    events = chunk_log(40_000)
    events[35_000] = msgspec.structs.replace(events[35_000], seq=7)
    path = tmp_path / "late.jsonl"
    write_jsonl(path, events)
    db = tmp_path / "s.db"
    expected = verdict(lambda: prepare_import(read_log(path), path))
    assert expected is not None and "index 35000" in expected[2]
    result = CliRunner().invoke(app, ["import", str(db), str(path)])
    assert result.exit_code == 1
    assert f"{path}: not imported: {expected[2]}" in result.output
    assert stored(db) == ([], 0)


def test_a_reading_error_anywhere_wins_over_an_earlier_invalid_event(tmp_path: Path) -> None:
    """As when the whole file was read before validation: a line that is not JSON at
    the end is reported, not the invalid event at the start."""
    events = chunk_log(30_000)
    events[3] = msgspec.structs.replace(events[3], seq=99)
    path = tmp_path / "both.jsonl"
    write_jsonl(path, events, bad_line=29_000)
    with pytest.raises(LogError) as raised:
        read_log(path)
    db = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["import", str(db), str(path)])
    assert result.exit_code == 2
    assert f"{path} is not JSONL: {raised.value}" in result.output
    assert stored(db) == ([], 0)


def test_an_invalid_log_wins_over_an_existing_id_and_nothing_changes(tmp_path: Path) -> None:
    events = chunk_log(3_000)
    path = tmp_path / "same.jsonl"
    write_jsonl(path, events)
    db = tmp_path / "s.db"
    runner = CliRunner()
    assert runner.invoke(app, ["import", str(db), str(path)]).exit_code == 0
    before = stored(db)
    assert before == ([("same", len(events))], len(events))
    again = runner.invoke(app, ["import", str(db), str(path)])
    assert again.exit_code == 1 and "session 'same' is already stored" in again.output
    broken = [*events[:-1], msgspec.structs.replace(events[-1], seq=0)]
    write_jsonl(path, broken)
    expected = verdict(lambda: prepare_import(read_log(path), path))
    assert expected is not None
    refused = runner.invoke(app, ["import", str(db), str(path)])
    assert refused.exit_code == 1 and f"not imported: {expected[2]}" in refused.output
    assert stored(db) == before


def test_import_log_of_a_log_in_memory_is_all_or_nothing(tmp_path: Path) -> None:
    events = chunk_log(2_000)
    log = read_log(_written(tmp_path / "ok.jsonl", events))

    async def run() -> None:
        store = await SqliteEventStore.open(tmp_path / "s.db")
        try:
            header = await import_log(store, log, tmp_path / "ok.jsonl")
            assert await store.read_since(header.id, 0) == events
            bad = read_log(_written(tmp_path / "bad.jsonl",
                                    [*events[:1500], events[1501]]))
            with pytest.raises(LogError, match="index 1500"):
                await import_log(store, bad, tmp_path / "bad.jsonl")
            assert [s.id for s in await store.list_sessions()] == ["ok"]
        finally:
            await store.close()

    asyncio.run(run())


def _written(path: Path, events: list[Event]) -> Path:
    write_jsonl(path, events)
    return path


# -- packed rows checked and stored as runs ------------------------------------------------

_NUMBER = st.one_of(st.integers(-3, 2**53 + 1), st.floats(allow_nan=False,
                                                           allow_infinity=False))
_MEMBER = st.text(max_size=6)


@st.composite
def packed_lines(draw: st.DrawFn, seq0: int = 0) -> bytes:
    """One packed row, valid or not in any of the ways the payload rules look at."""
    members = draw(st.lists(_MEMBER, min_size=1, max_size=5))
    kind = draw(st.sampled_from(["text-chunks", "reasoning-chunks", "tool-call-chunks"]))
    data: dict[str, Any] = {"turn": draw(_NUMBER), "step": draw(_NUMBER),
                            "index": draw(_NUMBER),
                            "dt": draw(st.lists(st.integers(-5, 5), min_size=len(members) - 1,
                                                max_size=len(members) - 1))}
    if kind == "tool-call-chunks":
        data["id"] = draw(_MEMBER)
        if draw(st.booleans()):
            data["name"] = draw(_MEMBER)
        data["args"] = members
    else:
        data["texts"] = members
    row = {"type": kind, "seq0": seq0 + draw(st.sampled_from([0, 0, 0, 1])),
           "time0": draw(st.integers(0, 2**40)), "data": data}
    return msgspec.json.encode(row)


@SETTINGS
@given(line=packed_lines())
def test_run_rows_are_the_rows_of_the_runs_events(line: bytes) -> None:
    from surfacelog.schema.dsh import decode_packed_row
    from surfacelog.store.rows import encode_batch, encode_records, run_rows

    run = decode_packed_row(line, "line 1")
    events = run.events()
    assert run_rows("s", run) == encode_batch("s", events).rows
    assert encode_records("s", [run]) == encode_batch("s", events)


@SETTINGS
@given(lines=st.lists(packed_lines(), min_size=1, max_size=3), data=st.data())
def test_a_run_is_checked_as_the_events_it_stands_for(lines: list[bytes], data: Any) -> None:
    """Runs between plain events, valid or not (a float or unsafe turn, step or index,
    a seq that does not follow): ``LogCheck`` of the runs gives ``replay``'s verdict
    of the expanded events, and the same surface."""
    from surfacelog.schema.dsh import decode_packed_row

    records: list[Any] = [Event(type="turn/start", seq=0, time=1, data={"turn": 1})]
    expanded: list[Event] = list(records)
    for line in lines:
        row = msgspec.json.decode(line)
        row["seq0"] += len(expanded)
        run = decode_packed_row(msgspec.json.encode(row), "line 2")
        records.append(run)
        expanded.extend(run.events())
        step = Event(type="step/start", seq=len(expanded), time=2, data={"turn": 1, "step": 1})
        records.append(step)
        expanded.append(step)
    cuts = data.draw(st.lists(st.integers(0, len(records)), max_size=3))
    expected = verdict(lambda: replay(expanded))
    assert verdict(lambda: fed(records, cuts)) == expected
    if expected is None:
        assert len(fed(records, cuts)) == len(expanded)


def test_streamed_import_of_runs_stores_the_expanded_events(tmp_path: Path) -> None:
    header = SessionHeader(version=0, id="runs", created_at=1, delegation_depth=0)
    events = chunk_log(30_000)
    path = tmp_path / "session.jsonl.zstd"
    path.write_bytes(encode_dsh(header, events, zstd=True))
    with LogStream(path, runs=True) as stream:
        assert any(type(r).__name__ == "PackedRun" for b in stream.records() for r in b)
    db = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["import", str(db), str(path)])
    assert result.exit_code == 0, result.output
    assert f"imported as session runs ({len(events)} events)" in result.output

    async def read() -> list[Event]:
        store = await SqliteEventStore.open(db)
        try:
            return await store.read_since("runs", 0)
        finally:
            await store.close()

    assert asyncio.run(read()) == events


@pytest.mark.parametrize("times, members", [
    ([5, 2**53, 7], ["a", "b", "c"]),   # an unsafe time in the middle
    ([5, 6, 7], ["a", 3, "c"]),         # a member that is not a string
])
def test_a_hand_built_run_outside_the_decoders_checks_is_folded_event_by_event(
        times: list[Any], members: list[Any]) -> None:
    """``fold_run`` checks the premises that let it skip building the members: a run
    the decoder would never make is checked as its events, with ``replay``'s verdict."""
    from surfacelog.schema.dsh import PackedRun

    start = Event(type="turn/start", seq=0, time=1, data={"turn": 1})
    run = PackedRun("text-delta", 1, times, 1, 1, 0, members)
    expected = verdict(lambda: replay([start, *run.events()]))
    assert expected is not None
    assert verdict(lambda: fed([start, run], [])) == expected
