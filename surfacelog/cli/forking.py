"""``surfacelog fork``: a child session seeded with a prefix of a stored one (docs/rules.md §10),
from the command line, with the fork's error codes as exit statuses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from surfacelog.cli.commands import JsonOpt, _open_store, _run_on_store, app
from surfacelog.cli.render import echo
from surfacelog.schema.codec import encode_json
from surfacelog.session.fork import (
    INVALID_BOUNDARY,
    OPEN_TURN,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
    ForkError,
    fork,
)
from surfacelog.store.errors import SessionNotFound, StoreError

FORK_EXIT: dict[str, int] = {SESSION_ALREADY_EXISTS: 3, SESSION_NOT_FOUND: 4,
                             INVALID_BOUNDARY: 5, OPEN_TURN: 6}
"""The exit status of each fork error code."""


async def _fork(db: Path, source: str, at: int | None, child_id: str | None) -> str:
    store = await _open_store(db)
    try:
        if child_id is not None:
            try:
                await store.header(child_id)
            except SessionNotFound:
                pass
            else:
                raise ForkError(SESSION_ALREADY_EXISTS, f"session {child_id!r} already exists")
        try:
            session = await store.load(source)
        except SessionNotFound:
            raise ForkError(SESSION_NOT_FOUND, f"session {source!r} not found") from None
        child = fork({source: session}, source, at, child_id)
        assert child.header is not None
        await store.create(child.header, list(child.log))
        await store.flush()
        return child.header.id
    finally:
        await store.close()


@app.command(name="fork")
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
    try:
        child_id = _run_on_store(_fork(db, session, at, child))
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
