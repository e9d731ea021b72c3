"""The request bodies a replica holds at once are bounded across requests
(``gateway.budget.BodyBudget``): the gateway's app, served by uvicorn on loopback
(``AsgiThread``) over a client of the test session's Ray, with a small budget."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.gateway.app import build_app
from surfacelog.gateway.auth import AuthConfig, parse_grants
from surfacelog.gateway.budget import BodyBudget
from surfacelog.gateway.ingress import AsgiThread
from surfacelog.store.shardmap import ShardMap

from support.ports import free_port

pytestmark = pytest.mark.usefixtures("ray_local")

TOKEN = "budget-token-0123456789abcdef"
BUDGET = 100_000



@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, FastAPI]]:
    client: Client = connect(config=HostingConfig(ShardMap.single(str(tmp_path / "b.db")),
                                                  placement="packed", packs=1))
    port = free_port()
    app = build_app(client, AuthConfig(parse_grants(TOKEN, "test")), body_budget=BUDGET)
    server = AsgiThread(app, "127.0.0.1", port)
    server.ready(30.0)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.stop(10.0)
        client.shutdown()


def _batch(size: int) -> bytes:
    """An append batch body of about ``size`` bytes."""
    text = "x" * max(0, size - 120)
    return json.dumps({"events": [{"type": "x-test/note", "data": {"t": text},
                                   "ignorable": True}]}).encode()


def _held(app: FastAPI) -> int:
    """The bytes of request bodies the app's budget holds now."""
    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, BodyBudget):
        layer = getattr(layer, "app", None)
    assert layer is not None
    return layer.held


async def test_bodies_past_the_budget_are_refused_early_and_the_rest_served(
        served: tuple[str, FastAPI]) -> None:
    base, app = served
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
        assert (await http.post("/v1/sessions", json={"id": "b-1"})).status_code == 201
        url = "/v1/sessions/b-1/events:batch"
        # One declared body over the whole budget: refused before it is read.
        r = await http.post(url, content=_batch(BUDGET + 10_000))
        assert r.status_code == 503 and r.json()["type"].endswith(":busy"), r.text
        assert "retry-after" in r.headers
        # A streamed body holds its bytes while it is open: a second one that would
        # go past the budget meanwhile is refused; once the first is done, it fits.
        release = asyncio.Event()
        first_part = _batch(70_000)

        async def slow_body() -> AsyncIterator[bytes]:
            yield first_part[:60_000]
            await release.wait()
            yield first_part[60_000:]

        held = asyncio.ensure_future(http.post(url, content=slow_body()))
        for _ in range(600):  # until the server holds the first part of that body
            if _held(app) >= 60_000:
                break
            await asyncio.sleep(0.05)
        assert _held(app) >= 60_000 and not held.done()
        r = await http.post(url, content=_batch(50_000))
        assert r.status_code == 503 and r.json()["type"].endswith(":busy"), r.text
        assert "retry-after" in r.headers
        release.set()
        assert (await held).status_code == 200
        r = await http.post(url, content=_batch(50_000))
        assert r.status_code == 200, r.text
        events = (await http.get("/v1/sessions/b-1/events")).json()["events"]
    # Every body accepted was appended whole; the refused ones left nothing.
    assert all(e["type"] == "x-test/note" for e in events)
