"""Waiting out a Ray actor that died or is restarting: exponential backoff within a time
budget, shared by the session handles, the journal's writers and the load run's chaos."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ray.exceptions import RayActorError

T = TypeVar("T")

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 1.0


class Backoff:
    """Waits of 0.05 s doubling to 1 s, for at most ``budget_s`` from creation."""

    __slots__ = ("_deadline", "_delay", "_loop")

    def __init__(self, budget_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + budget_s
        self._delay = FIRST_DELAY_S

    def remaining(self) -> float:
        """Seconds left of the budget (never below a small floor, so a last attempt
        still gets to run)."""
        return max(self._deadline - self._loop.time(), FIRST_DELAY_S)

    def exhausted(self) -> bool:
        """True when the next wait would end past the budget."""
        return self._loop.time() + self._delay > self._deadline

    async def wait(self) -> None:
        """Sleep the next delay (call after ``exhausted`` said no)."""
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, MAX_DELAY_S)


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
