"""The agent-loop driver: runs scripted turns against sessions, the way an agent loop
would, and measures what it sees.

Every append carries ``expected_seq``, so a request retried after the session actor died
is applied at most once. A ``Conflict`` means other events (a compaction, crash-repair
closers) took the seq: the driver reads the log again, and either resends at the new
tail or, when repair closed its turn, abandons that turn and starts the next one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

import msgspec
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig, tune_gc
from surfacelog.actors.errors import ShardUnavailable, TurnInterrupted
from surfacelog.actors.protocol import Conflict, LoggedEvents, SessionUnavailable
from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.runtime.live import LiveSession
from surfacelog.runtime.stream import AppendStream
from surfacelog.schema.events import Event
from surfacelog.session import AppendSpec, SurfaceSnapshot
from surfacelog.session.context import DEFAULT_PLUGIN, context_message
from surfacelog.session.turns import last_turn_boundary
from surfacelog.store.errors import CommitFailed, StoreError
from surfacelog.store.shardmap import Shard

MAX_RESENDS = 50
"""How long a driver keeps retrying a request whose shard is unavailable (its node is
lost) before the session's driving fails for good."""
OUTAGE_PAUSE_S = 0.25
"""Pause between two attempts of a request refused during an outage."""
T = TypeVar("T")
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (ShardUnavailable, RayActorError,
                                                  CommitFailed)
"""What a request may meet while its shard's node is lost or its actors restart."""


class DriverClient(Protocol):
    """What a driver needs of a client (``Client``, or the gateway's HTTP client)."""

    resent: int
    retry_for_s: float

    async def shard_of(self, session_id: str) -> Shard: ...


class DriverHandle(Protocol):
    """The calls a driver makes on a session (``SessionHandle``, or one over HTTP)."""

    @property
    def session_id(self) -> str: ...

    @property
    def client(self) -> DriverClient: ...

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> LoggedEvents: ...

    async def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]: ...

    async def surface(self) -> SurfaceSnapshot: ...

    async def set_context(self, body: str | dict[str, Any], *,
                          plugin: str = ...) -> Event | None: ...

    async def flush(self) -> None: ...


class LocalHandle:
    """A ``DriverHandle`` over a ``LiveSession`` of this process: the driver's calls
    with no Ray between it and the session (bench_hosting's in-process floor; the
    driver's own tests). ``client``: what the driver asks of a client."""

    def __init__(self, live: LiveSession, client: DriverClient) -> None:
        self._live = live
        self._client = client

    @property
    def session_id(self) -> str:
        return self._live.session_id

    @property
    def client(self) -> DriverClient:
        return self._client

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> LoggedEvents:
        return LoggedEvents.of(await self._live.append_batch(specs, expected_seq))

    async def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        return self._live.events(since_seq, limit)

    async def surface(self) -> SurfaceSnapshot:
        return self._live.surface()

    async def set_context(self, body: str | dict[str, Any], *,
                          plugin: str = DEFAULT_PLUGIN) -> Event | None:
        payload = body if isinstance(body, dict) else context_message(body, plugin=plugin)
        return await self._live.set_context(payload)

    async def flush(self) -> None:
        await self._live.flush()


class SurfacePoint(msgspec.Struct, array_like=True):
    """Surface size of one session after one turn: (ms since start, session, nodes,
    generation)."""

    t_ms: float
    session: str
    nodes: int
    generation: int


class ShardProgress(msgspec.Struct):
    """What one driver measured of the sessions of one shard."""

    events: int = 0
    appends: int = 0
    latencies_ms: list[float] = msgspec.field(default_factory=list)
    ok_times: list[float] = msgspec.field(default_factory=list)
    """When each acknowledged append ended (epoch seconds): when the shard served."""
    unavailable: int = 0
    """Requests refused with ``ShardUnavailable`` (the shard did not answer within the
    client's retry window: its node is lost), each retried."""
    transient: int = 0
    """Other requests that failed while the shard's actors were lost or restarting
    (actor died, commit of unknown outcome), each retried."""
    outages_s: list[float] = msgspec.field(default_factory=list)
    """Per request that was refused at least once: from its first attempt to its
    success."""
    lost: int = 0
    """Acknowledged events this shard's sessions were found no longer holding (counted
    in ``DriverProgress.lost`` too)."""

    def merge(self, other: ShardProgress) -> None:
        """Add ``other``'s counters and samples to these."""
        self.events += other.events
        self.appends += other.appends
        self.latencies_ms.extend(other.latencies_ms)
        self.ok_times.extend(other.ok_times)
        self.unavailable += other.unavailable
        self.transient += other.transient
        self.outages_s.extend(other.outages_s)
        self.lost += other.lost


