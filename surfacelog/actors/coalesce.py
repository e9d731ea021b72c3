"""``CallLine``: the requests one process sends to one actor, coalesced into few calls.

A Ray call costs about the same whatever it carries (a few hundred microseconds of CPU
on each side), so when many sessions hosted by one actor are driven from one process,
the process's call rate, not the work, bounds their throughput. A line sends a request
at once when nothing is in flight to its actor (a lone request pays nothing more), and
while a call is in flight it queues the requests that arrive; when the call returns,
everything queued travels together in the next call, up to ``max_items`` requests and
``max_bytes`` of payload (the rest waits for the call after). This is group commit
applied to calls: the busier the line, the more each call carries.

Each request keeps its own outcome: the actor answers a coalesced call with one
``Outcome`` per request (a value, or the exception that request alone raised), and each
caller gets its own (an exception raised at the actor comes wrapped in ``RequestError``,
as Ray wraps one in ``RayTaskError``, so that the caller can tell it from a failure of
the call). A failure of the call itself (the actor died, the process lost
its connection) is every request's failure, raised to each caller as it would have
been raised by a call of its own, so that each applies its own resend rule.

Order: requests are sent in the order they were submitted, a call carries them in
that order, and the next call leaves only after the previous one has returned; the
actor applies the requests of one session in the order they came (see
``run_coalesced``). Nothing here knows Ray: the line is given the two ways of sending
(one request alone, several together) and is tested with plain coroutines.
"""

from __future__ import annotations

import asyncio
import pickle
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from surfacelog.actors.errors import RequestError

MAX_ITEMS: Final = 512
"""Requests per coalesced call, at most."""

MAX_BYTES: Final = 4 << 20
"""Payload bytes per coalesced call, at most (a single larger request travels alone)."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request on a line: the actor's method, its arguments, the key whose requests
    must be applied in order (the session id), its payload size in bytes."""

    method: str
    args: tuple[Any, ...]
    key: Hashable
    size: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """A request's answer inside a coalesced reply: ``error`` when it raised (and then
    ``value`` is ``None``), else ``value``."""

    value: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class LineStats:
    """What a line sent: calls, requests, and the largest call."""

    calls: int = 0
    requests: int = 0
    coalesced_calls: int = 0
    largest: int = 0

    def add(self, other: LineStats) -> None:
        """Count ``other``'s calls in these."""
        self.calls += other.calls
        self.requests += other.requests
        self.coalesced_calls += other.coalesced_calls
        self.largest = max(self.largest, other.largest)

    def sent(self, n: int) -> None:
        self.calls += 1
        self.requests += n
        self.coalesced_calls += n > 1
        self.largest = max(self.largest, n)


@dataclass(slots=True)
class _Pending:
    request: Request
    future: asyncio.Future[Any] = field(repr=False)


WireRequest = tuple[str, tuple[Any, ...], Hashable]
"""A request as a coalesced call carries it: ``(method, args, key)``."""
WireOutcome = tuple[Any, BaseException | None]
"""An outcome as a coalesced reply carries it: ``(value, error)``."""
WireCall = bytes | list[WireRequest]
"""A coalesced call's argument: its ``WireRequest``s pickled, or the list itself when
the standard pickler cannot take them (see ``requests_to_wire``)."""
WireReply = bytes | list[WireOutcome]
"""A coalesced call's reply: its ``WireOutcome``s pickled, or the list itself."""

_PICKLE_PROTOCOL: Final = 5
_NOT_PICKLABLE: Final = (pickle.PicklingError, TypeError, AttributeError)
"""What the standard pickler raises for a value it cannot take (a lambda, a local
class, an object that refuses): Ray's own serializer (cloudpickle) may still take it."""
_MAIN: Final = b"__main__"


