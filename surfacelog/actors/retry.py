"""Waiting out a Ray actor that died or is restarting: exponential backoff within a time
budget, shared by the session handles and the journal flush."""

from __future__ import annotations

import asyncio

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 1.0


class Backoff:
    """Waits of 0.05 s doubling to 1 s, for at most ``budget_s`` from creation."""

    __slots__ = ("_deadline", "_delay", "_loop")

    def __init__(self, budget_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + budget_s
        self._delay = FIRST_DELAY_S

    def exhausted(self) -> bool:
        """True when the next wait would end past the budget."""
        return self._loop.time() + self._delay > self._deadline

    async def wait(self) -> None:
        """Sleep the next delay (call after ``exhausted`` said no)."""
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, MAX_DELAY_S)