class DriverProgress(msgspec.Struct):
    """Counters and samples of one driver."""

    sessions: int = 0
    turns_done: int = 0
    turns_interrupted: int = 0
    events: int = 0
    appends: int = 0
    conflicts: int = 0
    resent: int = 0
    """Requests sent again after their session actor died, restarted or passivated
    (by the handles, ``Client.resent``, and by the driver itself)."""
    lost: int = 0
    """Acknowledged events found missing from the log afterwards (at least this many):
    possible with buffered durability when an actor crashes, never with durable."""
    errors: int = 0
    """Sessions whose driving failed for good."""
    ray_calls: int = 0
    """Ray calls the driver's client sent to session actors (a coalesced call counts
    once, whatever it carries); 0 over HTTP, where the gateway makes them."""
    last_error: str | None = None
    latencies_ms: list[float] = msgspec.field(default_factory=list)
    append_times_ms: list[float] = msgspec.field(default_factory=list)
    surface_points: list[SurfacePoint] = msgspec.field(default_factory=list)
    finished: int = 0
    by_shard: dict[str, ShardProgress] = msgspec.field(default_factory=dict)
    """The same per shard (the shard that holds each session)."""

    def shard(self, name: str) -> ShardProgress:
        """The record of shard ``name`` (made on first use)."""
        found = self.by_shard.get(name)
        if found is None:
            found = self.by_shard[name] = ShardProgress()
        return found


