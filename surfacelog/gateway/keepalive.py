"""A small HTTP/1.1 client for the load run's HTTP drivers: keep-alive connections to
one origin, one request in flight per connection, each response parsed by httptools
(llhttp, the parser uvicorn runs on the gateway's side).

Why not aiohttp, which the drivers used before: a driver is the agents' stand-in, not
what is measured, yet on two cores its CPU is taken from the gateway and the session
actors it drives. aiohttp's client runs its request and response through several
layers of Python per request (the session's request builder, the connector's pool, the
payload writer, the stream reader, timers); this does the one thing the drivers need:
write a request to an idle connection and read its reply whole. Three alternating pairs
of ``surfacelog run --via http --mode batch --sessions 50 --turns 20`` (5 December 2026):
the drivers' CPU 0.028-0.031 ms per event against aiohttp's 0.057-0.061, the run's
0.155-0.180 ms against 0.204-0.218 (every process), 1.10-1.25x the events/s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Final, NamedTuple, cast
from urllib.parse import urlencode, urlsplit

import httptools

from surfacelog.gateway.errors import GatewayClosed

LIMIT: Final = 256
"""Connections open at once to the origin, at most (requests beyond wait for one)."""


class HttpReply(NamedTuple):
    """A response: its status and its body, read whole."""

    status: int
    content: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection: ``exchange`` writes a request and waits for its
    response; httptools calls the ``on_*`` methods from ``data_received``."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[HttpReply] | None = None
        self._body: list[bytes] = []
        self.reusable = True

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's, in Ray's actors, is not asyncio's own class).
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(GatewayClosed(f"the gateway's response could not be parsed: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._fail(GatewayClosed(f"the gateway closed the connection"
                                 f"{'' if exc is None else f': {exc}'}"))

    # -- httptools callbacks -----------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        body, self._body = b"".join(self._body), []
        self.reusable = self.reusable and self._parser.should_keep_alive()
        if waiter is None or waiter.done():
            # A response nobody asked for (or one whose request timed out): the
            # connection's request/response pairing is lost.
            self.reusable = False
            self.close()
            return
        waiter.set_result(HttpReply(self._parser.get_status_code(), body))

    # -- the client's side -------------------------------------------------------------

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    async def exchange(self, request: bytes, timeout_s: float) -> HttpReply:
        """Write ``request`` (head and body) and return its response. Raises
        ``GatewayClosed`` when the connection ends first, ``asyncio.TimeoutError`` when
        no response is complete within ``timeout_s`` (the connection is then unusable:
        its late response would answer the next request)."""
        if self._transport is None or self._transport.is_closing():
            raise GatewayClosed("the connection to the gateway is closed")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[HttpReply] = loop.create_future()
        self._waiter = waiter
        # A timer on the future, not asyncio.wait_for, which makes a task per request.
        timer = loop.call_later(timeout_s, self._time_out, timeout_s)
        self._transport.write(request)
        try:
            return await waiter
        finally:
            timer.cancel()

    def _time_out(self, timeout_s: float) -> None:
        self.reusable = False
        self._fail(asyncio.TimeoutError(f"the gateway did not answer within {timeout_s} s"))

    def close(self) -> None:
        self.reusable = False
        if self._transport is not None:
            self._transport.close()


class KeepAliveClient:
    """Requests to the origin of ``url`` (``http://host:port``) with ``headers`` sent on
    each, over at most ``LIMIT`` keep-alive connections; each request fails after
    ``timeout_s``. Raises ``ValueError`` for a URL that is not plain ``http``, and for a
    header that would not be one line of Latin-1 text."""

    def __init__(self, url: str, headers: Mapping[str, str], timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"{url!r}: the load run's HTTP client speaks plain http to an "
                             "origin (http://host:port)")
        self._host = parts.hostname
        self._port = parts.port or 80
        fields = {"Host": parts.netloc, **headers}
        for name, value in fields.items():
            if any(c in f"{name}{value}" for c in "\r\n\0") or ":" in name:
                raise ValueError(f"header {name!r}: a name and a value of one line each")
        try:
            self._fields = "".join(f"{name}: {value}\r\n"
                                   for name, value in fields.items()).encode("latin-1")
        except UnicodeEncodeError as exc:
            raise ValueError(f"headers must be Latin-1 text: {exc}") from None
        self._timeout_s = timeout_s
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None
        self._open: set[_Connection] = set()

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      params: Mapping[str, int] | None = None) -> HttpReply:
        """Send one request and return its response. Raises ``GatewayClosed`` when its
        connection ended before the response was complete, ``TimeoutError`` past
        ``timeout_s``, ``OSError`` when no connection could be opened."""
        target = f"{path}?{urlencode(params)}" if params else path
        payload = body or b""
        request = b"".join((f"{method} {target} HTTP/1.1\r\n".encode("ascii"), self._fields,
                            f"Content-Length: {len(payload)}\r\n\r\n".encode("ascii"),
                            payload))
        if self._slots is None:  # made in the running loop, as asyncio's objects must be
            self._slots = asyncio.Semaphore(LIMIT)
        async with self._slots:
            conn = await self._connection()
            try:
                reply = await conn.exchange(request, self._timeout_s)
            except BaseException:
                self._drop(conn)
                raise
            if conn.reusable:
                self._idle.append(conn)
            else:
                self._drop(conn)
            return reply

    async def _connection(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable:
                return conn
            self._drop(conn)
        _, conn = await asyncio.wait_for(asyncio.get_running_loop().create_connection(
            _Connection, self._host, self._port), self._timeout_s)
        self._open.add(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    async def close(self) -> None:
        """Close every connection."""
        self._idle.clear()
        for conn in list(self._open):
            self._drop(conn)
        await asyncio.sleep(0)  # let the transports run their close callbacks
