"""``SessionHost``: the sessions one session actor hosts. It activates a session on its
first request (loaded from the store, crash-repaired), runs each request against it with
the retry and fencing rules below, and passivates it after ``idle_timeout_s`` without
requests.

Plain asyncio, no Ray: a session actor (``session_actor``) holds one and calls it. Ray
wraps every method of an actor class, its private ones too, in a tracing coroutine (a
no-op unless tracing is on): kept on the actor, these helpers put two or three more
coroutines under each request of a coalesced call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from surfacelog.actors.metrics import Recorder
from surfacelog.actors.protocol import Conflict, SessionUnavailable, failure_line
from surfacelog.runtime.choices import Durability
from surfacelog.runtime.live import RELOAD, LiveSession
from surfacelog.store.base import EventStore
from surfacelog.store.errors import WriterFenced

T = TypeVar("T")

FAILED_PASSIVATIONS_KEPT = 20
"""How many of the latest failed passivations ``SessionHost.failed_passivations`` keeps."""


class SessionHost:
    """The live sessions of one actor, by id (``sessions``), and their lifecycle."""

    def __init__(self, store: Callable[[], Awaitable[EventStore]], metrics: Recorder, *,
                 durability: Durability, idle_timeout_s: float | None,
                 on_empty: Callable[[], None] | None = None) -> None:
        """``store``: the store sessions are activated from and write to (awaited on
        each activation: an owner opens its file on first use). ``on_empty``: called
        when the reaper has passivated the last session (a dedicated actor exits
        there)."""
        self._store = store
        self._metrics = metrics
        self._durability: Durability = durability
        self._idle_timeout_s = idle_timeout_s
        self._on_empty = on_empty
        self.sessions: dict[str, LiveSession] = {}
        self._activating: dict[str, asyncio.Lock] = {}
        self._fenced: set[str] = set()
        self._reaper: asyncio.Task[None] | None = None
        self.activations = 0
        self.passivations = 0
        self.failed_passivations: list[str] = []
        """``session: error`` of the latest failed passivations (at most
        ``FAILED_PASSIVATIONS_KEPT``)."""

    # -- activation ------------------------------------------------------------------

    async def live(self, session_id: str, create: bool) -> LiveSession:
        """The session, activated first when it is not live here. Raises
        ``SessionUnavailable`` for a session this incarnation was fenced from, and what
        ``LiveSession.activate`` raises."""
        live = self.sessions.get(session_id)
        if live is not None and live.closed is None:
            return live
        if session_id in self._fenced:
            raise SessionUnavailable(f"session {session_id!r}: this actor incarnation was "
                                     "fenced by a newer writer")
        lock = self._activating.setdefault(session_id, asyncio.Lock())
        async with lock:
            live = self.sessions.get(session_id)
            if live is None or live.closed is not None:
                live = await LiveSession.activate(session_id, await self._store(),
                                                  durability=self._durability, create=create)
                self.sessions[session_id] = live
                self.activations += 1
                self._metrics.activated(session_id)
                self._start_reaper()
            return live

    async def run(self, session_id: str, op: Callable[[LiveSession], Awaitable[T]],
                  create: bool = True) -> T:
        """``op`` on the live session. A session passivated, or closed to reload after a
        failed write, between its lookup and ``op`` is activated again, once. Raises
        what ``op`` raises; ``WriterFenced`` also fences the session from this host."""
        for attempt in (0, 1):
            live = await self.live(session_id, create)
            try:
                return await op(live)
            except SessionUnavailable:
                if live.closed not in ("passivated", RELOAD) or attempt:
                    raise
            except WriterFenced as exc:
                self._fenced.add(session_id)
                self.sessions.pop(session_id, None)
                self._metrics.failed("fenced", session_id, exc)
                raise
            except Conflict:
                self._metrics.conflict()
                raise
            except Exception as exc:
                if live.closed == RELOAD:  # this request's write has an unknown outcome
                    self._metrics.failed("write", session_id, exc)
                raise
        raise AssertionError("unreachable")

    async def read(self, session_id: str, op: Callable[[LiveSession], T]) -> T:
        """``op`` on the live session once no mutation is in flight: a read never sees
        events whose write may still fail and be rolled back."""
        async def call(live: LiveSession) -> T:
            async with live.lock:
                return op(live)
        return await self.run(session_id, call)

    async def held(self, session_ids: Sequence[str], now: Callable[[LiveSession], T | None],
                   later: Callable[[LiveSession], Awaitable[T]]) -> list[T | None]:
        """``now(live)`` for each of ``session_ids`` held here, all in this one step of
        the loop, and ``later(live)``, awaited side by side, for those whose ``now`` is
        ``None`` (a mutation in flight holds the session's lock); ``None`` for a session
        not held. With a task per session a pass over 1,000 sessions took 9.0-10.5 ms,
        most of it the tasks; 1.6-2.8 ms so."""
        answers: list[T | None] = [None] * len(session_ids)
        busy: list[tuple[int, LiveSession]] = []
        for k, session_id in enumerate(session_ids):
            live = self.sessions.get(session_id)
            if live is None or live.closed is not None:
                continue
            answers[k] = now(live)
            if answers[k] is None:
                busy.append((k, live))

        async def wait(k: int, live: LiveSession) -> None:
            with contextlib.suppress(SessionUnavailable):  # passivated: not held after all
                answers[k] = await later(live)
        await asyncio.gather(*(wait(k, live) for k, live in busy))
        return answers

    # -- passivation -------------------------------------------------------------------

    async def passivate(self, session_id: str) -> bool:
        """Flush and drop ``session_id`` now; False when it was not active here. Raises
        the flush's failure (the session is dropped regardless)."""
        live = self.sessions.pop(session_id, None)
        if live is None:
            return False
        self.passivations += 1
        self._metrics.passivated(session_id)
        try:
            await live.passivate()
        except Exception as exc:
            self._metrics.failed("passivation", session_id, exc)
            raise
        return True

    async def passivate_all(self) -> list[str]:
        """Passivate every session; the write failures found (``session: error``),
        after passivating all."""
        failures: list[str] = []
        for sid in list(self.sessions):
            try:
                await self.passivate(sid)
            except Exception as exc:  # reported to the caller, per session
                failures.append(failure_line(sid, exc))
        return failures

    def _start_reaper(self) -> None:
        if self._idle_timeout_s is not None and (self._reaper is None or self._reaper.done()):
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    def _idle(self, live: LiveSession, idle_s: float) -> bool:
        """Passivate after ``idle_timeout_s`` when no turn is open. A session inside a
        turn is waiting for its agent (a slow model, a long tool): passivating it would
        make reactivation close the turn as interrupted, so it gets ten times longer."""
        assert self._idle_timeout_s is not None
        if idle_s < self._idle_timeout_s:
            return False
        return live.turn_open() is None or idle_s >= 10 * self._idle_timeout_s

    async def _reap(self) -> None:
        assert self._idle_timeout_s is not None
        loop = asyncio.get_running_loop()
        period = max(0.05, min(self._idle_timeout_s / 2, 5.0))
        while self.sessions:
            await asyncio.sleep(period)
            now = loop.time()
            for sid, live in list(self.sessions.items()):
                if not live.lock.locked() and self._idle(live, now - live.last_activity):
                    try:
                        await live.passivate()
                    except Exception as exc:  # the live is closed regardless
                        self.failed_passivations.append(failure_line(sid, exc))
                        del self.failed_passivations[:-FAILED_PASSIVATIONS_KEPT]
                        self._metrics.failed("passivation", sid, exc)
                    if self.sessions.get(sid) is live:
                        del self.sessions[sid]
                        self.passivations += 1
                        self._metrics.passivated(sid)
                        if not self.sessions and self._on_empty is not None:
                            self._on_empty()


__all__ = ["FAILED_PASSIVATIONS_KEPT", "SessionHost"]
