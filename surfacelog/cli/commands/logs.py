"""The offline log commands: ``fold`` and ``repair`` read JSONL session logs, no
store, no Ray. The core, the codec and rich are imported when a command runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from surfacelog.cli.common import LIMIT_OPTION, FileArgs, JsonOpt, LegacyOpt, MaxLineOpt
from surfacelog.schema.errors import LogError, SurfacelogError, UnreadableLog
from surfacelog.schema.limits import MAX_LINE_BYTES

if TYPE_CHECKING:
    from rich.console import Console

    from surfacelog.schema.codec import LogFile
    from surfacelog.session import Session


def register(app: typer.Typer) -> None:
    """Add ``fold`` and ``repair`` to ``app``."""
    app.command()(fold)
    app.command()(repair)


def _read(path: Path, legacy: bool, max_line_bytes: int = MAX_LINE_BYTES) -> LogFile:
    """The whole log file at ``path`` (marked first with ``legacy``). Raises
    ``UnreadableLog`` (exit 2), ``LogError``."""
    from surfacelog.schema.codec import LogFile, read_log, reading
    from surfacelog.session import upgrade_legacy

    with reading(path, limit_option=LIMIT_OPTION):
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
    from surfacelog.session import replay

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
                at: int | None, console: Console | None) -> int:
    """Fold one file for ``fold`` and print it (on ``console`` unless ``json``); its
    exit status (0, 1 or 2)."""
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
    if json or console is None:
        from surfacelog.schema.codec import encode_json

        sys.stdout.write(encode_json(result).decode() + "\n")
        return status
    from rich.text import Text

    from surfacelog.cli.render import surface_tree, text

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
    from surfacelog.schema.limits import gc_paused

    console = None
    if not json:  # rich is loaded for the tree only: --json prints without it
        from rich.console import Console

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


def repair(file: Annotated[Path, typer.Argument(help="JSONL session log")],
           json: JsonOpt = False, legacy: LegacyOpt = False,
           max_line_bytes: MaxLineOpt = MAX_LINE_BYTES) -> None:
    """Print the events that close the log's interrupted turn (empty when none).

    Exit 2 when the file cannot be read, is not JSONL or has a line longer than
    ``--max-line-bytes``, 1 when the log is invalid (data nested deeper than the
    nesting limit included), 130 when interrupted.
    """
    from rich.console import Console

    from surfacelog.cli.common import echo
    from surfacelog.cli.render import text
    from surfacelog.schema.codec import encode_json
    from surfacelog.session import interrupted_turn_closers, replay

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
