"""``SurfacelogSession``: the OpenAI Agents SDK ``Session`` protocol over a surfacelog log.

The SDK keeps a conversation as a list of Responses items; here each item is one event
of an append-only log and the list the SDK reads is the log's *surface* (docs/rules.md §7):

- ``add_items`` appends one surface event per item (``mapping``); a
  ``function_call_output`` is preceded by a log-only ``tool/call`` that its
  ``tool/result`` cites (``sourceEventSeqs``), so the log says which call it answers.
- ``get_items(limit)`` reads the surface, not the log: after a compaction the SDK sees
  the checkpoint in place of the items it replaced, after ``pop_item`` the popped item
  is gone. The items of each node are cached as JSON, so a read decodes one document.
- ``pop_item`` cannot delete: it appends an *eraser*, an ``assistant/message`` with
  empty content (which projects nothing, docs/rules.md §7), that replaces the last node holding an
  item (and any erasers after it) and cites what it hides. The popped item stays in the
  log, off the surface; ``surfacelog inspect`` and ``derive_messages(as_of=...)`` still
  show it.
- ``clear_session`` appends one eraser replacing the whole surface: the SDK sees an empty
  session, the log keeps every earlier event (nothing is appended when the surface holds
  no item already).
- ``run_compaction`` (the SDK's compaction-aware session protocol; the ``Runner`` calls
  it after a turn) compacts with the core's rules: the surface's prefix up to a safe cut
  (never between a function call and its output) is replaced by a checkpoint
  ``user/message`` citing every item it hides, once the surface's token estimate exceeds
  ``compact_at`` (``force`` compacts whatever is above ``retain_tokens``). The SDK then
  reads the checkpoint as a user message of ``input_text`` parts.

The adapter writes no ``turn/start``/``turn/end``: the SDK's protocol has no turns, so
its events carry ``turn 0, step 0``, and reopening a session never adds crash-repair
results the SDK did not write. Operations of one adapter run one at a time.

Event loops and threads, as with ``SQLiteSession`` (which runs its SQL on worker
threads): a session that opens its own store (``db_path``) runs every operation on one
event loop of its own, in a daemon thread shared by such sessions, so it can be used
from any loop and any thread: ``Runner.run_sync`` (a loop of its own, closed after the
run), several threads each with a loop, one after another or at once. So does a session
over a Ray ``SessionHandle`` (bound to no loop). A session given a ``store`` or an
``EmbeddedHandle`` runs on the caller's loop (the store's).
After ``close()`` every operation raises ``RuntimeError``, as ``SQLiteSession``'s do.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from surfacelog.runtime.handle import (
    EmbeddedHandle,
    SessionLike,
    append_planned,
    compact_planned,
)
from surfacelog.runtime.handle import SurfaceView as View
from surfacelog.schema.codec import decode_json, encode_json
from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.schema.limits import gc_paused
from surfacelog.session import (
    AppendSpec,
    SurfaceSnapshot,
    choose_range,
    compaction_request,
    extractive_summary,
    project,
)
from surfacelog.session.compaction import CompactionRequest
from surfacelog.store.base import EventStore

from .mapping import PROVIDER, RESIDUAL, Item, Mapped, items_of, map_item, new_message_id

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

ERASER_MODEL: Final = "openai-agents/eraser"
"""The model name on the source of the empty ``assistant/message`` pop and clear append."""


class PopRefused(LogError):
    """``pop_item`` cannot remove the last item: its node holds several items (a message
    the adapter did not write, e.g. a DSH assistant message with text and tool calls).
    Nothing was appended. ``rule`` is ``"openai-pop"``; ``event_type`` and ``seq`` name
    the node."""


def _eraser(at_seq: int, hidden: Sequence[int], how: str) -> AppendSpec:
    """An empty assistant message replacing ``hidden`` (a run of nodes) and citing it."""
    message = {"id": new_message_id(), "role": "assistant",
               "source": {"kind": "model", "provider": PROVIDER, "model": ERASER_MODEL,
                          RESIDUAL: {"erased": how}},
               "content": []}
    return AppendSpec("assistant/message", {"turn": 0, "step": 0, "message": message},
                      surface_op=ReplaceOp(start=hidden[0], end=hidden[-1]),
                      source_event_seqs=tuple(hidden))


class _OwnLoop:
    """The event loop, in a daemon thread, on which the sessions that open their own
    store run (started at first use, shared by them all)."""

    _guard = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._guard:
            if cls._loop is None or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="surfacelog-sessions",
                                 daemon=True).start()
                cls._loop = loop
            return cls._loop


class _Done:
    """What ``close()`` returns once the session is closed: awaiting it waits for
    nothing (so both ``session.close()`` and ``await session.close()`` work)."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


