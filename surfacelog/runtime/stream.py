"""``AppendStream``: one session's appends written as they come, sent adaptively.

A live agent appends each chunk of its model's stream as it arrives. Awaiting each
append before reading the next chunk ties the stream to the append's round trip; not
awaiting them, one request per chunk would race its neighbours (two appends in flight
for one session are not tied to each other: a compaction landing between them leaves a
hole). A stream sends a write at once when nothing of the stream is in flight (a lone
chunk pays nothing more), and while an append is in flight it queues the writes that
arrive; when it returns, everything queued goes in the next append, all or nothing.
This is group commit applied to one session's writes: the slower the append, the more
each one carries, and a model that streams slower than appends are answered sends one
chunk per append, as before.

Every write is still its own event (a batch of N specs logs N events); a write's future
gives its seq once its append is acknowledged (for a durable session: committed).

Outcomes. A write refused on its own account is refused alone: when an append of
several writes is refused by the session's rules (``SurfaceError``: the specs are
checked together, so it may be any of them), its writes are sent again one at a time,
so the writes before the bad one land and the bad one gets its own refusal. Any other
failure (``Conflict``, a store error, an outage) is the outcome of every write of that
append. After a failure the stream is broken: the writes after the failed one are not
sent, and each raises ``StreamBroken`` naming the cause, so that a stream never logs a
chunk without the one before it.

With ``expected_seq`` the writes form a chain: each append carries the seq its first
write lands at, so an append resent after an unknown outcome lands exactly once (see
``SessionLike``), and anything appended by another writer between two of the stream's
appends refuses the later one with ``Conflict``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Final, Protocol

from surfacelog.runtime.errors import StreamBroken
from surfacelog.schema.errors import SurfaceError
from surfacelog.schema.events import Event
from surfacelog.session import AppendSpec

MAX_EVENTS: Final = 256
"""Writes per append, at most (the rest go in the next)."""


class Appender(Protocol):
    """What a stream appends through: a ``SessionLike``'s ``append_batch`` (the Ray
    handle, the in-process one, a load run's driver handle)."""

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> Sequence[Event]: ...


def _seqs(logged: Sequence[Event]) -> Sequence[int]:
    """The seqs of what an append logged (a Ray handle's ``LoggedEvents`` knows them
    without making its events)."""
    seqs: Sequence[int] | None = getattr(logged, "seqs", None)
    return seqs if seqs is not None else [event.seq for event in logged]


