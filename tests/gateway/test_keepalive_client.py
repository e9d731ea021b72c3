"""``gateway.keepalive.KeepAliveClient`` against real servers on loopback: uvicorn
serving a small ASGI app (as the gateway's replicas serve theirs), and plain asyncio
servers that misbehave on purpose (a response cut short, an unparseable one)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from surfacelog.gateway.errors import GatewayClosed
from surfacelog.gateway.ingress import AsgiThread
from surfacelog.gateway.keepalive import KeepAliveClient

from support.ports import free_port

HEADERS = {"Authorization": "Bearer t0ken", "Content-Type": "application/json"}
RELEASE = threading.Event()
"""Set at the end of the module: what ``/held`` waits for (a request that times out)."""


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/echo``: the request as JSON (method, path, query, body, its Authorization,
    the client's port: one per connection); ``/chunked``: a body sent in parts, no
    length; ``/close``: answered with ``Connection: close``; ``/held``: answered once
    ``RELEASE`` is set."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"first,", b"second,", b"third"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/held":
        await asyncio.get_running_loop().run_in_executor(None, RELEASE.wait, 60)
    headers = dict(scope["headers"])
    reply = json.dumps({"method": scope["method"], "path": path,
                        "query": scope["query_string"].decode(), "body": body.decode(),
                        "auth": headers.get(b"authorization", b"").decode(),
                        "port": scope["client"][1]}).encode()
    extra = [(b"connection", b"close")] if path == "/close" else []
    await send({"type": "http.response.start", "status": 201 if body else 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(reply)).encode()), *extra]})
    await send({"type": "http.response.body", "body": reply})


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    http = AsgiThread(_app, "127.0.0.1", port)
    http.ready(30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        RELEASE.set()
        assert http.stop(30)


async def test_a_request_reaches_the_server_whole_and_its_reply_comes_back(
        server: str) -> None:
    client = KeepAliveClient(server, HEADERS, 30)
    try:
        reply = await client.request("POST", "/echo", body=b'{"a": 1}',
                                     params={"since": 3, "limit": 10})
        assert reply.status == 201
        got = json.loads(reply.content)
        assert got["method"] == "POST" and got["path"] == "/echo"
        assert got["query"] == "since=3&limit=10" and got["body"] == '{"a": 1}'
        assert got["auth"] == "Bearer t0ken"
        empty = await client.request("GET", "/echo")
        assert empty.status == 200 and json.loads(empty.content)["body"] == ""
    finally:
        await client.close()


async def test_requests_one_after_another_share_one_connection(server: str) -> None:
    client = KeepAliveClient(server, HEADERS, 30)
    try:
        ports = {json.loads((await client.request("GET", "/echo")).content)["port"]
                 for _ in range(20)}
        assert len(ports) == 1
    finally:
        await client.close()


async def test_requests_at_once_each_get_their_own_reply(server: str) -> None:
    client = KeepAliveClient(server, HEADERS, 30)
    try:
        replies = await asyncio.gather(*(client.request("POST", "/echo", body=f"{k}".encode())
                                         for k in range(50)))
        assert [json.loads(r.content)["body"] for r in replies] == [str(k) for k in range(50)]
        # Then, one at a time again: the connections opened are reused.
        ports = {json.loads(r.content)["port"] for r in replies}
        again = {json.loads((await client.request("GET", "/echo")).content)["port"]
                 for _ in range(10)}
        assert again <= ports
    finally:
        await client.close()


async def test_a_chunked_body_is_read_whole(server: str) -> None:
    client = KeepAliveClient(server, HEADERS, 30)
    try:
        reply = await client.request("GET", "/chunked")
        assert reply == (200, b"first,second,third")
        # The connection is still good for the next request.
        assert (await client.request("GET", "/echo")).status == 200
    finally:
        await client.close()


async def test_a_connection_the_server_closes_is_not_used_again(server: str) -> None:
    client = KeepAliveClient(server, HEADERS, 30)
    try:
        first = json.loads((await client.request("GET", "/close")).content)["port"]
        second = json.loads((await client.request("GET", "/echo")).content)["port"]
        assert first != second
    finally:
        await client.close()


async def test_a_request_past_its_timeout_fails_and_its_connection_is_dropped(
        server: str) -> None:
    client = KeepAliveClient(server, HEADERS, 0.5)
    try:
        before = json.loads((await client.request("GET", "/echo")).content)["port"]
        with pytest.raises(asyncio.TimeoutError):
            await client.request("GET", "/held")
        # The held request's reply, when it comes, could not be told from the next
        # one's on that connection: the next request goes on another.
        after = json.loads((await client.request("GET", "/echo")).content)["port"]
        assert after != before
    finally:
        await client.close()


def test_it_runs_on_uvloop_as_in_rays_actors(server: str) -> None:
    """Ray's async actors (the load run's drivers) run on uvloop, whose transports are
    not asyncio's classes."""
    uvloop = pytest.importorskip("uvloop")

    async def twice() -> list[int]:
        client = KeepAliveClient(server, HEADERS, 30)
        try:
            return [json.loads((await client.request("GET", "/echo")).content)["port"]
                    for _ in range(2)]
        finally:
            await client.close()

    loop = uvloop.new_event_loop()
    try:
        first, second = loop.run_until_complete(twice())
    finally:
        loop.close()
    assert first == second