def _pickled(items: list[Any]) -> bytes | list[Any]:
    """``items`` pickled, or ``items`` themselves for Ray's serializer when the standard
    pickler refuses them, or when the pickle may name ``__main__``: the standard pickler
    refers to a class by its module, and the other process's ``__main__`` (Ray's
    worker) has no class of a script's, where cloudpickle sends such a class whole. A
    request carries one when a script's object rides in an append's data (which then
    travels as structs, for the session to refuse as in process); the text
    ``__main__`` inside a value only costs that call the slower serializer."""
    try:
        data = pickle.dumps(items, protocol=_PICKLE_PROTOCOL)
    except _NOT_PICKLABLE:
        return items
    return items if _MAIN in data else data


def _unpickled(wire: bytes | list[Any]) -> list[Any]:
    if isinstance(wire, bytes):
        items: list[Any] = pickle.loads(wire)
        return items
    return wire


def requests_to_wire(requests: Sequence[Request]) -> WireCall:
    """Requests as one ``bytes``: their ``(method, args, key)`` tuples pickled here with
    the standard pickler, so that Ray moves one opaque value. Ray's own serializer
    (cloudpickle, with a Python hook called for every object) spends about 60 us on the
    tuples of 50 appends where ``pickle.dumps`` spends 6 us (a list of dataclasses cost
    Ray 900 us); a call of 50 and its reply cost both processes 0.81-0.86x the CPU so
    (benchmarks/README.md, "One pickle per coalesced call"). The list itself, for Ray's
    serializer, when the standard pickler refuses an argument or would refer to a class
    of ``__main__`` (see ``_pickled``)."""
    return _pickled([(r.method, r.args, r.key) for r in requests])


def requests_from_wire(wire: WireCall) -> list[Request]:
    """The inverse of ``requests_to_wire`` (sizes are the sender's business: 0)."""
    return [Request(method, tuple(args), key) for method, args, key in _unpickled(wire)]


def outcomes_to_wire(outcomes: Sequence[Outcome]) -> WireReply:
    """Outcomes as one ``bytes`` (see ``requests_to_wire``): values and the exceptions
    requests raised, pickled; the list itself when the standard pickler refuses one."""
    return _pickled([(o.value, o.error) for o in outcomes])


def outcomes_from_wire(wire: WireReply) -> list[Outcome]:
    """The inverse of ``outcomes_to_wire``. Raises what unpickling raises (the reply is
    then lost, as when Ray cannot deserialize one: every request of the call fails)."""
    return [Outcome(value, error) for value, error in _unpickled(wire)]


SendOne = Callable[[Request], Awaitable[Any]]
SendMany = Callable[[Sequence[Request]], Awaitable[Sequence[Outcome]]]


