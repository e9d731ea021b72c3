"""``surfacelog inspect | verify | digest | export | import --shard-map FILE`` over real
SQLite shard files."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.schema.codec import encode_log, read_log
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.store import SqliteEventStore
from surfacelog.store.shardmap import Shard, ShardMap, load_shard_map

from support.shared_examples import EXAMPLES

BASIC = read_log(EXAMPLES / "basic-turns.jsonl")
COMPACTION = read_log(EXAMPLES / "compaction.jsonl")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def invoke(runner: CliRunner, *args: str | Path) -> Result:
    """Run the CLI; fail the test on an uncaught exception (a traceback)."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def write_config(tmp_path: Path, *shards: tuple[str, int], name: str = "shards.json") -> Path:
    """A shard configuration of ``(name, added)`` pairs, files beside it (relative)."""
    config = tmp_path / name
    config.write_bytes(msgspec.json.encode({"shards": [
        {"name": shard, "path": f"{shard}.db", "added": added} for shard, added in shards]}))
    return config


def write_log(folder: Path, session_id: str, source: Path = EXAMPLES / "basic-turns.jsonl",
              ) -> Path:
    """A JSONL log of ``source``'s events under a header line naming ``session_id``."""
    log = read_log(source)
    path = folder / f"{session_id}.jsonl"
    path.write_bytes(encode_log(SessionHeader(version=SESSION_FORMAT_VERSION, id=session_id,
                                              created_at=log.events[0].time), log.events))
    return path


def plant(db: Path, session_id: str) -> None:
    """Store ``session_id`` in ``db`` directly, bypassing routing."""
    async def run() -> None:
        store = await SqliteEventStore.open(db)
        try:
            await store.create(SessionHeader(version=SESSION_FORMAT_VERSION, id=session_id,
                                             created_at=BASIC.events[0].time), BASIC.events)
        finally:
            await store.close()

    asyncio.run(run())


def stored_ids(db: Path) -> list[str]:
    async def run() -> list[str]:
        store = await SqliteEventStore.open(db, create=False)
        try:
            return [info.id for info in await store.list_sessions()]
        finally:
            await store.close()

    return asyncio.run(run())


def find_id(shard_map: ShardMap, want: Callable[[list[Shard]], bool]) -> str:
    """The first id ``x-N`` whose candidate shards satisfy ``want``."""
    for n in range(10_000):
        session_id = f"x-{n}"
        if want(shard_map.candidates(session_id)):
            return session_id
    raise AssertionError("no such id")


def table_ids(output: str) -> list[str]:
    """The first column of a rich table's body rows (the header row is drawn with
    heavy lines; continuation lines are skipped)."""
    ids = []
    for line in output.splitlines():
        if line.startswith("│"):
            first = line.split("│")[1].strip()
            if first:
                ids.append(first)
    return ids


@pytest.fixture
def sharded(tmp_path: Path, runner: CliRunner) -> tuple[Path, list[str]]:
    """Three shards (``c`` added later) filled through ``import --shard-map``: 12 sessions
    with ids ``s-00``... plus the ``compaction`` example."""
    config = write_config(tmp_path, ("a", 0), ("b", 0), ("c", 1))
    logs = tmp_path / "logs"
    logs.mkdir()
    files = [write_log(logs, f"s-{n:02d}") for n in range(12)]
    files.append(EXAMPLES / "compaction.jsonl")
    # Sessions homed on the older shards first: their files must exist before an id
    # whose candidates include them can be imported onto the newer shard.
    shard_map = load_shard_map(config)
    seeds = [write_log(logs, find_id(shard_map, lambda c, name=name: c[0].name == name))
             for name in ("a", "b")]
    result = invoke(runner, "import", "--shard-map", config, *seeds)
    assert result.exit_code == 0, result.output
    result = invoke(runner, "import", "--shard-map", config, *files)
    assert result.exit_code == 0, result.output
    ids = sorted([f"s-{n:02d}" for n in range(12)] + ["compaction"]
                 + [seed.stem for seed in seeds])
    return config, ids


