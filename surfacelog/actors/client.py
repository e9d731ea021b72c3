"""The client API: ``connect`` -> ``Client``; ``client.session(id)`` -> ``SessionHandle``.

The directory is Ray's: session actors are named actors in the ``surfacelog`` namespace,
got or created by name (``get_if_exists``), so any process of the cluster reaches the
same actor for the same session. Handles unwrap Ray's task errors, so a caller catches
``SurfaceError``, ``Conflict``, ``WriterFenced``... exactly as the actor raised them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import zlib
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from functools import partial
from typing import Any, Final, Literal, overload

import ray
from msgspec import UNSET, UnsetType
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from surfacelog.actors.coalesce import (
    CallLine,
    LineStats,
    Outcome,
    Request,
    outcomes_from_wire,
    requests_to_wire,
)
from surfacelog.actors.config import (
    NAMESPACE,
    Durability,
    HostingConfig,
    Placement,
    Writer,
)
from surfacelog.actors.errors import RequestError, ShardUnavailable
from surfacelog.actors.journal import RemoteJournal, flush_journal, journal_name
from surfacelog.actors.metrics import Recorder
from surfacelog.actors.protocol import (
    ActorStats,
    LoggedEvents,
    SessionStats,
    actor_error,
    decode_events,
    decode_messages,
    encode_append,
    failure_line,
    writer_close_subject,
    writer_flush_subject,
)
from surfacelog.actors.raycompat import set_cluster_switch
from surfacelog.actors.replication import shard_writer_parts
from surfacelog.actors.retry import Backoff, through_restarts
from surfacelog.actors.session_actor import RemoteOwnerActor, RemoteSessionActor
from surfacelog.actors.shard_store import ShardStore
from surfacelog.runtime.handle import SessionLike
from surfacelog.schema.events import (
    Event,
    ExtensionType,
    LogOnlyType,
    ReplaceOp,
    SurfacePayload,
    SurfaceType,
)
from surfacelog.schema.header import SessionHeader
from surfacelog.session import AppendSpec, PruneCandidates, Replacement, SurfaceSnapshot
from surfacelog.session.compaction import CompactionRequest, PruneRequest
from surfacelog.session.context import DEFAULT_PLUGIN, context_message
from surfacelog.session.errors import ForkError
from surfacelog.session.fork import SESSION_ALREADY_EXISTS
from surfacelog.session.pressure import ContextPressure
from surfacelog.store.base import SessionInfo
from surfacelog.store.digests import StoreReplay
from surfacelog.store.errors import CommitFailed, SessionExists, StoreError
from surfacelog.store.replica import ReplicaPlan
from surfacelog.store.shardmap import Shard, ShardMap

RETRY_FOR_S_ENV: Final = "SURFACELOG_RETRY_FOR_S"
"""The environment variable that sets ``RETRY_FOR_S`` (seconds, > 0), read once, when
this module is imported; every process of a Ray that a process started inherits it.
Unset, the window is 30 s. For tests that lose a node on purpose and would otherwise
wait out whole windows after everything is gone; not meant to be tuned in production."""


def _retry_for_s(environ: Mapping[str, str] = os.environ) -> float:
    """``RETRY_FOR_S``: 30 s, or ``SURFACELOG_RETRY_FOR_S``. Raises ``ValueError`` when
    that is not a positive number."""
    raw = environ.get(RETRY_FOR_S_ENV, "").strip()
    if not raw:
        return 30.0
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(f"{RETRY_FOR_S_ENV} must be a positive number of seconds, "
                         f"not {raw!r}")
    return value


RETRY_FOR_S = _retry_for_s()
"""How long a handle keeps resending an idempotent request whose actor died or is
restarting (Ray restarts it; a dedicated actor's new process takes about a second):
30 s unless ``SURFACELOG_RETRY_FOR_S`` says otherwise."""
REPLAY_TIMEOUT_S: Final = 600.0
"""How long ``Client.replay_digests`` waits for a shard's writer to replay it."""
COALESCE_ENV: Final = "SURFACELOG_COALESCE"
"""Set to ``0`` to send each request in a call of its own (to measure what coalescing
gives); read once, inherited by the processes of a Ray this process starts."""
COALESCE = os.environ.get(COALESCE_ENV, "1") != "0"
_MAX_CONCURRENCY = 10_000
_HOMES_KEPT = 100_000
"""Session homes a client remembers (least recently used dropped first)."""


def local_ray_on_loopback() -> None:
    """Make the local Ray that ``ray.init`` is about to start listen on loopback only.

    Ray binds its servers (GCS, raylet, object manager, workers) to the node's IP, and
    to loopback only when that IP is loopback. On Linux it takes the machine's outward
    IP unless its switch ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` says no cluster is being
    formed; that switch is read once, when ``ray`` is imported, so it is set both in the
    environment (for the processes Ray spawns) and on the already imported constant
    (``raycompat.set_cluster_switch``, which raises ``RayCompatError`` should a Ray
    release drop it).
    ``tests/actors/test_local_ray_loopback.py`` checks every listening socket of the
    local Ray, so a Ray release that moves the switch fails there. Does nothing when the
    caller set it."""
    if "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" in os.environ:
        return
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    set_cluster_switch(False)


async def _shutdown_actor(name: str, actor: Any, timeout_s: float) -> list[str]:
    """Passivate every session of ``actor``; the write failures it found, by session,
    or one line for an actor that did not answer within ``timeout_s`` (its shard's
    node is lost: what it held is reported by its sessions when they reactivate)."""
    # A dedicated actor exits after passivating its idle session: it has nothing left to
    # flush. A crashed one lost its buffered writes, which its drivers see as missing.
    try:
        failures: list[str] = await within(actor.shutdown.remote(), timeout_s)
    except RayActorError:
        return []
    except asyncio.TimeoutError:
        return [failure_line(f"({name})", ShardUnavailable(
            f"did not answer within {timeout_s:g} s"))]
    return failures


async def within(awaitable: Any, timeout_s: float) -> Any:
    """The result of ``awaitable`` (an ``ObjectRef``, a future or a coroutine); raises
    ``asyncio.TimeoutError`` after ``timeout_s``, leaving it running.

    Not ``asyncio.wait_for``: before Python 3.12 it can swallow the cancellation of the
    task that awaits it when the awaited call finishes at the same moment (CPython
    gh-86296), and a compactor told to stop then never stops."""
    # An ObjectRef's own future wrapped for this loop: no extra task on the hot path.
    # (``ref.as_future()`` did the same but now warns that it is deprecated.)
    future = (asyncio.wrap_future(awaitable.future()) if isinstance(awaitable, ray.ObjectRef)
              else asyncio.ensure_future(awaitable))
    if not future.done():
        # What ``asyncio.wait`` does for one future and a timeout, without its sets and
        # its counting: this runs for every request a client sends. Cancelling the
        # caller cancels the waiter, never ``future``.
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        future.add_done_callback(wake)
        timer = loop.call_later(timeout_s, wake)
        try:
            await waiter
        finally:
            timer.cancel()
            future.remove_done_callback(wake)
    if not future.done():
        # Nobody will await it now: read its outcome when it comes, so that a late
        # failure (the actor restarting) is not reported as an unretrieved exception.
        future.add_done_callback(_drop_outcome)
        raise asyncio.TimeoutError
    return future.result()


def _drop_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def init_ray(address: str | None, **options: Any) -> None:
    """``ray.init`` in the ``surfacelog`` namespace. ``address=None``: join the cluster
    named by ``RAY_ADDRESS`` when that is set (as in a Ray job), else start a new local
    Ray on loopback only; never join whatever local cluster last wrote Ray's
    "current cluster" file (another user's test cluster, say), as ``ray.init()`` would."""
    if address is None and not os.environ.get("RAY_ADDRESS"):
        local_ray_on_loopback()
        address = "local"
    ray.init(address=address, namespace=NAMESPACE, **options)


def _run_sync(coro: Any) -> None:
    """Run ``coro`` to completion from sync code, inside or outside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


HELD_WAIT_S: Final = 2.0
"""How long ``Client.held`` waits for an actor's answer. Its sessions then get requests
of their own, which wait out the outage within the retry window: a pass over an actor
that is down waits about this much longer, not a second retry window."""

_UNKNOWN_OUTCOME: Final = (RayActorError, CommitFailed)
"""Errors a session actor may relay after which its write may or may not have happened."""


def _payload_size(args: Sequence[Any]) -> int:
    """The bytes an argument list carries, as far as a line's bound counts them: its
    encoded requests (``bytes``); other arguments are small."""
    return sum(len(a) for a in args if isinstance(a, (bytes, bytearray))) + 64


class Client:
    """A connection to the sessions of one deployment (its ``HostingConfig``: one or
    more shards) on a Ray cluster. Build it with ``connect``."""

    def __init__(self, config: HostingConfig, writers: dict[str, Any]) -> None:
        self.config = config
        self.writers = writers
        """Each shard's writer actor, by shard name: its ``JournalActor``
        (``writer="journal"``) or its ``OwnerActor`` (``writer="owner"``, which also
        hosts the shard's sessions). Both answer ``session_actor.WRITER_METHODS``."""
        self._actors: dict[str, Any] = {}
        self._homes: OrderedDict[str, Shard] = OrderedDict()
        """Where sessions were found (several shards only), least recently used first."""
        shards = config.shards.shards
        self._only = shards[0] if len(shards) == 1 else None
        self._keys = {shard.name: config.shard_key(shard) for shard in shards}
        self.resent = 0
        """Requests this client's handles sent again after their actor died."""
        self.retry_for_s = RETRY_FOR_S
        self.coalesce = COALESCE
        """Whether the handles' requests to one actor share calls (``line_to``)."""
        self._lines: dict[str, tuple[Any, asyncio.AbstractEventLoop, CallLine]] = {}
        self.direct_calls = 0
        """Requests sent in calls of their own with ``coalesce`` off."""

    @property
    def db(self) -> str:
        """The database file of a one-shard deployment. Raises ``ValueError`` when
        there are several (name a shard instead)."""
        if len(self.config.shards.shards) != 1:
            raise ValueError("this deployment has several shards: name one")
        return self.config.shards.shards[0].path

    @property
    def writer(self) -> Any:
        """The writer actor of a one-shard deployment (see ``writers``). Raises
        ``ValueError`` when there are several."""
        if len(self.writers) != 1:
            raise ValueError("this deployment has several shards: name one")
        return next(iter(self.writers.values()))

    # -- where a session lives -----------------------------------------------------------

    async def locate(self, session_id: str) -> tuple[Shard, bool]:
        """Where ``session_id`` is stored (``(shard, True)``), else its home
        (``(home, False)``), asking its candidate shards now (``ShardMap.candidates``).
        Raises ``ShardUnavailable`` when a candidate does not answer within the retry
        window before the session is found."""
        candidates = self.config.shards.candidates(session_id)
        for shard in candidates:
            if await self._holds(shard, session_id):
                return shard, True
        return candidates[0], False

    async def shard_of(self, session_id: str) -> Shard:
        """The shard that holds ``session_id``, or where it will be created (see
        ``locate``). With no shard added later that is its home, found without asking
        anyone; otherwise the answer is remembered. Raises ``ShardUnavailable``."""
        if self._only is not None:
            return self._only
        known = self._homes.get(session_id)
        if known is not None:
            self._homes.move_to_end(session_id)
            return known
        candidates = self.config.shards.candidates(session_id)
        home = candidates[0] if len(candidates) == 1 else (await self.locate(session_id))[0]
        self._homes[session_id] = home
        while len(self._homes) > _HOMES_KEPT:
            self._homes.popitem(last=False)
        return home

    async def _holds(self, shard: Shard, session_id: str) -> bool:
        held: bool = await self._on_shard(shard.name, "holds", session_id)
        return held

    def actor_name(self, shard: Shard, session_id: str) -> str:
        """The Ray actor name that serves ``session_id`` on ``shard``."""
        key = self._keys[shard.name]
        if self.config.writer == "owner":
            return owner_name(key)
        if self.config.placement == "dedicated":
            return f"session:{key}:{session_id}"
        pack = zlib.crc32(session_id.encode()) % self.config.packs
        return f"pack:{key}:{pack}"

    async def actor(self, session_id: str) -> Any:
        """Get or create the actor serving ``session_id`` (on its shard's node). Raises
        ``ShardUnavailable``."""
        return self.actor_on(await self.shard_of(session_id), session_id)

    def actor_on(self, shard: Shard, session_id: str) -> Any:
        """Get or create the actor serving ``session_id`` on ``shard``: a
        ``SessionActor``, or with ``writer="owner"`` the shard's ``OwnerActor``."""
        return self._named_actor(self.actor_name(shard, session_id), shard)

    def route(self, shard: Shard, session_id: str) -> tuple[Any, CallLine]:
        """The actor serving ``session_id`` on ``shard`` and this process's line to it
        (its name found once: this is every request's path)."""
        name = self.actor_name(shard, session_id)
        actor = self._named_actor(name, shard)
        return actor, self.line_to(name, actor)

    def send(self, shard: Shard, session_id: str, method: str, args: tuple[Any, ...],
             key: Hashable) -> Any:
        """Send ``method(*args)`` to the actor serving ``session_id`` on ``shard``: on
        this process's line to it (after the line's earlier requests of ``key``) when
        calls coalesce, else as a call of its own. Returns what to await, with
        ``within``: the request's future or the call's ``ObjectRef``."""
        if self.coalesce:
            _, line = self.route(shard, session_id)
            return line.submit(Request(method, args, key, _payload_size(args)))
        self.direct_calls += 1
        return getattr(self.actor_on(shard, session_id), method).remote(*args)

    async def held(self, method: str, session_ids: Sequence[str], *args: Any
                   ) -> dict[str, Any]:
        """``method`` (a ``held_*`` of ``SessionActor``) asked of each actor serving some
        of ``session_ids``, one request per actor for all of its sessions:
        ``{session: answer}``, the answer ``None`` for a session its actor does not
        hold now. A session is left out when its shard did not answer within the retry
        window, or its actor within ``HELD_WAIT_S`` (an outage: a caller asks it
        alone, as before, and that request waits the outage out or reports it). What
        a watcher's pass over many sessions asks first, instead of a request per
        session."""
        groups: dict[str, tuple[Shard, list[str]]] = {}
        for sid in session_ids:
            try:
                shard = await self.shard_of(sid)
            except ShardUnavailable:
                continue
            name = self.actor_name(shard, sid)
            groups.setdefault(name, (shard, []))[1].append(sid)

        async def ask(shard: Shard, sids: list[str]) -> dict[str, Any]:
            sent = self.send(shard, sids[0], method, (sids, *args), ("held", id(sids)))
            try:
                answers = await within(sent, min(self.retry_for_s, HELD_WAIT_S))
            except (asyncio.TimeoutError, RayActorError):
                return {}
            return dict(zip(sids, answers, strict=True))

        found: dict[str, Any] = {}
        for part in await asyncio.gather(*(ask(shard, sids)
                                           for shard, sids in groups.values())):
            found.update(part)
        return found

    def _named_actor(self, name: str, shard: Shard) -> Any:
        actor = self._actors.get(name)
        if actor is None:
            if self.config.writer == "owner":
                # The shard's one session actor is its writer: got (or created again,
                # should it have been stopped) exactly as ``connect`` started it.
                actor = start_writer(self.config, shard)
            else:
                actor = RemoteSessionActor.options(
                    name=name, namespace=NAMESPACE, get_if_exists=True,
                    lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=0,
                    max_concurrency=_MAX_CONCURRENCY,
                    resources=self.config.session_resources(shard),
                ).remote(self.config, shard.name)
            self._actors[name] = actor
        return actor

    def line_to(self, name: str, actor: Any) -> CallLine:
        """The line of this process's requests to ``actor`` (named ``name``), made on
        first use; a new one for a new handle under the same name (a restarted
        dedicated actor) or another event loop."""
        loop = asyncio.get_running_loop()
        known = self._lines.get(name)
        if known is not None and known[0] is actor and known[1] is loop:
            return known[2]

        async def one(request: Request) -> Any:
            ref = getattr(actor, request.method).remote(*request.args)
            return await asyncio.wrap_future(ref.future())

        async def many(requests: Sequence[Request]) -> Sequence[Outcome]:
            ref = actor.call_many.remote(requests_to_wire(requests))
            return outcomes_from_wire(await asyncio.wrap_future(ref.future()))

        line: CallLine = CallLine(one, many)
        self._lines[name] = (actor, loop, line)
        return line

    def call_stats(self) -> LineStats:
        """What this client's lines sent, summed: calls, requests, coalesced calls."""
        total = LineStats(calls=self.direct_calls, requests=self.direct_calls,
                          largest=min(self.direct_calls, 1))
        for _, _, line in self._lines.values():
            total.add(line.stats)
        return total

    def forget(self, session_id: str) -> None:
        """Drop the cached actor handle (after the actor died) to resolve it again."""
        shard = self._only or self._homes.get(session_id)
        if shard is not None:
            self._actors.pop(self.actor_name(shard, session_id), None)

    def session(self, session_id: str) -> SessionHandle:
        """A handle on ``session_id`` (created on its first request if missing)."""
        return SessionHandle(self, session_id)

    def shard_store(self, name: str | None = None) -> ShardStore:
        """Shard ``name``'s store as this process sees it (a ``ScopedEventStore``):
        each call goes to the shard's writer, journal or owner actor, which answers
        from its backend (scopes, state, listing and deletion included). ``name`` may
        be left out for a one-shard deployment. Raises ``ValueError`` when it is left
        out with several shards, ``KeyError`` for an unknown shard."""
        if name is None:
            if len(self.writers) != 1:
                raise ValueError("this deployment has several shards: name one")
            name = next(iter(self.writers))
        if name not in self.writers:
            raise KeyError(f"no shard named {name!r}")
        return ShardStore(name, partial(self._store_call, name))

    async def _store_call(self, name: str, method: str, args: tuple[Any, ...],
                          kwargs: dict[str, Any], idempotent: bool) -> Any:
        """``store_call`` of shard ``name``'s writer: an idempotent call is sent again
        while it restarts. Raises the backend's error (unwrapped), ``ShardUnavailable``
        when the writer does not answer within the retry window (for a call that is
        not idempotent, ``RayActorError`` when it died: its outcome is unknown)."""
        writer = self.writers[name]

        def send(_again: bool) -> Any:
            return writer.store_call.remote(method, args, kwargs)

        try:
            if idempotent:
                return await within(through_restarts(send, self.retry_for_s),
                                    self.retry_for_s)
            return await within(send(False), self.retry_for_s)
        except RayTaskError as exc:
            raise actor_error(exc) from None
        except (RayActorError, asyncio.TimeoutError) as exc:
            if isinstance(exc, RayActorError) and not idempotent:
                raise
            raise ShardUnavailable(f"shard {name!r} did not answer {method} within "
                                   f"{self.retry_for_s:g} s ({type(exc).__name__})") from None

    # -- every shard ---------------------------------------------------------------------

    async def list_sessions(self) -> list[SessionInfo]:
        """Every stored session of every shard, ordered by id. Raises
        ``ShardUnavailable`` when a shard does not answer."""
        parts = await asyncio.gather(*(self._on_shard(name, "list_sessions")
                                       for name in self.writers))
        return sorted((info for part in parts for info in part), key=lambda i: i.id)

    async def _on_shard(self, name: str, method: str, *args: Any) -> Any:
        """``method(*args)`` of shard ``name``'s writer (one of ``WRITER_METHODS``), sent
        again while it restarts. Raises ``ShardUnavailable`` when it does not answer
        within the retry window (its node is lost: the writer waits for a node offering
        the shard's resource)."""
        writer = self.writers[name]
        try:
            return await within(through_restarts(
                lambda _again: getattr(writer, method).remote(*args), self.retry_for_s),
                self.retry_for_s)
        except (RayActorError, asyncio.TimeoutError) as exc:
            raise ShardUnavailable(f"shard {name!r} did not answer {method} within "
                                   f"{self.retry_for_s:g} s ({type(exc).__name__})") from None

    async def shard_ready(self, name: str) -> None:
        """Return once shard ``name``'s writer answers. Raises ``ShardUnavailable`` when
        it does not within the retry window."""
        await self._on_shard(name, "ready")

    async def writer_stats(self) -> dict[str, Any]:
        """The writers' commit counters, summed over the shards. Raises
        ``ShardUnavailable`` when a shard does not answer."""
        parts = await asyncio.gather(*(self._on_shard(name, "writer_stats")
                                       for name in self.writers))
        total: dict[str, Any] = {}
        for part in parts:
            for key, value in part.items():
                total[key] = total.get(key, 0) + value
        return total

    async def replay_digests(self, timeout_s: float = REPLAY_TIMEOUT_S
                             ) -> dict[str, StoreReplay]:
        """Each shard's committed sessions replayed by its writer, on the shard's node
        (``JournalActor.replay_digests``), by shard name: nothing is read from this
        machine's disk. The replay is read-only, so it is sent again while a writer
        restarts. Raises ``ShardUnavailable`` when a shard has not answered within
        ``timeout_s`` (a replay reads the whole shard: a longer wait than one
        request's retry window), the store's errors as the writer raised them."""
        async def one(name: str) -> tuple[str, StoreReplay]:
            writer = self.writers[name]
            try:
                replay: StoreReplay = await within(through_restarts(
                    lambda _again: writer.replay_digests.remote(), timeout_s), timeout_s)
            except RayTaskError as exc:
                raise actor_error(exc) from None
            except (RayActorError, asyncio.TimeoutError) as exc:
                raise ShardUnavailable(
                    f"shard {name!r} did not replay its sessions within {timeout_s:g} s "
                    f"({type(exc).__name__})") from None
            return name, replay

        return dict(await asyncio.gather(*(one(name) for name in self.writers)))

    async def actor_stats(self) -> list[ActorStats]:
        """One entry per session actor this client has resolved."""
        return list(await asyncio.gather(*(a.actor_stats.remote()
                                           for a in self._actors.values())))

    async def passivate_all(self) -> list[str]:
        """Passivate (flush) every session of every actor this client has resolved,
        then flush the journals (an owner writer is among those actors). Returns the
        write failures found, one line per session (``session: error``) and one per
        shard whose writer failed to flush (``(shard NAME flush): error``); with
        buffered durability each means acknowledged events that are not stored. Every
        session is passivated either way. A failure that several actors report alike
        (each session actor of a shard finds its journal's flush failing) is listed
        once."""
        actors = dict(self._actors)
        if self.config.writer == "owner":
            # The writers are session actors: shutting one down flushes its file.
            for shard in self.config.shards.shards:
                actors.setdefault(owner_name(self._keys[shard.name]), self.writers[shard.name])
        found = await asyncio.gather(*(_shutdown_actor(name, actor, self.retry_for_s)
                                       for name, actor in actors.items()))
        failures = [line for lines in found for line in lines]
        if self.config.writer == "journal":
            for name, journal in self.writers.items():
                try:
                    await within(flush_journal(journal), self.retry_for_s)
                except (RayActorError, RayTaskError, asyncio.TimeoutError) as exc:
                    failures.append(failure_line(writer_flush_subject(name), exc))
        return list(dict.fromkeys(failures))

    async def flush(self) -> None:
        """``passivate_all``, raising ``StoreError`` when a write failed."""
        failures = await self.passivate_all()
        if failures:
            raise StoreError(f"{len(failures)} session(s) have writes that failed: "
                             + "; ".join(failures[:5]))

    def shutdown(self) -> list[str]:
        """Passivate (flush) and kill every actor this client resolved, and the writers.
        Returns ``passivate_all``'s write failures and each writer whose close failed
        (``(shard NAME close): error``: its last commits did not make it, a full disk
        say), unless its flush had just failed with that very error (the same batches
        refused again: listed once, as the flush's); the actors are stopped
        regardless."""
        failures: list[str] = []

        async def passivate() -> None:
            failures.extend(await self.passivate_all())

        try:
            _run_sync(passivate())
        finally:
            # The writers close first (with ``writer="owner"`` they are among the
            # session actors): a writer's close stops its shard's Litestream after a
            # last sync, which a kill would cut short (Ray kills a worker's children
            # with it). A writer lost or not answering is killed below all the same.
            for name, writer in self.writers.items():
                try:
                    with contextlib.suppress(RayActorError, GetTimeoutError):
                        ray.get(writer.close.remote(), timeout=self.retry_for_s)
                except RayTaskError as exc:  # the writer's own error, as its close raised it
                    if failure_line(writer_flush_subject(name), exc) not in failures:
                        failures.append(failure_line(writer_close_subject(name), exc))
            for actor in self._actors.values():
                ray.kill(actor, no_restart=True)
            for writer in self.writers.values():
                ray.kill(writer, no_restart=True)
            self._actors.clear()
        return failures


def owner_name(key: str) -> str:
    """The name of the ``OwnerActor`` of the shard whose key is ``key``
    (``HostingConfig.shard_key``)."""
    return f"owner:{key}"


def start_writer(config: HostingConfig, shard: Shard) -> Any:
    """Get or create ``shard``'s writer on the shard's node (its resource): its
    ``JournalActor``, or (``writer="owner"``) its ``OwnerActor``, the one session actor
    that hosts the shard's sessions and owns its file. Detached, restarted by Ray
    without end, never retrying a task (the callers resend)."""
    if config.writer == "owner":
        return RemoteOwnerActor.options(
            name=owner_name(config.shard_key(shard)), namespace=NAMESPACE, get_if_exists=True,
            lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=0,
            max_concurrency=_MAX_CONCURRENCY, resources=shard.pin,
        ).remote(config, shard.name)
    return RemoteJournal.options(
        name=journal_name(shard.path), namespace=NAMESPACE, get_if_exists=True,
        lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=0,
        max_concurrency=_MAX_CONCURRENCY, resources=shard.pin,
    ).remote(*_writer_parts(config, shard))


def _writer_parts(config: HostingConfig, shard: Shard) -> tuple[Any, Recorder,
                                                                ReplicaPlan | None]:
    opener, plan = shard_writer_parts(shard, config.store_options)
    return opener, Recorder(config.placement, config.writer, shard.name), plan


def connect(address: str | None = None, db: str = "surfacelog.db", *,
            shards: ShardMap | None = None, placement: Placement = "dedicated",
            packs: int = 8, durability: Durability = "durable",
            idle_timeout_s: float | None = 600.0,
            store_options: dict[str, Any] | None = None, writer: Writer = "journal",
            config: HostingConfig | None = None, ready_timeout_s: float = 30.0,
            **ray_init: Any) -> Client:
    """Connect to (or start) Ray and the writers of the deployment's shards (journals
    or owner actors, as ``writer`` says); returns a ``Client``.

    The deployment is ``config``, or else one made of the other arguments: ``shards``
    (a ``ShardMap``; default one shard, the file ``db``), ``placement``, ``packs``,
    ``durability``, ``idle_timeout_s``, ``store_options`` (``SqliteEventStore.open``
    options of every shard) and ``writer`` (see ``HostingConfig``). ``address=None``
    starts an embedded local Ray (see ``init_ray``; ``ray_init`` are more ``ray.init``
    options) unless one is initialised already; it listens on loopback only and starts
    no dashboard unless ``include_dashboard=True`` is given. Each shard's writer is waited
    for up to ``ready_timeout_s``; one that does not answer by then (its node is not
    up) leaves its sessions raising ``ShardUnavailable`` until it does. Raises
    ``VersionRefused`` when a shard's file was written by another build.
    """
    if config is None:
        config = HostingConfig(
            shards if shards is not None else ShardMap.single(db), placement=placement,
            packs=packs, durability=durability, idle_timeout_s=idle_timeout_s,
            store_options=dict(store_options or {}), writer=writer)
    if not ray.is_initialized():
        if address is None:  # embedded: no dashboard unless asked (include_dashboard=True)
            ray_init.setdefault("include_dashboard", False)
        init_ray(address, **ray_init)
    writers = {shard.name: start_writer(config, shard) for shard in config.shards.shards}
    # A shard whose node is not up yet is not waited for: its sessions raise
    # ShardUnavailable until it is; nor is a writer that died or is restarting (a crash,
    # its node lost): Ray restarts it and requests to its sessions retry. A shard that
    # answers with an error fails the connect.
    readiness = [writer.ready.remote() for writer in writers.values()]
    answered, _ = ray.wait(readiness, num_returns=len(readiness), timeout=ready_timeout_s)
    for ref in answered:
        try:
            ray.get(ref)
        except RayActorError:
            continue
        except RayTaskError as exc:
            for started in writers.values():
                ray.kill(started, no_restart=True)
            raise actor_error(exc) from None
    return Client(config, writers)


class SessionHandle:
    """Async methods mirroring the session actor's requests, for one session.

    A request that failed because the actor died (or is restarting) is sent again to the
    actor Ray restarts (or a newly created one), with backoff for up to
    ``Client.retry_for_s``, only when resending cannot apply it twice: reads, flushes,
    appends that carry ``expected_seq``, and replace requests (which are refused as stale
    once applied).
    """

    def __init__(self, client: Client, session_id: str) -> None:
        self.client = client
        self.session_id = session_id

    async def _call(self, method: str, *args: Any, idempotent: bool,
                    keyed: bool = True, relayed: bool = True) -> Any:
        """Call ``method`` with the session id first (unless not ``keyed``: the
        arguments then name the session themselves). ``relayed``: an idempotent request
        is also resent after the session actor relays a write of unknown outcome (not
        for a flush, whose caller must learn that a write failed)."""
        backoff = Backoff(self.client.retry_for_s)
        client = self.client
        call_args = (self.session_id, *args) if keyed else args
        while True:
            shard = await client.shard_of(self.session_id)
            try:
                sent = client.send(shard, self.session_id, method, call_args,
                                   self.session_id)
                # An actor whose node is gone waits for a node offering its shard's
                # resource; without a deadline the caller would wait with it.
                return await within(sent, backoff.remaining())
            except asyncio.TimeoutError:
                raise ShardUnavailable(
                    f"session {self.session_id!r}: shard {shard.name!r} did not answer "
                    f"{method} within {client.retry_for_s:g} s") from None
            except (RayTaskError, RequestError) as exc:
                # The request's own error at the actor: Ray's wrapping of a call's, or a
                # coalesced call's of one of its requests; handled alike.
                error = actor_error(exc) if isinstance(exc, RayTaskError) else exc.error
                # The session actor's journal died or its commit failed: the session
                # reloads from the store, and an idempotent request may be sent again.
                if not (idempotent and relayed and isinstance(error, _UNKNOWN_OUTCOME)) \
                        or backoff.exhausted():
                    raise error from None
            except RayActorError as exc:  # died, or restarting (ActorUnavailableError)
                self.client.forget(self.session_id)
                if not idempotent:
                    raise  # its outcome is unknown: the caller resends with expected_seq
                if backoff.exhausted():
                    raise ShardUnavailable(
                        f"session {self.session_id!r}: shard {shard.name!r} did not answer "
                        f"{method} within {self.client.retry_for_s:g} s "
                        f"({type(exc).__name__})") from exc
            self.client.resent += 1
            await backoff.wait()

    @overload
    async def append(self, type: SurfaceType, data: SurfacePayload, *,
                     surface_op: Literal["append"],
                     source_event_seqs: Sequence[int] | UnsetType = UNSET,
                     ignorable: Literal[True] | UnsetType = UNSET,
                     expected_seq: int | None = None) -> Event: ...

    @overload
    async def append(self, type: SurfaceType, data: SurfacePayload, *,
                     surface_op: ReplaceOp, source_event_seqs: Sequence[int],
                     ignorable: Literal[True] | UnsetType = UNSET,
                     expected_seq: int | None = None) -> Event: ...

    @overload
    async def append(self, type: LogOnlyType | ExtensionType, data: Any = UNSET, *,
                     ignorable: Literal[True] | UnsetType = UNSET,
                     expected_seq: int | None = None) -> Event: ...

    async def append(self, type: str, data: Any = UNSET, *, surface_op: Any = UNSET,
                     source_event_seqs: Any = UNSET, ignorable: Any = UNSET,
                     expected_seq: int | None = None) -> Event:
        """Append one event; returns it as logged. Raises ``SurfaceError``,
        ``Conflict`` (``expected_seq`` taken), store errors. Typed per kind of event
        as ``Session.append`` is."""
        spec = AppendSpec(type, data, surface_op, source_event_seqs, ignorable)
        request = encode_append(self.session_id, (spec,), expected_seq)
        if request is None:
            event: Event = await self._call("append", spec, expected_seq,
                                            idempotent=expected_seq is not None)
            return event
        reply = await self._call("append_wire", request, keyed=False,
                                 idempotent=expected_seq is not None)
        return LoggedEvents.from_reply(request, 1, reply)[0]

    async def append_with_state(self, specs: Sequence[AppendSpec],
                                delta: Mapping[str, Any], *, at: int,
                                expected_seq: int | None = None) -> list[Event]:
        """Append several events and write a state delta with them, all or nothing
        (``ScopedEventStore.append_with_state``; ``at``: the state's update time, ms).
        Raises as ``append``, ``InvalidArgument`` (a value that is not JSON),
        ``Unsupported`` (the shard's store keeps no state), ``ScopeConflict``."""
        events: list[Event] = await self._call(
            "append_with_state", list(specs), dict(delta), at, expected_seq,
            idempotent=expected_seq is not None)
        return events

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> LoggedEvents:
        """Append several events, all or nothing; returns them as logged (usually a
        ``LoggedEvents``: its ``seqs`` are known at once, its events made on first
        use). Raises as ``append``."""
        request = encode_append(self.session_id, specs, expected_seq)
        if request is None:
            events: list[Event] = await self._call("append_batch", list(specs),
                                                   expected_seq,
                                                   idempotent=expected_seq is not None)
            return LoggedEvents.of(events)
        reply = await self._call("append_wire", request, keyed=False,
                                 idempotent=expected_seq is not None)
        return LoggedEvents.from_reply(request, len(specs), reply)

    async def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        return decode_events(await self._call("events_wire", since_seq, limit,
                                              idempotent=True))

    async def surface(self) -> SurfaceSnapshot:
        snap: SurfaceSnapshot = await self._call("surface", idempotent=True)
        return snap

    async def surface_events(self) -> tuple[SurfaceSnapshot, list[Event]]:
        out: tuple[SurfaceSnapshot, list[Event]] = await self._call("surface_events",
                                                                    idempotent=True)
        return out

    async def oversized_results(self, max_chars: int) -> PruneCandidates:
        """The current tool results over ``max_chars`` characters (what a pruner
        needs), read where the session lives: the surface itself does not travel."""
        out: PruneCandidates = await self._call("oversized_results", max_chars,
                                                idempotent=True)
        return out

    async def derive_messages(self, as_of: int | None = None) -> list[dict[str, Any]]:
        return decode_messages(await self._call("derive_wire", as_of, idempotent=True))

    async def fold(self) -> list[Replacement]:
        replacements: list[Replacement] = await self._call("fold", idempotent=True)
        return replacements

    async def compact(self, request: CompactionRequest) -> list[Event]:
        events: list[Event] = await self._call("compact", request, idempotent=True)
        return events

    async def prune(self, request: PruneRequest) -> list[Event]:
        events: list[Event] = await self._call("prune", request, idempotent=True)
        return events

    async def pressure(self) -> ContextPressure:
        """The session's context pressure (``session.pressure``): what a compactor
        decides with, without reading the surface's events."""
        pressure: ContextPressure = await self._call("pressure", idempotent=True)
        return pressure

    async def set_context(self, body: str | dict[str, Any], *,
                          plugin: str = DEFAULT_PLUGIN) -> Event | None:
        """Make ``body`` the workspace context the model sees: a text (wrapped as
        ``plugin``'s context message) or a context message. Appends a
        ``context/message``, or replaces ``plugin``'s previous context node citing it;
        returns the event, or ``None`` when the surface already showed this context.
        Idempotent, so sent again after a crash. Raises ``ContextError``,
        ``SurfaceError``, store errors."""
        payload = body if isinstance(body, dict) else context_message(body, plugin=plugin)
        event: Event | None = await self._call("set_context", payload, idempotent=True)
        return event

    async def replace(self, request: CompactionRequest | PruneRequest) -> list[Event]:
        """Send a replace request (compaction or prune); ``Conflict`` when stale."""
        events: list[Event] = await self._call("replace", request, idempotent=True)
        return events

    async def fork(self, boundary: int | None = None,
                   child_id: str | None = None) -> SessionHandle:
        """Fork a child seeded with ``log[0..boundary]``; returns its handle. The child
        is stored on its own home shard, which may not be the parent's. Raises
        ``ForkError``, ``ShardUnavailable``."""
        client = self.client
        if len(client.config.shards.shards) == 1:
            header: SessionHeader = await self._call("fork", boundary, child_id,
                                                     idempotent=False)
            return SessionHandle(client, header.id)
        header, batch = await self._call("fork_seed", boundary, child_id, idempotent=True)
        shard, stored = await client.locate(header.id)
        if stored:
            raise ForkError(SESSION_ALREADY_EXISTS, f"session {header.id!r} already exists")
        try:
            await client.writers[shard.name].create_stored.remote(header, batch)
        except RayTaskError as exc:
            error = actor_error(exc)
            if isinstance(error, SessionExists):
                raise ForkError(SESSION_ALREADY_EXISTS,
                                f"session {header.id!r} already exists") from None
            raise error from None
        return SessionHandle(client, header.id)

    async def flush(self) -> None:
        await self._call("flush", idempotent=True, relayed=False)

    async def stats(self) -> SessionStats:
        stats: SessionStats = await self._call("stats", idempotent=True)
        return stats

    async def header(self) -> SessionHeader:
        """The session's header: its id, creation time, fork parent..."""
        header: SessionHeader = await self._call("header", idempotent=True)
        return header

    async def passivate(self) -> bool:
        done: bool = await self._call("passivate", idempotent=True, relayed=False)
        return done


def _is_session_like(handle: SessionHandle) -> SessionLike:
    """Never called: mypy checks here that a ``SessionHandle`` is a ``SessionLike``
    (the adapters take either it or an ``EmbeddedHandle``)."""
    return handle
