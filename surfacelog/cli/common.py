"""What the command groups share: the options several commands take, the one way data
reaches the terminal (``clean``, ``echo``), the one-line exits (usage errors,
failures), the choice between DB and ``--shard-map FILE``, and the opening of a store
with its one-line refusal.

Terminal safety: everything that comes from data (session ids, event types, message
text, file names, error messages quoting them) goes to the terminal through ``clean``:
control characters, ANSI escape sequences and bidirectional overrides are shown as
visible ``\\xNN``/``\\uNNNN`` escapes. ``echo`` is ``typer.echo`` of a cleaned line;
rich renderings take data as ``render.text``, never as markup.

Importing it is cheap (typer, and ``SurfacelogError`` for ``CannotOpen``): the helpers
import the store, asyncio and rich when called, so that every group module can import
it at start-up without slowing ``surfacelog --help`` or ``fold``.
"""

from __future__ import annotations

import re
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import typer

from surfacelog.schema.errors import SurfacelogError

if TYPE_CHECKING:
    from surfacelog.store.shardmap import ShardMap
    from surfacelog.store.sqlite import SqliteEventStore

T = TypeVar("T")

# -- options more than one command takes -------------------------------------------------

FileArgs = Annotated[list[Path], typer.Argument(help="JSONL session logs", exists=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
LegacyOpt = Annotated[bool, typer.Option("--legacy", help="mark a markerless log first")]
MaxLineOpt = Annotated[int, typer.Option(
    "--max-line-bytes", min=1, metavar="BYTES",
    help="refuse an input line longer than this (the file is read line by line)")]
DbArg = Annotated[str | None, typer.Argument(
    metavar="DB", show_default=False, help="SQLite store file (or --shard-map FILE instead)")]
ShardMapOpt = Annotated[Path | None, typer.Option(
    "--shard-map", metavar="FILE", show_default=False,
    help="shard map (JSON) to use instead of DB: work over every shard's file, each of "
         "which must be readable from this machine")]
LIMIT_OPTION = "--max-line-bytes"
"""The option that raises the line limit, named by a too-long line's message."""

# -- the terminal ------------------------------------------------------------------------

_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                            "\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(value: object) -> str:
    """``str(value)`` with every control character (C0, DEL, C1: so no ANSI escape
    sequence), line/paragraph separator and bidirectional override shown as a visible
    escape (``\\x1b``), for printing one line to a terminal."""
    return _UNSAFE.sub(_visible, str(value))


def echo(message: object, *, err: bool = False) -> None:
    """``typer.echo`` of ``clean(message)``: one terminal-safe line."""
    typer.echo(clean(message), err=err)


# -- one-line exits, stores ------------------------------------------------------------------


def usage(command: str, problem: str) -> typer.Exit:
    """Print a one-line usage error for ``command``; the exit (status 2) to raise."""
    typer.echo(f"usage error: surfacelog {command}: {problem}", err=True)
    return typer.Exit(2)


def either(command: str, db: str | None, shards: Path | None) -> ShardMap | None:
    """The shard map of ``--shard-map`` (``shards``; ``None`` for a single DB). Exits 2
    with a one-line message unless exactly one of DB and ``--shard-map`` is given, or
    when the shard map cannot be read or is malformed."""
    from surfacelog.store.errors import ShardConfigError
    from surfacelog.store.shardmap import load_shard_map

    if db is not None and shards is not None:
        raise usage(command, "give either DB or --shard-map FILE, not both")
    if shards is None:
        if db is None:
            raise usage(command, "give either DB or --shard-map FILE")
        return None
    try:
        return load_shard_map(shards)
    except ShardConfigError as exc:
        echo(f"bad shard configuration: {exc}", err=True)
        raise typer.Exit(2) from exc
    except OSError as exc:
        echo(f"cannot read shard configuration {shards}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from exc


def fail(exc: Exception) -> typer.Exit:
    """Print ``exc`` on one line; the exit (status 1) to raise."""
    echo(exc, err=True)
    return typer.Exit(1)


class CannotOpen(SurfacelogError):
    """A store a command needs cannot be opened (exit 2)."""


async def open_store(db: Path, *, create: bool = False, read_only: bool = False,
                     keep_failed: bool = True) -> SqliteEventStore:
    """Open ``db``; read-only commands pass ``read_only`` (a SQLite ``mode=ro`` open:
    never created, never written). Raises ``CannotOpen`` with a one-line message: a
    missing database ("no database at DB"), a file of another build, a foreign,
    truncated or unreadable file."""
    from surfacelog.store.errors import StoreError
    from surfacelog.store.sqlite import SqliteEventStore

    try:
        return await SqliteEventStore.open(db, create=create, read_only=read_only,
                                           keep_failed=keep_failed)
    except FileNotFoundError as exc:
        raise CannotOpen(f"cannot open store {db}: no database at {db} (nothing was "
                         f"created)") from exc
    except (StoreError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CannotOpen(f"cannot open store {db}: {reason}") from exc


def run_on_store(work: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(work)``, turning ``CannotOpen`` into its one line and exit 2."""
    import asyncio

    try:
        return asyncio.run(work)
    except CannotOpen as exc:
        echo(exc, err=True)
        raise typer.Exit(2) from exc


def refuse_unsafe_output(output: Path | None, databases: list[str], force: bool) -> None:
    """Refuse (exit 2, one line) an output that would destroy data: see ``outputs``."""
    if output is None:
        return
    from surfacelog.cli.errors import OutputError
    from surfacelog.cli.outputs import check_output

    try:
        check_output(output, databases=databases, force=force)
    except OutputError as exc:
        echo(exc, err=True)
        raise typer.Exit(2) from exc
