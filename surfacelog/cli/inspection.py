"""``surfacelog inspect``: a database's sessions as a table, or one surface as a tree;
with ``--shard-map``, the sessions of every shard merged and paginated, or one session
found on its shard."""

from __future__ import annotations

import asyncio
import datetime
import shlex
from collections.abc import Awaitable, Callable, Sequence

from rich.console import Console
from rich.table import Column, Table

from surfacelog.cli.render import surface_tree, text
from surfacelog.session.context import CONTEXT_TYPE, plugin_of
from surfacelog.session.session import Session
from surfacelog.store.errors import SessionNotFound, StoreError
from surfacelog.store.shardmap import ShardMap
from surfacelog.store.shardset import ShardedStores
from surfacelog.store.sqlite import SqliteEventStore


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S")


def _print_surface(session: Session, session_id: str, at: int | None, where: str,
                   console: Console) -> int:
    """Print ``session``'s surface tree (as of seq ``at`` when given); returns the exit
    status (1 when ``at`` is not one of its seqs)."""
    if at is None:
        snap = session.snapshot()
        title = f"{session_id}{where}: {snap.length} events"
    else:
        if not 0 <= at < len(session):
            console.print(text(f"--at {at} is not a seq of {session_id!r} "
                               f"(0..{len(session) - 1})", "red"))
            return 1
        snap = session.surface_at(at)
        title = f"{session_id}{where} as of seq {at}"
    replacements = [r for r in session.replacements() if r.seq < snap.length]
    title += (f", {len(snap.nodes)} nodes, replace generation {snap.replace_generation}")
    console.print(surface_tree(title, snap.nodes, session.log, replacements))
    for line in context_lines(session, snap.nodes):
        console.print(text(line, "cyan"), soft_wrap=True)
    return 0


def context_lines(session: Session, nodes: Sequence[int], width: int = 160) -> list[str]:
    """One line per context message on the surface ``nodes`` (what the model is told
    about its workspace): the plugin, the seq and the text's start."""
    lines = []
    for seq in nodes:
        event = session.event(seq)
        if event.type != CONTEXT_TYPE:
            continue
        blocks = event.data.get("content", []) if isinstance(event.data, dict) else []
        body = " ".join(str(b.get("text", "")) for b in blocks
                        if isinstance(b, dict) and b.get("type") == "text")
        body = " ".join(body.split())
        if len(body) > width:
            body = body[: width - 1] + "…"
        lines.append(f"context from {plugin_of(event.data) or '?'} (seq {seq}): {body}")
    return lines


Opener = Callable[[], Awaitable[SqliteEventStore]]


async def _open_read_only(db: str) -> SqliteEventStore:
    return await SqliteEventStore.open(db, read_only=True)


async def _inspect(db: str, session_id: str | None, at: int | None, console: Console,
                   opener: Opener) -> int:
    store = await opener()
    try:
        if session_id is None:
            table = Table(Column("session", overflow="fold"), "events", "surface nodes",
                          "replace gen", "last activity (UTC)", title=text(db))
            unreadable: list[str] = []
            for info in await store.list_sessions():
                try:
                    session = await store.load(info.id)
                except StoreError as exc:  # CorruptStore, a corrupted page...
                    unreadable.append(f"session {info.id}: {exc}")
                    table.add_row(text(info.id), text("unreadable", "red"), "-", "-",
                                  _when(info.last_time))
                    continue
                snap = session.snapshot()
                table.add_row(text(info.id), str(snap.length), str(len(snap.nodes)),
                              str(snap.replace_generation), _when(info.last_time))
            console.print(table)
            for problem in unreadable:
                console.print(text(f"unreadable {problem}", "red"), soft_wrap=True)
            return 1 if unreadable else 0
        try:
            session = await store.load(session_id)
        except SessionNotFound:
            console.print(text(f"no session {session_id!r} in {db}", "red"))
            return 1
        except StoreError as exc:
            console.print(text(f"session {session_id!r} in {db} cannot be read: {exc}",
                               "red"), soft_wrap=True)
            return 1
        return _print_surface(session, session_id, at, "", console)
    finally:
        await store.close()


def inspect_db(db: str, session_id: str | None, at: int | None, console: Console,
               opener: Opener | None = None) -> int:
    """Print the sessions table or one session's surface tree; returns the exit status
    (1: no such session, or one that cannot be read). The store is opened by
    ``opener`` (default: read-only). Raises what opening raises (``VersionRefused``,
    ``FileNotFoundError``, ``StoreError``), ``StoreError`` when the sessions cannot be
    listed."""
    return asyncio.run(_inspect(db, session_id, at, console,
                                opener or (lambda: _open_read_only(db))))


async def _inspect_shards(shard_map: ShardMap, config: str, session_id: str | None,
                          at: int | None, limit: int, after: str | None,
                          console: Console) -> int:
    async with ShardedStores(shard_map) as stores:
        if session_id is not None:
            try:
                shard = await stores.find(session_id)
            except SessionNotFound as exc:
                console.print(text(f"no session {session_id!r} in {config}: {exc}",
                                   "red"))
                return 1
            session = await (await stores.store(shard)).load(session_id)
            return _print_surface(session, session_id, at, f" (shard {shard.name})", console)
        page = await stores.page(after=after, limit=limit)
        title = f"{config}: {len(shard_map.shards)} shard(s)"
        if after is not None:
            title += f", sessions after {after!r}"
        table = Table("session", "shard", "events", "surface nodes", "replace gen",
                      "last activity (UTC)", title=text(title))
        for entry in page.entries:
            store = await stores.store(shard_map.get(entry.shard))
            snap = (await store.load(entry.info.id)).snapshot()
            table.add_row(text(entry.info.id), text(entry.shard), str(snap.length),
                          str(len(snap.nodes)), str(snap.replace_generation),
                          _when(entry.info.last_time))
        console.print(table)
        if page.next_after is None:
            console.print(f"{len(page.entries)} session(s) listed: this is the last page")
        else:
            console.print(text(
                f"{len(page.entries)} session(s) listed; next page: surfacelog inspect "
                f"--shard-map {shlex.quote(config)} --limit {limit} "
                f"--after {shlex.quote(page.next_after)}"), soft_wrap=True)
        return 0


def inspect_shards(shard_map: ShardMap, config: str, session_id: str | None,
                   at: int | None, limit: int, after: str | None, console: Console) -> int:
    """Over every shard of ``shard_map`` (read from the file ``config``; each shard file
    opened from this machine, never created): without ``session_id``, one page of the
    merged sessions table (``limit`` ids greater than ``after``, by id, with a shard
    column) and the command for the next page; with it, that session's surface tree,
    found on its candidate shards. Returns the exit status (1: no such session, or
    ``at`` not one of its seqs). Raises ``ShardFileError`` naming a shard whose file
    cannot be opened, ``CorruptStore``, ``StoreError``."""
    return asyncio.run(_inspect_shards(shard_map, config, session_id, at, limit, after,
                                       console))