def test_import_puts_each_session_on_its_home(
        sharded: tuple[Path, list[str]], tmp_path: Path) -> None:
    config, ids = sharded
    shard_map = load_shard_map(config)
    on: dict[str, list[str]] = {}
    for shard in shard_map.shards:
        for session_id in stored_ids(Path(shard.path)):
            on.setdefault(session_id, []).append(shard.name)
    assert sorted(on) == ids
    for session_id, holders in on.items():
        assert holders == [shard_map.home(session_id).name], session_id
    assert len({h[0] for h in on.values()}) == 3, "the ids should spread over every shard"


def test_verify_digest_export_inspect_over_shards(
        sharded: tuple[Path, list[str]], tmp_path: Path, runner: CliRunner) -> None:
    config, ids = sharded
    shard_map = load_shard_map(config)
    placed = {sid: name for name in shard_map.names
              for sid in stored_ids(Path(shard_map.get(name).path))}

    result = invoke(runner, "verify", "--shard-map", config)
    assert result.exit_code == 0, result.output
    for shard in shard_map.shards:
        count = sum(1 for name in placed.values() if name == shard.name)
        assert f"shard {shard.name} ({shard.path}): {count} session(s) checked, 0 failed" \
            in result.output
    assert f"{len(ids)} session(s) checked on 3 shard(s), 0 failed" in result.output

    # digest: ordered by id, each entry naming its shard, equal to a single-db digest.
    single = tmp_path / "single.db"
    assert invoke(runner, "import", single, write_log(tmp_path, "s-03"),
                  EXAMPLES / "compaction.jsonl").exit_code == 0
    merged = invoke(runner, "digest", "--shard-map", config, "--json")
    assert merged.exit_code == 0, merged.output
    entries = msgspec.json.decode(merged.stdout_bytes)
    assert [e["session"] for e in entries] == ids
    assert all(e["shard"] == placed[e["session"]] for e in entries)
    alone = msgspec.json.decode(invoke(runner, "digest", single, "--json").stdout_bytes)
    by_id = {e["session"]: e["digest"] for e in entries}
    assert by_id["s-03"] == alone["s-03"] and by_id["compaction"] == alone["compaction"]
    table = invoke(runner, "digest", "--shard-map", config)
    assert table.exit_code == 0 and "shard" in table.output

    # export: the bytes a single store exports, from whichever shard holds it.
    for session_id in ("compaction", "s-03"):
        out = invoke(runner, "export", "--shard-map", config, session_id)
        assert out.exit_code == 0, out.output
        assert out.stdout_bytes == invoke(runner, "export", single, session_id).stdout_bytes
    target = tmp_path / "out.jsonl"
    assert invoke(runner, "export", "--shard-map", config, "s-03", "-o", target).exit_code == 0
    assert target.read_bytes().split(b"\n", 1)[1] == (EXAMPLES / "basic-turns.jsonl").read_bytes()
    missing = invoke(runner, "export", "--shard-map", config, "nope")
    assert missing.exit_code == 1 and "'nope' is not stored" in missing.output

    # inspect SESSION: found on its shard, the same tree as from the single store.
    shown = invoke(runner, "inspect", "--shard-map", config, "compaction")
    assert shown.exit_code == 0, shown.output
    assert f"compaction (shard {placed['compaction']}): 254 events" in shown.output
    past = invoke(runner, "inspect", "--shard-map", config, "compaction", "--at", "10")
    assert past.exit_code == 0 and "as of seq 10" in past.output
    assert invoke(runner, "inspect", "--shard-map", config, "compaction",
                  "--at", "999").exit_code == 1
    assert invoke(runner, "inspect", "--shard-map", config, "nope").exit_code == 1


