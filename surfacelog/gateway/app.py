"""The gateway's routes: a FastAPI app over one ``Client`` (``build_app``).

Every route needs a bearer token (``auth``), checks the session id it names (``ids``)
and the token's prefixes before anything else, and answers errors as problem documents
(``problems``). Bodies are read and written with msgspec (``wire``); the OpenAPI
document is generated from the routes and the bodies' schemas (``openapi_document``).
The routes whose one dependency is the session id (appends, context, surface, header,
compact, prune: nearly every request of an agent) are served by ``direct.DirectRoutes``,
that dependency resolved by hand and FastAPI's per-request machinery skipped.

Sessions are never created by a read or an append: a session the gateway has not seen
stored is looked up first (``Client.locate``) and is a 404 when missing; ids found are
remembered (a stored session is never removed), so that lookup happens once per id.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Annotated, Any, Final

from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ray.exceptions import RayActorError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from surfacelog.actors.client import Client, SessionHandle
from surfacelog.gateway import wire
from surfacelog.gateway.auth import AuthConfig, Grant
from surfacelog.gateway.budget import BODY_BUDGET_BYTES, BodyBudget
from surfacelog.gateway.direct import DirectRoutes
from surfacelog.gateway.errors import BadRequest, BodyTooLarge, Forbidden, OutcomeUnknown
from surfacelog.gateway.ids import ID_PATTERN, MAX_ID_LENGTH, check_id, new_id, valid_id
from surfacelog.gateway.problems import (
    PROBLEM_MEDIA_TYPE,
    ProblemReply,
    problem,
    problem_for,
)
from surfacelog.schema.codec import JSON_ENCODER
from surfacelog.schema.errors import SeqOutOfRange, SurfacelogError
from surfacelog.schema.events import MAX_SAFE_INT
from surfacelog.schema.header import header_to_json
from surfacelog.store.errors import SessionExists, SessionNotFound

API_VERSION: Final = "1"
TITLE: Final = "surfacelog gateway"
PAGE: Final = 50
MAX_PAGE: Final = 1_000
EVENTS_PAGE: Final = 1_000
MAX_EVENTS_PAGE: Final = 10_000
EXPORT_PAGE: Final = 2_000
FOLLOW_POLL_S: Final = 0.2
FOLLOW_KEEPALIVE_S: Final = 15.0
FOLLOW_DEFAULT_S: Final = 300.0
FOLLOW_MAX_S: Final = 3_600.0
_KNOWN_KEPT: Final = 100_000
MAX_BODY_BYTES: Final = 32 * 1024 * 1024

log: Final = logging.getLogger("surfacelog.gateway")
"""The gateway layer's logger: answers of 5xx (method, path, problem type; never a token
or a body)."""

_bearer = HTTPBearer(auto_error=False, description="a configured gateway token")


def _schema(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json_body(name: str, required: bool = True) -> dict[str, Any]:
    return {"requestBody": {"required": required,
                            "content": {"application/json": {"schema": _schema(name)}}}}


_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    status: {"description": description,
             "content": {PROBLEM_MEDIA_TYPE: {"schema": _schema("Problem")}}}
    for status, description in (
        (400, "invalid session id or body"), (401, "no or wrong bearer token"),
        (403, "the token may not reach this session"), (404, "unknown session"),
        (409, "conflict: expectedSeq taken, stale generation, existing session"),
        (413, "the body is too large"),
        (422, "refused by the session: the rule, event type and seq"),
        (503, "the session or its shard is unavailable; retry after Retry-After"))
}


def _ok(name: str, status: int = 200, media: str = "application/json",
        description: str = "OK") -> dict[int | str, dict[str, Any]]:
    content = {media: {"schema": _schema(name)}} if name else {media: {}}
    return {status: {"description": description, "content": content}, **_ERRORS}


def _json(value: Any, status: int = 200) -> Response:
    return Response(JSON_ENCODER.encode(value), status_code=status,
                    media_type="application/json")


def _problem_response(reply: ProblemReply) -> Response:
    return Response(JSON_ENCODER.encode(reply.body), status_code=reply.status,
                    headers=reply.headers, media_type=PROBLEM_MEDIA_TYPE)


def answer(request: Request, exc: SurfacelogError | RayActorError) -> Response:
    """The problem response to a typed error (a 5xx is logged: method, path, type)."""
    reply = problem_for(exc)
    if reply.status >= 500:
        log.warning("%s %s: %d %s (%s)", request.method, request.url.path,
                    reply.status, reply.body["type"], type(exc).__name__)
    return _problem_response(reply)


def grant_for(auth: AuthConfig, request: Request) -> Grant:
    """The grant of ``request``'s bearer token; raises ``Unauthorized``."""
    return auth.authorize(request.headers.get("authorization"))


