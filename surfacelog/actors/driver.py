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
from collections.abc import Sequence
from typing import Any

import msgspec
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import SessionHandle, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.actors.protocol import (
    Conflict,
    LoggedEvents,
    SessionUnavailable,
)
from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.schema.errors import SurfacelogError
from surfacelog.session import AppendSpec
from surfacelog.session.turns import last_turn_boundary
from surfacelog.store.base import StoreError

MAX_RESENDS = 50


class TurnInterrupted(SurfacelogError):
    """Crash repair closed the turn the driver was in."""


class SurfacePoint(msgspec.Struct, array_like=True):
    """Surface size of one session after one turn: (ms since start, session, nodes,
    generation)."""

    t_ms: float
    session: str
    nodes: int
    generation: int


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
    last_error: str | None = None
    latencies_ms: list[float] = msgspec.field(default_factory=list)
    append_times_ms: list[float] = msgspec.field(default_factory=list)
    surface_points: list[SurfacePoint] = msgspec.field(default_factory=list)
    finished: int = 0


class SessionDriver:
    """Drives one session's turns through a handle; shares a progress record."""

    def __init__(self, handle: SessionHandle, script: AgentScript, progress: DriverProgress,
                 started: float) -> None:
        self.handle = handle
        self.script = script
        self.progress = progress
        self.started = started
        self.next_seq = 0
        self.turn_seq: int | None = None

    async def _resync(self) -> int:
        """Take the log's length as the next seq. Acknowledged events the log no longer
        holds (buffered writes lost with a crashed actor or a failed flush) are counted
        in ``lost``; returns how many."""
        acknowledged = self.next_seq
        snap = await self.handle.surface()
        self.next_seq = snap.length
        missing = max(0, acknowledged - snap.length)
        self.progress.lost += missing
        return missing

    async def _last_turn(self) -> int:
        """The number of the log's last turn (0 for none), reading back from the tail."""
        await self._resync()
        end = self.next_seq
        while end > 0:
            start = max(0, end - 256)
            boundary = last_turn_boundary(await self.handle.events(start, end - start))
            if boundary is not None:
                turn: int = boundary.data["turn"]
                return turn
            end = start
        return 0

    async def send(self, specs: Sequence[AppendSpec]) -> LoggedEvents:
        """Append ``specs`` at the tail exactly once; resend after conflicts."""
        for _ in range(MAX_RESENDS):
            t0 = time.perf_counter()
            try:
                events = await self.handle.append_batch(specs, self.next_seq)
            except Conflict:
                self.progress.conflicts += 1
                await self._check_turn_open()
                continue
            except SessionUnavailable:
                # Passivated (or its actor fenced) between lookup and request: resend,
                # exactly once thanks to expected_seq, after a look at whether repair
                # closed our turn. (An actor that died is resent by the handle itself,
                # for ``Client.retry_for_s``; past that the error is the session's end.)
                self.handle.client.resent += 1
                await asyncio.sleep(0.2)
                await self._check_turn_open()
                continue
            now = time.perf_counter()
            self.progress.latencies_ms.append((now - t0) * 1000.0)
            self.progress.append_times_ms.append((time.time() - self.started) * 1000.0)
            self.progress.appends += 1
            self.progress.events += len(events)
            self.next_seq = events.seqs.stop
            return events
        raise RuntimeError(f"session {self.handle.session_id}: gave up after "
                           f"{MAX_RESENDS} resends")

    async def show_workspace(self, body: str) -> None:
        """Make ``body`` the session's workspace context (idempotent, so the handle
        resends it through restarts); the event it appended, if any, is counted."""
        t0 = time.perf_counter()
        event = await self.handle.set_context(body)
        if event is None:
            return
        self.progress.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
        self.progress.append_times_ms.append((time.time() - self.started) * 1000.0)
        self.progress.appends += 1
        self.progress.events += 1
        self.next_seq = max(self.next_seq, event.seq + 1)

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
        boundary = last_turn_boundary(await self.handle.events(self.turn_seq))
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
        """Run ``turns`` more turns, numbered after the log's last one."""
        turn = await self._last_turn()
        done = 0
        while done < turns:
            turn += 1
            try:
                await self.run_turn(turn)
                self.progress.turns_done += 1
            except TurnInterrupted:
                self.progress.turns_interrupted += 1
            done += 1
            snap = await self.handle.surface()
            self.progress.surface_points.append(SurfacePoint(
                (time.time() - self.started) * 1000.0, self.handle.session_id,
                len(snap.nodes), snap.replace_generation))
        try:
            await self.handle.flush()
        except (StoreError, RayActorError):
            # A buffered write failed after it was acknowledged: the session reloads
            # from the store; resyncing counts what it lost.
            await self._resync()
        self.progress.finished += 1


class DriverActor:
    """Drives many sessions concurrently (one asyncio task each)."""

    def __init__(self, hosting: HostingConfig, config: ScriptConfig) -> None:
        self._client = connect(config=hosting)
        self._config = config
        self._progress = DriverProgress()

    async def run(self, session_ids: Sequence[str], turns: int,
                  started: float | None = None) -> DriverProgress:
        """Run ``turns`` turns in each session; returns the final counters. A session
        that fails is counted in ``errors`` and the others go on."""
        t0 = time.time() if started is None else started
        self._progress.sessions += len(session_ids)
        drivers = [SessionDriver(self._client.session(sid), AgentScript(sid, self._config),
                                 self._progress, t0) for sid in session_ids]
        results = await asyncio.gather(*(d.run(turns) for d in drivers),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                self._progress.errors += 1
                self._progress.last_error = f"{type(result).__name__}: {result}"[:300]
        self._progress.resent = self._client.resent
        return self._progress

    def progress(self) -> dict[str, Any]:
        """Counters so far (without the samples), cheap to poll."""
        p = self._progress
        return {"sessions": p.sessions, "turns_done": p.turns_done,
                "turns_interrupted": p.turns_interrupted, "events": p.events,
                "appends": p.appends, "conflicts": p.conflicts,
                "resent": self._client.resent, "lost": p.lost,
                "errors": p.errors,
                "finished": p.finished, "last_error": p.last_error,
                "recent_latencies_ms": p.latencies_ms[-200:]}


RemoteDriver: Any = ray.remote(DriverActor)
