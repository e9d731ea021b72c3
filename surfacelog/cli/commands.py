"""The ``surfacelog`` command line."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from inspect import Parameter, Signature
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer
from rich.console import Console

from surfacelog.cli.render import surface_tree
from surfacelog.cli.runmodel import RunConfig
from surfacelog.schema.codec import LogFile, encode_json, read_log
from surfacelog.schema.errors import LogError, SurfacelogError
from surfacelog.session import (
    interrupted_turn_closers,
    replay,
    upgrade_legacy,
)
from surfacelog.store import (
    SqliteEventStore,
    StoreError,
    VerifyFailure,
    export_session,
    import_log,
    verify_store,
)

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Event-sourced agent session logs with a replaceable surface.")

FileArgs = Annotated[list[Path], typer.Argument(help="JSONL session logs", exists=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
LegacyOpt = Annotated[bool, typer.Option("--legacy", help="mark a markerless log first")]


class _Unreadable(SurfacelogError):
    """A file cannot be read, or is not JSONL."""


def _read(path: Path, legacy: bool) -> LogFile:
    try:
        log = read_log(path)
    except OSError as exc:
        raise _Unreadable(f"cannot read {path}: {exc.strerror or exc}") from exc
    except LogError as exc:
        if exc.rule == "json":
            raise _Unreadable(f"{path} is not JSONL: {exc}") from exc
        raise
    if legacy:
        return LogFile(log.header, upgrade_legacy(log.events))
    return log


def _fold_one(path: Path, legacy: bool) -> dict[str, Any]:
    log = _read(path, legacy)
    session = replay(log.events, log.header)
    return {
        "file": str(path),
        "ok": True,
        "nodes": list(session.surface.nodes),
        "replacements": [
            {"seq": r.seq, "start": r.start, "end": r.end, "shadowedSeqs": list(r.shadowed_seqs)}
            for r in session.replacements()
        ],
        "messages": [m["id"] for m in session.derive_messages()],
    }


@app.command()
def fold(files: FileArgs, json: JsonOpt = False, legacy: LegacyOpt = False) -> None:
    """Replay each log; print its surface (nodes, replacements, message ids).

    Exit 0 when every file was read (valid or not), 2 when one cannot be read or is not
    JSONL.
    """
    console = Console()
    status = 0
    for path in files:
        try:
            result = _fold_one(path, legacy)
        except _Unreadable as exc:
            status = 2
            result = {"file": str(path), "ok": False, "error": str(exc), "rule": "unreadable"}
        except LogError as exc:
            result = {"file": str(path), "ok": False, "error": str(exc), "rule": exc.rule}
        if json:
            sys.stdout.write(encode_json(result).decode() + "\n")
            continue
        if not result["ok"]:
            console.print(f"[red]{path}: invalid[/] ({result['rule']}): {result['error']}",
                          markup=False)
            continue
        log = _read(path, legacy)
        session = replay(log.events, log.header)
        console.print(surface_tree(
            f"{path}: {len(log.events)} events, {len(result['nodes'])} nodes, "
            f"{len(result['replacements'])} replacement(s), "
            f"{len(result['messages'])} messages",
            session.surface.nodes, session.log, session.replacements()))
    raise typer.Exit(status)


@app.command()
def repair(file: Annotated[Path, typer.Argument(help="JSONL session log")],
           json: JsonOpt = False, legacy: LegacyOpt = False) -> None:
    """Print the events that close the log's interrupted turn (empty when none).

    Exit 2 when the file cannot be read or is not JSONL, 1 when the log is invalid.
    """
    try:
        log = _read(file, legacy)
        replay(log.events, log.header)
    except _Unreadable as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    except LogError as exc:
        typer.echo(f"invalid log ({exc.rule}): {exc}", err=True)
        raise typer.Exit(1) from exc
    closers = interrupted_turn_closers(log.events)
    if json:
        sys.stdout.write(encode_json(closers).decode() + "\n")
        return
    console = Console()
    if not closers:
        console.print("the last turn is closed: nothing to repair")
    for event in closers:
        console.print(encode_json(event).decode(), markup=False, soft_wrap=True)


# -- store commands -------------------------------------------------------------------

DbArg = Annotated[Path, typer.Argument(help="SQLite store file")]


async def _open_store(db: Path, *, create: bool) -> SqliteEventStore:
    try:
        return await SqliteEventStore.open(db, create=create)
    except (StoreError, OSError) as exc:
        typer.echo(f"cannot open store {db}: {exc}", err=True)
        raise typer.Exit(2) from exc


@app.command()
def export(db: DbArg, session: Annotated[str, typer.Argument(help="session id")],
           output: Annotated[Path | None, typer.Option("-o", "--output",
                                                       help="write here, not stdout")] = None,
           ) -> None:
    """Write a stored session as DSH JSONL: its header line, then one event per line.

    Exit 1 when the session is missing or unreadable, 2 when the store cannot be opened.
    """
    async def run() -> bytes:
        store = await _open_store(db, create=False)
        try:
            return await export_session(store, session)
        finally:
            await store.close()

    try:
        content = asyncio.run(run())
    except StoreError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    if output is None:
        sys.stdout.buffer.write(content)
        sys.stdout.flush()
    else:
        output.write_bytes(content)


@app.command(name="import")
def import_(db: DbArg, files: FileArgs, legacy: LegacyOpt = False) -> None:
    """Store each JSONL log as a new session (its header line's id, else the file name
    without extension), after validating it through the core.

    Exit 0 when every file was imported, 1 when a log is invalid or its session already
    exists, 2 when a file cannot be read or is not JSONL or the store cannot be opened.
    """
    async def run() -> int:
        status = 0
        store = await _open_store(db, create=True)
        try:
            for path in files:
                try:
                    log = _read(path, legacy)
                    header = await import_log(store, log, path)
                except _Unreadable as exc:
                    typer.echo(str(exc), err=True)
                    status = 2
                except (LogError, StoreError) as exc:
                    typer.echo(f"{path}: not imported: {exc}", err=True)
                    status = max(status, 1)
                else:
                    typer.echo(f"{path}: imported as session {header.id} "
                               f"({len(log.events)} events)")
        finally:
            await store.close()
        return status

    raise typer.Exit(asyncio.run(run()))


@app.command()
def verify(db: DbArg) -> None:
    """Reload every stored session through the full validation; print each failure by
    session and seq.

    Exit 0 when every session loads, 1 when one does not, 2 when the store cannot be
    opened.
    """
    async def run() -> tuple[int, list[VerifyFailure]]:
        store = await _open_store(db, create=False)
        try:
            return await verify_store(store)
        finally:
            await store.close()

    checked, failures = asyncio.run(run())
    for failure in failures:
        where = "-" if failure.seq is None else str(failure.seq)
        typer.echo(f"FAIL session {failure.session_id} seq {where}: {failure.message}")
    typer.echo(f"{checked} session(s) checked, {len(failures)} failed")
    raise typer.Exit(1 if failures else 0)


@app.command()
def digest(db: Annotated[Path, typer.Argument(help="SQLite database")],
           json: JsonOpt = False) -> None:
    """Replay every stored session and print its digest (length, nodes, generation,
    message ids, hash of the messages). ``run`` compares these with the live actors."""
    import asyncio

    import msgspec

    from surfacelog.store.digests import store_digests

    digests = asyncio.run(store_digests(str(db)))
    if json:
        sys.stdout.write(encode_json(msgspec.to_builtins(digests)).decode() + "\n")
        return
    from rich.table import Table

    table = Table("session", "events", "nodes", "generation", "messages", "sha256")
    for sid, d in digests.items():
        table.add_row(sid, str(d.length), str(len(d.nodes)), str(d.replace_generation),
                      str(len(d.message_ids)), d.messages_sha256[:16])
    Console().print(table)


@app.command()
def inspect(db: Annotated[Path, typer.Argument(help="SQLite database")],
            session: Annotated[str | None, typer.Argument(help="session id")] = None,
            at: Annotated[int | None, typer.Option("--at", help="as of this seq")] = None,
            ) -> None:
    """Without SESSION: a table of sessions. With it: the surface as a tree, each
    replacement expanded to the events it shadowed (``--at``: as of a past seq)."""
    from surfacelog.cli.inspection import inspect_db

    raise typer.Exit(inspect_db(str(db), session, at, Console()))


def run(**options: Any) -> None:
    """The load workload: host sessions as Ray actors, drive them with scripted agents
    while compaction and pruning actors work, report, then verify the database replays
    to exactly what the live actors reported. Exit 0 when verification passed, 1 when it
    failed, 2 on a bad option, 3 when appends failed, 130 when interrupted (what was
    acknowledged is kept; the next run on the same database resumes)."""
    from surfacelog.cli.live import run_live

    raise typer.Exit(run_live(RunConfig(**options)))


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


def main() -> None:
    """Console-script entry point."""
    app()
