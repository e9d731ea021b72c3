"""A shard's store as seen from another process: its methods forwarded by name to the
shard's writer (its journal actor, or the owner session actor that holds its file),
which calls them on its backend (``JournalActor.store_call``).

``ForwardedScopes`` forwards the scoped sub-interface (scopes, state, listing, deletion:
``ScopedEventStore``); the session actor's ``JournalStore`` and the client's
``ShardStore`` both build on it. ``ShardStore`` is what a client uses to reach scopes,
state and deletion through the cluster (``Client.shard_store``): Google ADK's session
service over Ray, for one. Every call goes to the one writer of the shard, so it is
ordered with the writes of the shard's sessions as the writer receives them.

A proxy is a ``ScopedEventStore`` by type; whether the far side keeps scopes is the
backend's: one that does not (the DSH root) answers ``Unsupported``, naming its type.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.store.base import ScopedEventStore, SessionInfo
from surfacelog.store.rows import EncodedBatch
from surfacelog.store.scoped import ScopedSession, ScopedState, SessionPage
from surfacelog.store.stored import StoredSession

SCOPED_CALLS: Final = frozenset({
    "set_scope", "append_with_state", "scope_of", "get_state", "user_state",
    "update_state", "list_scoped", "delete_session", "purge_session"})
"""The ``ScopedEventStore`` methods a shard's writer answers by name."""

STORE_CALLS: Final = SCOPED_CALLS | {"create_stored", "append_stored", "read_stored",
                                     "list_sessions", "flush"}
"""Every method a shard's writer answers by name (``JournalActor.store_call``)."""

Forward = Callable[[str, tuple[Any, ...], dict[str, Any], bool], Awaitable[Any]]
"""``(method, args, kwargs, idempotent)`` -> the backend's answer: one call to a
shard's writer; ``idempotent``: it may be sent again while the writer restarts."""


class ForwardedScopes(ScopedEventStore):
    """The scoped sub-interface of a store in another process, each method forwarded by
    name (``_forward``). Reads, ``set_scope`` and ``update_state`` (applying the same
    delta twice leaves the same state) are sent again while the writer restarts; the
    other writes are sent once, their outcome unknown when the writer died."""

    @abc.abstractmethod
    async def _forward(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                       idempotent: bool) -> Any:
        """The answer of the backend's ``method(*args, **kwargs)``; raises its error."""

    async def set_scope(self, session_id: str, app_name: str, user_id: str, *,
                        state: Mapping[str, Any] | None = None, at: int) -> None:
        """See ``ScopedEventStore.set_scope``."""
        await self._forward("set_scope", (session_id, app_name, user_id),
                            {"state": dict(state or {}), "at": at}, True)

    async def append_with_state(self, session_id: str, events: Sequence[Event],
                                delta: Mapping[str, Any], *, epoch: int, at: int,
                                durable: bool = True) -> None:
        """See ``ScopedEventStore.append_with_state``."""
        await self._forward("append_with_state", (session_id, list(events), dict(delta)),
                            {"epoch": epoch, "at": at, "durable": durable}, False)

    async def scope_of(self, session_id: str) -> ScopedSession:
        """See ``ScopedEventStore.scope_of``."""
        scope: ScopedSession = await self._forward("scope_of", (session_id,), {}, True)
        return scope

    async def get_state(self, session_id: str) -> ScopedState:
        """See ``ScopedEventStore.get_state``."""
        state: ScopedState = await self._forward("get_state", (session_id,), {}, True)
        return state

    async def user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """See ``ScopedEventStore.user_state``."""
        state: dict[str, Any] = await self._forward("user_state", (app_name, user_id), {},
                                                    True)
        return state

    async def update_state(self, session_id: str, delta: Mapping[str, Any], *,
                           at: int) -> None:
        """See ``ScopedEventStore.update_state``."""
        await self._forward("update_state", (session_id, dict(delta)), {"at": at}, True)

    async def list_scoped(self, app_name: str, user_id: str | None = None, *,
                          after: str | None = None, limit: int | None = None
                          ) -> SessionPage:
        """See ``ScopedEventStore.list_scoped``."""
        page: SessionPage = await self._forward(
            "list_scoped", (app_name, user_id), {"after": after, "limit": limit}, True)
        return page

    async def delete_session(self, session_id: str, *, at: int) -> None:
        """See ``ScopedEventStore.delete_session``."""
        await self._forward("delete_session", (session_id,), {"at": at}, False)

    async def purge_session(self, session_id: str) -> None:
        """See ``ScopedEventStore.purge_session``."""
        await self._forward("purge_session", (session_id,), {}, False)


class ShardStore(ForwardedScopes):
    """One shard's store for a client process (``Client.shard_store``): every method,
    the ``EventStore`` primitives included, forwarded to the shard's writer by
    ``forward`` (which sends an idempotent call again while the writer restarts and
    raises ``ShardUnavailable`` past the client's retry window). Closing it closes
    nothing: the writer is the deployment's."""

    def __init__(self, shard: str, forward: Forward) -> None:
        self.shard = shard
        self._send = forward

    async def _forward(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                       idempotent: bool) -> Any:
        return await self._send(method, args, kwargs, idempotent)

    async def create_stored(self, header: SessionHeader, batch: EncodedBatch) -> int:
        """See ``EventStore.create_stored``."""
        epoch: int = await self._forward("create_stored", (header, batch), {}, False)
        return epoch

    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None:
        """See ``EventStore.append_stored``."""
        await self._forward("append_stored", (session_id, batch),
                            {"epoch": epoch, "durable": durable, "resend": resend}, False)

    async def read_stored(self, session_id: str, *, since: int = 0,
                          limit: int | None = None, bump: bool = False) -> StoredSession:
        """See ``EventStore.read_stored`` (a read that bumps is sent once)."""
        stored: StoredSession = await self._forward(
            "read_stored", (session_id,), {"since": since, "limit": limit, "bump": bump},
            not bump)
        return stored

    async def list_sessions(self) -> list[SessionInfo]:
        """See ``EventStore.list_sessions``."""
        sessions: list[SessionInfo] = await self._forward("list_sessions", (), {}, True)
        return sessions

    async def flush(self) -> None:
        """The writer's flush: every batch it accepted is committed (batches still
        buffered in session actors are theirs to flush)."""
        await self._forward("flush", (), {}, True)

    async def close(self) -> None:
        """Nothing to release: the shard's writer belongs to the deployment."""


__all__ = ["SCOPED_CALLS", "STORE_CALLS", "Forward", "ForwardedScopes", "ShardStore"]