def test_inspect_pages_walk_every_session_once(
        sharded: tuple[Path, list[str]], runner: CliRunner) -> None:
    config, ids = sharded
    first = invoke(runner, "inspect", "--shard-map", config)
    assert first.exit_code == 0, first.output
    assert table_ids(first.output) == ids  # 15 ids < the default page of 50
    assert "this is the last page" in first.output

    seen: list[str] = []
    args = ["inspect", "--shard-map", str(config), "--limit", "4"]
    pages = 0
    while True:
        page = invoke(runner, *args)
        assert page.exit_code == 0, page.output
        rows = table_ids(page.output)
        assert 0 < len(rows) <= 4
        seen.extend(rows)
        pages += 1
        hint = [line for line in page.output.splitlines() if "next page: " in line]
        if not hint:
            assert "this is the last page" in page.output
            break
        args = shlex.split(hint[0].split("next page: ", 1)[1])[1:]
        assert args[:3] == ["inspect", "--shard-map", str(config)]
    assert seen == ids and pages == 4
    after_all = invoke(runner, "inspect", "--shard-map", config, "--after", ids[-1])
    assert after_all.exit_code == 0 and "0 session(s) listed" in after_all.output
    assert invoke(runner, "inspect", "--shard-map", config, "--limit", "0").exit_code == 2


def test_verify_fails_on_an_id_stored_on_two_shards(
        sharded: tuple[Path, list[str]], tmp_path: Path, runner: CliRunner) -> None:
    config, _ = sharded
    plant(tmp_path / "a.db", "twice")
    plant(tmp_path / "b.db", "twice")
    result = invoke(runner, "verify", "--shard-map", config)
    assert result.exit_code == 1, result.output
    assert "FAIL session twice is stored on 2 shards: a, b" in result.output
    assert "1 id(s) on several shards" in result.output
    entries = msgspec.json.decode(
        invoke(runner, "digest", "--shard-map", config, "--json").stdout_bytes)
    assert [e["shard"] for e in entries if e["session"] == "twice"] == ["a", "b"]


def test_verify_reports_a_session_outside_its_candidates(
        tmp_path: Path, runner: CliRunner) -> None:
    config = write_config(tmp_path, ("a", 0), ("b", 0))
    shard_map = load_shard_map(config)
    session_id = find_id(shard_map, lambda c: c[0].name == "a")
    plant(tmp_path / "a.db", "other")
    plant(tmp_path / "b.db", session_id)
    result = invoke(runner, "verify", "--shard-map", config)
    assert result.exit_code == 1
    assert (f"FAIL session {session_id} is stored on shard b, not one of its candidate "
            "shards (a)") in result.output


def test_import_never_creates_an_id_held_by_a_candidate(
        tmp_path: Path, runner: CliRunner) -> None:
    config = write_config(tmp_path, ("a", 0), ("b", 0), ("c", 1))
    shard_map = load_shard_map(config)
    session_id = find_id(shard_map, lambda c: len(c) == 2 and c[0].name == "c")
    older = shard_map.candidates(session_id)[1].name
    plant(tmp_path / f"{older}.db", session_id)
    log = write_log(tmp_path, session_id)
    result = invoke(runner, "import", "--shard-map", config, log)
    assert result.exit_code == 1
    assert f"session '{session_id}' is already stored (on shard '{older}')" in result.output
    home = tmp_path / "c.db"
    assert not home.exists() or session_id not in stored_ids(home)
    # ...and it is read from where it is.
    out = invoke(runner, "export", "--shard-map", config, session_id)
    assert out.exit_code == 0 and out.stdout_bytes == log.read_bytes()
    # Once every older file exists, a new id is created on its home (the file made
    # then); a second import finds it there and is refused as in a single store.
    for name in ("a", "b"):
        plant(tmp_path / f"{name}.db", find_id(shard_map, lambda c, n=name: c[0].name == n))
    fresh = find_id(shard_map, lambda c: c[0].name == "c" and c[1].name != older)
    fresh_log = write_log(tmp_path, fresh)
    first = invoke(runner, "import", "--shard-map", config, fresh_log)
    assert first.exit_code == 0, first.output
    assert f"imported as session {fresh} on shard c" in first.output
    assert stored_ids(home) == [fresh]
    again = invoke(runner, "import", "--shard-map", config, fresh_log)
    assert again.exit_code == 1
    assert f"session '{fresh}' is already stored (on shard 'c')" in again.output
    assert invoke(runner, "verify", "--shard-map", config).exit_code == 0