@pytest.fixture
async def broken() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server that answers each connection's first request with the next of
    ``answers`` (set by the test), then closes the connection; or, after an answer
    that says ``Connection: close``, leaves it open, unread, until the client closes
    it."""
    answers: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        answer = answers.pop(0)
        writer.write(answer)
        await writer.drain()
        if b"Connection: close" in answer:
            await reader.read()
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", answers
    finally:
        srv.close()
        await srv.wait_closed()


async def test_a_reply_that_says_close_ends_its_connections_use(
        broken: tuple[str, list[bytes]]) -> None:
    """Even when the server leaves the socket open: a request sent on it again would
    never be answered."""
    url, answers = broken
    answers += [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\none",
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo"]
    client = KeepAliveClient(url, HEADERS, 5)
    try:
        assert await client.request("GET", "/x") == (200, b"one")
        assert await client.request("GET", "/x") == (200, b"two")
    finally:
        await client.close()


async def test_a_response_cut_short_is_an_unknown_outcome(
        broken: tuple[str, list[bytes]]) -> None:
    url, answers = broken
    answers += [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part of it",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    client = KeepAliveClient(url, HEADERS, 30)
    try:
        with pytest.raises(GatewayClosed, match="closed the connection"):
            await client.request("POST", "/x", body=b"{}")
        # The next request opens a connection of its own.
        assert await client.request("POST", "/x", body=b"{}") == (200, b"ok")
    finally:
        await client.close()


async def test_a_response_that_is_not_http_is_refused(
        broken: tuple[str, list[bytes]]) -> None:
    url, answers = broken
    answers.append(b"SSH-2.0-OpenSSH\r\n\r\n")
    client = KeepAliveClient(url, HEADERS, 30)
    try:
        with pytest.raises(GatewayClosed, match="could not be parsed"):
            await client.request("GET", "/x")
    finally:
        await client.close()


async def test_no_server_is_an_os_error() -> None:
    client = KeepAliveClient(f"http://127.0.0.1:{free_port()}", HEADERS, 30)
    with pytest.raises(OSError):
        await client.request("GET", "/x")


@pytest.mark.parametrize("url", ["https://127.0.0.1:1", "http://127.0.0.1:1/base",
                                 "127.0.0.1:1"])
def test_only_a_plain_http_origin_is_taken(url: str) -> None:
    with pytest.raises(ValueError, match="plain http"):
        KeepAliveClient(url, HEADERS, 30)


@pytest.mark.parametrize("headers", [{"X-A": "one\r\nX-Injected: two"}, {"X-A\n": "v"},
                                     {"X-A:": "v"}, {"X-A": "caf\u20ac"}])
def test_a_header_that_is_not_one_latin_1_line_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="header"):
        KeepAliveClient("http://127.0.0.1:1", headers, 30)
