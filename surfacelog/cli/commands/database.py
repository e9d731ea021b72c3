"""The database commands: ``export``, ``import``, ``verify``, ``restore``, ``digest``,
``inspect`` and ``fork``, over one SQLite store (DB) or every shard of a shard
map (``--shard-map FILE``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from surfacelog.cli.common import (
    LIMIT_OPTION,
    CannotOpen,
    DbArg,
    JsonOpt,
    LegacyOpt,
    MaxLineOpt,
    ShardMapOpt,
    either,
    fail,
    open_store,
    refuse_unsafe_output,
    run_on_store,
    usage,
)
from surfacelog.schema.limits import MAX_LINE_BYTES

if TYPE_CHECKING:
    from surfacelog.store import SqliteEventStore, VerifyFailure
    from surfacelog.store.importing import ImportTarget, Outcome
    from surfacelog.store.shardmap import ShardMap
    from surfacelog.store.shardset import ShardedStores

# The store, the codec, rich and the import pipeline are imported inside each command:
# registering these commands must cost ``surfacelog --help`` and ``fold`` nothing.

_PAGE = 50


def register(app: typer.Typer) -> None:
    """Add the database commands to ``app``."""
    app.command()(export)
    app.command(name="import")(import_)
    app.command()(verify)
    app.command()(restore)
    app.command()(digest)
    app.command()(inspect)
    app.command(name="fork")(fork_command)


def _write(content: bytes, output: Path | None) -> None:
    """``content`` to ``output`` (atomically), or to stdout."""
    from surfacelog.cli.outputs import write_atomic

    if output is None:
        sys.stdout.buffer.write(content)
        sys.stdout.flush()
    else:
        write_atomic(output, content)


def export(db: DbArg = None,
           session: Annotated[str | None, typer.Argument(
               metavar="SESSION", show_default=False, help="session id")] = None,
           output: Annotated[Path | None, typer.Option("-o", "--output",
                                                       help="write here, not stdout")] = None,
           shards: ShardMapOpt = None,
           force: Annotated[bool, typer.Option(
               "--force", help="replace an existing output file (never a database)")
           ] = False,
           fmt: Annotated[Literal["jsonl", "dsh"], typer.Option(
               "--format", help="jsonl: one event per line; dsh: as DSH's JSONL backend "
                                "writes it (packed chunk rows)")] = "jsonl",
           zstd: Annotated[bool, typer.Option(
               "--zstd", help="with --format dsh: zstd frames (DSH's session.jsonl.zstd)")
           ] = False) -> None:
    """Write a stored session as DSH JSONL: its header line (``delegationDepth``
    always present), then one event per line. ``--format dsh`` writes what DSH's own
    JSONL backend writes: chunk runs as packed rows (runs of 3..1024, at most 1 MiB of
    data per row), and with ``--zstd`` one zstd frame for the header and one per batch
    of events (DSH's default ``session.jsonl.zstd``).
    With ``--shard-map FILE`` (then ``export --shard-map FILE SESSION``): from the shard that
    holds it, found among its candidate shards. The store is opened read-only.

    ``-o FILE`` is refused when it is the database (or its -wal/-shm file), any SQLite
    database, or an existing file without ``--force``; it is written to a temporary
    file in the same directory and renamed, so it is never left half-written.

    Exit 1 when the session is missing or unreadable (or, with ``--shard-map``, a shard
    file it may be on cannot be opened) or the output cannot be written, 2 when the
    store cannot be opened, the output is refused, on a usage error or a bad shard
    configuration.
    """
    import asyncio

    from surfacelog.cli.errors import OutputError
    from surfacelog.store.errors import StoreError
    from surfacelog.store.jsonl import export_session
    from surfacelog.store.shardset import ShardedStores
    from surfacelog.store.sqlite.file_format import is_sqlite_file

    if (shards is not None and session is None and db is not None
            and not is_sqlite_file(Path(db))):
        db, session = None, db
    shard_map = either("export", db, shards)
    if session is None:
        raise usage("export", "missing argument SESSION")
    if zstd and fmt != "dsh":
        raise usage("export", "--zstd needs --format dsh")
    session_id = session
    databases = ([db] if db is not None else
                 [s.path for s in shard_map.shards] if shard_map is not None else [])
    refuse_unsafe_output(output, databases, force)

    async def run_one(db_path: Path) -> bytes:
        store = await open_store(db_path, read_only=True)
        try:
            return await export_session(store, session_id, fmt=fmt, zstd=zstd)
        finally:
            await store.close()

    async def run_sharded(stores: ShardedStores) -> bytes:
        async with stores:
            _, content = await stores.export_session(session_id, fmt=fmt, zstd=zstd)
            return content

    try:
        if shard_map is None:
            assert db is not None
            content = run_on_store(run_one(Path(db)))
        else:
            content = asyncio.run(run_sharded(ShardedStores(shard_map)))
        _write(content, output)
    except (StoreError, OutputError) as exc:
        raise fail(exc) from exc


def import_(db: DbArg = None,
            files: Annotated[list[Path] | None, typer.Argument(
                metavar="FILE", show_default=False, help="JSONL session logs")] = None,
            legacy: LegacyOpt = False, shards: ShardMapOpt = None,
            max_line_bytes: MaxLineOpt = MAX_LINE_BYTES) -> None:
    """Store each JSONL log as a new session (its header line's id, else the file name
    without extension), after validating it through the core. Every DSH encoding is
    read (plain or zstd frames, packed chunk rows; a torn tail is dropped and said).

    A directory is a DSH sessions root (``<root>/--<cwd>--/<id>/session.jsonl[.zstd]``,
    ``_no-cwd/``) and a SQLite file with DSH's application id a DSH session database
    (schema version 17 only): every session of it is imported with its header, and
    reported on its own line: imported, already stored (the same events are stored
    under its id, so running the import again resumes it) or refused with the rule.
    With ``--shard-map FILE``
    (then ``import --shard-map FILE FILE...``): each session goes to its home shard (its
    file created when missing), after checking that no other candidate shard holds the
    id; nothing is ever created on another shard.

    Each file is read line by line (``--max-line-bytes``) and stored in one
    transaction, streamed (validated and inserted block by block: memory holds one
    block, not the file; not with ``--legacy``, nor with ``--shard-map`` for the file that
    creates its home shard, which is created only once the whole file is valid): a
    file reported "not imported" left nothing stored, and nothing of it
    is written later (a failed commit, e.g. on a full disk, is not retried with the
    next file), so importing it again later stores it.

    Exit 0 when every file was imported (for a root or DSH database: imported or
    already stored), 1 when a log is invalid or its session already exists (or, with
    ``--shard-map``, a shard file cannot be opened), 2 when a file cannot
    be read or is not JSONL or the store cannot be opened, on a usage error or a bad
    shard configuration.
    """
    from contextlib import aclosing

    from surfacelog.store.importing import ImportOptions, StoreTarget, import_sources
    from surfacelog.store.shardset import ShardedStores
    from surfacelog.store.sqlite.file_format import is_dsh_database, is_sqlite_file

    paths = list(files or [])
    if shards is not None and db is not None:
        if is_sqlite_file(Path(db)) and not is_dsh_database(Path(db)):
            raise usage("import", "give either DB or --shard-map FILE, not both")
        paths.insert(0, Path(db))
        db = None
    shard_map = either("import", db, shards)
    if not paths:
        raise usage("import", "missing argument FILE...")

    options = ImportOptions(legacy=legacy, max_line_bytes=max_line_bytes,
                            limit_option=LIMIT_OPTION)

    async def run() -> int:
        target: ImportTarget
        if shard_map is None:
            assert db is not None
            target = StoreTarget(await open_store(Path(db), create=True,
                                                  keep_failed=False))
        else:
            target = ShardedStores(shard_map, read_only=False, keep_failed=False)
        status = 0
        try:
            # Closed before the target even when printing fails: a DSH database the
            # pipeline is reading is closed with it.
            async with aclosing(import_sources(target, paths, options)) as outcomes:
                async for outcome in outcomes:
                    status = max(status, _report_import(outcome))
        finally:
            await target.close()
        return status

    raise typer.Exit(run_on_store(run()))


def _report_import(outcome: Outcome) -> int:
    """Print one outcome of ``import`` on its line (refusals on stderr); its exit
    status: 2 for a file given by itself that cannot be read and for a DSH root or
    database that cannot, 1 for any other refusal, else 0."""
    from surfacelog.cli.common import echo
    from surfacelog.store.importing import (
        AlreadyStored,
        Imported,
        Refused,
        SourceRead,
        SourceUnreadable,
    )

    match outcome:
        case Imported(label, _, session_id, events, shard, torn):
            where = "" if shard is None else f" on shard {shard}"
            note = f"; {torn}" if torn else ""
            echo(f"{label}: imported as session {session_id}{where} ({events} "
                 f"events{note})")
            return 0
        case AlreadyStored(label, _, session_id, events):
            echo(f"{label}: already stored as session {session_id} ({events} events)")
            return 0
        case Refused(_, "file", "unreadable", reason):
            echo(reason, err=True)
            return 2
        case Refused(label, "file", _, reason):
            echo(f"{label}: not imported: {reason}", err=True)
            return 1
        case Refused(label, _, rule, reason):
            echo(f"{label}: refused ({rule}): {reason}", err=True)
            return 1
        case SourceRead(path, "root", sessions):
            echo(f"{path}: {sessions} DSH session file(s)")
            return 0
        case SourceRead(path, _, sessions):
            echo(f"{path}: {sessions} DSH session(s)")
            return 0
        case SourceUnreadable(_, reason):
            echo(reason, err=True)
            return 2
    raise AssertionError(f"unknown import outcome {outcome!r}")


def verify(db: DbArg = None, shards: ShardMapOpt = None) -> None:
    """Reload every stored session through the full validation; print each failure by
    session and seq. With ``--shard-map FILE``: every session of every shard, reported per
    shard, then every id stored on more than one shard and every session stored on a
    shard that is not one of its candidates (both are failures).

    The store is opened read-only. A session that cannot be read (a corrupted page,
    data nested deeper than the nesting limit...) is reported and the others are
    still checked.

    Exit 0 when every session loads, 1 when one does not (or, with ``--shard-map``, a shard
    file cannot be opened, an id is on two shards or a session is misplaced), 2 when the
    store cannot be opened (missing, foreign, another version, truncated), on a usage
    error or a bad shard configuration.
    """
    from surfacelog.cli.common import echo
    from surfacelog.store.errors import StoreError
    from surfacelog.store.verify import verify_store

    shard_map = either("verify", db, shards)
    if shard_map is not None:
        raise typer.Exit(_verify_shards(shard_map))

    async def run() -> tuple[int, list[VerifyFailure]]:
        assert db is not None
        store = await open_store(Path(db), read_only=True)
        try:
            return await verify_store(store)
        finally:
            await store.close()

    try:
        checked, failures = run_on_store(run())
    except StoreError as exc:  # the sessions cannot even be listed
        echo(f"FAIL {db}: cannot list its sessions: {exc}")
        raise typer.Exit(1) from exc
    for failure in failures:
        where = "-" if failure.seq is None else str(failure.seq)
        echo(f"FAIL session {failure.session_id} seq {where}: {failure.message}")
    echo(f"{checked} session(s) checked, {len(failures)} failed")
    raise typer.Exit(1 if failures else 0)


def _verify_shards(shard_map: ShardMap) -> int:
    """Print ``verify_shards``; returns the exit status (0 when all is well, else 1)."""
    import asyncio

    from surfacelog.cli.common import echo
    from surfacelog.store.verify import verify_shards

    result = asyncio.run(verify_shards(shard_map))
    checked = failed = unreadable = 0
    for report in result.shards:
        if report.error is not None:
            unreadable += 1
            echo(f"FAIL shard {report.shard}: {report.error}")
            continue
        for failure in report.failures:
            where = "-" if failure.seq is None else str(failure.seq)
            echo(f"FAIL shard {report.shard} session {failure.session_id} "
                 f"seq {where}: {failure.message}")
        checked += report.checked
        failed += len(report.failures)
        echo(f"shard {report.shard} ({report.path}): {report.checked} session(s) "
             f"checked, {len(report.failures)} failed")
    for session_id, holders in result.duplicates.items():
        echo(f"FAIL session {session_id} is stored on {len(holders)} shards: "
             f"{', '.join(holders)}")
    for wrong in result.misplaced:
        echo(f"FAIL session {wrong.session_id} is stored on shard {wrong.shard}, "
             f"not one of its candidate shards ({', '.join(wrong.candidates)})")
    echo(f"{checked} session(s) checked on {len(result.shards)} shard(s), "
         f"{failed} failed, {unreadable} shard(s) unreadable, "
         f"{len(result.duplicates)} id(s) on several shards, "
         f"{len(result.misplaced)} misplaced")
    return 0 if result.ok else 1


def restore(
    shard: Annotated[str, typer.Argument(metavar="SHARD", help="the shard's name")],
    shards: Annotated[Path | None, typer.Option(
        "--shard-map", metavar="FILE", show_default=False,
        help="shard map (JSON) naming the shard's replica [required]")] = None,
    to: Annotated[Path | None, typer.Option(
        "--to", metavar="PATH", show_default=False,
        help="where to write the restored file (default: the shard's own path)")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="replace an existing file (and its -wal/-shm) at the target, "
                        "once the restored file verified")] = False,
    json: JsonOpt = False,
) -> None:
    """Restore shard SHARD from its Litestream replica (its ``replica`` in the shard
    configuration) to ``--to PATH``, or to the shard's own path, on this machine.

    Litestream restores into a temporary file beside the target; every session of it
    is loaded through the full validation before it is renamed into place, so nothing
    is written at the target unless it verified. A shard's writer does the same by
    itself when it starts and finds the shard's file missing.

    Exit 0 restored and verified; 1 the replica holds no backup, ``litestream restore``
    failed, or the restored file does not verify (nothing written); 2 usage: a bad
    shard configuration, an unknown shard, a shard without a replica, a target (or its
    -wal/-shm) that exists without ``--force``, no ``litestream`` command.
    """
    import asyncio

    import msgspec

    from surfacelog.cli.common import echo
    from surfacelog.store.errors import LitestreamNotFound, ReplicaError, RestoreRefused
    from surfacelog.store.replica import restore as restore_replica

    if shards is None:
        raise usage("restore", "missing option --shard-map FILE")
    shard_map = either("restore", None, shards)
    assert shard_map is not None
    try:
        chosen = shard_map.get(shard)
    except KeyError:
        raise usage("restore", f"no shard {shard!r} in {shards} (shards: "
                     f"{', '.join(shard_map.names)})") from None
    if chosen.replica is None:
        raise usage("restore", f"shard {shard!r} has no replica in {shards}")
    target = to if to is not None else Path(chosen.path)
    try:
        report = asyncio.run(restore_replica(chosen.replica, target, shard=chosen.name,
                                             force=force))
    except (RestoreRefused, LitestreamNotFound) as exc:
        echo(exc, err=True)
        raise typer.Exit(2) from exc
    except ReplicaError as exc:
        raise fail(exc) from exc
    except OSError as exc:
        echo(f"cannot write {target}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from exc
    assert report is not None
    if json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        echo(f"restored shard {report.shard} to {report.path}: {report.bytes} bytes, "
             f"{report.sessions} session(s), {report.events} event(s), all verified "
             f"(restore {report.restore_s:.2f} s, verification {report.verify_s:.2f} s)")


def digest(db: DbArg = None, json: JsonOpt = False, shards: ShardMapOpt = None) -> None:
    """Replay every stored session and print its digest (length, nodes, generation,
    message ids, hash of the messages). ``run`` compares these with the live actors.
    With ``--shard-map FILE``: every shard's sessions, ordered by session id, each naming
    its shard (``--json``: a list of ``{"session", "shard", "digest"}``).

    The store is opened read-only. A session that cannot be read is reported on stderr
    (``FAIL session ID: why``) and left out; the others are digested.

    Exit 0 when every session was digested, 1 when one could not be read (or, with
    ``--shard-map``, a shard file cannot be opened), 2 when the store cannot be opened
    (missing, foreign, another version, truncated), on a usage error or a bad shard
    configuration."""
    import asyncio

    import msgspec
    from rich.console import Console
    from rich.table import Column, Table

    from surfacelog.cli.common import echo
    from surfacelog.cli.render import text
    from surfacelog.schema.codec import encode_json
    from surfacelog.store.digests import shard_digests, store_digest_report
    from surfacelog.store.errors import StoreError

    shard_map = either("digest", db, shards)
    if shard_map is None:
        assert db is not None

        async def report() -> Any:
            store = await open_store(Path(db), read_only=True)
            try:
                return await store_digest_report(store)
            finally:
                await store.close()

        try:
            digests, failures = run_on_store(report())
        except StoreError as exc:
            raise fail(exc) from exc
        for failure in failures:
            echo(f"FAIL session {failure.session_id}: {failure.message}", err=True)
        if json:
            sys.stdout.write(encode_json(msgspec.to_builtins(digests)).decode() + "\n")
            raise typer.Exit(1 if failures else 0)
        table = Table(Column("session", overflow="fold"), "events", "nodes", "generation",
                      "messages", "sha256")
        for sid, d in digests.items():
            table.add_row(text(sid), str(d.length), str(len(d.nodes)),
                          str(d.replace_generation), str(len(d.message_ids)),
                          d.messages_sha256[:16])
        Console().print(table)
        raise typer.Exit(1 if failures else 0)
    try:
        entries = asyncio.run(shard_digests(shard_map))
    except StoreError as exc:
        raise fail(exc) from exc
    if json:
        sys.stdout.write(encode_json(msgspec.to_builtins(entries)).decode() + "\n")
        return
    table = Table(Column("session", overflow="fold"), "shard", "events", "nodes",
                  "generation", "messages", "sha256")
    for entry in entries:
        d = entry.digest
        table.add_row(text(entry.session), text(entry.shard), str(d.length),
                      str(len(d.nodes)), str(d.replace_generation),
                      str(len(d.message_ids)), d.messages_sha256[:16])
    Console().print(table)


def inspect(db: DbArg = None,
            session: Annotated[str | None, typer.Argument(
                metavar="SESSION", show_default=False, help="session id")] = None,
            at: Annotated[int | None, typer.Option("--at", help="as of this seq")] = None,
            shards: ShardMapOpt = None,
            limit: Annotated[int | None, typer.Option(
                "--limit", min=1, show_default=False,
                help=f"with --shard-map: sessions per page (default {_PAGE})")] = None,
            after: Annotated[str | None, typer.Option(
                "--after", metavar="ID",
                help="with --shard-map: list the sessions whose id sorts after ID")] = None,
            ) -> None:
    """Without SESSION: a table of sessions. With it: the surface as a tree, each
    replacement expanded to the events it shadowed (``--at``: as of a past seq).

    With ``--shard-map FILE`` (then ``inspect --shard-map FILE [SESSION]``): the sessions of
    every shard merged by id with a shard column, one page at a time (``--limit``,
    ``--after``; the table ends with the command for the next page), or SESSION found
    on its shard. The store is opened read-only; a session that cannot be read is
    listed as unreadable and the others are shown.

    Exit 1 when the session is missing or unreadable (or one of the table's), or a
    shard file cannot be opened, 2 when the store cannot be opened (missing, foreign,
    another version, truncated), on a usage error or a bad shard configuration."""
    from rich.console import Console

    from surfacelog.cli.common import echo
    from surfacelog.cli.inspection import inspect_db, inspect_shards
    from surfacelog.store.errors import StoreError
    from surfacelog.store.sqlite.file_format import is_sqlite_file

    if shards is not None and db is not None:
        if session is not None or is_sqlite_file(Path(db)):
            raise usage("inspect", "give either DB or --shard-map FILE, not both")
        db, session = None, db
    shard_map = either("inspect", db, shards)
    if shard_map is None:
        if limit is not None or after is not None:
            raise usage("inspect", "--limit and --after page the --shard-map table")
        assert db is not None

        async def opened() -> SqliteEventStore:
            return await open_store(Path(db), read_only=True)

        try:
            status = inspect_db(db, session, at, Console(), opener=opened)
        except CannotOpen as exc:
            echo(exc, err=True)
            raise typer.Exit(2) from exc
        except StoreError as exc:
            raise fail(exc) from exc
        raise typer.Exit(status)
    assert shards is not None
    try:
        status = inspect_shards(shard_map, str(shards), session, at,
                                _PAGE if limit is None else limit, after, Console())
    except StoreError as exc:
        raise fail(exc) from exc
    raise typer.Exit(status)


def fork_command(
        db: Annotated[Path, typer.Argument(help="SQLite store file")],
        session: Annotated[str, typer.Argument(metavar="SESSION", help="session to fork")],
        at: Annotated[int | None, typer.Option(
            "--at", metavar="SEQ", help="last seq of the seed (default: the last event)")
        ] = None,
        child: Annotated[str | None, typer.Option(
            "--id", metavar="NEW", help="the child's id (default: a new UUID)")] = None,
        json: JsonOpt = False) -> None:
    """Store a new session seeded with SESSION's log up to seq --at (inclusive); print
    the child's id. The seed may not end inside a turn.

    Exit 0 on success; 3 SESSION_ALREADY_EXISTS (--id taken), 4 SESSION_NOT_FOUND, 5
    INVALID_BOUNDARY (--at not a seq of the log), 6 OPEN_TURN (--at inside a turn), 1
    when the store fails, 2 when it cannot be opened, 130 when interrupted.
    """
    from surfacelog.cli.common import echo
    from surfacelog.cli.forking import FORK_EXIT, fork_stored
    from surfacelog.schema.codec import encode_json
    from surfacelog.session.errors import ForkError
    from surfacelog.store.errors import StoreError

    try:
        child_id = run_on_store(fork_stored(db, session, at, child))
    except ForkError as exc:
        if json:
            typer.echo(encode_json({"ok": False, "code": exc.code, "error": exc.detail}).decode())
        else:
            echo(f"surfacelog fork: {exc}", err=True)
        raise typer.Exit(FORK_EXIT[exc.code]) from None
    except StoreError as exc:
        echo(f"surfacelog fork: {exc}", err=True)
        raise typer.Exit(1) from None
    if json:
        typer.echo(encode_json({"ok": True, "id": child_id, "source": session, "at": at}).decode())
    else:
        echo(child_id)
