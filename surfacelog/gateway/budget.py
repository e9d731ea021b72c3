"""The request bodies a replica holds at once, bounded (``BodyBudget``).

``MAX_BODY_BYTES`` bounds one body; without a bound across requests, a few dozen
concurrent bodies near that size grow a replica by gigabytes, and keep it grown. The
budget counts each request's body from its first byte (its declared length when it has
one, else the bytes as they arrive) until its answer is sent; a request that would go
past it is refused early with ``GatewayBusy`` (503 ``busy``, Retry-After), before its
body is read or as soon as a streamed body crosses the line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from surfacelog.gateway.errors import GatewayBusy

BODY_BUDGET_BYTES: Final = 256 * 1024 * 1024
"""Bytes of request bodies one replica holds at once by default: eight bodies of the
largest size."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyBudget:
    """ASGI middleware around ``app``: at most ``budget`` bytes of request bodies held
    at once, across the requests of this process (one event loop: no lock)."""

    def __init__(self, app: App, budget: int = BODY_BUDGET_BYTES) -> None:
        if budget < 1:
            raise ValueError(f"a body budget is at least 1 byte, not {budget}")
        self.app = app
        self.budget = budget
        self.held = 0

    def _take(self, n: int) -> None:
        if self.held + n > self.budget:
            raise GatewayBusy(f"this replica holds {self.held} bytes of request bodies "
                              f"(at most {self.budget}); retry")
        self.held += n

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = 0
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit():
                declared = int(value)
        taken = 0

        async def counted() -> Message:
            nonlocal taken
            message = await receive()
            if message["type"] == "http.request":
                arrived = len(message.get("body", b""))
                # A declared length is taken whole at the first chunk; a streamed body
                # (or one longer than it said) as its bytes arrive.
                want = max(declared, taken + arrived) - taken
                if want > 0:
                    self._take(want)
                    taken += want
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            self.held -= taken