class SurfacelogSession:
    """An OpenAI Agents SDK session (``agents.memory.Session`` protocol, compaction-aware)
    whose history is a surfacelog log. Drop-in for ``SQLiteSession``::

        session = SQLiteSession("conv-1", "conversations.db")       # before
        session = SurfacelogSession("conv-1", "conversations.db")   # after

    Where the log lives (exactly one):

    - ``db_path``: an embedded surfacelog SQLite file, opened on first use by this
      session (no Ray); ``store_options`` go to ``SqliteEventStore.open``;
    - ``store``: an open ``EventStore`` shared by several sessions (the caller closes it);
    - ``handle``: any ``SessionLike`` (``surfacelog.runtime``): a Ray ``SessionHandle``
      (``surfacelog.connect(...).session(id)``), or an ``EmbeddedHandle``.

    The embedded forms go through an ``EmbeddedHandle``: they take the session for
    writing (writer epoch) at their first write, not when reading: one writing adapter
    per session at a time (a later writer fences an earlier one); use the Ray form to
    share a session between processes. Every write is planned from a read of the
    surface and lands exactly after it (``expected_seq``), planned again when anything
    was appended in between (``append_planned``), so both forms write the same way. Use
    one adapter at a time per session; ``close()`` at the end (flushes, and closes the
    store it opened; ``await session.close()`` works too). A ``db_path`` session runs
    (or over a Ray handle) runs on an event loop of its own and can be used from any
    loop or thread (module docstring); a ``store`` or ``EmbeddedHandle`` session runs
    on the caller's loop.

    ``durable`` (embedded): ``add_items``/``pop_item``/``clear_session`` return once the
    write is committed (the SDK's ``SQLiteSession`` guarantee); ``False`` returns once
    queued, ``flush()``/``close()`` being the barrier. ``model`` names the model source
    of assistant-side events (the SDK's items do not carry it). ``compact_at``,
    ``retain_tokens`` and ``summarize`` drive ``run_compaction``.

    See the module docstring for what pop, clear and compaction do to the log.
    """

    def __init__(self, session_id: str, db_path: str | Path | None = None, *,
                 store: EventStore | None = None, handle: SessionLike | None = None,
                 session_settings: Any = None, model: str = "agents-sdk",
                 durable: bool = True, store_options: dict[str, Any] | None = None,
                 compact_at: int = 8000, retain_tokens: int = 2000,
                 summarize: Callable[[Sequence[Event]], list[dict[str, Any]]] | None = None
                 ) -> None:
        if sum(x is not None for x in (db_path, store, handle)) != 1:
            raise ValueError("give exactly one of db_path, store and handle")
        if not model:
            raise ValueError("model must be a non-empty string")
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self.model = model
        self.compact_at = compact_at
        self.retain_tokens = retain_tokens
        self.summarize = summarize or extractive_summary
        if handle is not None and handle.session_id != session_id:
            raise ValueError(f"handle is for session {handle.session_id!r}, "
                             f"not {session_id!r}")
        self._given = handle
        self._handle: SessionLike | None = handle
        self._path = db_path
        self._store = store
        self._opened_store: EventStore | None = None  # opened here from db_path
        self._durable = durable
        self._store_options = dict(store_options or {})
        self._lock = asyncio.Lock()
        self._closed = False
        # Every operation runs on the sessions' own loop (_OwnLoop) when the adapter
        # owns its store (db_path) or holds a handle bound to no loop (over Ray).
        self._own_loop = db_path is not None or (
            handle is not None and not isinstance(handle, EmbeddedHandle))
        self._memo: dict[int, tuple[int, bytes]] = {}
        self._buffer = bytearray(b"[")
        self._buffered = 0  # nodes whose items are in _buffer
        self._buffer_generation = -1

    async def handle(self) -> SessionLike:
        """The session the adapter reads and writes: the handle it was given, or an
        ``EmbeddedHandle`` over its store (opening the store of ``db_path`` first)."""
        if self._handle is None:
            store = self._store
            if store is None:
                from surfacelog.store.sqlite import SqliteEventStore

                assert self._path is not None
                store = self._opened_store = await SqliteEventStore.open(
                    self._path, **self._store_options)
            self._handle = EmbeddedHandle(
                self.session_id, store, durability="durable" if self._durable else "buffered")
        return self._handle

    # -- reading -----------------------------------------------------------------------

    def _node(self, view: View, seq: int) -> tuple[int, bytes]:
        """(number of items, their JSON without brackets) of the node at ``seq``."""
        got = self._memo.get(seq)
        if got is None:
            message = project(view.event(seq))
            items = [] if message is None else items_of(message)
            got = (len(items), encode_json(items)[1:-1])
            self._memo[seq] = got
        return got

    def _all_items(self, view: View) -> list[Item]:
        nodes = view.nodes
        if view.generation != self._buffer_generation or len(nodes) < self._buffered:
            self._buffer = bytearray(b"[")
            self._buffered = 0
            self._buffer_generation = view.generation
        buffer = self._buffer
        for k in range(self._buffered, len(nodes)):
            count, chunk = self._node(view, nodes[k])
            if count:
                if len(buffer) > 1:
                    buffer += b","
                buffer += chunk
        self._buffered = len(nodes)
        with gc_paused():  # thousands of fresh acyclic dicts: see limits.gc_paused
            items: list[Item] = decode_json(bytes(buffer) + b"]")
        return items

    def _last_items(self, view: View, limit: int) -> list[Item]:
        nodes = view.nodes
        chunks: list[bytes] = []
        have = 0
        for k in range(len(nodes) - 1, -1, -1):
            count, chunk = self._node(view, nodes[k])
            if count:
                chunks.append(chunk)
                have += count
                if have >= limit:
                    break
        chunks.reverse()
        with gc_paused():
            items: list[Item] = decode_json(b"[" + b",".join(chunks) + b"]")
        return items[len(items) - limit:] if len(items) > limit else items

    def _limit(self, limit: int | None) -> int | None:
        if limit is not None:
            return limit
        settings = self.session_settings
        if isinstance(settings, dict):
            value = settings.get("limit")
        else:
            value = getattr(settings, "limit", None)
        return value if isinstance(value, int) else None

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The items the model sees: the surface's, in order; with ``limit`` (or the
        session settings' ``limit``) the latest ``limit`` of them (``0``: none; a
        negative limit: all, like ``SQLiteSession``). Fresh objects on every call."""
        limit = self._limit(limit)

        async def read() -> list[Item]:
            view = await View.read(await self.handle())
            if limit is None or limit < 0:
                return self._all_items(view)
            if limit == 0:
                return []
            return self._last_items(view, limit)

        return await self._run(read)

    # -- where operations run ------------------------------------------------------------

    async def _run(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` under the adapter's lock: on the sessions' own loop for a
        ``db_path`` session, else on the caller's. Raises ``RuntimeError`` once
        closed."""
        self._check_open()
        if not self._own_loop:
            async with self._lock:
                self._check_open()
                return await op()
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._locked(op), _OwnLoop.get()))

    async def _locked(self, op: Callable[[], Awaitable[T]]) -> T:
        async with self._lock:
            self._check_open()
            return await op()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    # -- writing -----------------------------------------------------------------------

    async def _write(self, plan: Callable[[View], Sequence[AppendSpec]]
                     ) -> Sequence[Event]:
        try:
            return await append_planned(await self.handle(), plan)
        except BaseException:
            self._forget()
            raise

    def _forget(self) -> None:
        """Drop the read caches (a failed write may have been seen half-way)."""
        self._memo.clear()
        self._buffer = bytearray(b"[")
        self._buffered = 0
        self._buffer_generation = -1

    async def add_items(self, items: list[Item]) -> None:
        """Append ``items`` in order, all or nothing. Raises ``UnmappableItem`` (before
        anything is written) for an item that is not a JSON object surviving a JSON
        round trip, ``SurfaceError`` and the store's (or the actors') errors."""
        self._check_open()
        mapped = [map_item(item, self.model, k) for k, item in enumerate(items)]
        if not mapped:
            return

        def plan(view: View) -> list[AppendSpec]:
            return self._add_specs(view, mapped)

        await self._run(lambda: self._write(plan))

    def _add_specs(self, view: View, mapped: list[Mapped]) -> list[AppendSpec]:
        specs: list[AppendSpec] = []
        calls: dict[str, tuple[str, str]] = {}
        at = view.length
        for m in mapped:
            message = m.message
            if m.event_type == "tool/result":
                call_id = message["source"]["callId"]
                name, arguments = calls.get(call_id) or _find_call(view, call_id)
                specs.append(AppendSpec("tool/call", {"turn": 0, "step": 0, "callId": call_id,
                                                      "name": name, "arguments": arguments}))
                specs.append(AppendSpec("tool/result",
                                        {"turn": 0, "step": 0, "message": message},
                                        surface_op="append",
                                        source_event_seqs=(at + len(specs) - 1,)))
                continue
            if m.event_type == "assistant/message":
                for block in message["content"]:
                    if block.get("type") == "tool-call":
                        calls[block["id"]] = (block["name"], block["arguments"])
                data: Any = {"turn": 0, "step": 0, "message": message}
            else:
                data = message
            specs.append(AppendSpec(m.event_type, data, surface_op="append"))
        return specs

    async def pop_item(self) -> Item | None:
        """Remove the latest item from what the SDK sees and return it (``None`` when
        there is none). The log only grows: an eraser event replaces the item's node on
        the surface and cites it (module docstring). Raises ``PopRefused`` when that
        node holds several items (a message the adapter did not write)."""
        popped: list[Item] = []

        def plan(view: View) -> list[AppendSpec]:
            popped.clear()
            nodes = view.nodes
            for k in range(len(nodes) - 1, -1, -1):
                message = project(view.event(nodes[k]))
                items = [] if message is None else items_of(message)
                if not items:
                    continue
                if len(items) > 1:
                    event = view.event(nodes[k])
                    raise PopRefused("openai-pop", f"the last node holds {len(items)} items "
                                     "(not written by this adapter); pop_item removes whole "
                                     "nodes only", event.type, event.seq)
                popped.append(decode_json(encode_json(items[0])))
                return [_eraser(view.length, list(nodes[k:]), "pop_item")]
            return []

        await self._run(lambda: self._write(plan))
        return popped[0] if popped else None

    async def clear_session(self) -> None:
        """Make the session empty for the SDK: one eraser replaces the whole surface and
        cites every node it hides; the log keeps them (module docstring). Appends
        nothing when the surface holds no item."""

        def plan(view: View) -> list[AppendSpec]:
            nodes = view.nodes
            if not any(project(view.event(seq)) is not None for seq in nodes):
                return []
            return [_eraser(view.length, list(nodes), "clear_session")]

        await self._run(lambda: self._write(plan))

    async def run_compaction(self, args: dict[str, Any] | None = None) -> None:
        """Compact with the core's rules (``choose_range``, ``compaction_request``):
        when the surface's token estimate exceeds ``compact_at`` (any size with
        ``args["force"]``), replace its prefix up to the last safe cut that keeps
        ``retain_tokens`` with a checkpoint citing every hidden node. The other SDK
        arguments (``response_id``, ``compaction_mode``, ``store``) concern OpenAI's
        server-side compaction and are ignored. A summary that would not shrink the
        range is recorded as a failed compaction (docs/rules.md §13), changing nothing."""
        force = bool((args or {}).get("force", False))

        def plan(view: View) -> CompactionRequest | None:
            nodes = list(view.nodes)
            events = [view.event(seq) for seq in nodes]
            choice = choose_range(nodes, events, compact_at=0 if force else self.compact_at,
                                  retain_tokens=self.retain_tokens)
            if choice is None:
                return None
            shadowed = events[: len(choice.shadowed)]
            snapshot = SurfaceSnapshot(tuple(nodes), view.generation, view.length)
            return compaction_request(snapshot, choice, shadowed, self.summarize(shadowed))

        async def compact() -> None:
            try:
                await compact_planned(await self.handle(), plan)
            except BaseException:
                self._forget()
                raise

        await self._run(compact)

    async def flush(self) -> None:
        """Wait until every write is durable (a no-op for durable writes)."""

        async def flush() -> None:
            if self._handle is not None:
                await self._handle.flush()

        await self._run(flush)

    def close(self) -> Awaitable[None]:
        """Close the session, as ``SQLiteSession.close()``: flush, and close the store
        this session opened (``db_path``); a handle or store given to the adapter is
        flushed and stays the caller's. Afterwards every operation raises
        ``RuntimeError``; closing again does nothing. A ``db_path`` session is closed
        when this returns; a ``store``/``handle`` session when the awaitable returned is
        done (it runs as a task of the running loop, awaited or not)."""
        if self._closed:
            return _Done()
        self._closed = True
        if self._own_loop:
            future = asyncio.run_coroutine_threadsafe(self._shut(), _OwnLoop.get())
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                future.result()
                return _Done()
            if threading.current_thread().name == "surfacelog-sessions":
                return asyncio.wrap_future(future)
            future.result()  # the own loop never waits for the caller's: no deadlock
            return _Done()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._shut()
        return loop.create_task(self._shut())

    async def _shut(self) -> None:
        async with self._lock:
            self._forget()
            handle, store = self._handle, self._opened_store
            if handle is None:
                return
            if handle is self._given:
                await handle.flush()
                return
            self._handle = self._opened_store = None
            try:
                await handle.passivate()
            finally:
                if store is not None:
                    await store.close()


def _settings(value: Any) -> Any:
    """``session_settings`` as ``SQLiteSession`` keeps it: a dict made a
    ``SessionSettings`` (``TypeError`` for an unknown key), ``None`` an empty one, when
    the SDK is installed; as given otherwise."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        return value
    return SessionSettings() if value is None else coerce_session_settings(value)


def _find_call(view: View, call_id: str) -> tuple[str, str]:
    """The name and arguments of the latest surface tool call ``call_id`` (``("", "")``
    when it is not on the surface, e.g. compacted away)."""
    nodes = view.nodes
    for k in range(len(nodes) - 1, -1, -1):
        message = project(view.event(nodes[k]))
        if message is None or message.get("role") != "assistant":
            continue
        for block in message["content"]:
            if block.get("type") == "tool-call" and block.get("id") == call_id:
                return str(block["name"]), str(block["arguments"])
    return "", ""


__all__ = ["ERASER_MODEL", "PopRefused", "SurfacelogSession"]
