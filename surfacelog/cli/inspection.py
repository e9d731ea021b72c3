"""``surfacelog inspect``: a database's sessions as a table, or one surface as a tree."""

from __future__ import annotations

import asyncio
import datetime

from rich.console import Console
from rich.table import Table

from surfacelog.cli.render import surface_tree
from surfacelog.store.base import SessionNotFound
from surfacelog.store.sqlite import SqliteEventStore


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S")


async def _inspect(db: str, session_id: str | None, at: int | None, console: Console) -> int:
    store = await SqliteEventStore.open(db)
    try:
        if session_id is None:
            table = Table("session", "events", "surface nodes", "replace gen",
                          "last activity (UTC)", title=db)
            for info in await store.list_sessions():
                session = await store.load(info.id)
                snap = session.snapshot()
                table.add_row(info.id, str(snap.length), str(len(snap.nodes)),
                              str(snap.replace_generation), _when(info.last_time))
            console.print(table)
            return 0
        try:
            session = await store.load(session_id)
        except SessionNotFound:
            console.print(f"[red]no session {session_id!r} in {db}[/]")
            return 1
        if at is None:
            snap = session.snapshot()
            title = f"{session_id}: {snap.length} events"
        else:
            if not 0 <= at < len(session):
                console.print(f"[red]--at {at} is not a seq of {session_id!r} "
                              f"(0..{len(session) - 1})[/]")
                return 1
            snap = session.surface_at(at)
            title = f"{session_id} as of seq {at}"
        replacements = [r for r in session.replacements() if r.seq < snap.length]
        title += (f", {len(snap.nodes)} nodes, replace generation {snap.replace_generation}")
        console.print(surface_tree(title, snap.nodes, session.log, replacements))
        return 0
    finally:
        await store.close()


def inspect_db(db: str, session_id: str | None, at: int | None, console: Console) -> int:
    """Print the sessions table or one session's surface tree; returns the exit status.
    Raises ``VersionRefused`` for a database of another build."""
    return asyncio.run(_inspect(db, session_id, at, console))
