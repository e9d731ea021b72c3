"""An import records its source in the transaction that stores the session (the
``imports`` table: source, events, a digest of the rows stored for them), and ``verify``
checks each imported session against it: a session that holds every event of its
source passes, one cut short or changed since fails, naming its source. Real SQLite
files in ``tmp_path``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from surfacelog.schema.codec import encode_log
from surfacelog.store import SqliteEventStore
from surfacelog.store.importing import Imported, Refused, import_sources
from surfacelog.store.shardmap import Shard, ShardMap
from surfacelog.store.shardset import ShardedStores
from surfacelog.store.verify import VerifyFailure

from support.dsh_database import dsh_database
from support.importing import import_files, verified
from support.sessiongen import add_turn, build_session, header


def write_log(path: Path, session_id: str, turns: int) -> int:
    """A valid log of ``turns`` turns at ``path``; its number of events."""
    events = list(build_session(session_id, turns).log)
    path.write_bytes(encode_log(header(session_id), events))
    return len(events)


def cut_after_turn(db: Path, session_id: str, turns_kept: int) -> int:
    """Cut the stored session after its ``turns_kept``-th turn/end, the way a truncated
    import would have left it (a valid log, shorter than its source): its new length."""
    conn = sqlite3.connect(db)
    ends = [seq for (seq,) in conn.execute(
        "SELECT seq FROM events WHERE session_id = ? AND type = 'turn/end' ORDER BY seq",
        (session_id,))]
    last = ends[turns_kept - 1]
    conn.execute("DELETE FROM events WHERE session_id = ? AND seq > ?", (session_id, last))
    conn.execute("UPDATE sessions SET next_seq = ? WHERE id = ?", (last + 1, session_id))
    conn.commit()
    conn.close()
    return last + 1


async def test_an_import_is_recorded_and_verify_finds_it_whole(tmp_path: Path) -> None:
    source = tmp_path / "s-1.jsonl"
    length = write_log(source, "s-1", 3)
    db = tmp_path / "s.db"
    assert await import_files(db, source) == [Imported(str(source), "file", "s-1", length)]
    store = await SqliteEventStore.open(db)
    try:
        check = await store.check_source("s-1")
        await store.create(header("made-here"))
        assert await store.check_source("made-here") is None  # not an import
    finally:
        await store.close()
    assert check is not None
    assert (check.source, check.events, check.stored, check.problem()) == (
        str(source), length, length, None)
    assert await verified(db) == (2, [])


async def test_verify_says_a_session_was_cut_short_of_its_source(tmp_path: Path) -> None:
    source = tmp_path / "s-1.jsonl"
    length = write_log(source, "s-1", 4)
    db = tmp_path / "s.db"
    await import_files(db, source)
    kept = cut_after_turn(db, "s-1", 2)
    assert kept < length
    checked, failures = await verified(db)
    assert checked == 1
    assert failures == [VerifyFailure(
        "s-1", kept, f"cut short: imported from {source} with {length} events, only "
                     f"{kept} of them are stored")]


async def test_verify_says_a_session_no_longer_holds_what_was_imported(
        tmp_path: Path) -> None:
    source = tmp_path / "s-1.jsonl"
    length = write_log(source, "s-1", 2)
    db = tmp_path / "s.db"
    await import_files(db, source)
    conn = sqlite3.connect(db)
    seq, data = conn.execute("SELECT seq, data FROM events WHERE session_id = 's-1' AND "
                             "type = 'user/message' ORDER BY seq LIMIT 1").fetchone()
    changed = json.loads(data)
    changed["content"][0]["text"] += " (edited)"  # still a valid log
    conn.execute("UPDATE events SET data = ? WHERE session_id = 's-1' AND seq = ?",
                 (json.dumps(changed), seq))
    conn.commit()
    conn.close()
    assert await verified(db) == (1, [VerifyFailure(
        "s-1", None, f"differs from its source: its first {length} events are not those "
                     f"imported from {source}")])


async def test_events_appended_after_the_import_are_not_the_source(tmp_path: Path) -> None:
    source = tmp_path / "s-1.jsonl"
    length = write_log(source, "s-1", 2)
    db = tmp_path / "s.db"
    await import_files(db, source)
    store = await SqliteEventStore.open(db)
    try:
        opened = await store.open_session("s-1")
        session = opened.session
        before = len(session)
        add_turn(session, 3)
        await store.append("s-1", session.log[before:], epoch=opened.epoch, durable=True)
        check = await store.check_source("s-1")
    finally:
        await store.close()
    assert check is not None and check.problem() is None and check.events == length
    assert await verified(db) == (1, [])


async def test_a_refused_file_leaves_no_record_and_a_purge_removes_one(
        tmp_path: Path) -> None:
    source = tmp_path / "s-1.jsonl"
    write_log(source, "s-1", 2)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(source.read_bytes() + b'{"type":"turn/start","seq":0}\n')
    db = tmp_path / "s.db"
    outcomes = await import_files(db, bad)
    assert [type(o) for o in outcomes] == [Refused]
    assert sqlite3.connect(db).execute("SELECT count(*) FROM imports").fetchone() == (0,)
    await import_files(db, source)
    store = await SqliteEventStore.open(db)
    try:
        await store.delete_session("s-1", at=1)
        await store.purge_session("s-1")
    finally:
        await store.close()
    assert sqlite3.connect(db).execute("SELECT count(*) FROM imports").fetchone() == (0,)
    # The id is free again, record included: a new import of it is recorded afresh.
    assert [type(o) for o in await import_files(db, source)] == [Imported]
    assert await verified(db) == (1, [])


async def test_a_dsh_database_session_is_recorded_with_its_database(tmp_path: Path) -> None:
    events = list(build_session("d-1", 2).log)
    dsh = tmp_path / "dsh.sqlite"
    dsh_database(dsh, {"d-1": (header("d-1"), events)})
    db = tmp_path / "s.db"
    await import_files(db, dsh)
    kept = cut_after_turn(db, "d-1", 1)
    _, failures = await verified(db)
    assert [(f.session_id, f.seq) for f in failures] == [("d-1", kept)]
    assert str(dsh) in failures[0].message


@pytest.mark.parametrize("shard_file_first", [False, True],
                         ids=["new-shard-whole-file", "streamed"])
async def test_an_import_onto_shards_is_recorded_on_the_home_shard(
        tmp_path: Path, shard_file_first: bool) -> None:
    shard_map = ShardMap((Shard("a", str(tmp_path / "a.db")),))
    if shard_file_first:  # the home shard exists: the file is streamed into it
        store = await SqliteEventStore.open(tmp_path / "a.db")
        await store.close()
    source = tmp_path / "s-1.jsonl"
    length = write_log(source, "s-1", 3)
    stores = ShardedStores(shard_map, read_only=False, keep_failed=False)
    try:
        outcomes = [o async for o in import_sources(stores, [source])]
    finally:
        await stores.close()
    assert outcomes == [Imported(str(source), "file", "s-1", length, "a")]
    kept = cut_after_turn(tmp_path / "a.db", "s-1", 1)
    _, failures = await verified(tmp_path / "a.db")
    assert [(f.session_id, f.seq) for f in failures] == [("s-1", kept)]
