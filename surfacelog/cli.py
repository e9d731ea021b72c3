"""The ``surfacelog`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from surfacelog.render import surface_tree
from surfacelog.schema.codec import LogFile, encode_json, read_log
from surfacelog.schema.errors import LogError
from surfacelog.session import (
    interrupted_turn_closers,
    replay,
    upgrade_legacy,
)

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Event-sourced agent session logs with a replaceable surface.")

FileArgs = Annotated[list[Path], typer.Argument(help="JSONL session logs", exists=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
LegacyOpt = Annotated[bool, typer.Option("--legacy", help="mark a markerless log first")]


class _Unreadable(Exception):
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


def main() -> None:
    """Console-script entry point."""
    app()
