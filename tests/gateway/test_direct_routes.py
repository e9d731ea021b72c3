"""The routes ``gateway.direct.DirectRoutes`` serves answer exactly as FastAPI serving
them does: the same requests, in the same order, to the gateway's app built with and
without the direct routes (each on loopback over a deployment of its own on the test
session's Ray) get the same status, headers and body, refusals included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.routing import Route

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.gateway.app import build_app
from surfacelog.gateway.auth import AuthConfig, parse_grants
from surfacelog.gateway.direct import DirectRoutes
from surfacelog.gateway.ingress import AsgiThread
from surfacelog.store.shardmap import ShardMap

from support.ports import free_port

pytestmark = pytest.mark.usefixtures("ray_local")

FULL = "direct-full-token-0123456789"
LIMITED = "direct-limited-token-0123456789"
BUDGET = 50_000
HEADERS = ("allow", "content-type", "location", "retry-after", "www-authenticate")


def _direct_layer(app: FastAPI) -> DirectRoutes | None:
    layer: Any = app.middleware_stack
    while layer is not None and not isinstance(layer, DirectRoutes):
        layer = getattr(layer, "app", None)
    return layer


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[bool, tuple[str, FastAPI]]]:
    """Two gateways, ``{direct: (url, app)}``, each over its own deployment."""
    auth = AuthConfig(parse_grants(f"{FULL}\n{LIMITED} lim-\n", "test"))
    clients: list[Client] = []
    servers: list[AsgiThread] = []
    out: dict[bool, tuple[str, FastAPI]] = {}
    try:
        for direct in (True, False):
            clients.append(connect(config=HostingConfig(
                ShardMap.single(str(tmp_path / f"direct-{direct}.db")),
                placement="packed", packs=1)))
            app = build_app(clients[-1], auth, body_budget=BUDGET, direct=direct)
            port = free_port()
            servers.append(AsgiThread(app, "127.0.0.1", port))
            servers[-1].ready(30.0)
            out[direct] = (f"http://127.0.0.1:{port}", app)
        yield out
    finally:
        for server in servers:
            server.stop(10.0)
        for client in clients:
            client.shutdown()


def _scrub(value: Any) -> Any:
    """``value`` without the events' and the header's times (the two deployments log
    at other instants)."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in ("time", "createdAt")}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _note(k: int) -> dict[str, Any]:
    return {"type": "x-test/note", "data": {"k": k}, "ignorable": True}


def _user(k: int) -> dict[str, Any]:
    return {"type": "user/message", "surfaceOp": "append",
            "data": {"id": f"u-{k}", "role": "user", "source": {"kind": "user"},
                     "content": [{"type": "text", "text": f"hello {k}"}]}}