class AppendStream:
    """One session's writes, each sent as soon as the stream's previous append is
    answered, those that arrived meanwhile together (see the module's docstring).

    ``expected_seq``: the seq the first write lands at (the session's length), or
    ``None`` to append wherever the log ends. Use from one event loop. ``async with``
    drains the stream at the end of the block (unless the block raised)."""

    def __init__(self, session: Appender, expected_seq: int | None = None, *,
                 max_events: int = MAX_EVENTS) -> None:
        if max_events < 1:
            raise ValueError("a stream needs max_events >= 1")
        if expected_seq is not None and expected_seq < 0:
            raise ValueError(f"expected_seq must be >= 0, got {expected_seq}")
        self.session = session
        self._next = expected_seq
        self._max_events = max_events
        self._queue: deque[tuple[AppendSpec, asyncio.Future[int]]] = deque()
        self._written: list[asyncio.Future[int]] = []
        self._sender: asyncio.Task[None] | None = None
        """The task sending the stream's appends (held: the loop keeps only a weak
        reference to a task)."""
        self._broken: BaseException | None = None
        self._in_flight = 0
        self.appends = 0
        """Appends sent (a write sent again alone after a refusal counts once more)."""
        self.writes = 0
        """Writes accepted by ``write`` (not those refused at once as broken)."""

    @property
    def next_seq(self) -> int | None:
        """The seq the next append lands at (chained streams; ``None`` when not)."""
        return self._next

    @property
    def broken(self) -> BaseException | None:
        """The failure that broke the stream, or ``None``."""
        return self._broken

    @property
    def pending(self) -> int:
        """Writes not answered yet: queued (a cancelled one until the stream passes
        it) or in the append in flight."""
        return len(self._queue) + self._in_flight

    def write(self, spec: AppendSpec) -> asyncio.Future[int]:
        """Queue ``spec`` (sent at once when nothing of the stream is in flight, else
        with the next append); returns the future of its seq. The future raises what
        the session raised for it (see the module's docstring), or ``StreamBroken``
        once an earlier write failed, at once when the stream was broken already.
        Cancelling the future before its append is sent leaves the write out."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        if self._broken is not None:
            future.set_exception(StreamBroken.after(self._broken))
            return future
        self.writes += 1
        self._queue.append((spec, future))
        self._written.append(future)
        if self._sender is None:
            # From the next turn of the loop: writes made in this turn go together.
            self._sender = loop.create_task(self._send_queued())
        return future

    async def drain(self) -> list[int]:
        """Wait for every write made since the last ``drain``; returns their seqs, in
        the order written. Raises the first failure among them (the stream's cause,
        never the ``StreamBroken`` of the writes after it); every write is answered
        before it raises, so nothing is left in flight."""
        written, self._written = self._written, []
        outcomes = await asyncio.gather(*written, return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            causes = [f for f in failures if not isinstance(f, StreamBroken)]
            raise (causes or failures)[0]
        return [o for o in outcomes if not isinstance(o, BaseException)]

    async def __aenter__(self) -> AppendStream:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if kind is None:
            await self.drain()

    def _take(self) -> list[tuple[AppendSpec, asyncio.Future[int]]]:
        batch: list[tuple[AppendSpec, asyncio.Future[int]]] = []
        while self._queue and len(batch) < self._max_events:
            item = self._queue.popleft()
            if not item[1].done():  # cancelled by its writer before it was sent
                batch.append(item)
        return batch

    async def _send_queued(self) -> None:
        batch: list[tuple[AppendSpec, asyncio.Future[int]]] = []
        try:
            while self._queue and self._broken is None:
                batch = self._take()
                if batch:
                    await self._send(batch)
        except BaseException as exc:
            # Torn down (cancelled, the loop closing): the writes not answered never
            # will be, so each learns why.
            self._break(exc, [f for _, f in batch])
            raise
        finally:
            self._sender = None
            if self._broken is not None:
                self._fail_queued()

    async def _append(self, specs: list[AppendSpec]) -> Sequence[int]:
        self.appends += 1
        seqs = _seqs(await self.session.append_batch(specs, self._next))
        if self._next is not None:
            self._next += len(seqs)
        return seqs

    async def _send(self, batch: list[tuple[AppendSpec, asyncio.Future[int]]]) -> None:
        self._in_flight = len(batch)
        try:
            seqs = await self._append([spec for spec, _ in batch])
        except SurfaceError as exc:
            if len(batch) == 1:
                self._break(exc, [batch[0][1]])
            else:
                await self._send_alone(batch)
            return
        except Exception as exc:
            self._break(exc, [f for _, f in batch])
            return
        finally:
            self._in_flight = 0
        for (_, future), seq in zip(batch, seqs, strict=True):
            if not future.done():
                future.set_result(seq)

    async def _send_alone(self, batch: list[tuple[AppendSpec, asyncio.Future[int]]]) -> None:
        """A refused append's writes, each in an append of its own, until one fails."""
        for index, (spec, future) in enumerate(batch):
            try:
                seq = (await self._append([spec]))[0]
            except Exception as exc:
                self._break(exc, [future])
                for _, later in batch[index + 1:]:
                    if not later.done():
                        later.set_exception(StreamBroken.after(exc))
                return
            if not future.done():
                future.set_result(seq)

    def _break(self, cause: BaseException, failed: list[asyncio.Future[int]]) -> None:
        self._broken = cause
        for future in failed:
            if not future.done():
                if isinstance(cause, Exception):
                    future.set_exception(cause)
                else:
                    future.cancel()

    def _fail_queued(self) -> None:
        assert self._broken is not None
        while self._queue:
            _, future = self._queue.popleft()
            if not future.done():
                future.set_exception(StreamBroken.after(self._broken))


__all__ = ["MAX_EVENTS", "AppendStream", "Appender", "StreamBroken"]
