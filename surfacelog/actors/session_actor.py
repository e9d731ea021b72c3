"""The session actor: a Ray async actor hosting ``LiveSession``s (``surfacelog.runtime``).

``SessionActor`` reaches its shard's file through the shard's journal actor
(``writer="journal"``); its subclass ``OwnerActor`` is the shard's writer itself
(``writer="owner"``): it runs the journal's code in its own process and also answers
what a journal answers (``WRITER_METHODS``). ``client.start_writer`` and
``Client.actor_on`` choose the class from ``HostingConfig.writer``.

``SessionActor`` serves both placements (an ``OwnerActor`` is packed). ``dedicated``:
the actor is named by its session id and hosts that one session (the design card's
shape); ``packed``: the actor is named by a shard number and hosts every session whose
id hashes to it. Either way its ``SessionHost`` (``actors.hosting``) activates a session
on its first request (loaded from the store, crash-repaired), serves requests one
mutation at a time, and passivates it after ``idle_timeout_s`` without requests (a
dedicated actor then exits, freeing its process).
A crashed actor is restarted by Ray (``max_restarts``) and activates its sessions again
through the same load path; the store's writer epoch fences whatever the previous
incarnation still tries to write.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import ray

from surfacelog.actors.coalesce import (
    Request,
    WireCall,
    WireReply,
    outcomes_to_wire,
    requests_from_wire,
    run_coalesced,
)
from surfacelog.actors.config import NAMESPACE, HostingConfig, tune_gc
from surfacelog.actors.hosting import SessionHost
from surfacelog.actors.journal import JournalActor, JournalStore, journal_name
from surfacelog.actors.metrics import Recorder
from surfacelog.actors.protocol import (
    ActorStats,
    AppendReply,
    BatchPayload,
    EventsPayload,
    MessagesPayload,
    SessionStats,
    append_reply,
    decode_append,
    encode_events,
    encode_messages,
    failure_line,
    pack_batch,
    writer_flush_subject,
)
from surfacelog.actors.replication import ReplicaStatus, shard_writer_parts
from surfacelog.runtime.live import LiveSession, StateDelta
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.session import AppendSpec, PruneCandidates, Replacement, SurfaceSnapshot
from surfacelog.session.compaction import CompactionRequest, PruneRequest
from surfacelog.session.pressure import ContextPressure
from surfacelog.store.base import EventStore, SessionInfo
from surfacelog.store.digests import StoreReplay
from surfacelog.store.rows import encode_batch

T = TypeVar("T")


def _memory() -> tuple[int, int | None]:
    import psutil

    proc = psutil.Process()
    try:
        full = proc.memory_full_info()
        return int(full.rss), int(full.uss)
    except (psutil.AccessDenied, AttributeError):
        return int(proc.memory_info().rss), None


class SessionActor:
    """Hosts sessions of one shard of ``config`` (``writer="journal"``), writing through
    the shard's journal actor; every method names its session first."""

    def __init__(self, config: HostingConfig, shard: str) -> None:
        """Raises ``ValueError`` when ``config`` is not this class's writer (an owner
        shard's sessions are hosted by an ``OwnerActor``), and Ray's ``ValueError``
        when the shard's journal is not running (``start_writer`` starts it)."""
        tune_gc()
        self._shard = shard
        self._metrics = Recorder(config.placement, config.writer, shard)
        self._attach(config, shard)
        self._host = SessionHost(
            self._get_store, self._metrics, durability=config.durability,
            idle_timeout_s=config.idle_timeout_s,
            # Its one session went idle: free the process. The next request creates a
            # new actor under the same name.
            on_empty=_exit_actor if config.placement == "dedicated" else None)
        self._requests = _requests_of(type(self))

    def _attach(self, config: HostingConfig, shard: str) -> None:
        """Reach the shard's writer: its journal actor (``OwnerActor`` overrides this
        to be the writer). Raises ``ValueError`` for another writer."""
        if config.writer != "journal":
            raise ValueError(f"writer {config.writer!r}: the shard's sessions are hosted "
                             f"by its OwnerActor (start_writer), not a SessionActor")
        journal = ray.get_actor(journal_name(config.shards.get(shard).path),
                                namespace=NAMESPACE)
        self._journal = JournalStore(journal, metrics=self._metrics)

    async def _get_store(self) -> EventStore:
        """The store this actor's sessions are activated from and write to."""
        return self._journal

    # -- requests ----------------------------------------------------------------------

    async def ping(self) -> None:
        """A no-op round trip (the benchmark's baseline)."""

    async def pid(self) -> int:
        """The process serving this actor: a new one after Ray restarts it."""
        return os.getpid()

    async def node_id(self) -> str:
        """The Ray node this actor runs on (hex id), to check where it was placed."""
        return str(ray.get_runtime_context().get_node_id())

    async def append(self, session_id: str, spec: AppendSpec,
                     expected_seq: int | None = None) -> Event:
        events = await self.append_batch(session_id, [spec], expected_seq)
        return events[0]

    async def append_batch(self, session_id: str, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> list[Event]:
        started = time.perf_counter()
        events, appended = await self._host.run(session_id, lambda h: h.append_request(
            specs, expected_seq))
        self._metrics.appended(len(events) if appended else 0,
                               time.perf_counter() - started)
        return events

    async def append_with_state(self, session_id: str, specs: Sequence[AppendSpec],
                                delta: Mapping[str, Any], at: int,
                                expected_seq: int | None = None) -> list[Event]:
        """``append_batch`` with a state delta written in the same write, all or nothing
        (``LiveSession.append_request(state=...)``)."""
        started = time.perf_counter()
        events, appended = await self._host.run(session_id, lambda h: h.append_request(
            specs, expected_seq, state=StateDelta(delta, at)))
        self._metrics.appended(len(events) if appended else 0,
                               time.perf_counter() - started)
        return events

    async def append_wire(self, request: bytes) -> AppendReply:
        """``append_batch`` of an ``encode_append`` request, answered by
        ``append_reply``. What ``SessionHandle`` uses: one argument, no pickling."""
        started = time.perf_counter()
        req = decode_append(request)
        events, appended = await self._host.run(req.session_id, lambda h: h.append_request(
            req.specs, req.expected_seq, owned=True))
        self._metrics.appended(len(events) if appended else 0,
                               time.perf_counter() - started)
        return append_reply(events, appended)

    async def events(self, session_id: str, since_seq: int = 0,
                     limit: int | None = None) -> list[Event]:
        return await self._host.read(session_id, lambda h: h.events(since_seq, limit))

    async def events_wire(self, session_id: str, since_seq: int = 0,
                          limit: int | None = None) -> EventsPayload:
        """``events`` as ``encode_events`` bytes (what ``SessionHandle`` uses)."""
        return encode_events(await self._host.read(session_id,
                                                   lambda h: h.events(since_seq, limit)))

    async def surface(self, session_id: str) -> SurfaceSnapshot:
        return await self._host.read(session_id, lambda h: h.surface())

    async def surface_events(self, session_id: str) -> tuple[SurfaceSnapshot, list[Event]]:
        return await self._host.read(session_id, lambda h: h.surface_events())

    async def oversized_results(self, session_id: str, max_chars: int) -> PruneCandidates:
        """The current tool results over ``max_chars`` characters: what a pruner reads
        on each pass (nearly always none), not the whole surface."""
        return await self._host.read(session_id, lambda h: h.oversized_results(max_chars))

    async def derive_messages(self, session_id: str,
                              as_of: int | None = None) -> list[dict[str, Any]]:
        return await self._host.read(session_id, lambda h: h.derive_messages(as_of))

    async def derive_wire(self, session_id: str, as_of: int | None = None
                          ) -> MessagesPayload:
        """``derive_messages`` as ``encode_messages`` bytes (what ``SessionHandle``
        uses)."""
        return encode_messages(await self._host.read(session_id,
                                                     lambda h: h.derive_messages(as_of)))

    async def fold(self, session_id: str) -> list[Replacement]:
        return await self._host.read(session_id, lambda h: h.fold())

    async def compact(self, session_id: str, request: CompactionRequest) -> list[Event]:
        return await self._host.run(session_id, lambda h: h.compact(request))

    async def prune(self, session_id: str, request: PruneRequest) -> list[Event]:
        return await self._host.run(session_id, lambda h: h.prune(request))

    async def pressure(self, session_id: str) -> ContextPressure:
        return await self._host.run(session_id, lambda h: h.pressure())

    async def held_pressures(self, session_ids: Sequence[str]
                             ) -> list[ContextPressure | None]:
        """The context pressure of each of ``session_ids`` that this actor holds now;
        ``None`` for one it does not hold (nothing is loaded to answer). A watcher's
        pass asks once per actor, then sends its per-session requests only where there
        is work (``actors.compactor``)."""
        return await self._host.held(session_ids, LiveSession.pressure_now, LiveSession.pressure)

    async def held_oversized(self, session_ids: Sequence[str], max_chars: int
                             ) -> list[bool | None]:
        """For each of ``session_ids`` that this actor holds now, whether its surface
        has a tool result over ``max_chars`` characters; ``None`` for one it does not
        hold. What a pruner's pass asks once per actor."""
        def now(live: LiveSession) -> bool | None:
            return None if live.lock.locked() else bool(
                live.oversized_results(max_chars).nodes)

        async def later(live: LiveSession) -> bool:
            async with live.lock:
                return bool(live.oversized_results(max_chars).nodes)
        return await self._host.held(session_ids, now, later)

    async def set_context(self, session_id: str, payload: dict[str, Any]) -> Event | None:
        return await self._host.run(session_id, lambda h: h.set_context(payload))

    async def replace(self, session_id: str,
                      request: CompactionRequest | PruneRequest) -> list[Event]:
        """The protocol's ``replace``: a compaction or a prune request."""
        if isinstance(request, PruneRequest):
            return await self.prune(session_id, request)
        return await self.compact(session_id, request)

    async def fork(self, session_id: str, boundary: int | None,
                   child_id: str | None) -> SessionHeader:
        return await self._host.run(session_id, lambda h: h.fork(boundary, child_id))

    async def fork_seed(self, session_id: str, boundary: int | None,
                        child_id: str | None) -> tuple[SessionHeader, BatchPayload]:
        """The child of a fork, as its header and its seed log's rows, not stored: the
        client stores it on the child's own shard."""
        async def seed(live: LiveSession) -> tuple[SessionHeader, BatchPayload]:
            child = await live.fork_seed(boundary, child_id)
            assert child.header is not None and child.header.id is not None
            return child.header, pack_batch(encode_batch(child.header.id, child.log))
        return await self._host.run(session_id, seed)

    async def flush(self, session_id: str) -> None:
        await self._host.run(session_id, lambda h: h.flush())

    async def stats(self, session_id: str) -> SessionStats:
        return await self._host.read(session_id, lambda h: h.stats())

    async def header(self, session_id: str) -> SessionHeader:
        """The session's header (what an export writes first)."""
        return await self._host.read(session_id, _header)

    async def passivate(self, session_id: str) -> bool:
        """Flush and drop ``session_id`` now; False when it was not active here."""
        return await self._host.passivate(session_id)

    # Ray records each call's state changes as "task events" in the caller and here, and
    # ships them to its GCS for its task list: CPU in three processes per call, at
    # thousands of calls a second (bench_hosting section 1: 0.87-0.99x the CPU per no-op
    # call without them, 50 in flight, four runs). Ray Serve turns them off for its replicas too.
    # The requests' own latency and outcomes are this package's metrics
    # (``actors.metrics``); Ray's task list no longer shows these calls.
    @ray.method(enable_task_events=False)
    async def call_many(self, requests: WireCall) -> WireReply:
        """Several requests of one client process in one call (``actors.coalesce``:
        pickled tuples, ``requests_to_wire``), each answered with its own outcome: one
        session's requests are applied in the order they came, different sessions' side
        by side, so that their writes share one group commit. A request for a method not in
        ``COALESCED`` is refused (its outcome is a ``ValueError``)."""
        async def apply(request: Request) -> Any:
            method = self._requests.get(request.method)  # the COALESCED ones only
            if method is None:
                raise ValueError(f"{request.method!r} is not a request a coalesced call "
                                 "carries")
            return await method(self, *request.args)
        return outcomes_to_wire(await run_coalesced(requests_from_wire(requests), apply))

    async def actor_stats(self) -> ActorStats:
        rss, uss = _memory()
        host = self._host
        return ActorStats(active_sessions=len(host.sessions), activations=host.activations,
                         passivations=host.passivations, pid=os.getpid(), rss_bytes=rss,
                         failed_passivations=tuple(host.failed_passivations),
                         **({} if uss is None else {"uss_bytes": uss}))

    async def shutdown(self) -> list[str]:
        """Passivate every session (flushing it); the actor then holds nothing. Returns
        the write failures found (``session: error``), after passivating all, and the
        shard writer's own flush failing (``(shard NAME flush): error``)."""
        failures = await self._host.passivate_all()
        try:
            await (await self._get_store()).flush()
        except Exception as exc:  # the shard's writer itself: reported the same way
            failures.append(failure_line(writer_flush_subject(self._shard), exc))
        return failures


COALESCED: Final = frozenset({
    "append", "append_batch", "append_wire", "events", "events_wire", "surface",
    "surface_events", "oversized_results", "derive_messages", "derive_wire", "fold",
    "compact", "prune", "pressure", "set_context", "replace", "fork", "fork_seed", "flush",
    "stats", "header", "passivate", "held_pressures", "held_oversized"})
"""The requests that ``call_many`` applies: the methods ``SessionHandle`` calls, each
naming its session first, and the ``held_*`` that ``Client.held`` sends, which name the
sessions of a watcher's pass."""


WRITER_METHODS: Final = ("ready", "holds", "list_sessions", "create_stored",
                         "writer_stats", "close", "replica_status", "store_call",
                         "replay_digests")
"""What a shard's writer answers, a ``JournalActor`` or an ``OwnerActor`` alike
(``Client`` calls them by name on ``Client.writers``); a ``SessionActor`` has none."""


class OwnerActor(SessionActor):
    """The shard's one writer with ``writer="owner"`` (named ``owner:<key>``): hosts
    every session of the shard, as a packed ``SessionActor`` does, and owns the shard's
    file itself, the journal's code (``JournalActor``) running in this process, so an
    append commits without a second Ray call. Also answers what a journal answers
    (``WRITER_METHODS``), and supervises the shard's Litestream when it has a replica."""

    def _attach(self, config: HostingConfig, shard: str) -> None:
        """Become the shard's writer (the file is opened on first use). Raises
        ``ValueError`` for another writer, ``ReplicaError`` for a replica on a shard
        that is not a SQLite file."""
        if config.writer != "owner":
            raise ValueError(f"writer {config.writer!r}: an OwnerActor is the shard's "
                             f"writer only with writer 'owner'")
        opener, plan = shard_writer_parts(config.shards.get(shard), config.store_options)
        self._writer = JournalActor(opener, self._metrics, plan)

    async def _get_store(self) -> EventStore:
        return await self._writer.backend()

    # -- what a journal answers ------------------------------------------------------

    async def ready(self) -> None:
        """Open the shard's file (bump-and-reject happens here)."""
        await self._writer.ready()

    async def holds(self, session_id: str) -> bool:
        """True when ``session_id`` is stored in the shard (``JournalActor.holds``)."""
        return await self._writer.holds(session_id)

    async def list_sessions(self) -> list[SessionInfo]:
        """Every session stored in the shard."""
        return await self._writer.list_sessions()

    async def create_stored(self, header: SessionHeader, batch: BatchPayload) -> int:
        """Store a new session from its rows (a fork's child); its writer epoch. Raises
        ``SessionExists``."""
        return await self._writer.create_stored(header, batch)

    async def writer_stats(self) -> dict[str, Any]:
        """The shard's commit counters (``JournalActor.stats``)."""
        return await self._writer.stats()

    async def close(self) -> None:
        """Close the shard's file, then stop its Litestream after a last sync."""
        await self._writer.close()

    async def replica_status(self) -> ReplicaStatus | None:
        """The shard's Litestream process (``None``: no replica, or not opened yet)."""
        return await self._writer.replica_status()

    async def store_call(self, method: str, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:
        """``JournalActor.store_call``: the shard's store, for a client's
        ``ShardStore``."""
        return await self._writer.store_call(method, args, kwargs)

    async def replay_digests(self) -> StoreReplay:
        """``JournalActor.replay_digests``: the shard's committed sessions replayed on
        its node."""
        return await self._writer.replay_digests()


def _exit_actor() -> None:
    ray.actor.exit_actor()  # type: ignore[no-untyped-call]


def _requests_of(cls: type[SessionActor]) -> dict[str, Callable[..., Awaitable[Any]]]:
    """The ``COALESCED`` methods of ``cls`` as the class body defines them. In a Ray
    actor, ``cls`` is Ray's subclass of the actor class, each of whose methods is
    wrapped in a tracing coroutine (``functools.wraps``: ``inspect.unwrap`` finds the
    method), which does nothing without a trace context (never passed to a call from
    within the actor): ``call_many`` calls the methods themselves, one coroutine less
    for every request it applies."""
    return {name: inspect.unwrap(getattr(cls, name)) for name in COALESCED}


RemoteSessionActor: Any = ray.remote(SessionActor)
RemoteOwnerActor: Any = ray.remote(OwnerActor)


def _header(live: LiveSession) -> SessionHeader:
    header = live.session.header
    if header is None:
        raise AssertionError(f"session {live.session_id!r} is hosted without a header")
    return header