async def grant_of(request: Request, credentials: Annotated[
        HTTPAuthorizationCredentials | None, Security(_bearer)]) -> Grant:
    """The request's grant (its bearer token's); raises ``Unauthorized``."""
    return grant_for(request.app.state.auth, request)


Granted = Annotated[Grant, Depends(grant_of)]


def _allowed_methods(request: Request) -> list[str]:
    """The methods of every route whose path matches the request's."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


def allowed(grant: Grant, session_id: str) -> str:
    """``session_id`` when it is valid and ``grant`` reaches it; raises
    ``InvalidSessionId``, ``Forbidden``."""
    check_id(session_id)
    if not grant.allows(session_id):
        raise Forbidden("this token may not reach that session")
    return session_id


async def session_id_of(session_id: str, grant: Granted) -> str:
    return allowed(grant, session_id)


SessionId = Annotated[str, Depends(session_id_of)]


def _is_number(text: str) -> bool:
    """``text`` is a decimal number ``int`` reads (``str.isdigit`` alone also accepts
    digits such as ``²`` that ``int`` refuses)."""
    return text.isascii() and text.isdigit()


async def read_body(request: Request, empty: bytes = b"") -> bytes:
    """The request's body (``empty`` when there is none), read up to
    ``MAX_BODY_BYTES``. Raises ``BodyTooLarge``."""
    declared = request.headers.get("content-length")
    if declared is not None and _is_number(declared) and int(declared) > MAX_BODY_BYTES:
        raise BodyTooLarge(f"a request body is at most {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge(f"a request body is at most {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks) or empty


class Sessions:
    """The client, and the ids it has seen stored."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._known: OrderedDict[str, None] = OrderedDict()

    def remember(self, session_id: str) -> None:
        self._known[session_id] = None
        self._known.move_to_end(session_id)
        while len(self._known) > _KNOWN_KEPT:
            self._known.popitem(last=False)

    async def stored(self, session_id: str) -> bool:
        if session_id in self._known:
            return True
        _, stored = await self.client.locate(session_id)
        if stored:
            self.remember(session_id)
        return stored

    async def existing(self, session_id: str) -> SessionHandle:
        """The handle of a stored session. Raises ``SessionNotFound``."""
        if not await self.stored(session_id):
            raise SessionNotFound(f"session {session_id!r} is not stored")
        return self.client.session(session_id)


