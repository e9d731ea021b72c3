"""The import pipeline (``surfacelog.store.importing``) below the CLI: the outcome of
each session, from log files, DSH sessions roots and DSH databases, into one SQLite
store (``StoreTarget``) and onto shards (``ShardedStores``) through the same
``ImportTarget``. Real SQLite files in ``tmp_path``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec
import pytest

from surfacelog.schema.codec import LogFile, LogStream, Record, encode_log, read_log
from surfacelog.schema.dsh import encode_dsh
from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event
from surfacelog.store import SqliteEventStore
from surfacelog.store.errors import SessionNotFound
from surfacelog.store.importing import (
    AlreadyStored,
    Imported,
    ImportOptions,
    ImportTarget,
    Outcome,
    Refused,
    SourceRead,
    SourceUnreadable,
    Stored,
    StoreTarget,
    import_sources,
)
from surfacelog.store.jsonl import prepare_import
from surfacelog.store.shardmap import Shard, ShardMap
from surfacelog.store.shardset import ShardedStores

from support.dsh_database import dsh_database
from support.sessiongen import build_session, header


def write_log(path: Path, session_id: str, turns: int = 2, *,
              with_header: bool = True) -> list[Event]:
    """A valid log of ``turns`` turns at ``path``; its events."""
    events = list(build_session(session_id, turns).log)
    path.write_bytes(encode_log(header(session_id) if with_header else None, events))
    return events


async def run(target: ImportTarget, *paths: Path,
              options: ImportOptions | None = None) -> list[Outcome]:
    return [o async for o in import_sources(target, paths, options)]


async def opened(db: Path) -> StoreTarget:
    return StoreTarget(await SqliteEventStore.open(db))


async def stored(db: Path) -> dict[str, list[Event]]:
    store = await SqliteEventStore.open(db, create=False)
    try:
        return {info.id: await store.read_since(info.id, 0)
                for info in await store.list_sessions()}
    finally:
        await store.close()


class Counting(StoreTarget):
    """A ``StoreTarget`` that records which ``ImportTarget`` calls the pipeline makes,
    and how many batches it streams and how large the largest is."""

    def __init__(self, store: SqliteEventStore) -> None:
        super().__init__(store)
        self.calls: list[str] = []
        self.batches = 0
        self.largest_batch = 0

    async def store_log(self, log: LogFile, source: Path) -> Stored:
        self.calls.append("log")
        return await super().store_log(log, source)

    async def store_stream(self, stream: LogStream, source: Path,
                           batches: Iterable[Sequence[Record]]) -> Stored:
        self.calls.append("stream")

        def measured() -> Iterable[Sequence[Record]]:
            for batch in batches:
                self.batches += 1
                self.largest_batch = max(self.largest_batch, len(batch))
                yield batch

        return await super().store_stream(stream, source, measured())


# -- log files into one store ------------------------------------------------------------


async def test_a_file_is_streamed_into_the_store_in_bounded_batches(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    events = write_log(path, "big", turns=650)
    db = tmp_path / "s.db"
    target = Counting(await SqliteEventStore.open(db))
    try:
        outcomes = await run(target, path)
    finally:
        await target.close()
    assert outcomes == [Imported(str(path), "file", "big", len(events))]
    assert target.calls == ["stream"]
    # One block of the file at a time (as LogStream reads it), never the whole file.
    assert target.batches > 1 and target.largest_batch < len(events)
    assert target.largest_batch <= 16_384 + 1024
    assert await stored(db) == {"big": events}


async def test_a_file_without_a_header_line_is_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    events = write_log(path, "ignored", with_header=False)
    target = await opened(tmp_path / "s.db")
    try:
        assert await run(target, path) == [Imported(str(path), "file", "plain", len(events))]
    finally:
        await target.close()


async def test_a_torn_tail_is_dropped_and_said(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    events = write_log(path, "torn")
    path.write_bytes(path.read_bytes() + b'{"type":"turn/st')
    target = await opened(tmp_path / "s.db")
    try:
        [outcome] = await run(target, path)
    finally:
        await target.close()
    assert isinstance(outcome, Imported) and outcome.events == len(events)
    assert outcome.torn is not None and outcome.torn == read_log(path).torn


async def test_a_stored_id_refuses_a_file_and_keeps_what_is_stored(tmp_path: Path) -> None:
    path = tmp_path / "same.jsonl"
    events = write_log(path, "same")
    db = tmp_path / "s.db"
    target = await opened(db)
    try:
        await run(target, path)
        write_log(path, "same", turns=3)  # other events under the same id
        assert await run(target, path) == [Refused(
            str(path), "file", "exists", "session 'same' is already stored")]
    finally:
        await target.close()
    assert await stored(db) == {"same": events}


async def test_an_invalid_log_is_refused_with_its_rule_and_stores_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    events = write_log(path, "bad")
    events[5] = msgspec.structs.replace(events[5], seq=50)
    path.write_bytes(encode_log(header("bad"), events))
    with pytest.raises(LogError) as raised:
        prepare_import(read_log(path), path)
    db = tmp_path / "s.db"
    target = await opened(db)
    try:
        assert await run(target, path) == [
            Refused(str(path), "file", raised.value.rule, str(raised.value))]
    finally:
        await target.close()
    assert await stored(db) == {}


async def test_unreadable_files_are_refused_as_unreadable(tmp_path: Path) -> None:
    not_json = tmp_path / "notjson.jsonl"
    not_json.write_bytes(b"{not json\n")
    long_line = tmp_path / "long.jsonl"
    write_log(long_line, "long")
    missing = tmp_path / "missing.jsonl"
    target = await opened(tmp_path / "s.db")
    try:
        outcomes = await run(target, not_json, missing, long_line, options=ImportOptions(
            max_line_bytes=64, limit_option="--max-line-bytes"))
        unhinted = await run(target, long_line, options=ImportOptions(max_line_bytes=64))
    finally:
        await target.close()
    assert [(o.label, o.origin, o.rule) for o in outcomes if isinstance(o, Refused)] == [
        (str(not_json), "file", "unreadable"), (str(missing), "file", "unreadable"),
        (str(long_line), "file", "unreadable")]
    reasons = [o.reason for o in outcomes if isinstance(o, Refused)]
    assert reasons[0].startswith(f"{not_json} is not JSONL: ")
    assert reasons[1] == f"cannot read {missing}: No such file or directory"
    assert "is longer than 64 bytes" in reasons[2]
    assert reasons[2].endswith(" (see --max-line-bytes)")
    assert isinstance(unhinted[0], Refused) and "(see" not in unhinted[0].reason


async def test_legacy_marks_the_log_first_and_reads_it_whole(tmp_path: Path) -> None:
    events = list(build_session("old", 2).log)
    unmarked = [msgspec.structs.replace(e, surface_op=msgspec.UNSET) for e in events]
    path = tmp_path / "old.jsonl"
    path.write_bytes(encode_log(None, unmarked))
    db = tmp_path / "s.db"
    target = Counting(await SqliteEventStore.open(db))
    try:
        refused = await run(target, path)
        outcomes = await run(target, path, options=ImportOptions(legacy=True))
    finally:
        await target.close()
    assert isinstance(refused[0], Refused) and refused[0].origin == "file"
    assert outcomes == [Imported(str(path), "file", "old", len(events))]
    assert target.calls == ["stream", "log"]
    assert await stored(db) == {"old": events}


class Gated(StoreTarget):
    """A ``StoreTarget`` whose store reader, on its own thread, stops after the first
    batch until ``go`` is set: the import can be interrupted while the file is being
    stored."""

    def __init__(self, store: SqliteEventStore) -> None:
        super().__init__(store)
        self.first = threading.Event()
        self.go = threading.Event()

    async def store_stream(self, stream: LogStream, source: Path,
                           batches: Iterable[Sequence[Record]]) -> Stored:
        def gated() -> Iterable[Sequence[Record]]:
            for k, batch in enumerate(batches):
                yield batch
                if k == 0:
                    self.first.set()
                    self.go.wait(60)

        return await super().store_stream(stream, source, gated())


def notes_log(path: Path, events: int) -> Path:
    """A valid log of ``events`` ignorable notes (several read blocks), quick to write."""
    lines = [b'{"type":"session","version":0,"id":"%s","createdAt":1,"delegationDepth":0}'
             % path.stem.encode()]
    lines += [b'{"type":"x/note","seq":%d,"time":1,"data":{"t":"%s"},"ignorable":true}'
              % (k, b"y" * 40) for k in range(events)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


async def test_an_interrupted_streamed_import_stores_nothing(tmp_path: Path) -> None:
    """Cancelled (Ctrl-C cancels the CLI's task) while the store's thread is reading
    the file: the reader is stopped and the session rolled back. Closing the stream
    under it instead ends its records early, and the part read was committed as a
    whole session."""
    path = notes_log(tmp_path / "long.jsonl", 60_000)
    db = tmp_path / "s.db"
    target = Gated(await SqliteEventStore.open(db))
    try:
        task = asyncio.create_task(run(target, path))
        assert await asyncio.to_thread(target.first.wait, 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        target.go.set()
    finally:
        await target.close()  # after the reader's unit of work, committed or not
    assert await stored(db) == {}
    again = await opened(db)
    try:
        assert await run(again, path) == [Imported(str(path), "file", "long", 60_000)]
    finally:
        await again.close()


# -- DSH sessions roots and databases --------------------------------------------------------


def dsh_root(tmp_path: Path) -> tuple[Path, dict[str, list[Event]]]:
    """A DSH sessions root of two sessions (zstd files), as DSH lays it out."""
    root = tmp_path / "sessions"
    logs = {}
    for cwd_dir, session_id in (("--w--", "r-1"), ("_no-cwd", "r-2")):
        folder = root / cwd_dir / session_id
        folder.mkdir(parents=True)
        logs[session_id] = list(build_session(session_id, 2).log)
        (folder / "session.jsonl.zstd").write_bytes(
            encode_dsh(header(session_id), logs[session_id], zstd=True))
    (root / "notes.txt").write_text("not a session")
    return root, logs


def root_file(root: Path, session_id: str) -> Path:
    return next(root.glob(f"*/{session_id}/session.jsonl.zstd"))


async def test_a_root_is_imported_then_resumed(tmp_path: Path) -> None:
    root, logs = dsh_root(tmp_path)
    db = tmp_path / "s.db"
    one, two = str(root_file(root, "r-1")), str(root_file(root, "r-2"))
    target = await opened(db)
    try:
        first = await run(target, root)
        again = await run(target, root)
    finally:
        await target.close()
    assert first == [Imported(one, "root", "r-1", len(logs["r-1"])),
                     Imported(two, "root", "r-2", len(logs["r-2"])),
                     SourceRead(root, "root", 2)]
    assert again == [AlreadyStored(one, "root", "r-1", len(logs["r-1"])),
                     AlreadyStored(two, "root", "r-2", len(logs["r-2"])),
                     SourceRead(root, "root", 2)]
    assert await stored(db) == logs


async def test_a_root_refuses_other_events_under_a_stored_id_and_bad_files(
        tmp_path: Path) -> None:
    root, logs = dsh_root(tmp_path)
    db = tmp_path / "s.db"
    target = await opened(db)
    try:
        await run(target, root)
        other = list(build_session("r-1", 3).log)
        root_file(root, "r-1").write_bytes(encode_dsh(header("r-1"), other, zstd=True))
        root_file(root, "r-2").write_bytes(b"{not json\n")
        outcomes = await run(target, root)
    finally:
        await target.close()
    one, two = str(root_file(root, "r-1")), str(root_file(root, "r-2"))
    assert outcomes[0] == Refused(one, "root", "exists",
                                  "session 'r-1' is already stored, with other events "
                                  "than this file's")
    assert isinstance(outcomes[1], Refused)
    assert (outcomes[1].label, outcomes[1].rule) == (two, "unreadable")
    assert outcomes[1].reason.startswith(f"{two} is not JSONL: ")
    assert outcomes[2] == SourceRead(root, "root", 2)
    assert await stored(db) == logs


async def test_a_root_that_cannot_be_read_is_one_outcome(tmp_path: Path) -> None:
    root, _ = dsh_root(tmp_path)
    plain = root / "_no-cwd" / "r-3" / "session.jsonl"
    plain.parent.mkdir()
    plain.write_bytes(encode_log(header("r-3"), []))
    target = await opened(tmp_path / "s.db")
    try:
        [both] = await run(target, root)
    finally:
        await target.close()
    assert isinstance(both, SourceUnreadable) and both.path == root
    assert "holds both session.jsonl and session.jsonl.zstd" in both.reason


async def test_a_dsh_database_is_imported_session_by_session_then_resumed(
        tmp_path: Path) -> None:
    logs = {sid: list(build_session(sid, 2).log) for sid in ("d-1", "d-2")}
    dsh = tmp_path / "dsh.sqlite"
    dsh_database(dsh, {sid: (header(sid), events) for sid, events in logs.items()})
    db = tmp_path / "s.db"
    target = await opened(db)
    try:
        first = await run(target, dsh)
        again = await run(target, dsh)
    finally:
        await target.close()
    assert first == [Imported(f"{dsh} session d-1", "database", "d-1", len(logs["d-1"])),
                     Imported(f"{dsh} session d-2", "database", "d-2", len(logs["d-2"])),
                     SourceRead(dsh, "database", 2)]
    assert [type(o) for o in again] == [AlreadyStored, AlreadyStored, SourceRead]
    assert await stored(db) == logs


async def test_a_dsh_database_of_another_version_is_one_outcome(tmp_path: Path) -> None:
    dsh = tmp_path / "dsh.sqlite"
    dsh_database(dsh, {"d-1": (header("d-1"), [])}, version=18)
    db = tmp_path / "s.db"
    target = await opened(db)
    try:
        [refused] = await run(target, dsh)
    finally:
        await target.close()
    assert isinstance(refused, SourceUnreadable) and refused.path == dsh
    assert "has schema version 18, incompatible with this build (17)" in refused.reason
    assert await stored(db) == {}


# -- onto shards: the same pipeline, ShardedStores as the target --------------------------


def two_shards(tmp_path: Path) -> ShardMap:
    """Shards ``a`` and ``b`` from the start, ``c`` added later (an id homed on ``c``
    may also be on one of the others)."""
    return ShardMap((Shard("a", str(tmp_path / "a.db")), Shard("b", str(tmp_path / "b.db")),
                     Shard("c", str(tmp_path / "c.db"), added=1)))


def ids_where(shard_map: ShardMap, home: str, count: int = 1, many: int = 1) -> list[str]:
    """The first ``many`` ids whose home is ``home`` and that have ``count`` candidate
    shards."""
    found = [f"x-{n}" for n in range(10_000)
             if shard_map.candidates(f"x-{n}")[0].name == home
             and len(shard_map.candidates(f"x-{n}")) == count]
    assert len(found) >= many
    return found[:many]


class CountingShards(ShardedStores):
    """``ShardedStores`` counting the ``ImportTarget`` calls the pipeline makes."""

    calls: list[str]

    async def store_log(self, log: LogFile, source: Path) -> Stored:
        self.calls.append("log")
        return await super().store_log(log, source)

    async def store_stream(self, stream: LogStream, source: Path,
                           batches: Iterable[Sequence[Record]]) -> Stored | None:
        self.calls.append("stream")
        return await super().store_stream(stream, source, batches)


async def plant(path: str, session_id: str) -> list[Event]:
    events = list(build_session(session_id, 1).log)
    store = await SqliteEventStore.open(path)
    try:
        await store.create(header(session_id), events)
    finally:
        await store.close()
    return events


async def test_onto_shards_a_new_home_is_created_from_the_whole_file_then_streamed(
        tmp_path: Path) -> None:
    shard_map = two_shards(tmp_path)
    first, second = ids_where(shard_map, "a", many=2)
    paths = [tmp_path / f"{sid}.jsonl" for sid in (first, second)]
    logs = {sid: write_log(p, sid) for sid, p in zip((first, second), paths, strict=True)}
    stores = CountingShards(shard_map, read_only=False, keep_failed=False)
    stores.calls = []
    try:
        outcomes = await run(stores, *paths)
    finally:
        await stores.close()
    assert outcomes == [Imported(str(p), "file", sid, len(logs[sid]), "a")
                        for sid, p in zip((first, second), paths, strict=True)]
    # The first file creates shard a: declined streamed, it is read whole; the second
    # finds a.db and streams.
    assert stores.calls == ["stream", "log", "stream"]
    assert await stored(tmp_path / "a.db") == logs
    assert not (tmp_path / "b.db").exists() and not (tmp_path / "c.db").exists()


async def test_onto_shards_the_files_error_comes_before_another_shards_refusal(
        tmp_path: Path) -> None:
    shard_map = two_shards(tmp_path)
    [session_id] = ids_where(shard_map, "c", count=2)
    older = shard_map.candidates(session_id)[1]
    for shard in shard_map.shards:
        await plant(shard.path, f"seed-{shard.name}")
    held = await plant(older.path, session_id)
    valid = tmp_path / "valid.jsonl"
    events = write_log(valid, session_id)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(encode_log(header(session_id),
                               [*events[:3], msgspec.structs.replace(events[3], seq=9)]))
    stores = ShardedStores(shard_map, read_only=False, keep_failed=False)
    try:
        invalid, refused = await run(stores, bad, valid)
    finally:
        await stores.close()
    assert isinstance(invalid, Refused) and invalid.rule != "exists"
    assert "seq" in invalid.reason
    assert refused == Refused(str(valid), "file", "exists",
                              f"session {session_id!r} is already stored "
                              f"(on shard {older.name!r})")
    assert (await stored(Path(older.path)))[session_id] == held
    assert session_id not in await stored(tmp_path / "c.db")


async def test_onto_shards_a_root_resumes_finding_each_session_where_it_is(
        tmp_path: Path) -> None:
    root, logs = dsh_root(tmp_path)
    shard_map = ShardMap((Shard("a", str(tmp_path / "a.db")),
                          Shard("b", str(tmp_path / "b.db"))))
    homes = {sid: shard_map.candidates(sid)[0].name for sid in logs}
    for_both = ShardedStores(shard_map, read_only=False, keep_failed=False)
    try:
        first = await run(for_both, root)
        again = await run(for_both, root)
        assert await for_both.stored_events("r-1") == logs["r-1"]
        with pytest.raises(SessionNotFound):
            await for_both.stored_events("nobody")
    finally:
        await for_both.close()
    assert [(o.session_id, o.shard) for o in first if isinstance(o, Imported)] == \
        [(sid, homes[sid]) for sid in ("r-1", "r-2")]
    assert [type(o) for o in again] == [AlreadyStored, AlreadyStored, SourceRead]


async def test_onto_shards_a_session_a_shard_cannot_take_is_refused_and_the_rest_go_on(
        tmp_path: Path) -> None:
    """A candidate shard whose file is missing may hold the id: that session of a DSH
    root or database is refused (rule ``store``) and the next ones are imported, as
    log files given by themselves are."""
    shard_map = two_shards(tmp_path)
    [blocked] = ids_where(shard_map, "c", count=2)
    older = shard_map.candidates(blocked)[1]
    free_home = next(s.name for s in shard_map.shards if s.name not in (older.name, "c"))
    [free] = ids_where(shard_map, free_home)
    root = tmp_path / "sessions"
    logs = {}
    for session_id in (blocked, free):
        folder = root / "_no-cwd" / session_id
        folder.mkdir(parents=True)
        logs[session_id] = list(build_session(session_id, 1).log)
        (folder / "session.jsonl.zstd").write_bytes(
            encode_dsh(header(session_id), logs[session_id], zstd=True))
    dsh = tmp_path / "dsh.sqlite"
    dsh_database(dsh, {blocked: (header(blocked), logs[blocked])})
    await plant(shard_map.get(free_home).path, f"seed-{free_home}")
    stores = ShardedStores(shard_map, read_only=False, keep_failed=False)
    try:
        outcomes = await run(stores, root, dsh)
    finally:
        await stores.close()
    refused = [o for o in outcomes if isinstance(o, Refused)]
    assert [(o.label, o.origin, o.rule) for o in refused] == [
        (str(root / "_no-cwd" / blocked / "session.jsonl.zstd"), "root", "store"),
        (f"{dsh} session {blocked}", "database", "store")]
    assert all(f"shard {older.name!r} ({older.path}): no database file" in o.reason
               for o in refused)
    assert [(o.session_id, o.shard) for o in outcomes if isinstance(o, Imported)] == \
        [(free, free_home)]
    assert [o for o in outcomes if isinstance(o, SourceRead)] == [
        SourceRead(root, "root", 2), SourceRead(dsh, "database", 1)]
    assert not Path(older.path).exists() and not (tmp_path / "c.db").exists()


@pytest.mark.parametrize("target", [StoreTarget, ShardedStores])
def test_both_targets_implement_the_protocol_by_name(target: type) -> None:
    """mypy checks the signatures where the CLI passes either target; this checks that
    each method takes the protocol's parameter names, which a caller may pass by
    keyword."""
    import inspect

    for name in ("store_log", "store_stream", "stored_events", "close"):
        want = list(inspect.signature(getattr(ImportTarget, name)).parameters)
        assert list(inspect.signature(getattr(target, name)).parameters) == want, name
