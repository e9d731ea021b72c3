"""The gateway's hot routes served without FastAPI's per-request machinery
(``DirectRoutes``).

Measured under ``surfacelog run --via http`` (py-spy of the replica): of the replica's
time on an append request, FastAPI's dependency solving took about a third and the
layers between it and uvicorn (exception handling, exit stacks, routing) another third;
the route's own work (read and decode the body, send the coalesced call, encode the
answer) about a quarter. The routes an agent calls again and again depend on the
session id alone, so they are served here: the route is found by its own ``matches``
(path and method, as the router would), its arguments are what its dependency would
resolve (``arguments``: the bearer token's grant, then the session id it may reach),
its endpoint is called as it is, and a typed error is answered as the app's exception
handlers answer it (``answer``). Every other request goes on to the app unchanged.

It sits inside the app's ``BodyBudget`` and the outer layers FastAPI adds, so bodies are
budgeted and an unexpected exception reaches uvicorn (a 500, logged) as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ray.exceptions import RayActorError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route

from surfacelog.gateway.budget import App, Receive, Scope, Send
from surfacelog.schema.errors import SurfacelogError

Arguments = Callable[[Request], dict[str, Any]]
Answer = Callable[[Request, SurfacelogError | RayActorError], Response]


class DirectRoutes:
    """ASGI middleware around ``app``: a request that one of ``routes`` matches fully
    is served by calling that route's endpoint with ``arguments(request)``; anything
    else goes on to ``app``. ``served`` counts the requests served directly.

    Raises ``ValueError`` when a route is not a plain ``Route`` or its endpoint takes
    a parameter that ``arguments`` does not give (``parameters``): a route whose
    dependencies changed must not be served with the old ones."""

    def __init__(self, app: App, *, routes: Sequence[BaseRoute], arguments: Arguments,
                 parameters: frozenset[str], answer: Answer) -> None:
        self.app = app
        self._routes: list[tuple[Route, frozenset[str]]] = []
        for route in routes:
            if not isinstance(route, Route):
                raise ValueError(f"{route!r} is not a Route with an endpoint")
            names = frozenset(inspect.signature(route.endpoint).parameters)
            if not names <= parameters:
                raise ValueError(f"route {route.path}: its endpoint takes {sorted(names)}, "
                                 f"served directly with {sorted(parameters)} only")
            self._routes.append((route, names))
        self._arguments = arguments
        self._answer = answer
        self.served = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route, names in self._routes:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    self.served += 1
                    await self._serve(route.endpoint, names, {**scope, **child}, receive,
                                      send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, endpoint: Callable[..., Awaitable[Response]],
                     names: frozenset[str], scope: Scope, receive: Receive,
                     send: Send) -> None:
        request = Request(scope, receive)
        try:
            given = self._arguments(request)
            response = await endpoint(**{name: given[name] for name in names})
        except (SurfacelogError, RayActorError) as exc:
            response = self._answer(request, exc)
        await response(scope, receive, send)


__all__ = ["DirectRoutes"]