def build_app(client: Client, auth: AuthConfig, *,
              body_budget: int = BODY_BUDGET_BYTES, direct: bool = True) -> FastAPI:
    """The gateway's FastAPI app over ``client``, guarded by ``auth``, holding at most
    ``body_budget`` bytes of request bodies at once (``budget.BodyBudget``). ``direct``:
    the routes whose one dependency is ``SessionId`` are served by
    ``direct.DirectRoutes``; without it, by FastAPI as every other route (what the tests
    check the direct path against)."""
    app = FastAPI(title=TITLE, version=API_VERSION, openapi_url=None, docs_url=None,
                  redoc_url=None,
                  description="Event-sourced agent sessions over HTTP: append events, "
                              "read the surface and messages, compact, prune, fork, "
                              "export and follow. JSON is DeepSeek Harness's (camelCase).")
    sessions = Sessions(client)
    app.state.auth = auth
    document: list[dict[str, Any]] = []  # the OpenAPI document, made on first request

    # -- errors --------------------------------------------------------------------------

    @app.exception_handler(SurfacelogError)
    async def on_error(request: Request, exc: SurfacelogError) -> Response:
        return answer(request, exc)

    @app.exception_handler(RayActorError)
    async def on_actor_error(request: Request, exc: RayActorError) -> Response:
        return answer(request, exc)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_: Request, exc: RequestValidationError) -> Response:
        where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                          for e in exc.errors())
        return _problem_response(problem_for(BadRequest(f"invalid request: {where}")))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        reply = problem(exc.status_code, "http", str(exc.detail), str(exc.detail))
        for name, value in (exc.headers or {}).items():
            reply.headers.setdefault(name, value)
        if exc.status_code == 405:
            # Starlette names the methods of the first route whose path matched; a path
            # served by several routes (GET and POST .../events) allows all of theirs.
            reply.headers["Allow"] = ", ".join(_allowed_methods(request))
        return _problem_response(reply)

    # -- sessions ------------------------------------------------------------------------

    @app.get("/openapi.json", tags=["meta"], summary="This API's OpenAPI document",
             responses={200: {"description": "OK"}, **_ERRORS})
    async def openapi(grant: Granted) -> JSONResponse:
        if not document:
            document.append(openapi_document(app))
        return JSONResponse(document[0])

    @app.get("/v1/sessions", tags=["sessions"], summary="List sessions (paginated)",
             response_class=Response, responses=_ok("SessionPage"))
    async def list_sessions(grant: Granted,
                            limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE,
                            after: Annotated[str | None, Query(max_length=128)] = None,
                            ) -> Response:
        infos = [i for i in await client.list_sessions()
                 if valid_id(i.id) and grant.allows(i.id) and (after is None or i.id > after)]
        page = infos[:limit]
        more = len(infos) > limit
        return _json(wire.SessionPage([wire.SessionSummary.of(i) for i in page],
                                      page[-1].id if more else None))

    @app.post("/v1/sessions", tags=["sessions"], summary="Create a session",
              response_class=Response, responses=_ok("Created", 201, description="Created"),
              openapi_extra=_json_body("CreateSession", required=False))
    async def create_session(request: Request, grant: Granted) -> Response:
        body: wire.CreateSession = wire.decode(await read_body(request, b"{}"),
                                               wire.CreateSession)
        session_id = allowed(grant, body.id if body.id is not None else new_id(
            prefix=grant.prefixes[0] if grant.prefixes else "s-"))
        if await sessions.stored(session_id):
            raise SessionExists(f"session {session_id!r} is stored already")
        stats = await client.session(session_id).stats()  # activating creates it
        sessions.remember(session_id)
        return _json(wire.Created(session_id, stats.length), 201)

    # -- appends -------------------------------------------------------------------------

    def unknown_outcome(exc: RayActorError) -> OutcomeUnknown:
        return OutcomeUnknown("the session's actor died during this append, which was "
                              f"sent without expectedSeq: it may have been logged "
                              f"({type(exc).__name__}); read the log, or resend with "
                              "expectedSeq")

    @app.post("/v1/sessions/{session_id}/events", tags=["events"],
              summary="Append one event", response_class=Response,
              responses=_ok("Events"), openapi_extra=_json_body("AppendOne"))
    async def append(session_id: SessionId, request: Request) -> Response:
        body: wire.AppendOne = wire.decode(await read_body(request), wire.AppendOne)
        handle = await sessions.existing(session_id)
        try:
            logged = await handle.append_batch([body.spec()], body.expected_seq)
        except RayActorError as exc:
            raise unknown_outcome(exc) from exc
        return _json(wire.Events(list(logged), logged.seqs.stop))

    @app.post("/v1/sessions/{session_id}/events:batch", tags=["events"],
              summary="Append events, all or nothing", response_class=Response,
              responses=_ok("Events"), openapi_extra=_json_body("AppendBatch"))
    async def append_batch(session_id: SessionId, request: Request) -> Response:
        body: wire.AppendBatch = wire.decode(await read_body(request), wire.AppendBatch)
        specs = wire.batch_specs(body)
        handle = await sessions.existing(session_id)
        try:
            logged = await handle.append_batch(specs, body.expected_seq)
        except RayActorError as exc:
            raise unknown_outcome(exc) from exc
        return _json(wire.Events(list(logged), logged.seqs.stop))

    @app.post("/v1/sessions/{session_id}/context", tags=["events"],
              summary="Set the workspace context (idempotent)", response_class=Response,
              responses=_ok("Events"), openapi_extra=_json_body("ContextBody"))
    async def context(session_id: SessionId, request: Request) -> Response:
        body: wire.ContextBody = wire.decode(await read_body(request), wire.ContextBody)
        payload = body.payload()
        handle = await sessions.existing(session_id)
        event = await handle.set_context(payload)
        if event is None:
            return _json(wire.Events([], (await handle.surface()).length))
        return _json(wire.Events([event], event.seq + 1))

    # -- reads ---------------------------------------------------------------------------

    @app.get("/v1/sessions/{session_id}/events", tags=["events"],
             summary="The log from a seq on", response_class=Response,
             responses=_ok("Events"))
    async def read_events(session_id: SessionId,
                          since: Annotated[int, Query(ge=0)] = 0,
                          limit: Annotated[int, Query(ge=1, le=MAX_EVENTS_PAGE)] = EVENTS_PAGE,
                          ) -> Response:
        handle = await sessions.existing(session_id)
        events = await handle.events(since, limit)
        return _json(wire.Events(events, events[-1].seq + 1 if events else since))

    @app.get("/v1/sessions/{session_id}/surface", tags=["reads"], summary="The surface",
             response_class=Response, responses=_ok("Surface"))
    async def surface(session_id: SessionId) -> Response:
        handle = await sessions.existing(session_id)
        return _json(wire.Surface.of(await handle.surface()))

    @app.get("/v1/sessions/{session_id}/messages", tags=["reads"],
             summary="The derived messages, now or as of a seq", response_class=Response,
             responses=_ok("Messages"))
    async def messages(session_id: SessionId,
                       as_of: Annotated[int | None, Query(
                           alias="asOf", ge=0, le=MAX_SAFE_INT,
                           description="a seq of the log (below its length, else 422 "
                                       "seq-out-of-range): the messages as of that event")
                       ] = None,
                       ) -> Response:
        handle = await sessions.existing(session_id)
        if as_of is not None:
            length = (await handle.surface()).length
            if as_of >= length:  # the log's state, not the request: not a 400
                raise SeqOutOfRange(f"asOf {as_of} is not a seq of this log of {length} "
                                    "events")
        return _json(wire.Messages(await handle.derive_messages(as_of)))

    @app.get("/v1/sessions/{session_id}/header", tags=["reads"],
             summary="The session's header", response_class=Response,
             responses=_ok("SessionHeader"))
    async def header(session_id: SessionId) -> Response:
        handle = await sessions.existing(session_id)
        return _json(await handle.header())

    # -- replaces and forks --------------------------------------------------------------

    @app.post("/v1/sessions/{session_id}/compact", tags=["replace"],
              summary="Compact a range of the surface (generation-checked)",
              response_class=Response, responses=_ok("Events"),
              openapi_extra=_json_body("CompactBody"))
    async def compact(session_id: SessionId, request: Request) -> Response:
        body: wire.CompactBody = wire.decode(await read_body(request), wire.CompactBody)
        handle = await sessions.existing(session_id)
        events = await handle.compact(body.request())
        return _json(wire.Events(events, events[-1].seq + 1 if events else 0))

    @app.post("/v1/sessions/{session_id}/prune", tags=["replace"],
              summary="Shorten a tool result (generation-checked)",
              response_class=Response, responses=_ok("Events"),
              openapi_extra=_json_body("PruneBody"))
    async def prune(session_id: SessionId, request: Request) -> Response:
        body: wire.PruneBody = wire.decode(await read_body(request), wire.PruneBody)
        handle = await sessions.existing(session_id)
        events = await handle.prune(body.request())
        return _json(wire.Events(events, events[-1].seq + 1 if events else 0))

    @app.post("/v1/sessions/{session_id}/fork", tags=["sessions"],
              summary="Fork a child seeded with a prefix of the log",
              response_class=Response, responses=_ok("Created", 201, description="Created"),
              openapi_extra=_json_body("ForkBody", required=False))
    async def fork(session_id: SessionId, grant: Granted, request: Request) -> Response:
        body: wire.ForkBody = wire.decode(await read_body(request, b"{}"), wire.ForkBody)
        child_id = allowed(grant, body.child_id if body.child_id is not None
                           else new_id(session_id))
        handle = await sessions.existing(session_id)
        if await sessions.stored(child_id):
            raise SessionExists(f"session {child_id!r} is stored already")
        child = await handle.fork(body.boundary, child_id)
        sessions.remember(child.session_id)
        return _json(wire.Created(child.session_id, (await child.surface()).length), 201)

    # -- streams -------------------------------------------------------------------------

    @app.get("/v1/sessions/{session_id}/export", tags=["reads"],
             summary="The session as DSH JSONL (streamed)", response_class=StreamingResponse,
             responses=_ok("", media="application/x-ndjson",
                           description="a header line, then one event per line"))
    async def export(session_id: SessionId) -> StreamingResponse:
        handle = await sessions.existing(session_id)
        head = JSON_ENCODER.encode(header_to_json(await handle.header(), dsh_line=True))
        length = (await handle.surface()).length

        async def lines() -> AsyncIterator[bytes]:
            yield head + b"\n"
            seq = 0
            while seq < length:
                events = await handle.events(seq, min(EXPORT_PAGE, length - seq))
                if not events:
                    return
                yield b"".join(JSON_ENCODER.encode(e) + b"\n" for e in events)
                seq = events[-1].seq + 1

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.get("/v1/sessions/{session_id}/follow", tags=["events"],
             summary="Follow new events (server-sent events)",
             response_class=StreamingResponse,
             responses=_ok("", media="text/event-stream",
                           description="one 'event' per logged event (id: its seq, data: "
                                       "the event), then one 'end' when the time is up"))
    async def follow(session_id: SessionId, request: Request,
                     since: Annotated[int, Query(ge=0)] = 0,
                     timeout: Annotated[float, Query(gt=0, le=FOLLOW_MAX_S)] = FOLLOW_DEFAULT_S,
                     ) -> StreamingResponse:
        handle = await sessions.existing(session_id)
        last = request.headers.get("last-event-id")
        if last is not None:
            if not _is_number(last):
                raise BadRequest("Last-Event-ID is not a seq")
            since = int(last) + 1
        return StreamingResponse(_follow(handle, request, since, timeout),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    if direct:
        # The routes whose only dependency is ``SessionId``: nearly every request of an
        # agent, or of a compactor or pruner over HTTP. (``read_events`` and ``messages``
        # validate query parameters, ``fork`` needs the grant: FastAPI serves them.)
        served_directly = (append, append_batch, context, surface, header, compact, prune)

        def arguments(request: Request) -> dict[str, Any]:
            # What ``SessionId`` resolves to, in the order FastAPI resolves it.
            return {"session_id": allowed(grant_for(auth, request),
                                          request.path_params["session_id"]),
                    "request": request}

        app.add_middleware(DirectRoutes, routes=[
            r for r in app.routes if getattr(r, "endpoint", None) in served_directly
        ], arguments=arguments, parameters=frozenset({"session_id", "request"}),
            answer=answer)
    # Added last, so outside the direct routes too.
    app.add_middleware(BodyBudget, budget=body_budget)
    return app


async def _follow(handle: SessionHandle, request: Request, since: int,
                  timeout_s: float) -> AsyncIterator[bytes]:
    """Server-sent events: each new event (``id`` its seq), a comment now and then to
    keep the connection open, and an ``end`` event after ``timeout_s``. Stops when the
    client disconnects (Serve cancels the request, or the disconnect is seen)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    quiet_since = loop.time()
    seq = since
    while loop.time() < deadline:
        if await request.is_disconnected():
            return
        events = await handle.events(seq, EVENTS_PAGE)
        if events:
            yield b"".join(b"id: %d\nevent: event\ndata: %s\n\n"
                           % (e.seq, JSON_ENCODER.encode(e)) for e in events)
            seq = events[-1].seq + 1
            quiet_since = loop.time()
            continue
        if loop.time() - quiet_since >= FOLLOW_KEEPALIVE_S:
            yield b": keepalive\n\n"
            quiet_since = loop.time()
        await asyncio.sleep(FOLLOW_POLL_S)
    yield b"event: end\ndata: %s\n\n" % JSON_ENCODER.encode({"next": seq})


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (``build_app``), the bodies' schemas included."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.update(wire.schemas())
    _document_limits(doc)
    return doc


def _document_limits(doc: dict[str, Any]) -> None:
    """State in ``doc`` the limits the routes enforce in code (``ids.check_id``, the
    session's envelope checks) rather than in the body types, so that a client reading
    the document sends nothing it says is valid and the server refuses."""
    session_id = {"type": "string", "pattern": ID_PATTERN, "minLength": 1,
                  "maxLength": MAX_ID_LENGTH}
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                if parameter.get("in") == "path" and parameter.get("name") == "session_id":
                    parameter["schema"] = {**parameter["schema"], **session_id}
    schemas = doc["components"]["schemas"]
    for struct, field in (("CreateSession", "id"), ("ForkBody", "childId")):
        schemas[struct]["properties"][field]["anyOf"] = [session_id, {"type": "null"}]
    # ``shapes.check_envelope``: a type is a non-empty string, ``ignorable`` the literal
    # true; the marker's shape (rule 6.3) and provenance's elements (6.5) are fixed too.
    # (Which types exist, what their data holds, and which seqs a marker or provenance
    # may name in the log as it is now are the session's rules: 422.)
    seq = {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INT}
    for struct in ("EventSpec", "AppendOne"):
        properties = schemas[struct]["properties"]
        properties["type"]["minLength"] = 1
        properties["ignorable"] = {"const": True}
        properties["surfaceOp"] = {"anyOf": [
            {"const": "append"},
            {"type": "object", "required": ["op", "start", "end"],
             "additionalProperties": False,
             "properties": {"op": {"const": "replace"}, "start": seq, "end": seq}}]}
        properties["sourceEventSeqs"] = {"type": "array", "items": seq, "uniqueItems": True}
    # ``session.fork``: a boundary is a seq (INVALID_BOUNDARY, 422, when the log has none
    # such).
    schemas["ForkBody"]["properties"]["boundary"]["anyOf"] = [seq, {"type": "null"}]
    # ``ContextBody.payload``: exactly one of text and message (a null is an absent one).
    schemas["ContextBody"]["oneOf"] = [
        {"required": [given], "properties": {given: {"not": {"type": "null"}},
                                             other: {"type": "null"}}}
        for given, other in (("text", "message"), ("message", "text"))]
