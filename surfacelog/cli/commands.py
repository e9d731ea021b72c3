"""The ``surfacelog`` command line."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sys
from contextlib import aclosing
from inspect import Parameter, Signature
from pathlib import Path
from typing import Annotated, Any, Literal, get_type_hints

import msgspec
import typer
from rich.console import Console
from rich.text import Text

from surfacelog.cli.outputs import OutputError, check_output, write_atomic
from surfacelog.cli.render import echo, surface_tree, text
from surfacelog.cli.runmodel import RunConfig
from surfacelog.schema.codec import LogFile, encode_json, read_log, reading
from surfacelog.schema.errors import LogError, SurfacelogError, UnreadableLog
from surfacelog.schema.gcpause import gc_paused
from surfacelog.schema.limits import MAX_LINE_BYTES
from surfacelog.session import (
    Session,
    interrupted_turn_closers,
    replay,
    upgrade_legacy,
)
from surfacelog.store import (
    SqliteEventStore,
    VerifyFailure,
    export_session,
    verify_store,
)
from surfacelog.store.dsh_sources import is_dsh_database
from surfacelog.store.errors import StoreError
from surfacelog.store.importing import (
    AlreadyStored,
    Imported,
    ImportOptions,
    ImportTarget,
    Outcome,
    Refused,
    SourceRead,
    SourceUnreadable,
    StoreTarget,
    import_sources,
)
from surfacelog.store.replica import LitestreamNotFound, ReplicaError, RestoreRefused
from surfacelog.store.replica import restore as restore_replica
from surfacelog.store.shardmap import ShardConfigError, ShardMap, load_shard_map
from surfacelog.store.shardset import ShardedStores
from surfacelog.store.verify import verify_shards

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Event-sourced agent session logs with a replaceable surface.")

FileArgs = Annotated[list[Path], typer.Argument(help="JSONL session logs", exists=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
LegacyOpt = Annotated[bool, typer.Option("--legacy", help="mark a markerless log first")]
MaxLineOpt = Annotated[int, typer.Option(
    "--max-line-bytes", min=1, metavar="BYTES",
    help="refuse an input line longer than this (the file is read line by line)")]


_LIMIT_OPTION = "--max-line-bytes"
"""The option that raises the line limit, named by a too-long line's message."""


def _read(path: Path, legacy: bool, max_line_bytes: int = MAX_LINE_BYTES) -> LogFile:
    """The whole log file at ``path`` (marked first with ``legacy``). Raises
    ``UnreadableLog`` (exit 2), ``LogError``."""
    with reading(path, limit_option=_LIMIT_OPTION):
        log = read_log(path, max_line_bytes=max_line_bytes)
    if legacy:
        return LogFile(log.header, upgrade_legacy(log.events))
    return log


class _NotASeq(SurfacelogError):
    """``fold --at`` names no seq of the file's log."""


def _fold_one(path: Path, legacy: bool, max_line_bytes: int,
              at: int | None = None) -> tuple[dict[str, Any], Session]:
    """The fold of one file (as of seq ``at`` when given) and its session. Raises
    ``UnreadableLog``, ``LogError``, ``_NotASeq``."""
    log = _read(path, legacy, max_line_bytes)
    session = replay(log.events, log.header)
    if at is not None and not 0 <= at < len(session):
        raise _NotASeq(f"--at {at} is not a seq of {path} (0..{len(session) - 1})")
    nodes = session.surface.nodes if at is None else session.surface_at(at).nodes
    result: dict[str, Any] = {
        "file": str(path),
        "ok": True,
        "nodes": list(nodes),
        "replacements": [
            {"seq": r.seq, "start": r.start, "end": r.end, "shadowedSeqs": list(r.shadowed_seqs)}
            for r in session.replacements() if at is None or r.seq <= at
        ],
        "messages": [m["id"] for m in session.derive_messages(as_of=at)],
    }
    if at is not None:
        result["at"] = at
    return result, session


