"""Waiting out something that failed and may work again: exponential backoff, optionally
within a time budget, shared by the session handles, the journal's writers, the load
run's chaos (a Ray actor that died or is restarting) and the Litestream supervisor (a
child process that exited)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ray.exceptions import RayActorError

T = TypeVar("T")

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 1.0


class Backoff:
    """Delays of ``first_s`` (0.05 s by default) doubling up to ``max_s`` (1 s), for at
    most ``budget_s`` from creation (``None``: no budget, for a loop that retries until
    told to stop).

    ``wait`` sleeps on the running event loop; code on a thread of its own takes
    ``next_delay`` and sleeps as it must (on a ``threading.Event``, say, so that a stop
    ends the wait). Times are ``time.monotonic``, the clock asyncio's loop uses."""

    __slots__ = ("_deadline", "_delay", "_first_s", "_max_s")

    def __init__(self, budget_s: float | None = None, *, first_s: float = FIRST_DELAY_S,
                 max_s: float = MAX_DELAY_S) -> None:
        """Raises ``ValueError`` unless 0 < ``first_s`` <= ``max_s``."""
        if not 0 < first_s <= max_s:
            raise ValueError(f"backoff delays must be 0 < first_s <= max_s, not "
                             f"{first_s} and {max_s}")
        self._first_s = first_s
        self._max_s = max_s
        self._deadline = None if budget_s is None else time.monotonic() + budget_s
        self._delay = first_s

    def remaining(self) -> float:
        """Seconds left of the budget (never below the first delay, so a last attempt
        still gets to run; infinite without a budget)."""
        if self._deadline is None:
            return float("inf")
        return max(self._deadline - time.monotonic(), self._first_s)

    def exhausted(self) -> bool:
        """True when the next wait would end past the budget (never without one)."""
        return self._deadline is not None and time.monotonic() + self._delay > self._deadline

    def next_delay(self) -> float:
        """The delay to wait now; the next one is twice as long, up to ``max_s``."""
        delay = self._delay
        self._delay = min(delay * 2, self._max_s)
        return delay

    def reset(self) -> None:
        """Start again from ``first_s`` (what was retried went well for a while)."""
        self._delay = self._first_s

    async def wait(self) -> None:
        """Sleep the next delay (call after ``exhausted`` said no)."""
        await asyncio.sleep(self.next_delay())


async def through_restarts(send: Callable[[bool], Awaitable[T]], budget_s: float) -> T:
    """``send(False)``; while its actor is dead or restarting, ``send(True)`` again (the
    flag tells a resend apart) with backoff until it answers. Raises the last
    ``RayActorError`` after ``budget_s``, and any other error at once."""
    backoff = Backoff(budget_s)
    again = False
    while True:
        try:
            return await send(again)
        except RayActorError:
            if backoff.exhausted():
                raise
        again = True
        await backoff.wait()