class SessionDriver:
    """Drives one session's turns through a handle; shares a progress record."""

    def __init__(self, handle: DriverHandle, script: AgentScript, progress: DriverProgress,
                 started: float) -> None:
        self.handle = handle
        self.script = script
        self.progress = progress
        self.started = started
        self.next_seq = 0
        self.turn_seq: int | None = None
        self.shard = ShardProgress()
        """This session's shard's record (set by ``activate`` once the shard is
        known)."""
        self.last_turn: int | None = None
        self.halt: asyncio.Event | None = None
        """Once set, ``run`` stops after the current turn."""
        self.next_at: float | None = None
        """Paced (``ScriptConfig.chunk_every_ms``): when the session's next append
        arrives (a ``time.perf_counter()`` reading; set by ``run``)."""

    async def activate(self) -> int:
        """Find the session's shard and its last turn (activating the session on its
        actor); returns that turn's number. Raises what ``_through_outage`` raises."""
        shard = await self.handle.client.shard_of(self.handle.session_id)
        self.shard = self.progress.shard(shard.name)
        self.last_turn = await self._last_turn()
        return self.last_turn

    async def _through_outage(self, call: Callable[[], Awaitable[T]],
                              refusals: tuple[type[BaseException], ...] = OUTAGE_ERRORS
                              ) -> T:
        """``call()``, made again while the session's shard is unavailable: its node is
        lost (``ShardUnavailable``), or its actors died or relayed a write of unknown
        outcome while it was going (``RayActorError``, ``CommitFailed``). An outage is
        not an error: each refusal is counted on the shard and the very same request is
        sent again after a pause (an append carries its ``expected_seq``, so it lands
        exactly once). ``refusals``: the errors taken as an outage. Raises the last
        refusal after the script's ``outage_budget_s``, and any other error at once."""
        first: float | None = None
        while True:
            started = time.monotonic()
            try:
                result = await call()
            except refusals as exc:
                if isinstance(exc, ShardUnavailable):
                    self.shard.unavailable += 1
                else:
                    self.shard.transient += 1
                first = started if first is None else first
                if time.monotonic() - first > self.script.config.outage_budget_s:
                    raise
                await asyncio.sleep(OUTAGE_PAUSE_S)
                continue
            if first is not None:
                self.shard.outages_s.append(round(time.monotonic() - first, 3))
            return result

    async def _resync(self) -> int:
        """Take the log's length as the next seq. Acknowledged events the log no longer
        holds (buffered writes lost with a crashed actor or a failed flush) are counted
        in ``lost``; returns how many."""
        acknowledged = self.next_seq
        snap = await self._through_outage(self.handle.surface)
        self.next_seq = snap.length
        missing = max(0, acknowledged - snap.length)
        self.progress.lost += missing
        self.shard.lost += missing
        return missing

    async def _last_turn(self) -> int:
        """The number of the log's last turn (0 for none), reading back from the tail."""
        await self._resync()
        end = self.next_seq
        while end > 0:
            start = max(0, end - 256)
            boundary = last_turn_boundary(await self._through_outage(
                partial(self.handle.events, start, end - start)))
            if boundary is not None:
                turn: int = boundary.data["turn"]
                return turn
            end = start
        return 0

    async def _arrival(self) -> float | None:
        """Paced: wait for the next append's arrival, one interval after the one
        before, and return when it arrived, the time its latency counts from; ``None``
        unpaced (each attempt's send counts). An append due while the one before was
        still in flight is sent at once and counts from when it was due, so a session
        that falls behind says so in its latencies (the schedule does not slow down
        for a slow append). One sent after a pause counts from its send: the
        driver's own lateness in waking is not the session's."""
        if self.next_at is None:
            return None
        due = self.next_at
        self.next_at = due + self.script.config.chunk_every_ms / 1000
        if due <= time.perf_counter():
            return due
        await asyncio.sleep(due - time.perf_counter())
        return time.perf_counter()

    async def send(self, specs: Sequence[AppendSpec]) -> LoggedEvents:
        """Append ``specs`` at the tail exactly once (paced: once they arrive,
        ``_arrival``); resend after conflicts, and the same request through an outage
        of the session's shard (``_through_outage``). Raises ``TurnInterrupted`` when
        crash repair closed the turn, ``RuntimeError`` after ``MAX_RESENDS``
        conflicts, and what ``_through_outage`` raises."""
        return await self._send_arrived(specs, await self._arrival())

    async def _send_arrived(self, specs: Sequence[AppendSpec], arrived: float | None
                            ) -> LoggedEvents:
        """``send`` of ``specs`` that arrived at ``arrived`` (a ``time.perf_counter()``
        reading, their latency's start; ``None``: from now)."""
        for _ in range(MAX_RESENDS):
            t0 = time.perf_counter() if arrived is None else arrived
            try:
                events = await self._through_outage(
                    partial(self.handle.append_batch, specs, self.next_seq))
            except Conflict:
                self.progress.conflicts += 1
                await self._check_turn_open()
                continue
            except ShardUnavailable:
                raise  # the outage outlasted the outage budget: this session's end
            except SessionUnavailable:
                # Passivated (or its actor fenced) between lookup and request: resend,
                # exactly once thanks to expected_seq, after a look at whether repair
                # closed our turn. (An actor that died is resent by the handle itself,
                # for ``Client.retry_for_s``; past that the error is the session's end.)
                self.handle.client.resent += 1
                await asyncio.sleep(0.2)
                await self._check_turn_open()
                continue
            self._acknowledged(t0, len(events))
            self.next_seq = events.seqs.stop
            return events
        raise RuntimeError(f"session {self.handle.session_id}: gave up after "
                           f"{MAX_RESENDS} resends")

    async def show_workspace(self, body: str) -> None:
        """Make ``body`` the session's workspace context (idempotent, so it is sent
        again through restarts and shard outages), paced like an append; the event it
        appended, if any, is counted like an append."""
        arrived = await self._arrival()
        t0 = time.perf_counter() if arrived is None else arrived
        event = await self._through_outage(partial(self.handle.set_context, body))
        if event is None:
            return
        self._acknowledged(t0, 1)
        self.next_seq = max(self.next_seq, event.seq + 1)

    def _acknowledged(self, t0: float, events: int) -> None:
        """Count an append of ``events`` events acknowledged now, sent (or, paced,
        arrived) at ``t0`` (a ``time.perf_counter()`` reading)."""
        latency_ms = (time.perf_counter() - t0) * 1000.0
        ended = time.time()
        self.progress.latencies_ms.append(latency_ms)
        self.progress.append_times_ms.append((ended - self.started) * 1000.0)
        self.progress.appends += 1
        self.progress.events += events
        self.shard.latencies_ms.append(latency_ms)
        self.shard.ok_times.append(ended)
        self.shard.appends += 1
        self.shard.events += events

    async def stream(self, specs: Sequence[AppendSpec]) -> list[int]:
        """Append ``specs`` (a model attempt's start and its chunks) each as it arrives
        (paced: ``_arrival``; else all at once, as a model faster than the appends),
        through an ``AppendStream`` chained at the tail: the chunks that arrive while
        the stream's append is in flight go together in its next. Each chunk counts as
        an append, its latency from its arrival to its acknowledgement. Returns their
        seqs. Once the stream breaks (a conflict, an outage), the chunks not logged go
        one at a time through ``send``, which resyncs and waits outages out: those
        already written with the latency of their first arrival, the others as they
        arrive. Raises what ``send`` raises."""
        writer = AppendStream(self.handle, self.next_seq)
        written: list[tuple[AppendSpec, float, asyncio.Future[int]]] = []
        for spec in specs:
            if writer.broken is not None:
                break
            arrived = await self._arrival()
            t0 = time.perf_counter() if arrived is None else arrived
            future = writer.write(spec)
            future.add_done_callback(partial(self._chunk_answered, t0))
            written.append((spec, t0, future))
        await asyncio.gather(*(f for _, _, f in written), return_exceptions=True)
        seqs: list[int] = []
        for index, (_, _, future) in enumerate(written):
            error = future.exception()
            if error is None:
                seqs.append(future.result())
                continue
            if not isinstance(error, Exception):
                raise error
            for spec, t0, _ in written[index:]:
                seqs.append((await self._send_arrived([spec], t0)).seqs[0])
            break
        for spec in specs[len(written):]:
            seqs.append((await self.send([spec])).seqs[0])
        return seqs

    def _chunk_answered(self, t0: float, future: asyncio.Future[int]) -> None:
        if not future.cancelled() and future.exception() is None:
            self._acknowledged(t0, 1)
            self.next_seq = max(self.next_seq, future.result() + 1)

    async def _check_turn_open(self) -> None:
        """Resync the tail; raise ``TurnInterrupted`` when our turn is no longer the one
        the log is inside (crash repair closed it), or when the log no longer holds
        everything it acknowledged (buffered writes lost with a crashed actor: the turn
        cannot go on citing them)."""
        missing = await self._resync()
        if missing and self.turn_seq is not None:
            raise TurnInterrupted(f"{missing} acknowledged events are no longer in the log")
        if self.turn_seq is None:
            return
        # Our turn goes on only while its turn/start is the log's last turn boundary.
        boundary = last_turn_boundary(await self._through_outage(
            partial(self.handle.events, self.turn_seq)))
        if boundary is not None and boundary.seq != self.turn_seq:
            raise TurnInterrupted(
                f"turn closed at seq {boundary.seq}" if boundary.type == "turn/end"
                else f"another turn opened at seq {boundary.seq}")

    async def run_turn(self, turn: int) -> None:
        script, cfg = self.script, self.script.config
        self.turn_seq = None
        await self.show_workspace(script.workspace(turn))
        opened = await self.send(script.turn_open(turn))
        self.turn_seq = opened.seqs[0]
        for step in range(1, cfg.steps + 1):
            final = step == cfg.steps
            stream = script.stream(turn, step, final)
            if cfg.mode == "batch":
                logged = await self.send([script.step_start(turn, step), *stream.chunks])
                chunk_seqs = list(logged.seqs[1:])
            elif cfg.mode == "stream":
                # The model attempt's start and its chunks, each written as it comes.
                chunk_seqs = (await self.stream([script.step_start(turn, step),
                                                 *stream.chunks]))[1:]
            else:
                await self.send([script.step_start(turn, step)])
                chunk_seqs = [(await self.send([c])).seqs[0] for c in stream.chunks]
            logged = await self.send([script.message(turn, step, stream, chunk_seqs),
                                      *(script.tool_call(turn, step, c) for c in stream.calls)])
            call_seqs = list(logged.seqs[1:])
            await self.send([*(script.tool_result(turn, step, c, s)
                               for c, s in zip(stream.calls, call_seqs, strict=True)),
                             script.step_end(turn, step)])
        await self.send([script.turn_end(turn)])

    async def run(self, turns: int) -> None:
        """Run ``turns`` more turns, numbered after the log's last one (``activate``
        first if it was not); paced (``ScriptConfig.chunk_every_ms``), the first append
        arrives at the script's ``phase`` of an interval. Raises what ``send`` raises
        but ``TurnInterrupted``."""
        turn = self.last_turn if self.last_turn is not None else await self.activate()
        cfg = self.script.config
        if cfg.mode != "batch" and cfg.chunk_every_ms > 0:
            # Each session from its own phase of the interval: started together they
            # would all append at the same instants.
            self.next_at = (time.perf_counter()
                            + self.script.phase() * cfg.chunk_every_ms / 1000)
        done = 0
        while done < turns and not (self.halt is not None and self.halt.is_set()):
            turn += 1
            try:
                await self.run_turn(turn)
                self.progress.turns_done += 1
            except TurnInterrupted:
                self.progress.turns_interrupted += 1
            done += 1
            snap = await self._through_outage(self.handle.surface)
            self.progress.surface_points.append(SurfacePoint(
                (time.time() - self.started) * 1000.0, self.handle.session_id,
                len(snap.nodes), snap.replace_generation))
        try:
            # Only a shard outage is waited out: a failed buffered write must reach the
            # resync below, which counts what it lost.
            await self._through_outage(self.handle.flush, (ShardUnavailable,))
        except (StoreError, RayActorError):
            # A buffered write failed after it was acknowledged: the session reloads
            # from the store; resyncing counts what it lost.
            await self._resync()
        self.progress.finished += 1