def test_import_refuses_when_a_candidate_shard_file_is_missing(
        tmp_path: Path, runner: CliRunner) -> None:
    config = write_config(tmp_path, ("a", 0), ("b", 0), ("c", 1))
    shard_map = load_shard_map(config)
    session_id = find_id(shard_map, lambda c: len(c) == 2 and c[0].name == "c")
    older = shard_map.candidates(session_id)[1]
    result = invoke(runner, "import", "--shard-map", config, write_log(tmp_path, session_id))
    assert result.exit_code == 1
    assert f"shard '{older.name}' ({older.path}): no database file" in result.output
    assert not (tmp_path / "c.db").exists()
    assert not Path(older.path).exists()


def test_a_dsh_root_session_a_missing_shard_may_hold_is_one_refusal(
        tmp_path: Path, runner: CliRunner) -> None:
    """As for a log file given by itself: one line naming the shard, exit 1, the rest of
    the root imported (it was a traceback)."""
    from surfacelog.schema.dsh import encode_dsh

    config = write_config(tmp_path, ("a", 0), ("b", 0), ("c", 1))
    shard_map = load_shard_map(config)
    session_id = find_id(shard_map, lambda c: len(c) == 2 and c[0].name == "c")
    older = shard_map.candidates(session_id)[1]
    folder = tmp_path / "sessions" / "_no-cwd" / session_id
    folder.mkdir(parents=True)
    (folder / "session.jsonl.zstd").write_bytes(encode_dsh(
        SessionHeader(version=SESSION_FORMAT_VERSION, id=session_id,
                      created_at=BASIC.events[0].time), BASIC.events, zstd=True))
    result = invoke(runner, "import", "--shard-map", config, tmp_path / "sessions")
    assert result.exit_code == 1
    assert (f"{folder / 'session.jsonl.zstd'}: refused (store): shard {older.name!r} "
            f"({older.path}): no database file") in result.output
    assert f"{tmp_path / 'sessions'}: 1 DSH session file(s)" in result.output
    assert not (tmp_path / "c.db").exists() and not Path(older.path).exists()


def test_read_commands_name_a_missing_shard_file(
        sharded: tuple[Path, list[str]], tmp_path: Path, runner: CliRunner) -> None:
    _, ids = sharded
    gone = write_config(tmp_path, ("a", 0), ("b", 0), ("c", 1), ("d", 2), name="more.json")
    missing = tmp_path / "d.db"
    needle = f"shard 'd' ({missing}): no database file"
    for args in (["verify"], ["digest"], ["digest", "--json"], ["inspect"]):
        result = invoke(runner, *args, "--shard-map", gone)
        assert result.exit_code == 1, (args, result.output)
        assert needle in result.output
    session_id = find_id(load_shard_map(gone), lambda c: c[0].name == "d")
    for args in (["export", session_id], ["inspect", session_id]):
        result = invoke(runner, *args, "--shard-map", gone)
        assert result.exit_code == 1 and needle in result.output
    assert not missing.exists()
    verify = invoke(runner, "verify", "--shard-map", gone)
    assert f"{len(ids)} session(s) checked on 4 shard(s)" in verify.output


