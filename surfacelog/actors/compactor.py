"""Compaction and pruning actors.

``Compactor`` is the loop logic over session handles (no Ray of its own): read the
surface, decide with the core's ``compaction_policy``, summarise with a pluggable (sync
or async) summariser, send the replace request, and on ``Conflict`` read again and
retry, a bounded number of times. ``CompactionActor`` and ``PrunerActor`` run it inside
Ray, on demand (``run_once``) or watching the sessions they were asked to manage
(``start``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import Client, SessionHandle, connect
from surfacelog.actors.config import HostingConfig, tune_gc
from surfacelog.actors.errors import ShardUnavailable, SummariserError
from surfacelog.actors.protocol import Conflict, failure_line
from surfacelog.schema.events import Event
from surfacelog.session.compaction_policy import (
    choose_range,
    compaction_request,
    extractive_summary,
    prune_requests_for,
)
from surfacelog.session.pressure import (
    CONTEXT_PRESSURE,
    ContextPressure,
    compaction_threshold,
    context_tokens,
)
from surfacelog.session.tokens import event_tokens
from surfacelog.store.errors import CommitFailed

Blocks = list[dict[str, Any]]
AnySummariser = Callable[[Sequence[Event]], "Blocks | Awaitable[Blocks]"]


def load_summariser(path: str) -> AnySummariser:
    """The summariser named ``module:attribute`` (``module.attribute`` works too): a
    callable taking the shadowed events and returning the summary's blocks, sync or
    async (e.g. one that calls a model). ``extractive`` names the built-in default.
    Raises ``SummariserError`` when the module or attribute is missing or not
    callable."""
    if path in ("extractive", ""):
        return extractive_summary
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise SummariserError(f"summariser {path!r}: expected module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SummariserError(f"summariser {path!r}: cannot import {module_name!r} "
                              f"({exc})") from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise SummariserError(f"summariser {path!r}: {module_name} has no callable "
                              f"{attribute!r}")
    summariser: AnySummariser = found
    return summariser


class CompactorStats(msgspec.Struct):
    """Counters of one compactor or pruner."""

    passes: int = 0
    committed: int = 0
    failed: int = 0
    conflicts: int = 0
    gave_up: int = 0
    prunes: int = 0
    errors: int = 0
    last_error: str | None = None
    unavailable: int = 0
    """Sessions skipped in a pass because their shard was unavailable (its node lost,
    its actors restarting): an outage, not an error; the next pass tries again."""


class Compactor:
    """Compaction and pruning decisions for sessions reached through ``SessionHandle``s."""

    def __init__(self, *, compact_at: int = 8000, retain_tokens: int | None = None,
                 prune_over: int = 4000, prune_keep: int = 1000, max_retries: int = 3,
                 summariser: AnySummariser = extractive_summary,
                 pressure_ratio: float = CONTEXT_PRESSURE) -> None:
        self.compact_at = compact_at
        self.pressure_ratio = pressure_ratio
        self.retain_tokens = compact_at // 4 if retain_tokens is None else retain_tokens
        self.prune_over = prune_over
        self.prune_keep = prune_keep
        self.max_retries = max_retries
        self.summariser = summariser
        self.stats = CompactorStats()

    async def _summarise(self, events: Sequence[Event]) -> list[dict[str, Any]]:
        out = self.summariser(events)
        if inspect.isawaitable(out):
            out = await out
        return list(out)

    def due_threshold(self, pressure: ContextPressure) -> int | None:
        """The threshold in force when a session with ``pressure`` is compacted now
        (its context is over it, see ``compact``), else ``None``."""
        threshold = compaction_threshold(pressure, self.compact_at, self.pressure_ratio)
        return threshold if context_tokens(pressure) > threshold else None

    async def compact(self, handle: SessionHandle) -> str:
        """Compact once when the session's context is under pressure, as DSH decides
        (``session.pressure``): right after a provider reported a context overflow,
        above ``pressure_ratio`` of the context window a ``request/context`` announced,
        else above ``compact_at`` estimated tokens. Returns ``committed``, ``failed``
        (summary not smaller: recorded as a failed compaction), ``skipped`` or
        ``gave-up`` (still conflicting after ``max_retries``)."""
        for _ in range(self.max_retries):
            threshold = self.due_threshold(await handle.pressure())
            if threshold is None:
                return "skipped"
            snapshot, events = await handle.surface_events()
            # The tail kept is budgeted against the threshold in force, so a compaction
            # after an overflow (threshold 0) still keeps the recent turns it can.
            budget = min(self.retain_tokens, max(threshold, self.compact_at) // 4)
            choice = choose_range(snapshot.nodes, events, compact_at=min(
                threshold, sum(event_tokens(e) for e in events) - 1), retain_tokens=budget)
            if choice is None:
                return "skipped"
            shadowed = events[: len(choice.shadowed)]
            request = compaction_request(snapshot, choice, shadowed,
                                         await self._summarise(shadowed))
            try:
                await handle.compact(request)
            except Conflict:
                self.stats.conflicts += 1
                continue
            if request.error is None:
                self.stats.committed += 1
                return "committed"
            self.stats.failed += 1
            return "failed"
        self.stats.gave_up += 1
        return "gave-up"

    async def prune(self, handle: SessionHandle) -> int:
        """Shorten every current tool result over ``prune_over`` characters; returns how
        many were pruned (a conflicting one is left for the next pass)."""
        candidates = await handle.oversized_results(self.prune_over)
        done = 0
        for request in prune_requests_for(candidates, keep_chars=self.prune_keep):
            try:
                await handle.prune(request)
            except Conflict:
                self.stats.conflicts += 1
                continue
            done += 1
        self.stats.prunes += done
        return done


class _Watcher:
    """Runs one ``Compactor`` pass over managed sessions, on demand or periodically.

    A pass handles its sessions side by side (at most ``MAX_CONCURRENT`` at once), so
    that their requests to one session actor travel together in its next call (the
    client's lines coalesce them): a pass over 50 sessions costs a few Ray calls
    instead of two per session, each of which costs about as much CPU as a whole
    append."""

    prune_only = False
    compact_only = False
    MAX_CONCURRENT = 64

    def __init__(self, hosting: HostingConfig, retry_for_s: float | None = None,
                 **compactor: Any) -> None:
        """``retry_for_s``: the client's retry window once a first pass is done (the
        sessions' actors started; default: the client's); the other keyword arguments
        are ``Compactor``'s."""
        tune_gc()
        self._client: Client = connect(config=hosting)
        self._retry_for_s = retry_for_s
        self._compactor = Compactor(**compactor)
        self._managed: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._busy = 0
        """Sessions whose prune or compaction is in flight (their requests may be
        running in the sessions' actors)."""

    def manage(self, session_ids: Sequence[str]) -> int:
        """Add sessions to watch; returns how many are managed."""
        known = set(self._managed)
        self._managed.extend(s for s in session_ids if s not in known)
        return len(self._managed)

    async def run_once(self, session_ids: Sequence[str] | None = None) -> CompactorStats:
        """One pass over ``session_ids`` (default: the managed ones). A session whose
        shard is unavailable is counted in ``unavailable`` and left for the next pass;
        any other failure is counted in ``errors``."""
        limit = asyncio.Semaphore(self.MAX_CONCURRENT)

        async def one(sid: str) -> None:
            async with limit:
                if not self._stopping:
                    await self._session_pass(sid)

        ids = list(self._managed if session_ids is None else session_ids)
        await asyncio.gather(*(one(sid) for sid in await self._due(ids)))
        self._compactor.stats.passes += 1
        return self._compactor.stats

    async def _due(self, session_ids: list[str]) -> list[str]:
        """The sessions of a pass that get a pass of their own: all but those whose
        actor, asked once for all of its sessions (``Client.held``), holds them with
        nothing to do. A session its actor does not hold, or whose actor did not
        answer, gets its own pass as before (which loads it, or reports the outage)."""
        compactor = self._compactor
        idle: list[set[str]] = []  # per job of this watcher: the sessions without work
        try:
            if not self.compact_only:
                held = await self._client.held("held_oversized", session_ids,
                                               compactor.prune_over)
                idle.append({sid for sid, over in held.items() if over is False})
            if not self.prune_only:
                held = await self._client.held("held_pressures", session_ids)
                idle.append({sid for sid, pressure in held.items() if pressure is not None
                             and compactor.due_threshold(pressure) is None})
        except Exception as exc:  # counted and reported; every session gets its pass
            compactor.stats.errors += 1
            compactor.stats.last_error = failure_line("(pass)", exc)
            return session_ids
        skipped = set.intersection(*idle)
        return [sid for sid in session_ids if sid not in skipped]

    async def _session_pass(self, sid: str) -> None:
        handle = self._client.session(sid)
        self._busy += 1
        try:
            if not self.compact_only:
                await self._compactor.prune(handle)
            if not self.prune_only:
                await self._compactor.compact(handle)
        except (ShardUnavailable, RayActorError, CommitFailed):
            # Its node is lost or its actors restarting (the handle waited out the
            # retry window, or a write's outcome is unknown): an outage, not an
            # error; the session reloads and is tried again on the next pass.
            self._compactor.stats.unavailable += 1
        except Exception as exc:  # counted and reported; the watcher keeps going
            self._compactor.stats.errors += 1
            self._compactor.stats.last_error = failure_line(sid, exc)
        finally:
            self._busy -= 1

    async def _loop(self, period_s: float) -> None:
        while not self._stopping:
            await self.run_once()
            if self._retry_for_s is not None:
                self._client.retry_for_s = self._retry_for_s
            await asyncio.sleep(period_s)

    async def start(self, period_s: float = 0.5) -> None:
        """Watch the managed sessions every ``period_s`` seconds until ``stop``."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop(period_s))

    async def stop(self) -> CompactorStats:
        """Stop watching once the session in progress is done; returns the counters.
        The pass is not cancelled in the middle of a session's request: the request
        would go on in the session's actor and land after the caller, told the watcher
        stopped, read the sessions' state."""
        task = self._task
        if task is not None:
            self._stopping = True
            if not self._busy:
                task.cancel()  # between sessions or asleep: nothing in flight
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._task = None
            self._stopping = False
        return self._compactor.stats

    def stats(self) -> CompactorStats:
        return self._compactor.stats


class CompactionActor(_Watcher):
    """Compacts the surfaces it manages when they exceed ``compact_at`` tokens."""

    compact_only = True


class PrunerActor(_Watcher):
    """Shortens tool results over ``prune_over`` characters."""

    prune_only = True


RemoteCompactor: Any = ray.remote(CompactionActor)
RemotePruner: Any = ray.remote(PrunerActor)