def _fold_print(path: Path, json: bool, legacy: bool, max_line_bytes: int,
                at: int | None, console: Console) -> int:
    """Fold one file for ``fold`` and print it; its exit status (0, 1 or 2)."""
    status = 0
    session: Session | None = None
    try:
        result, session = _fold_one(path, legacy, max_line_bytes, at)
    except UnreadableLog as exc:
        status = 2
        result = {"file": str(path), "ok": False, "error": str(exc), "rule": "unreadable"}
    except _NotASeq as exc:
        status = 1
        result = {"file": str(path), "ok": False, "error": str(exc), "rule": "at"}
    except LogError as exc:
        result = {"file": str(path), "ok": False, "error": str(exc), "rule": exc.rule}
    if json:
        sys.stdout.write(encode_json(result).decode() + "\n")
        return status
    if session is None:
        console.print(Text.assemble(text(f"{path}: invalid", "red"),
                                    text(f" ({result['rule']}): {result['error']}")))
        return status
    when = "" if at is None else f" as of seq {at}"
    shown = [r for r in session.replacements() if at is None or r.seq <= at]
    console.print(surface_tree(
        f"{path}{when}: {len(session.log) if at is None else at + 1} events, "
        f"{len(result['nodes'])} nodes, {len(result['replacements'])} replacement(s), "
        f"{len(result['messages'])} messages",
        result["nodes"], session.log, shown))
    return status


@app.command()
def fold(files: FileArgs, json: JsonOpt = False, legacy: LegacyOpt = False,
         max_line_bytes: MaxLineOpt = MAX_LINE_BYTES,
         at: Annotated[int | None, typer.Option(
             "--at", metavar="SEQ", min=0,
             help="time travel: the surface as of this seq (the log's first SEQ+1 "
                  "events)")] = None) -> None:
    """Replay each log; print its surface (nodes, replacements, message ids), now or as
    of seq ``--at``.

    Exit 0 when every file was read (valid or not), 1 when ``--at`` is not a seq of a
    valid file, 2 when one cannot be read, is not JSONL or has a line longer than
    ``--max-line-bytes``, 130 when interrupted.
    """
    console = Console()
    status = 0
    for path in files:
        # The collector is held off for each file until its session is dropped: a fold
        # builds a log's worth of long-lived acyclic containers (the events' data),
        # which each collection meanwhile would traverse in vain (a young and then a
        # middle generation pass: about 0.3 s of CPU per 200k events, a third of the
        # fold); none of them outlives the file.
        with gc_paused():
            status = max(status, _fold_print(path, json, legacy, max_line_bytes, at,
                                             console))
    raise typer.Exit(status)


@app.command()
def repair(file: Annotated[Path, typer.Argument(help="JSONL session log")],
           json: JsonOpt = False, legacy: LegacyOpt = False,
           max_line_bytes: MaxLineOpt = MAX_LINE_BYTES) -> None:
    """Print the events that close the log's interrupted turn (empty when none).

    Exit 2 when the file cannot be read, is not JSONL or has a line longer than
    ``--max-line-bytes``, 1 when the log is invalid (data nested deeper than the
    nesting limit included), 130 when interrupted.
    """
    try:
        log = _read(file, legacy, max_line_bytes)
        replay(log.events, log.header)
    except UnreadableLog as exc:
        echo(exc, err=True)
        raise typer.Exit(2) from exc
    except LogError as exc:
        echo(f"invalid log ({exc.rule}): {exc}", err=True)
        raise typer.Exit(1) from exc
    closers = interrupted_turn_closers(log.events)
    if json:
        sys.stdout.write(encode_json(closers).decode() + "\n")
        return
    console = Console()
    if not closers:
        console.print("the last turn is closed: nothing to repair")
    for event in closers:
        console.print(text(encode_json(event).decode()), soft_wrap=True)


# -- store commands -------------------------------------------------------------------

DbArg = Annotated[str | None, typer.Argument(
    metavar="DB", show_default=False, help="SQLite store file (or --shards FILE instead)")]
ShardsOpt = Annotated[Path | None, typer.Option(
    "--shards", metavar="FILE", show_default=False,
    help="shard configuration (JSON) to use instead of DB: work over every shard's "
         "file, each of which must be readable from this machine")]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_PAGE = 50