FULL_AUTH = {"Authorization": f"Bearer {FULL}"}
S = "/v1/sessions/d-1"
# (method, path, headers, body, the status expected, served directly)
REQUESTS: list[tuple[str, str, dict[str, str], Any, int, bool]] = [
    ("POST", "/v1/sessions", FULL_AUTH, {"id": "d-1"}, 201, False),
    ("POST", f"{S}/events:batch", FULL_AUTH, {"events": [_user(0), _note(1)],
                                              "expectedSeq": 0}, 200, True),
    ("POST", f"{S}/events", FULL_AUTH, _note(2), 200, True),
    ("POST", f"{S}/events", FULL_AUTH, {**_note(3), "expectedSeq": 3}, 200, True),
    # A resend of what already landed, then an expectedSeq that is taken by another.
    ("POST", f"{S}/events", FULL_AUTH, {**_note(3), "expectedSeq": 3}, 200, True),
    ("POST", f"{S}/events:batch", FULL_AUTH, {"events": [_note(9)], "expectedSeq": 1},
     409, True),
    ("POST", f"{S}/events", {}, _note(4), 401, True),
    ("POST", f"{S}/events", {"Authorization": f"Basic {FULL}"}, _note(4), 401, True),
    ("POST", f"{S}/events", {"Authorization": "Bearer not-a-token-0123456789"},
     _note(4), 401, True),
    ("POST", f"{S}/events", {"Authorization": f"Bearer {LIMITED}"}, _note(4), 403, True),
    ("GET", f"{S}/surface", {"Authorization": f"Bearer {LIMITED}"}, None, 403, True),
    ("POST", "/v1/sessions/sp%20ace/events", FULL_AUTH, _note(4), 400, True),
    ("POST", "/v1/sessions/-dash/events:batch", {}, _note(4), 401, True),
    ("POST", "/v1/sessions/d-missing/events", FULL_AUTH, _note(4), 404, True),
    ("POST", f"{S}/events", FULL_AUTH, b"{not json", 400, True),
    ("POST", f"{S}/events", FULL_AUTH, b'{"type": "x-a", "type": "x-b"}', 400, True),
    ("POST", f"{S}/events:batch", FULL_AUTH, {"events": []}, 400, True),
    ("POST", f"{S}/events", FULL_AUTH, {"type": "tool/result", "surfaceOp": "append",
                                        "data": {}}, 422, True),
    ("POST", f"{S}/events", FULL_AUTH, {**_note(5), "data": {"t": "x" * BUDGET}}, 503,
     True),
    ("POST", f"{S}/context", FULL_AUTH, {"text": "the workspace"}, 200, True),
    ("POST", f"{S}/context", FULL_AUTH, {"text": "the workspace"}, 200, True),
    ("GET", f"{S}/surface", FULL_AUTH, None, 200, True),
    ("GET", f"{S}/header", FULL_AUTH, None, 200, True),
    ("POST", f"{S}/compact", FULL_AUTH, {
        "compactionId": "c-1", "generation": 99, "shadowed": [0],
        "summary": [{"type": "text", "text": "s"}], "shadowedTokenCount": 1,
        "checkpointId": "k-1"}, 409, True),
    ("POST", f"{S}/prune", FULL_AUTH, {
        "generation": 0, "target": 0, "content": [{"type": "text", "text": "t"}],
        "shadowedTokenCount": 1}, 409, True),
    ("POST", f"{S}/prune", FULL_AUTH, {"generation": 0}, 400, True),
    # Not served directly: another method, a path no direct route has, query parameters.
    ("GET", f"{S}/events:batch", FULL_AUTH, None, 405, False),
    ("PUT", f"{S}/surface", FULL_AUTH, None, 405, False),
    ("GET", f"{S}/surface/", FULL_AUTH, None, 307, False),
    ("POST", "/v1/sessions/d%2F1/events", FULL_AUTH, _note(6), 404, False),
    ("GET", f"{S}/events?since=-1", FULL_AUTH, None, 400, False),
    ("GET", f"{S}/events?since=0", FULL_AUTH, None, 200, False),
]


async def _ask(http: httpx.AsyncClient, method: str, path: str, headers: dict[str, str],
               body: Any) -> tuple[int, dict[str, str | None], Any]:
    content = body if isinstance(body, bytes) else None
    r = await http.request(method, path, headers=headers, content=content,
                           json=None if body is None or content is not None else body)
    shown = {h: r.headers.get(h) for h in HEADERS}
    if shown["location"] is not None:  # a redirect names the server's own port
        shown["location"] = shown["location"].removeprefix(str(http.base_url).rstrip("/"))
    parsed = r.json() if "json" in (shown["content-type"] or "") else r.content
    return r.status_code, shown, _scrub(parsed)


async def test_the_direct_routes_answer_as_fastapi_does(
        served: dict[bool, tuple[str, FastAPI]]) -> None:
    answers: dict[bool, list[tuple[int, dict[str, str | None], Any]]] = {}
    for direct, (url, _) in served.items():
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     follow_redirects=False) as http:
            answers[direct] = [await _ask(http, method, path, headers, body)
                               for method, path, headers, body, _, _ in REQUESTS]
    for n, (method, path, _, _, status, _) in enumerate(REQUESTS):
        assert answers[True][n] == answers[False][n], (method, path)
        assert answers[True][n][0] == status, (method, path, answers[True][n])
    layer = _direct_layer(served[True][1])
    assert layer is not None and _direct_layer(served[False][1]) is None
    assert layer.served == sum(1 for *_, direct in REQUESTS if direct)


def test_a_route_whose_endpoint_needs_more_is_refused() -> None:
    async def endpoint(session_id: str, request: Request, limit: int) -> Response:
        raise AssertionError("never called")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("never called")

    with pytest.raises(ValueError, match="limit"):
        DirectRoutes(app, routes=[Route("/x/{session_id}", endpoint)],
                     arguments=lambda r: {}, parameters=frozenset({"session_id", "request"}),
                     answer=lambda r, e: Response())