def test_db_and_shards_together_or_neither_is_a_usage_error(
        sharded: tuple[Path, list[str]], tmp_path: Path, runner: CliRunner) -> None:
    config, _ = sharded
    db = tmp_path / "a.db"
    log = write_log(tmp_path, "z-1")
    cases = [
        ["verify", db, "--shard-map", config], ["verify"],
        ["digest", db, "--shard-map", config], ["digest"],
        ["inspect", db, "s-01", "--shard-map", config], ["inspect"],
        ["export", db, "s-01", "--shard-map", config], ["export"],
        ["import", db, log, "--shard-map", config], ["import"],
        ["inspect", db, "--shard-map", config], ["export", db, "--shard-map", config],
        ["import", db, "--shard-map", config],
        ["import", "--shard-map", config],
        ["inspect", db, "--limit", "3"],
    ]
    for args in cases:
        result = invoke(runner, *args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, (args, result.output)
    assert "z-1" not in stored_ids(db)


@pytest.mark.parametrize("content", [b"not json", b'{"shards": []}',
                                     b'{"shards": [{"name": "a", "path": "x.db"},'
                                     b' {"name": "a", "path": "y.db"}]}',
                                     b'{"shards": [{"name": "A", "path": "x.db"}]}'])
def test_bad_shard_configuration_is_one_line_naming_the_file(
        tmp_path: Path, runner: CliRunner, content: bytes) -> None:
    config = tmp_path / "bad.json"
    config.write_bytes(content)
    for args in (["verify"], ["digest"], ["inspect"], ["export", "s"],
                 ["import", str(EXAMPLES / "basic-turns.jsonl")]):
        result = invoke(runner, *args, "--shard-map", config)
        assert result.exit_code == 2, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and str(config) in lines[0], (args, result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]


def test_unreadable_shard_configuration_in_a_real_process(tmp_path: Path) -> None:
    config = tmp_path / "absent.json"
    done = subprocess.run([sys.executable, "-m", "surfacelog.cli", "verify", "--shard-map",
                           str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"cannot read shard configuration {config}: No such file or directory"]


# -- streamed imports onto shards ----------------------------------------------------------


def test_sharded_import_streams_once_the_home_shard_exists(tmp_path: Path) -> None:
    """``ShardedStores.import_stream`` stores a file on its home shard block by block
    when the home file exists, and declines (``None``, nothing created) when it does
    not: creating a shard must wait until the whole file is known valid."""
    from surfacelog.schema.codec import LogStream
    from surfacelog.store.shardset import ShardedStores

    config = write_config(tmp_path, ("a", 0), ("b", 0))
    shard_map = load_shard_map(config)
    session_id = find_id(shard_map, lambda c: c[0].name == "a")
    log = write_log(tmp_path, session_id, EXAMPLES / "compaction.jsonl")

    async def run() -> object:
        stores = ShardedStores(shard_map)
        try:
            with LogStream(log, runs=True) as stream:
                return await stores.import_stream(stream, log)
        finally:
            await stores.close()

    assert asyncio.run(run()) is None
    assert not (tmp_path / "a.db").exists()
    plant(tmp_path / "a.db", "seed-a")
    done = asyncio.run(run())
    assert done is not None
    shard, streamed = done  # type: ignore[misc]
    assert shard.name == "a" and streamed.events == len(COMPACTION.events)
    assert sorted(stored_ids(tmp_path / "a.db")) == sorted(["seed-a", session_id])
    assert not (tmp_path / "b.db").exists()


def test_sharded_streamed_import_reports_the_file_before_the_shards(
        tmp_path: Path, runner: CliRunner) -> None:
    """Streamed onto shards, a file's own error wins over another shard holding its id
    (the order of a whole-file import); a valid file held elsewhere is refused naming
    that shard; nothing is stored on the home shard either way."""
    config = write_config(tmp_path, ("a", 0), ("b", 0), ("c", 1))
    shard_map = load_shard_map(config)
    for name in ("a", "b", "c"):
        plant(tmp_path / f"{name}.db", f"seed-{name}")
    session_id = find_id(shard_map, lambda c: len(c) == 2 and c[0].name == "c")
    older = shard_map.candidates(session_id)[1].name
    plant(tmp_path / f"{older}.db", session_id)
    valid = write_log(tmp_path, session_id)
    bad = tmp_path / "bad.jsonl"
    lines = valid.read_bytes().splitlines(keepends=True)
    # The same id, one event's seq off: the core refuses it at that line.
    broken = msgspec.json.decode(lines[3])
    broken["seq"] += 5
    bad.write_bytes(b"".join([*lines[:3], msgspec.json.encode(broken) + b"\n", *lines[4:]]))
    before = stored_ids(tmp_path / "c.db")

    refused = invoke(runner, "import", "--shard-map", config, bad)
    assert refused.exit_code == 1
    assert "already stored" not in refused.output and "seq" in refused.output
    held = invoke(runner, "import", "--shard-map", config, valid)
    assert held.exit_code == 1
    assert f"session '{session_id}' is already stored (on shard '{older}')" in held.output
    assert stored_ids(tmp_path / "c.db") == before


def test_sharded_streamed_import_keeps_a_torn_tail_note(
        tmp_path: Path, runner: CliRunner) -> None:
    config = write_config(tmp_path, ("a", 0), ("b", 0))
    shard_map = load_shard_map(config)
    for name in ("a", "b"):
        plant(tmp_path / f"{name}.db", f"seed-{name}")
    session_id = find_id(shard_map, lambda c: c[0].name == "b")
    log = write_log(tmp_path, session_id)
    log.write_bytes(log.read_bytes() + b'{"type":"turn/st')
    result = invoke(runner, "import", "--shard-map", config, log)
    assert result.exit_code == 0, result.output
    assert f"imported as session {session_id} on shard b ({len(BASIC.events)} events;" \
        in result.output
    assert "torn" in result.output
    out = invoke(runner, "export", "--shard-map", config, session_id)
    assert out.exit_code == 0
    exported = tmp_path / "exported.jsonl"
    exported.write_bytes(out.stdout_bytes)
    assert read_log(exported).events == BASIC.events


# -- one name for a shard map file ------------------------------------------------------

SHARD_MAP_COMMANDS = ("export", "import", "verify", "restore", "digest", "inspect", "serve")
"""Every command that takes a shard map file."""


def test_a_shard_map_file_is_named_shard_map_on_every_command(runner: CliRunner) -> None:
    """``--shard-map FILE`` everywhere a file is meant; ``--shards`` is shown nowhere
    but on ``run``, where it is a count (``--local-nodes``) beside ``run
    --shard-map FILE``."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for name in (*SHARD_MAP_COMMANDS, "run"):
        params = group.commands[name].params
        shown = {opt: p for p in params if not getattr(p, "hidden", False) for opt in p.opts}
        assert shown["--shard-map"].metavar == "FILE", name
        help_text = invoke(runner, name, "--help").output
        assert "--shard-map" in help_text, name
        if name != "run":
            assert "--shards" not in shown and "--shards" not in help_text, name
    run_shards = next(p for p in group.commands["run"].params if "--shards" in p.opts)
    assert type(run_shards.type).__name__ == "IntRange"  # a count, not a file


@pytest.mark.parametrize("command", SHARD_MAP_COMMANDS)
def test_the_old_shards_file_option_is_a_usage_error(
        sharded: tuple[Path, list[str]], runner: CliRunner, command: str) -> None:
    """``--shard-map FILE`` is the one name of a shard map file (``run --shards N``
    alone keeps ``--shards``, a count): the old name is refused, exit 2, no traceback."""
    config, _ = sharded
    old = invoke(runner, command, "--shards", config)
    assert old.exit_code == 2, old.output
    assert "No such option: --shards" in old.output and "Traceback" not in old.output


def test_restore_needs_a_shard_map(tmp_path: Path, runner: CliRunner) -> None:
    result = invoke(runner, "restore", "s0", "--to", tmp_path / "x.db")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "usage error: surfacelog restore: missing option --shard-map FILE"]
