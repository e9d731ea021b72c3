"""A session handle over the gateway's HTTP API, for the load run's drivers (``surfacelog
run --via http``): the calls an agent loop makes, with the same typed errors a
``SessionHandle`` raises, read back from the problem documents.

``HttpSessions`` holds one ``keepalive.KeepAliveClient`` (its connections) and the shard
map (to name each session's shard in the figures); ``HttpSession`` is one session's
handle. Under the load run a driver spent about 3.7 ms of CPU per request in httpx (its
transport layers: httpcore, anyio, h11), more than the gateway itself; aiohttp, used
next, still ran several layers of Python per request (see ``keepalive``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import Any, Final
from urllib.parse import quote

import msgspec
import ray
from msgspec import UNSET

from surfacelog.actors.config import HostingConfig
from surfacelog.actors.driver import DriverActor, DriverHandle, DriverProgress
from surfacelog.actors.protocol import Conflict, LoggedEvents, SessionUnavailable
from surfacelog.actors.script import ScriptConfig
from surfacelog.gateway.errors import GatewayError
from surfacelog.gateway.keepalive import HttpReply, KeepAliveClient
from surfacelog.schema.codec import JSON_ENCODER, decode_event
from surfacelog.schema.errors import SurfacelogError
from surfacelog.schema.events import Event
from surfacelog.session import AppendSpec, SurfaceSnapshot
from surfacelog.session.context import DEFAULT_PLUGIN
from surfacelog.store.errors import CommitFailed
from surfacelog.store.shardmap import Shard, ShardMap

PREFIX: Final = "/v1/sessions"
TIMEOUT_S: Final = 120.0


class _EventsReply(msgspec.Struct):
    events: list[msgspec.Raw]
    next: int


class _SurfaceReply(msgspec.Struct, rename="camel"):
    nodes: list[int]
    replace_generation: int
    length: int


_BY_SLUG: Final[dict[str, type[SurfacelogError]]] = {
    "conflict": Conflict,
    "unavailable": SessionUnavailable,
    "outcome-unknown": SessionUnavailable,
    "commit-failed": CommitFailed,
}


def _raise_problem(reply: HttpReply) -> None:
    """Raise the typed error of a problem reply (any status >= 400)."""
    if reply.status < 400:
        return
    try:
        body = msgspec.json.decode(reply.content)
    except msgspec.DecodeError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    slug = str(body.get("type", "")).rpartition(":")[2] or "http"
    detail = str(body.get("detail", reply.content[:200].decode("utf-8", "replace")))
    kind = _BY_SLUG.get(slug)
    if kind is not None:
        raise kind(detail)
    raise GatewayError(reply.status, slug, detail)


def _spec_json(spec: AppendSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"type": spec.type}
    for key, value in (("data", spec.data), ("surfaceOp", spec.surface_op),
                       ("sourceEventSeqs", spec.source_event_seqs),
                       ("ignorable", spec.ignorable)):
        if value is not UNSET:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def _decoded(raws: list[msgspec.Raw]) -> list[Event]:
    return [decode_event(bytes(raw)) for raw in raws]


def _events(content: bytes) -> list[Event]:
    return _decoded(msgspec.json.decode(content, type=_EventsReply).events)


def _logged(content: bytes, count: int) -> LoggedEvents:
    """The reply of an append of ``count`` events: their seqs at once (``next`` is the
    seq after the last), the events decoded on first use. A driver reads only the seqs:
    decoding every event it sent was a fifth of its Python samples (py-spy). Raises
    ``ValueError`` when the reply holds another count, ``msgspec.DecodeError`` when it
    is not such a reply."""
    reply = msgspec.json.decode(content, type=_EventsReply)
    if len(reply.events) != count:
        raise ValueError(f"an append of {count} events was answered with "
                         f"{len(reply.events)}")
    return LoggedEvents.made_later(reply.next - count, count,
                                   partial(_decoded, reply.events))


class HttpSessions:
    """The gateway at ``url``, reached with ``token``; what ``HttpSession`` handles
    share. ``resent`` and ``retry_for_s`` mirror ``Client``'s (the gateway's own client
    resends to restarting actors; these count what the driver sends again)."""

    def __init__(self, url: str, token: str, shards: ShardMap) -> None:
        self._http = KeepAliveClient(url, {"Authorization": f"Bearer {token}",
                                           "Content-Type": "application/json"}, TIMEOUT_S)
        self.shards = shards
        self.resent = 0
        self.retry_for_s = TIMEOUT_S

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      params: dict[str, int] | None = None) -> HttpReply:
        """Send one request; its status and body (read whole). Raises what
        ``KeepAliveClient.request`` raises."""
        return await self._http.request(method, path, body=body, params=params)

    async def shard_of(self, session_id: str) -> Shard:
        """The session's home shard (the run's sessions are created on their homes)."""
        return self.shards.home(session_id)

    async def create(self, session_id: str) -> bool:
        """Create ``session_id``; False when it is stored already."""
        reply = await self.request("POST", PREFIX,
                                   body=JSON_ENCODER.encode({"id": session_id}))
        if reply.status == 409:
            return False
        _raise_problem(reply)
        return True

    def session(self, session_id: str) -> HttpSession:
        return HttpSession(self, session_id)

    async def close(self) -> None:
        await self._http.close()


class HttpSession:
    """One session through the gateway: the calls ``actors.driver.SessionDriver``
    makes."""

    def __init__(self, client: HttpSessions, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self._path = f"{PREFIX}/{quote(session_id, safe='')}"

    async def append_batch(self, specs: Sequence[AppendSpec],
                           expected_seq: int | None = None) -> LoggedEvents:
        body: dict[str, Any] = {"events": [_spec_json(s) for s in specs]}
        if expected_seq is not None:
            body["expectedSeq"] = expected_seq
        reply = await self.client.request("POST", f"{self._path}/events:batch",
                                          body=JSON_ENCODER.encode(body))
        _raise_problem(reply)
        return _logged(reply.content, len(specs))

    async def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        params: dict[str, int] = {"since": since_seq}
        if limit is not None:
            params["limit"] = limit
        reply = await self.client.request("GET", f"{self._path}/events", params=params)
        _raise_problem(reply)
        return _events(reply.content)

    async def surface(self) -> SurfaceSnapshot:
        reply = await self.client.request("GET", f"{self._path}/surface")
        _raise_problem(reply)
        got = msgspec.json.decode(reply.content, type=_SurfaceReply)
        return SurfaceSnapshot(tuple(got.nodes), got.replace_generation, got.length)

    async def set_context(self, body: str | dict[str, Any], *,
                          plugin: str = DEFAULT_PLUGIN) -> Event | None:
        request: dict[str, Any] = ({"message": body} if isinstance(body, dict)
                                   else {"text": body, "plugin": plugin})
        reply = await self.client.request("POST", f"{self._path}/context",
                                          body=JSON_ENCODER.encode(request))
        _raise_problem(reply)
        events = _events(reply.content)
        return events[0] if events else None

    async def flush(self) -> None:
        """Nothing to wait for: the gateway's appends are durable (``run --via http``
        refuses buffered durability)."""


class HttpDriverActor(DriverActor):
    """A driver (``actors.driver.DriverActor``) whose sessions are reached through the
    gateway at ``url`` instead of their actors: the same scripted turns, over HTTP."""

    def __init__(self, hosting: HostingConfig, config: ScriptConfig, url: str, token: str,
                 retry_for_s: float | None = None) -> None:
        self._http = HttpSessions(url, token, hosting.shards)
        self._setup(self._http, config, retry_for_s)

    def handle(self, session_id: str) -> DriverHandle:
        return self._http.session(session_id)

    async def run(self, session_ids: Sequence[str], turns: int,
                  started: float | None = None) -> DriverProgress:
        """Create the sessions that are not stored yet (``POST /v1/sessions``), then
        drive them (``DriverActor.run``)."""
        await asyncio.gather(*(self._http.create(sid) for sid in session_ids))
        return await super().run(session_ids, turns, started)


RemoteHttpDriver: Any = ray.remote(HttpDriverActor)


__all__ = ["GatewayError", "HttpDriverActor", "HttpSession", "HttpSessions",
           "RemoteHttpDriver"]