class CallLine:
    """The line of requests from this process to one actor (see the module's
    docstring). ``send_one`` sends a request alone (its method called directly, the
    path of a lone request); ``send_many`` sends several in one call and returns one
    ``Outcome`` per request, in order."""

    def __init__(self, send_one: SendOne, send_many: SendMany, *,
                 max_items: int = MAX_ITEMS, max_bytes: int = MAX_BYTES) -> None:
        if max_items < 1 or max_bytes < 1:
            raise ValueError("a line needs max_items >= 1 and max_bytes >= 1")
        self._send_one = send_one
        self._send_many = send_many
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._queue: deque[_Pending] = deque()
        self._busy = False
        self._drainer: asyncio.Task[None] | None = None
        """The task sending the line's calls (held here: the event loop keeps only a
        weak reference to a task, which could be collected mid-drain)."""
        self.stats = LineStats()

    @property
    def queued(self) -> int:
        """Requests waiting for the call in flight to return."""
        return len(self._queue)

    def submit(self, request: Request) -> asyncio.Future[Any]:
        """Queue ``request`` to be sent (at once when the line is idle, else with the
        next call); returns the future of its value. The future raises what
        ``send_one`` raised when the request went alone; ``RequestError`` when it
        raised at the actor inside a coalesced call; what the call carrying it raised
        (then every request of that call raises it). Cancelling the future before its
        call is sent leaves the request out of it.

        A plain method, not a coroutine: a caller awaits the future itself, so a
        request costs no task of its own (every append of a streaming agent is one)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append(_Pending(request, future))
        if not self._busy:
            # The drain runs from the next turn of the loop, so requests made in this
            # same turn (a burst: many sessions at once) already go in its first call.
            self._busy = True
            self._drainer = loop.create_task(self._drain())
        return future

    def _take(self) -> list[_Pending]:
        """The next call's requests: the queue's head, within the bounds (a first
        request larger than ``max_bytes`` goes alone)."""
        batch = [self._queue.popleft()]
        size = batch[0].request.size
        while self._queue and len(batch) < self._max_items:
            nxt = self._queue[0].request.size
            if size + nxt > self._max_bytes:
                break
            batch.append(self._queue.popleft())
            size += nxt
        return batch

    async def _drain(self) -> None:
        """Send calls until the queue is empty; one call in flight at a time."""
        try:
            while self._queue:
                batch = self._take()
                self.stats.sent(len(batch))
                await self._send(batch)
        except BaseException:
            # Torn down (the loop is closing): nobody will send what is queued.
            while self._queue:
                pending = self._queue.popleft()
                if not pending.future.done():
                    pending.future.cancel()
            raise
        finally:
            self._busy = False

    async def _send(self, batch: list[_Pending]) -> None:
        live = [p for p in batch if not p.future.done()]  # a caller cancelled: skip it
        if not live:
            return
        try:
            if len(live) == 1:
                outcomes = [Outcome(value=await self._send_one(live[0].request))]
            else:
                outcomes = list(await self._send_many([p.request for p in live]))
        except asyncio.CancelledError:
            for p in live:
                if not p.future.done():
                    p.future.cancel()
            raise
        except BaseException as exc:  # the call failed: so did each of its requests
            for p in live:
                if not p.future.done():
                    p.future.set_exception(exc)
            return
        if len(outcomes) != len(live):
            mismatch = RuntimeError(f"a coalesced call of {len(live)} requests was "
                                    f"answered with {len(outcomes)} outcomes")
            for p in live:
                if not p.future.done():
                    p.future.set_exception(mismatch)
            return
        for p, outcome in zip(live, outcomes, strict=True):
            if p.future.done():
                continue
            if outcome.error is not None:
                p.future.set_exception(RequestError(outcome.error))
            else:
                p.future.set_result(outcome.value)


async def run_coalesced(requests: Sequence[Request],
                        apply: Callable[[Request], Awaitable[Any]]) -> list[Outcome]:
    """The actor's side of a coalesced call: apply each request and answer each with
    its own ``Outcome``. Requests of different keys run concurrently (so that their
    writes share one group commit); those of one key run one after another, in the
    order they came. A request's exception is its outcome, never its neighbours'
    (``CancelledError`` and other ``BaseException``s that are not ``Exception``
    propagate: the whole call is being torn down)."""
    outcomes: list[Outcome | None] = [None] * len(requests)
    by_key: dict[Hashable, list[int]] = defaultdict(list)
    for index, request in enumerate(requests):
        by_key[request.key].append(index)

    async def run_key(indexes: list[int]) -> None:
        for index in indexes:
            try:
                outcomes[index] = Outcome(value=await apply(requests[index]))
            except Exception as exc:
                outcomes[index] = Outcome(error=exc)

    await asyncio.gather(*(run_key(indexes) for indexes in by_key.values()))
    return [o if o is not None else Outcome(error=RuntimeError("request not applied"))
            for o in outcomes]


__all__ = ["MAX_BYTES", "MAX_ITEMS", "CallLine", "LineStats", "Outcome", "Request",
           "RequestError", "WireCall", "WireOutcome", "WireReply", "WireRequest",
           "outcomes_from_wire",
           "outcomes_to_wire", "requests_from_wire", "requests_to_wire", "run_coalesced"]