def _usage(command: str, problem: str) -> typer.Exit:
    """Print a one-line usage error for ``command``; the exit (status 2) to raise."""
    typer.echo(f"usage error: surfacelog {command}: {problem}", err=True)
    return typer.Exit(2)


def _either(command: str, db: str | None, shards: Path | None) -> ShardMap | None:
    """The shard map of ``--shards`` (``None`` for a single DB). Exits 2 with a one-line
    message unless exactly one of DB and ``--shards`` is given, or when the shard
    configuration cannot be read or is malformed."""
    if db is not None and shards is not None:
        raise _usage(command, "give either DB or --shards FILE, not both")
    if shards is None:
        if db is None:
            raise _usage(command, "give either DB or --shards FILE")
        return None
    try:
        return load_shard_map(shards)
    except ShardConfigError as exc:
        echo(f"bad shard configuration: {exc}", err=True)
        raise typer.Exit(2) from exc
    except OSError as exc:
        echo(f"cannot read shard configuration {shards}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from exc


def _fail(exc: Exception) -> typer.Exit:
    """Print ``exc`` on one line; the exit (status 1) to raise."""
    echo(exc, err=True)
    return typer.Exit(1)


class _CannotOpen(SurfacelogError):
    """A store a command needs cannot be opened (exit 2)."""


async def _open_store(db: Path, *, create: bool = False, read_only: bool = False,
                      keep_failed: bool = True) -> SqliteEventStore:
    """Open ``db``; read-only commands pass ``read_only`` (a SQLite ``mode=ro`` open:
    never created, never written). Raises ``_CannotOpen`` with a one-line message: a
    missing database ("no database at DB"), a file of another build, a foreign,
    truncated or unreadable file."""
    try:
        return await SqliteEventStore.open(db, create=create, read_only=read_only,
                                           keep_failed=keep_failed)
    except FileNotFoundError as exc:
        raise _CannotOpen(f"cannot open store {db}: no database at {db} (nothing was "
                          f"created)") from exc
    except (StoreError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise _CannotOpen(f"cannot open store {db}: {reason}") from exc


def _run_on_store(work: Any) -> Any:
    """``asyncio.run(work)``, turning ``_CannotOpen`` into its one line and exit 2."""
    try:
        return asyncio.run(work)
    except _CannotOpen as exc:
        echo(exc, err=True)
        raise typer.Exit(2) from exc


def _write(content: bytes, output: Path | None) -> None:
    if output is None:
        sys.stdout.buffer.write(content)
        sys.stdout.flush()
    else:
        write_atomic(output, content)


def _check_output(output: Path | None, databases: list[str], force: bool) -> None:
    """Refuse (exit 2, one line) an output that would destroy data: see ``outputs``."""
    if output is None:
        return
    try:
        check_output(output, databases=databases, force=force)
    except OutputError as exc:
        echo(exc, err=True)
        raise typer.Exit(2) from exc


@app.command()
def export(db: DbArg = None,
           session: Annotated[str | None, typer.Argument(
               metavar="SESSION", show_default=False, help="session id")] = None,
           output: Annotated[Path | None, typer.Option("-o", "--output",
                                                       help="write here, not stdout")] = None,
           shards: ShardsOpt = None,
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
    With ``--shards FILE`` (then ``export --shards FILE SESSION``): from the shard that
    holds it, found among its candidate shards. The store is opened read-only.

    ``-o FILE`` is refused when it is the database (or its -wal/-shm file), any SQLite
    database, or an existing file without ``--force``; it is written to a temporary
    file in the same directory and renamed, so it is never left half-written.

    Exit 1 when the session is missing or unreadable (or, with ``--shards``, a shard
    file it may be on cannot be opened) or the output cannot be written, 2 when the
    store cannot be opened, the output is refused, on a usage error or a bad shard
    configuration.
    """
    if (shards is not None and session is None and db is not None
            and not _is_sqlite(Path(db))):
        db, session = None, db
    shard_map = _either("export", db, shards)
    if session is None:
        raise _usage("export", "missing argument SESSION")
    if zstd and fmt != "dsh":
        raise _usage("export", "--zstd needs --format dsh")
    session_id = session
    databases = ([db] if db is not None else
                 [s.path for s in shard_map.shards] if shard_map is not None else [])
    _check_output(output, databases, force)

    async def run_one(db_path: Path) -> bytes:
        store = await _open_store(db_path, read_only=True)
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
            content = _run_on_store(run_one(Path(db)))
        else:
            content = asyncio.run(run_sharded(ShardedStores(shard_map)))
        _write(content, output)
    except (StoreError, OutputError) as exc:
        raise _fail(exc) from exc


@app.command(name="import")
def import_(db: DbArg = None,
            files: Annotated[list[Path] | None, typer.Argument(
                metavar="FILE", show_default=False, help="JSONL session logs")] = None,
            legacy: LegacyOpt = False, shards: ShardsOpt = None,
            max_line_bytes: MaxLineOpt = MAX_LINE_BYTES) -> None:
    """Store each JSONL log as a new session (its header line's id, else the file name
    without extension), after validating it through the core. Every DSH encoding is
    read (plain or zstd frames, packed chunk rows; a torn tail is dropped and said).

    A directory is a DSH sessions root (``<root>/--<cwd>--/<id>/session.jsonl[.zstd]``,
    ``_no-cwd/``) and a SQLite file with DSH's application id a DSH session database
    (schema version 17 only): every session of it is imported with its header, and
    reported on its own line: imported, already stored (the same events are stored
    under its id, so running the import again resumes it) or refused with the rule.
    With ``--shards FILE``
    (then ``import --shards FILE FILE...``): each session goes to its home shard (its
    file created when missing), after checking that no other candidate shard holds the
    id; nothing is ever created on another shard.

    Each file is read line by line (``--max-line-bytes``) and stored in one
    transaction, streamed (validated and inserted block by block: memory holds one
    block, not the file; not with ``--legacy``, nor with ``--shards`` for the file that
    creates its home shard, which is created only once the whole file is valid): a
    file reported "not imported" left nothing stored, and nothing of it
    is written later (a failed commit, e.g. on a full disk, is not retried with the
    next file), so importing it again later stores it.

    Exit 0 when every file was imported (for a root or DSH database: imported or
    already stored), 1 when a log is invalid or its session already exists (or, with
    ``--shards``, a shard file cannot be opened), 2 when a file cannot
    be read or is not JSONL or the store cannot be opened, on a usage error or a bad
    shard configuration.
    """
    paths = list(files or [])
    if shards is not None and db is not None:
        if _is_sqlite(Path(db)) and not is_dsh_database(Path(db)):
            raise _usage("import", "give either DB or --shards FILE, not both")
        paths.insert(0, Path(db))
        db = None
    shard_map = _either("import", db, shards)
    if not paths:
        raise _usage("import", "missing argument FILE...")

    options = ImportOptions(legacy=legacy, max_line_bytes=max_line_bytes,
                            limit_option=_LIMIT_OPTION)

    async def run() -> int:
        target: ImportTarget
        if shard_map is None:
            assert db is not None
            target = StoreTarget(await _open_store(Path(db), create=True,
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

    raise typer.Exit(_run_on_store(run()))


def _report_import(outcome: Outcome) -> int:
    """Print one outcome of ``import`` on its line (refusals on stderr); its exit
    status: 2 for a file given by itself that cannot be read and for a DSH root or
    database that cannot, 1 for any other refusal, else 0."""
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


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a readable file that starts like a SQLite database: with
    ``--shards``, a positional that is one is a DB given as well, not a session id or a
    log."""
    try:
        with path.open("rb") as f:
            return f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


@app.command()
def verify(db: DbArg = None, shards: ShardsOpt = None) -> None:
    """Reload every stored session through the full validation; print each failure by
    session and seq. With ``--shards FILE``: every session of every shard, reported per
    shard, then every id stored on more than one shard and every session stored on a
    shard that is not one of its candidates (both are failures).

    The store is opened read-only. A session that cannot be read (a corrupted page,
    data nested deeper than the nesting limit...) is reported and the others are
    still checked.

    Exit 0 when every session loads, 1 when one does not (or, with ``--shards``, a shard
    file cannot be opened, an id is on two shards or a session is misplaced), 2 when the
    store cannot be opened (missing, foreign, another version, truncated), on a usage
    error or a bad shard configuration.
    """
    shard_map = _either("verify", db, shards)
    if shard_map is not None:
        raise typer.Exit(_verify_shards(shard_map))

    async def run() -> tuple[int, list[VerifyFailure]]:
        assert db is not None
        store = await _open_store(Path(db), read_only=True)
        try:
            return await verify_store(store)
        finally:
            await store.close()

    try:
        checked, failures = _run_on_store(run())
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


@app.command()
def restore(
    shard: Annotated[str, typer.Argument(metavar="SHARD", help="the shard's name")],
    shards: Annotated[Path, typer.Option(
        "--shards", metavar="FILE", help="shard configuration (JSON) naming the shard's "
        "replica")],
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
    shard_map = _either("restore", None, shards)
    assert shard_map is not None
    try:
        chosen = shard_map.get(shard)
    except KeyError:
        raise _usage("restore", f"no shard {shard!r} in {shards} (shards: "
                     f"{', '.join(shard_map.names)})") from None
    if chosen.replica is None:
        raise _usage("restore", f"shard {shard!r} has no replica in {shards}")
    target = to if to is not None else Path(chosen.path)
    try:
        report = asyncio.run(restore_replica(chosen.replica, target, shard=chosen.name,
                                             force=force))
    except (RestoreRefused, LitestreamNotFound) as exc:
        echo(exc, err=True)
        raise typer.Exit(2) from exc
    except ReplicaError as exc:
        raise _fail(exc) from exc
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


@app.command()
def digest(db: DbArg = None, json: JsonOpt = False, shards: ShardsOpt = None) -> None:
    """Replay every stored session and print its digest (length, nodes, generation,
    message ids, hash of the messages). ``run`` compares these with the live actors.
    With ``--shards FILE``: every shard's sessions, ordered by session id, each naming
    its shard (``--json``: a list of ``{"session", "shard", "digest"}``).

    The store is opened read-only. A session that cannot be read is reported on stderr
    (``FAIL session ID: why``) and left out; the others are digested.

    Exit 0 when every session was digested, 1 when one could not be read (or, with
    ``--shards``, a shard file cannot be opened), 2 when the store cannot be opened
    (missing, foreign, another version, truncated), on a usage error or a bad shard
    configuration."""
    from rich.table import Column, Table

    from surfacelog.store.digests import shard_digests, store_digest_report

    shard_map = _either("digest", db, shards)
    if shard_map is None:
        assert db is not None

        async def report() -> Any:
            store = await _open_store(Path(db), read_only=True)
            try:
                return await store_digest_report(store)
            finally:
                await store.close()

        try:
            digests, failures = _run_on_store(report())
        except StoreError as exc:
            raise _fail(exc) from exc
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
        raise _fail(exc) from exc
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


@app.command()
def inspect(db: DbArg = None,
            session: Annotated[str | None, typer.Argument(
                metavar="SESSION", show_default=False, help="session id")] = None,
            at: Annotated[int | None, typer.Option("--at", help="as of this seq")] = None,
            shards: ShardsOpt = None,
            limit: Annotated[int | None, typer.Option(
                "--limit", min=1, show_default=False,
                help=f"with --shards: sessions per page (default {_PAGE})")] = None,
            after: Annotated[str | None, typer.Option(
                "--after", metavar="ID",
                help="with --shards: list the sessions whose id sorts after ID")] = None,
            ) -> None:
    """Without SESSION: a table of sessions. With it: the surface as a tree, each
    replacement expanded to the events it shadowed (``--at``: as of a past seq).

    With ``--shards FILE`` (then ``inspect --shards FILE [SESSION]``): the sessions of
    every shard merged by id with a shard column, one page at a time (``--limit``,
    ``--after``; the table ends with the command for the next page), or SESSION found
    on its shard. The store is opened read-only; a session that cannot be read is
    listed as unreadable and the others are shown.

    Exit 1 when the session is missing or unreadable (or one of the table's), or a
    shard file cannot be opened, 2 when the store cannot be opened (missing, foreign,
    another version, truncated), on a usage error or a bad shard configuration."""
    from surfacelog.cli.inspection import inspect_db, inspect_shards

    if shards is not None and db is not None:
        if session is not None or _is_sqlite(Path(db)):
            raise _usage("inspect", "give either DB or --shards FILE, not both")
        db, session = None, db
    shard_map = _either("inspect", db, shards)
    if shard_map is None:
        if limit is not None or after is not None:
            raise _usage("inspect", "--limit and --after page the --shards table")
        assert db is not None

        async def opened() -> SqliteEventStore:
            return await _open_store(Path(db), read_only=True)

        try:
            status = inspect_db(db, session, at, Console(), opener=opened)
        except _CannotOpen as exc:
            echo(exc, err=True)
            raise typer.Exit(2) from exc
        except StoreError as exc:
            raise _fail(exc) from exc
        raise typer.Exit(status)
    assert shards is not None
    try:
        status = inspect_shards(shard_map, str(shards), session, at,
                                _PAGE if limit is None else limit, after, Console())
    except StoreError as exc:
        raise _fail(exc) from exc
    raise typer.Exit(status)


@app.command()
def serve(db: Annotated[str | None, typer.Option(
              "--db", metavar="FILE", show_default=False,
              help="SQLite store file (default surfacelog.db)")] = None,
          shards: ShardsOpt = None,
          host: Annotated[str, typer.Option("--host", help="address to listen on")
                          ] = "127.0.0.1",
          port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8000,
          token_file: Annotated[Path | None, typer.Option(
              "--token-file", metavar="FILE", show_default=False,
              help="bearer tokens, one 'TOKEN [PREFIX...]' per line (else the variable "
                   "SURFACELOG_GATEWAY_TOKENS)")] = None,
          insecure_no_auth: Annotated[bool, typer.Option(
              "--insecure-no-auth", help="serve without tokens (loopback only)")] = False,
          address: Annotated[str | None, typer.Option(
              "--address", help="join this Ray cluster instead of an embedded one")] = None,
          placement: Annotated[str, typer.Option(
              "--placement", help="packed or dedicated session actors")] = "packed",
          writer: Annotated[str, typer.Option(
              "--writer", help="auto (owner when packed), owner or journal")] = "auto",
          ) -> None:
    """Serve the sessions over HTTP (the gateway: a Ray Serve app) until Ctrl-C.

    Exit 2 on a usage error, a bad token or shard configuration, 1 when it cannot start.
    """
    from surfacelog.cli.serving import serve_gateway

    if placement not in ("packed", "dedicated") or writer not in ("auto", "owner", "journal"):
        raise _usage("serve", "--placement is packed or dedicated, --writer auto, owner "
                              "or journal")
    raise typer.Exit(serve_gateway(db, shards, host, port, token_file, insecure_no_auth,
                                   address, placement, writer))


def run(**options: Any) -> None:
    """The load workload: host sessions as Ray actors, drive them with scripted agents
    while compaction and pruning actors work, report, then verify the database replays
    to exactly what the live actors reported.

    Exit statuses: 0 verification passed and nothing failed; 1 verification failed
    (the database does not replay to what the live actors reported, or an acknowledged
    durable event is missing); 2 usage error, nothing started (a bad option, a --db
    that is a directory or not a surfacelog database, a refused --report path); 3 the
    run verified but appends failed (e.g. the disk filled); 4 the run could not start
    or complete: Ray cannot be reached (--address is tried for 5 s) or did not start,
    another run holds --db, Ray (raylet, GCS) or one of the run's own actors (driver,
    compactor, pruner) was lost mid-run (the report is still printed, marked
    incomplete; after the loss of the GCS, one line), or the --report file could not
    be written; 130 interrupted by Ctrl-C
    (what was acknowledged is kept; a rerun with the same --db resumes: the same
    session ids continue their logs, nothing is replayed or duplicated).

    One run per database: a second run on the same --db (or, with --local-nodes, the
    same shard map) is refused with exit 4 while the first holds it.

    With ``--local-nodes N`` the run starts its own Ray cluster on this machine: a head
    node (the GCS and the run's own actors; never killed) and N worker nodes hosting the
    shards, whose files sit next to ``--db`` (``X.db`` -> ``X.s0.db``...) with the shard
    map ``X.shards.json`` for ``verify``/``digest``/``inspect --shards``;
    ``--kill-node-every S`` removes a random worker node every S seconds and adds it
    back."""
    from surfacelog.actors.compactor import SummariserError, load_summariser

    try:
        config = RunConfig(**options)
    except typer.BadParameter as exc:
        raise _usage("run", exc.format_message().replace("\n", " ")) from exc
    try:
        load_summariser(config.summariser)  # found before anything starts
    except SummariserError as exc:
        raise _usage("run", str(exc)) from exc
    raise typer.Exit(_run_locked(config))


def _run_locked(config: RunConfig) -> int:
    """Check ``run``'s files before anything starts, then run holding the database's
    lock; returns the exit status (see ``run``)."""
    from surfacelog.cli.localcluster import shard_files
    from surfacelog.cli.run_display import EXIT_FAILED, run_live
    from surfacelog.cli.runlock import DatabaseInUse, RunLock

    if config.local_nodes:
        files, lock_path = shard_files(config.db.absolute(), config.shard_count)
        databases = [str(f) for f in files]
        protected = [*databases, str(lock_path)]
    else:
        lock_path, databases = config.db, [str(config.db)]
        protected = databases
    if config.report is not None:
        _check_output(config.report, protected, config.force)
    if config.db.is_dir():
        raise _usage("run", f"--db {config.db} is a directory, not a database file")
    try:
        lock = RunLock.acquire(lock_path)
    except DatabaseInUse as exc:
        echo(f"run refused: {exc}", err=True)
        return EXIT_FAILED
    except OSError as exc:
        raise _usage("run", f"cannot open {lock_path}: {exc.strerror or exc}") from exc
    with lock:
        for db in databases:
            _check_store(db)
        return run_live(config)


def _check_store(db: str) -> None:
    """Exit 2 (one line) unless ``db`` is a new or surfacelog database: a foreign file,
    another build's, a truncated one is refused before Ray starts (read-only check)."""
    from surfacelog.store.errors import VersionRefused
    from surfacelog.store.sqlite.file_format import inspect_file

    try:
        inspect_file(Path(db))
    except VersionRefused as exc:
        raise _usage("run", f"--db {exc}") from exc
    except OSError as exc:
        raise _usage("run", f"cannot read --db {db}: {exc.strerror or exc}") from exc


def _fields_as_options(config: type[Any]) -> Signature:
    """Keyword-only parameters named, annotated and defaulted as the dataclass
    ``config``'s fields, their ``Annotated`` typer metadata included."""
    hints = get_type_hints(config, include_extras=True)
    return Signature([Parameter(f.name, Parameter.KEYWORD_ONLY, default=f.default,
                                annotation=hints[f.name])
                      for f in dataclasses.fields(config)])


# typer reads a command's options from its signature: run's are RunConfig's fields, so
# each option, its default and its help are spelled once, in RunConfig. Set through
# vars() because a function's attributes are not declared to type checkers.
vars(run)["__signature__"] = _fields_as_options(RunConfig)
app.command()(run)


_interrupted = False


def _on_interrupt(signum: int, frame: object) -> None:
    """The first Ctrl-C interrupts the command; later ones are ignored while it cleans
    up (closing its store), so that it ends with one line, not a traceback."""
    global _interrupted
    _interrupted = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> None:
    """Console-script entry point. Ctrl-C (once or repeatedly) ends every command but
    ``run`` (which reports what it did first) with ``surfacelog: interrupted`` on
    stderr and exit status 130, never a traceback."""
    if sys.argv[1:2] != ["run"]:
        signal.signal(signal.SIGINT, _on_interrupt)
    try:
        app()
    except KeyboardInterrupt:
        _interrupted_exit()
    except SystemExit as exc:
        if _interrupted and exc.code in (130, 1):
            _interrupted_exit()
        raise


def _interrupted_exit() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sys.stderr.write("surfacelog: interrupted\n")
        sys.stderr.flush()
    finally:
        raise SystemExit(130)