class DriverActor:
    """Drives many sessions concurrently (one asyncio task each)."""

    def __init__(self, hosting: HostingConfig, config: ScriptConfig,
                 retry_for_s: float | None = None) -> None:
        """``retry_for_s``: the client's retry window (``Client.retry_for_s``) once the
        sessions are activated, after which a request whose shard does not answer is
        refused with ``ShardUnavailable`` and counted as such (default: the client's)."""
        tune_gc()
        self._setup(connect(config=hosting), config, retry_for_s)

    def _setup(self, client: DriverClient, config: ScriptConfig,
               retry_for_s: float | None) -> None:
        self._client = client
        self._retry_for_s = retry_for_s
        self._config = config
        self._progress = DriverProgress()
        self._halt = asyncio.Event()

    async def ready(self) -> bool:
        """``True``, once the actor is built: the load run waits for every driver's
        before its clock and its CPU count start."""
        return True

    async def stop(self) -> None:
        """Stop after the current turn: each session ends its turn, flushes and
        ``run`` returns (the run stops early when it cannot complete)."""
        self._halt.set()

    def handle(self, session_id: str) -> DriverHandle:
        """The handle the driver drives ``session_id`` through."""
        client = self._client
        assert isinstance(client, Client)
        return client.session(session_id)

    async def run(self, session_ids: Sequence[str], turns: int,
                  started: float | None = None) -> DriverProgress:
        """Run ``turns`` turns in each session; returns the final counters. A session
        that fails is counted in ``errors`` and the others go on."""
        t0 = time.time() if started is None else started
        self._progress.sessions += len(session_ids)
        drivers = [SessionDriver(self.handle(sid), AgentScript(sid, self._config),
                                 self._progress, t0) for sid in session_ids]
        for driver in drivers:
            driver.halt = self._halt
        # Every session is activated first, within the client's default retry window:
        # starting the actors' processes may take longer than the short window that
        # measures outages, and a slow start is no outage.
        activated = await asyncio.gather(*(d.activate() for d in drivers),
                                         return_exceptions=True)
        if self._retry_for_s is not None:
            self._client.retry_for_s = self._retry_for_s
        results = await asyncio.gather(
            *(d.run(turns) for d, a in zip(drivers, activated, strict=True)
              if not isinstance(a, BaseException)),
            return_exceptions=True)
        results += [a for a in activated if isinstance(a, BaseException)]
        for result in results:
            if isinstance(result, BaseException):
                self._progress.errors += 1
                self._progress.last_error = f"{type(result).__name__}: {result}"[:300]
        self._progress.resent = self._client.resent
        self._progress.ray_calls = self._ray_calls()
        return self._progress

    def _ray_calls(self) -> int:
        client = self._client
        return client.call_stats().calls if isinstance(client, Client) else 0

    def progress(self) -> dict[str, Any]:
        """Counters so far (without the samples), cheap to poll."""
        p = self._progress
        return {"sessions": p.sessions, "turns_done": p.turns_done,
                "turns_interrupted": p.turns_interrupted, "events": p.events,
                "appends": p.appends, "conflicts": p.conflicts,
                "resent": self._client.resent, "lost": p.lost,
                "ray_calls": self._ray_calls(),
                "errors": p.errors,
                "finished": p.finished, "last_error": p.last_error,
                "recent_latencies_ms": p.latencies_ms[-200:],
                "by_shard": {name: {"events": s.events, "unavailable": s.unavailable,
                                    "transient": s.transient}
                             for name, s in p.by_shard.items()}}


RemoteDriver: Any = ray.remote(DriverActor)
