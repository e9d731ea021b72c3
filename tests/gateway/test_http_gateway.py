"""The HTTP gateway, tested as a client would: its real replicas on a loopback port
(once for the module, on the test session's local Ray), spoken to with httpx.

Every endpoint, the error mapping, the auth refusals, retries with ``expectedSeq``,
concurrent appends from several clients, a session actor killed mid-request, server-sent
events, and the streamed export against ``surfacelog export``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psutil
import pytest
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import NAMESPACE, HostingConfig
from surfacelog.gateway.auth import AuthConfig, parse_grants
from surfacelog.gateway.deployment import REPLICA_PREFIX, start_gateway, stop_gateway
from surfacelog.gateway.ids import valid_id
from surfacelog.gateway.openapi import document, render
from surfacelog.gateway.wire import MAX_BATCH
from surfacelog.schema.codec import encode_json
from surfacelog.session import Session
from surfacelog.store.shardmap import ShardMap

from support import paths
from support.ports import free_port

pytestmark = pytest.mark.usefixtures("ray_local")

REPO = paths.REPO
FULL = "full-token-0123456789abcdef"
LIMITED = "limited-token-0123456789abcdef"
PREFIX = "lim-"


@dataclass
class Gateway:
    url: str
    db: Path
    client: Client



@pytest.fixture(scope="module")
def gateway(ray_local: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    db = tmp_path_factory.mktemp("gateway") / "gw.db"
    hosting = HostingConfig(ShardMap.single(str(db)), placement="packed", packs=2)
    auth = AuthConfig(parse_grants(f"{FULL}\n{LIMITED} {PREFIX}\n", "test"))
    client = connect(config=hosting)
    url = start_gateway(hosting, auth, host="127.0.0.1", port=free_port())
    try:
        yield Gateway(url, db, client)
    finally:
        stop_gateway()
        # Resolve the session actors the gateway made, so that shutdown stops them too.
        for info in asyncio.run(client.list_sessions()):
            client.actor_on(client.config.shards.shards[0], info.id)
        client.shutdown()


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120,
                                 headers={"Authorization": f"Bearer {FULL}"}) as c:
        yield c


async def _create(http: httpx.AsyncClient, session_id: str) -> None:
    r = await http.post("/v1/sessions", json={"id": session_id})
    assert r.status_code == 201, r.text
    assert r.json() == {"id": session_id, "length": 0}


def _note(client: int, k: int) -> dict[str, Any]:
    return {"type": "x-test/note", "data": {"client": client, "k": k}, "ignorable": True}


def _specs(session: Session) -> list[dict[str, Any]]:
    """The events of a pure session as append specs (no seq, no time)."""
    out = []
    for event in session.log:
        body = json.loads(encode_json(event))
        del body["seq"], body["time"]
        out.append(body)
    return out


def _conversation() -> Session:
    """turn, two user messages, an assistant calling c1, its result, a user message."""
    s = Session()
    s.append("turn/start", {"turn": 1})
    for k in range(2):
        s.append("user/message", {"id": f"u-{k}", "role": "user", "source": {"kind": "user"},
                                  "content": [{"type": "text", "text": "u" * 400}]},
                 surface_op="append")
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("assistant/message", {
        "turn": 1, "step": 1,
        "message": {"id": "a-1", "role": "assistant",
                    "source": {"kind": "model", "provider": "p", "model": "m"},
                    "content": [{"type": "text", "text": "a" * 100},
                                {"type": "tool-call", "id": "c1", "name": "bash",
                                 "arguments": "{ls}"}]}},
        surface_op="append", source_event_seqs=[])
    s.append("tool/result", {
        "turn": 1, "step": 1,
        "message": {"id": "t-c1", "role": "user", "source": {"kind": "tool", "callId": "c1"},
                    "content": [{"type": "tool-result", "toolCallId": "c1",
                                 "content": [{"type": "text", "text": "r" * 800}]}]}},
        surface_op="append")
    s.append("step/end", {"turn": 1, "step": 1})
    s.append("user/message", {"id": "u-2", "role": "user", "source": {"kind": "user"},
                              "content": [{"type": "text", "text": "u" * 400}]},
             surface_op="append")
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return s


# -- the document, the socket ---------------------------------------------------------

async def test_the_served_openapi_document_is_the_checked_in_one(
        http: httpx.AsyncClient) -> None:
    checked_in = (REPO / "deploy" / "openapi.json").read_text(encoding="utf-8")
    assert render(document()) == checked_in, \
        "regenerate it: python -m surfacelog.gateway.openapi deploy/openapi.json"
    r = await http.get("/openapi.json")
    assert r.status_code == 200
    assert r.json() == json.loads(checked_in)


def test_the_document_states_the_limits_the_server_enforces() -> None:
    """Session ids (path and bodies) and batch sizes: what the document accepts is what
    ``valid_id`` and the batch route accept."""
    import jsonschema

    doc = document()
    parameter = doc["paths"]["/v1/sessions/{session_id}/events"]["post"]["parameters"][0]
    schemas = doc["components"]["schemas"]
    create_id = schemas["CreateSession"]["properties"]["id"]["anyOf"][0]
    for candidate in ["a", "A.b_c-9", "x" * 128, "x" * 129, "-lead", "sp ace", "ünï",
                      "semi;colon", "", "tail\n"]:
        for schema in (parameter["schema"], create_id):
            # OpenAPI patterns are ECMA-262, where $ is the end of the input; Python's
            # re (which jsonschema uses) lets $ match before a final newline too.
            ecma = {**schema, "pattern": schema["pattern"].removesuffix("$") + r"(?![\s\S])"}
            documented = jsonschema.Draft202012Validator(ecma).is_valid(candidate)
            assert documented == valid_id(candidate), (candidate, schema)
    events = schemas["AppendBatch"]["properties"]["events"]
    assert (events["minItems"], events["maxItems"]) == (1, MAX_BATCH)


async def test_a_method_a_route_lacks_is_405_with_allow(http: httpx.AsyncClient) -> None:
    for method, path, allowed_methods in (("DELETE", "/v1/sessions", {"GET", "POST"}),
                                          ("PUT", "/v1/sessions/s-1/events", {"GET", "POST"})):
        r = await http.request(method, path)
        assert r.status_code == 405, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert {m.strip() for m in r.headers["allow"].split(",")} == allowed_methods


async def test_create_without_a_body_is_documented_as_optional(
        http: httpx.AsyncClient) -> None:
    """A create with no body makes a session with a new id (what the README promises):
    the document says the body is optional, as the server treats it."""
    operation = document()["paths"]["/v1/sessions"]["post"]
    assert operation["requestBody"]["required"] is False
    r = await http.post("/v1/sessions")
    assert r.status_code == 201 and r.json()["length"] == 0


async def test_fork_without_a_body_is_documented_as_optional(
        http: httpx.AsyncClient) -> None:
    """A fork with no body forks the whole log under a derived id: the document says
    the body is optional (schemathesis's negative_data_rejection found it required)."""
    operation = document()["paths"]["/v1/sessions/{session_id}/fork"]["post"]
    assert operation["requestBody"]["required"] is False
    await _create(http, "fork-nobody")
    assert (await http.post("/v1/sessions/fork-nobody/events", json=_note(0, 0))
            ).status_code == 200
    r = await http.post("/v1/sessions/fork-nobody/fork")
    assert r.status_code == 201 and r.json()["id"].startswith("fork-nobody"), r.text


async def test_a_request_integer_written_with_a_zero_fraction_is_an_integer(
        http: httpx.AsyncClient) -> None:
    """JSON Schema (so the OpenAPI document) counts ``3.0`` as an integer, as JavaScript
    does: the request's own integer fields read it as one (schemathesis sent a fork
    ``boundary`` of ``180609320.0`` and got a 400). A fraction is still refused, and an
    event's own values stay the log's (``1.0`` is not a seq: docs/rules.md)."""
    await _create(http, "whole-1")
    url = "/v1/sessions/whole-1"
    r = await http.post(f"{url}/events", json={**_note(0, 0), "expectedSeq": 0.0})
    assert r.status_code == 200 and r.json()["next"] == 1, r.text
    r = await http.post(f"{url}/events:batch", json={"events": [_note(0, 1)],
                                                     "expectedSeq": 1.0})
    assert r.status_code == 200 and r.json()["next"] == 2, r.text
    r = await http.post(f"{url}/fork", json={"boundary": 1.0, "childId": "whole-2"})
    assert r.status_code == 201 and r.json() == {"id": "whole-2", "length": 3}, r.text
    r = await http.post(f"{url}/fork", json={"boundary": 1.5, "childId": "whole-3"})
    assert r.status_code == 400 and "boundary" in r.json()["detail"], r.text
    r = await http.post(f"{url}/events", json={
        "type": "user/message", "surfaceOp": {"op": "replace", "start": 1.0, "end": 1},
        "data": {"id": "u", "role": "user", "source": {"kind": "user"}, "content": []}})
    assert r.status_code == 422 and r.json()["rule"] == "marker", r.text


def _component(doc: dict[str, Any], name: str) -> Any:
    """A validator of the document's schema ``name`` (references resolved in it)."""
    import jsonschema

    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                            "components": doc["components"]})


async def test_the_document_and_the_server_agree_on_envelopes_and_context_bodies(
        http: httpx.AsyncClient) -> None:
    """What the document says of an event's envelope (a non-empty type, ``ignorable``
    the literal true, the marker's shape, provenance's elements), of a fork's boundary
    and of a context body (exactly one of text and message) is what the server does: a
    body the document allows is not refused for those, one it refuses is refused (a
    4xx problem)."""
    doc = document()
    await _create(http, "agree-1")
    base = "/v1/sessions/agree-1"
    context = {"id": "c-1", "role": "user", "source": {"kind": "plugin", "plugin": "w"},
               "content": [{"type": "text", "text": "ctx"}]}
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": True}),
        ("AppendOne", "/events", {"type": "turn/start", "data": {"turn": 1}}),
        ("AppendOne", "/events", {"type": "", "ignorable": True}),
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": False}),
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": None}),
        ("AppendBatch", "/events:batch", {"events": [{"type": "", "ignorable": True}]}),
        ("AppendBatch", "/events:batch", {"events": [{"type": "x-test/n",
                                                       "ignorable": True}]}),
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": True,
                                  "surfaceOp": "prepend"}),
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": True,
                                  "surfaceOp": None}),
        ("AppendOne", "/events", {"type": "user/message", "surfaceOp": {
            "op": "replace", "start": 0, "end": -1}}),
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": True,
                                  "sourceEventSeqs": [0, 0]}),
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": True,
                                  "sourceEventSeqs": [-1]}),
        ("AppendOne", "/events", {"type": "x-test/n", "ignorable": True,
                                  "sourceEventSeqs": "0"}),
        ("AppendOne", "/events", {"type": "user/message", "surfaceOp": "append",
                                  "sourceEventSeqs": [0], "data": {
                                      "id": "u-1", "role": "user", "source": {"kind": "user"},
                                      "content": [{"type": "text", "text": "hi"}]}}),
        ("ForkBody", "/fork", {"boundary": -1, "childId": "agree-2"}),
        ("ContextBody", "/context", {"text": "workspace"}),
        ("ContextBody", "/context", {"message": context, "text": None}),
        ("ContextBody", "/context", {"text": "x", "message": context}),
        ("ContextBody", "/context", {}),
        ("ContextBody", "/context", {"text": None, "message": None}),
    ]
    for name, path, body in cases:
        documented = _component(doc, name).is_valid(body)
        r = await http.post(base + path, json=body)
        assert (r.status_code < 300) == documented, (name, body, r.status_code, r.text)
        if not documented:
            assert r.headers["content-type"].startswith("application/problem+json")


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_the_gateway_listens_on_loopback_only(gateway: Gateway) -> None:
    """The gateway's port is served by its replica on loopback, and no process of the
    test's Ray listens beyond loopback (Serve's replicas did, on an all-interfaces gRPC
    port: the gateway no longer runs on Serve)."""
    pids = {p.pid for p in psutil.Process().children(recursive=True)}
    port = int(gateway.url.rsplit(":", 1)[1])
    sockets = [(c.laddr.ip, c.laddr.port, psutil.Process(c.pid).name())
               for c in psutil.net_connections("inet")
               if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert [s for s in sockets if s[1] == port] == [("127.0.0.1", port,
                                                     "ray::GatewayReplica")]
    assert [s for s in sockets if not _loopback(s[0])] == []


# -- access -----------------------------------------------------------------------------

async def test_requests_without_a_valid_token_are_refused(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as anon:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                        {"Authorization": f"Basic {FULL}"}, {"Authorization": "Bearer"}):
            for path in ("/v1/sessions", "/openapi.json", "/v1/sessions/s/surface"):
                r = await anon.get(path, headers=headers)
                assert r.status_code == 401, (headers, path)
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert r.headers["content-type"] == "application/problem+json"
                body = r.json()
                assert body["status"] == 401 and body["type"].endswith(":unauthorized")
                assert FULL not in r.text and "wrong-token" not in r.text


async def test_a_limited_token_reaches_its_prefixes_only(
        gateway: Gateway, http: httpx.AsyncClient) -> None:
    await _create(http, "lim-one")
    assert (await http.post("/v1/sessions/lim-one/events", json=_note(0, 0))).status_code == 200
    await _create(http, "other-one")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60,
                                 headers={"Authorization": f"Bearer {LIMITED}"}) as lim:
        assert (await lim.get("/v1/sessions/lim-one/surface")).status_code == 200
        for method, path in (("GET", "/v1/sessions/other-one/surface"),
                             ("POST", "/v1/sessions/other-one/events"),
                             ("GET", "/v1/sessions/other-one/export")):
            r = await lim.request(method, path, json=_note(0, 0))
            assert r.status_code == 403, path
            assert r.json()["type"].endswith(":forbidden")
        r = await lim.post("/v1/sessions", json={"id": "other-two"})
        assert r.status_code == 403
        r = await lim.post("/v1/sessions", json={})  # a fresh id under its prefix
        assert r.status_code == 201 and r.json()["id"].startswith(PREFIX)
        r = await lim.post("/v1/sessions/lim-one/fork", json={"childId": "other-fork"})
        assert r.status_code == 403
        listed = (await lim.get("/v1/sessions", params={"limit": 1000})).json()
        ids = [s["id"] for s in listed["sessions"]]
        assert "lim-one" in ids and all(i.startswith(PREFIX) for i in ids)
        # A fork without a child id gets one under the parent's id, so still reachable.
        r = await lim.post("/v1/sessions/lim-one/fork", json={})
        assert r.status_code == 201, r.text
        assert r.json()["id"].startswith("lim-one-fork-")


@pytest.mark.parametrize("bad", ["-leading-dash", "x" * 129, "sp ace", "dollar$", "ünï",
                                 "semi;colon", "quote'd"])
async def test_invalid_session_ids_are_refused_before_anything(
        http: httpx.AsyncClient, bad: str) -> None:
    r = await http.get(f"/v1/sessions/{quote(bad, safe='')}/surface")
    assert r.status_code == 400, r.text
    assert r.json()["type"].endswith(":invalid-session-id")
    r = await http.post("/v1/sessions", json={"id": bad})
    assert r.status_code == 400


# -- sessions ---------------------------------------------------------------------------

async def test_create_and_list_sessions_page_by_page(http: httpx.AsyncClient) -> None:
    ids = [f"page-{k}" for k in range(5)]
    for sid in ids:
        await _create(http, sid)
    r = await http.post("/v1/sessions", json={"id": "page-0"})
    assert r.status_code == 409 and r.json()["type"].endswith(":session-exists")
    r = await http.post("/v1/sessions", json={})
    assert r.status_code == 201
    fresh = r.json()["id"]
    seen: list[str] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if after is not None:
            params["after"] = after
        page = (await http.get("/v1/sessions", params=params)).json()
        assert len(page["sessions"]) <= 2
        seen += [s["id"] for s in page["sessions"]]
        after = page["next"]
        if after is None:
            break
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    assert {*ids, fresh} <= set(seen)
    r = await http.get("/v1/sessions", params={"limit": 0})
    assert r.status_code == 400


# -- appends ----------------------------------------------------------------------------

async def test_appends_and_retries_with_expected_seq_land_once(
        http: httpx.AsyncClient) -> None:
    await _create(http, "append-1")
    url = "/v1/sessions/append-1/events"
    first = await http.post(url, json={**_note(0, 0), "expectedSeq": 0})
    assert first.status_code == 200, first.text
    again = await http.post(url, json={**_note(0, 0), "expectedSeq": 0})
    assert again.status_code == 200 and again.json() == first.json()
    assert first.json()["events"][0]["seq"] == 0 and first.json()["next"] == 1
    other = await http.post(url, json={**_note(0, 1), "expectedSeq": 0})
    assert other.status_code == 409 and other.json()["type"].endswith(":conflict")
    batch = {"events": [_note(0, k) for k in (1, 2, 3)], "expectedSeq": 1}
    b1 = await http.post(url + ":batch", json=batch)
    b2 = await http.post(url + ":batch", json=batch)
    assert b1.status_code == b2.status_code == 200 and b1.json() == b2.json()
    assert [e["seq"] for e in b1.json()["events"]] == [1, 2, 3]
    log = (await http.get(url)).json()
    assert [e["data"]["k"] for e in log["events"]] == [0, 1, 2, 3] and log["next"] == 4
    assert (await http.get(url, params={"since": 2, "limit": 1})).json()["next"] == 3


async def test_context_replaces_the_previous_one_and_is_idempotent(
        http: httpx.AsyncClient) -> None:
    await _create(http, "context-1")
    url = "/v1/sessions/context-1/context"
    first = await http.post(url, json={"text": "workspace: a.py"})
    assert first.status_code == 200, first.text
    (event,) = first.json()["events"]
    assert event["type"] == "context/message" and first.json()["next"] == event["seq"] + 1
    again = await http.post(url, json={"text": "workspace: a.py"})
    assert again.status_code == 200 and again.json()["events"] == []
    second = await http.post(url, json={"text": "workspace: b.py"})
    (replacing,) = second.json()["events"]
    assert replacing["sourceEventSeqs"] == [event["seq"]]
    surface = (await http.get("/v1/sessions/context-1/surface")).json()
    assert surface["nodes"] == [replacing["seq"]]
    both = await http.post(url, json={"text": "x", "message": {"role": "user"}})
    assert both.status_code == 400


async def test_json_too_deep_for_any_reader_is_a_nesting_problem(
        http: httpx.AsyncClient) -> None:
    """Nesting far past the limit (beyond what msgspec can decode at all) in every body
    field typed ``Any`` is the 422 ``nesting`` problem, as a shallower excess is;
    nothing is appended."""
    await _create(http, "deep-1")
    deep = "[" * 5000 + "]" * 5000
    path = "/v1/sessions/deep-1"
    bodies = [
        (f"{path}/events", f'{{"type": "x-test/n", "data": {deep}, "ignorable": true}}'),
        (f"{path}/events", f'{{"type": "x-test/n", "surfaceOp": {deep}}}'),
        (f"{path}/events:batch", f'{{"events": [{{"type": "x-test/n", "data": {deep}}}]}}'),
        (f"{path}/context", f'{{"message": {{"role": "user", "content": {deep}}}}}'),
        (f"{path}/compact", f'{{"compactionId": "c", "generation": 0, "shadowed": [0], '
                               f'"summary": [{{"type": "text", "text": {deep}}}], '
                               f'"shadowedTokenCount": 1, "checkpointId": "k"}}'),
    ]
    for url, text in bodies:
        r = await http.post(url, content=text.encode())
        assert r.status_code == 422, (url, r.status_code, r.text[:300])
        assert r.json()["rule"] == "nesting", r.text[:300]
    assert (await http.get(f"{path}/surface")).json()["length"] == 0


async def test_a_key_named_twice_is_refused_on_every_route_with_a_body(
        http: httpx.AsyncClient) -> None:
    """Issue 27 item 8: a body whose object names a key twice (at any depth) is a 400
    ``duplicate-key`` problem naming the key and the path of the object, on every route
    that reads a JSON body; nothing is created or appended."""
    await _create(http, "twice-1")
    base = "/v1/sessions/twice-1"
    bodies = [
        ("/v1/sessions", b'{"id":"twice-2","id":"twice-3"}', "id", "$"),
        (f"{base}/events", b'{"type":"x-test/note","ignorable":true,'
                           b'"data":{"a":1,"a":2}}', "a", "$.data"),
        (f"{base}/events", b'{"type":"x-test/note","ignorable":true,"data":{},'
                           b'"expectedSeq":0,"expectedSeq":1}', "expectedSeq", "$"),
        (f"{base}/events:batch", b'{"events":[{"type":"x-test/note","ignorable":true,'
                                 b'"data":{"m":[{"b":{"c":1,"c":1}}]}}]}', "c",
         "$.events[0].data.m[0].b"),
        (f"{base}/context", b'{"message":{"id":"c","role":"user","role":"user",'
                            b'"source":{"kind":"plugin","plugin":"w"},"content":[]}}',
         "role", "$.message"),
        (f"{base}/compact", b'{"compactionId":"c","generation":0,"shadowed":[0],'
                            b'"summary":[{"type":"text","text":"s","text":"t"}],'
                            b'"shadowedTokenCount":1,"checkpointId":"k"}', "text",
         "$.summary[0]"),
        (f"{base}/prune", b'{"generation":0,"target":0,"content":[],"target":1,'
                          b'"shadowedTokenCount":1}', "target", "$"),
        (f"{base}/fork", b'{"childId":"twice-4","childId":"twice-5"}', "childId", "$"),
    ]
    for url, body, key, path in bodies:
        r = await http.post(url, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (url, r.text)
        problem = r.json()
        assert problem["type"].endswith(":duplicate-key"), (url, problem)
        assert problem["rule"] == "duplicate-key"
        assert f'duplicate key "{key}" in the object at {path}' in problem["detail"], \
            (url, problem)
    assert (await http.get(f"{base}/surface")).json()["length"] == 0
    for session_id in ("twice-2", "twice-3", "twice-4", "twice-5"):
        assert (await http.get(f"/v1/sessions/{session_id}/header")).status_code == 404


async def test_a_last_event_id_that_is_not_ascii_digits_is_refused(
        http: httpx.AsyncClient) -> None:
    await _create(http, "lastid-1")
    # Header bytes are read as latin-1: b"\xb2" arrives as "²", which str.isdigit
    # accepts and int refuses.
    for value in (b"\xb2", b"\xb9\xb3", "١".encode(), b"x", b"-1"):
        r = await http.get("/v1/sessions/lastid-1/follow", params={"timeout": 1},
                           headers={"Last-Event-ID": value})
        assert r.status_code == 400, (value, r.status_code)
        assert r.json()["type"].endswith(":bad-request")


async def test_typed_errors_map_to_problems(http: httpx.AsyncClient) -> None:
    await _create(http, "errors-1")
    url = "/v1/sessions/errors-1/events"
    r = await http.post(url, json={"type": "user/message", "surfaceOp": "append",
                                   "data": {"id": "u", "role": "user"}})
    assert r.status_code == 422
    body = r.json()
    assert body["rule"] and body["eventType"] == "user/message" and body["seq"] == 0
    assert body["type"].endswith(":surface") and body["status"] == 422
    assert "user/message" in body["detail"]
    r = await http.post(url, json={"type": "user/message", "surfaceOp": {
        "op": "replace", "start": 3, "end": 9}, "sourceEventSeqs": [1], "data": {}})
    assert r.status_code == 422 and r.json()["rule"]
    r = await http.post(url, content=b"{not json")
    assert r.status_code == 400 and r.json()["type"].endswith(":bad-request")
    r = await http.post(url, json={"type": "turn/start", "unknownKey": 1})
    assert r.status_code == 400
    r = await http.post(url + ":batch", json={"events": []})
    assert r.status_code == 400
    for method, path in (("GET", "/v1/sessions/missing-1/surface"),
                         ("POST", "/v1/sessions/missing-1/events"),
                         ("GET", "/v1/sessions/missing-1/export"),
                         ("GET", "/v1/sessions/missing-1/follow")):
        r = await http.request(method, path, json=_note(0, 0))
        assert r.status_code == 404, path
        assert r.json()["type"].endswith(":unknown-session")
    # Nothing was created by those requests.
    listed = (await http.get("/v1/sessions", params={"limit": 1000})).json()
    assert "missing-1" not in {s["id"] for s in listed["sessions"]}


# -- reads, replaces, forks -------------------------------------------------------------

async def test_reads_compaction_prune_and_fork(http: httpx.AsyncClient) -> None:
    local = _conversation()
    await _create(http, "conv-1")
    base = "/v1/sessions/conv-1"
    r = await http.post(f"{base}/events:batch", json={"events": _specs(local),
                                                      "expectedSeq": 0})
    assert r.status_code == 200, r.text
    surface = (await http.get(f"{base}/surface")).json()
    assert surface == {"nodes": list(local.surface.nodes), "replaceGeneration": 0,
                       "length": len(local)}
    messages = (await http.get(f"{base}/messages")).json()["messages"]
    assert messages == local.derive_messages().to_list()
    as_of = (await http.get(f"{base}/messages", params={"asOf": 1})).json()["messages"]
    assert as_of == local.derive_messages(1).to_list() and len(as_of) == 1
    # Past the log's end: the session's state refuses it (422), not the document (400).
    r = await http.get(f"{base}/messages", params={"asOf": 999})
    assert r.status_code == 422 and r.json()["type"].endswith(":seq-out-of-range"), r.text
    r = await http.get(f"{base}/messages", params={"asOf": 2**53})  # past any seq: 400
    assert r.status_code == 400, r.text
    header = (await http.get(f"{base}/header")).json()
    assert header["id"] == "conv-1"

    nodes = surface["nodes"]
    compaction = {"compactionId": "c-1", "generation": 0, "shadowed": nodes[:2],
                  "summary": [{"type": "text", "text": "two questions"}],
                  "shadowedTokenCount": 200, "checkpointId": "cp-1"}
    r = await http.post(f"{base}/compact", json=compaction)
    assert r.status_code == 200, r.text
    assert [e["type"] for e in r.json()["events"]] == [
        "compaction/start", "compaction/summary", "user/message", "compaction/end"]
    r = await http.post(f"{base}/compact", json=compaction)  # stale generation now
    assert r.status_code == 409 and r.json()["type"].endswith(":conflict")
    surface = (await http.get(f"{base}/surface")).json()
    assert surface["replaceGeneration"] == 1
    result_seq = next(e.seq for e in local.log if e.type == "tool/result")
    prune = {"generation": 1, "target": result_seq, "shadowedTokenCount": 200,
             "content": [{"type": "text", "text": "[pruned]"}]}
    r = await http.post(f"{base}/prune", json=prune)
    assert r.status_code == 200, r.text
    assert [e["type"] for e in r.json()["events"]] == ["compaction/prune", "tool/result"]
    r = await http.post(f"{base}/prune", json=prune)
    assert r.status_code == 409

    r = await http.post(f"{base}/fork", json={"boundary": 1, "childId": "conv-1-open"})
    assert r.status_code == 409 and r.json()["code"] == "OPEN_TURN"
    r = await http.post(f"{base}/fork", json={"childId": "conv-1-child"})
    assert r.status_code == 201, r.text
    assert r.json()["id"] == "conv-1-child"
    child = (await http.get("/v1/sessions/conv-1-child/header")).json()
    assert child["parentSession"] == "conv-1"
    r = await http.post(f"{base}/fork", json={"childId": "conv-1-child"})
    assert r.status_code == 409
    r = await http.post(f"{base}/fork", json={"boundary": 10_000, "childId": "conv-1-c2"})
    assert r.status_code == 422 and r.json()["code"] == "INVALID_BOUNDARY"


async def test_streamed_export_equals_the_cli_export(gateway: Gateway,
                                                     http: httpx.AsyncClient) -> None:
    await _create(http, "export-1")
    local = _conversation()
    r = await http.post("/v1/sessions/export-1/events:batch",
                        json={"events": _specs(local) * 1, "expectedSeq": 0})
    assert r.status_code == 200
    notes = {"events": [_note(1, k) for k in range(2_500)], "expectedSeq": len(local)}
    assert (await http.post("/v1/sessions/export-1/events:batch", json=notes)).status_code \
        == 200
    chunks: list[bytes] = []
    async with http.stream("GET", "/v1/sessions/export-1/export") as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("application/x-ndjson")
        async for chunk in resp.aiter_bytes():
            chunks.append(chunk)
    streamed = b"".join(chunks)
    cli = subprocess.run([sys.executable, "-m", "surfacelog.cli", "export", str(gateway.db),
                          "export-1"], capture_output=True, check=True, cwd=REPO)
    assert streamed == cli.stdout
    assert streamed.count(b"\n") == 1 + len(local) + 2_500


# -- concurrency and failures ------------------------------------------------------------

async def _append_all(http: httpx.AsyncClient, url: str, client: int, count: int) -> int:
    """Append ``count`` notes, each at the seq read just before, retrying on 409;
    returns how many conflicts it met."""
    conflicts = 0
    k = 0
    while k < count:
        since = (await http.get(f"{url}/surface")).json()["length"]
        r = await http.post(f"{url}/events", json={**_note(client, k), "expectedSeq": since})
        if r.status_code == 409:
            conflicts += 1
            continue
        assert r.status_code == 200, r.text
        k += 1
    return conflicts


async def test_concurrent_clients_lose_and_duplicate_nothing(gateway: Gateway) -> None:
    clients, each = 5, 8
    headers = {"Authorization": f"Bearer {FULL}"}
    async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=120) as h:
        await _create(h, "shared-1")
    https = [httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=120)
             for _ in range(clients)]
    try:
        await asyncio.gather(*(_append_all(h, "/v1/sessions/shared-1", c, each)
                               for c, h in enumerate(https)))
        events = (await https[0].get("/v1/sessions/shared-1/events")).json()["events"]
    finally:
        for h in https:
            await h.aclose()
    assert [e["seq"] for e in events] == list(range(clients * each))
    assert sorted((e["data"]["client"], e["data"]["k"]) for e in events) == [
        (c, k) for c in range(clients) for k in range(each)]


async def _append_exactly_once(http: httpx.AsyncClient, url: str,
                               events: list[dict[str, Any]], seq: int) -> list[int]:
    """What a client does to append ``events`` exactly once: send them at ``seq``;
    resend after a 503; after a 409, read the log from ``seq``: when the batch is there
    it landed, else send it again at the log's end (an activation after a crash may
    have appended its own events, such as the seed marker). Returns the seqs."""
    for _attempt in range(30):
        r = await http.post(f"{url}/events:batch", json={"events": events,
                                                         "expectedSeq": seq})
        if r.status_code == 200:
            return [e["seq"] for e in r.json()["events"]]
        if r.status_code == 503:
            assert "retry-after" in r.headers
            await asyncio.sleep(float(r.headers["retry-after"]))
            continue
        assert r.status_code == 409, r.text
        log = (await http.get(f"{url}/events", params={"since": seq, "limit": 10_000})).json()
        mine = [e["seq"] for e in log["events"] if e.get("data") in
                [spec["data"] for spec in events] and e["type"] == events[0]["type"]]
        if mine:
            return mine
        seq = log["next"]
    raise AssertionError(f"{url}: not appended after 30 attempts")


async def _restarted(name: str, before: int) -> None:
    """Wait until the actor ``name`` answers from a process other than ``before`` (the
    kill is asynchronous: the old process may still answer for a moment)."""
    for _attempt in range(600):
        try:
            if await ray.get_actor(name, namespace=NAMESPACE).pid.remote() != before:
                return
        except RayActorError:  # ActorUnavailableError while it restarts
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} was not restarted in a new process")


async def test_a_killed_session_actor_and_the_retry_land_exactly_once(
        gateway: Gateway, http: httpx.AsyncClient) -> None:
    await _create(http, "kill-1")
    client = gateway.client
    url = "/v1/sessions/kill-1"
    name = client.actor_name(client.config.shards.shards[0], "kill-1")
    seq = 0
    for round_ in range(3):
        batch = [_note(round_, k) for k in range(500)]
        request = asyncio.create_task(_append_exactly_once(http, url, batch, seq))
        await asyncio.sleep(0.05)
        actor = ray.get_actor(name, namespace=NAMESPACE)
        before = await actor.pid.remote()
        ray.kill(actor, no_restart=False)
        seqs = await request
        await _restarted(name, before)
        assert seqs == list(range(seqs[0], seqs[0] + 500))
        seq = seqs[-1] + 1
    log = (await http.get(f"{url}/events", params={"limit": 10_000})).json()["events"]
    notes = [(e["data"]["client"], e["data"]["k"]) for e in log if e["type"] == "x-test/note"]
    assert notes == [(r, k) for r in range(3) for k in range(500)]
    # Anything else in the log is the activations' own (the seed marker).
    assert {e["type"] for e in log} <= {"x-test/note", "session/end-seed"}


async def test_a_replica_killed_mid_request_drops_the_connection_and_a_resend_lands_once(
        gateway: Gateway) -> None:
    """With the session's actor stopped (SIGSTOP) the append waits in the replica; the
    replica is killed: the client sees the connection drop (no answer it could take
    for a refusal), Ray restarts the replica, which serves again on the same port, and
    the resend with ``expectedSeq`` lands the batch exactly once, whether or not the
    first send had reached the actor."""
    headers = {"Authorization": f"Bearer {FULL}"}
    url = "/v1/sessions/rkill-1"
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120, headers=headers) as h:
        await _create(h, "rkill-1")
        owner = ray.get_actor(gateway.client.actor_name(
            gateway.client.config.shards.shards[0], "rkill-1"), namespace=NAMESPACE)
        owner_pid = await owner.pid.remote()
        replica = ray.get_actor(f"{REPLICA_PREFIX}0", namespace=NAMESPACE)
        replica_pid = (await replica.ready.remote(5.0)).pid
        batch = [_note(7, k) for k in range(50)]
        os.kill(owner_pid, signal.SIGSTOP)
        try:
            request = asyncio.create_task(h.post(f"{url}/events:batch", json={
                "events": batch, "expectedSeq": 0}))
            done, _ = await asyncio.wait({request}, timeout=0.5)
            assert not done, "the append was answered while its actor was stopped"
            ray.kill(replica, no_restart=False)
            with pytest.raises(httpx.TransportError):
                await request
        finally:
            os.kill(owner_pid, signal.SIGCONT)
    for _attempt in range(600):
        try:
            info = await ray.get_actor(f"{REPLICA_PREFIX}0", namespace=NAMESPACE
                                       ).ready.remote(5.0)
            if info.pid != replica_pid:
                break
        except RayActorError:  # restarting
            pass
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the replica was not restarted")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120, headers=headers) as h:
        seqs = await _append_exactly_once(h, url, batch, 0)
        log = (await h.get(f"{url}/events", params={"limit": 1000})).json()["events"]
    assert len(seqs) == 50
    notes = [e["data"]["k"] for e in log if e["type"] == "x-test/note"]
    assert notes == list(range(50))


# -- server-sent events ------------------------------------------------------------------

async def _read_events(resp: httpx.Response, count: int) -> list[tuple[int, dict[str, Any]]]:
    got: list[tuple[int, dict[str, Any]]] = []
    current_id = -1
    async for line in resp.aiter_lines():
        if line.startswith("id: "):
            current_id = int(line[4:])
        elif line.startswith("data: "):
            got.append((current_id, json.loads(line[6:])))
            if len(got) == count:
                break
    return got


async def test_follow_streams_new_events_then_ends(gateway: Gateway,
                                                   http: httpx.AsyncClient) -> None:
    await _create(http, "follow-1")
    url = "/v1/sessions/follow-1"
    await http.post(f"{url}/events", json={**_note(9, 0), "expectedSeq": 0})
    async with http.stream("GET", f"{url}/follow", params={"since": 1, "timeout": 120}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        headers = {"Authorization": f"Bearer {FULL}"}
        async with httpx.AsyncClient(base_url=gateway.url, headers=headers,
                                     timeout=60) as writer:
            r = await writer.post(f"{url}/events:batch", json={
                "events": [_note(9, k) for k in (1, 2, 3)], "expectedSeq": 1})
            assert r.status_code == 200
        got = await _read_events(resp, 3)
    assert [seq for seq, _ in got] == [1, 2, 3]
    assert [e["data"]["k"] for _, e in got] == [1, 2, 3]
    # Resumed after the last id seen; and a follow whose time is up ends with 'end'.
    async with http.stream("GET", f"{url}/follow", params={"timeout": 1},
                           headers={"Last-Event-ID": "2"}) as resp:
        lines = [line async for line in resp.aiter_lines()]
    assert "id: 3" in lines and "id: 2" not in lines
    assert "event: end" in lines and 'data: {"next":4}' in lines


# -- configuration and the command ------------------------------------------------------

def test_token_configuration_is_checked_and_never_echoed(tmp_path: Path) -> None:
    from surfacelog.gateway.auth import load_auth
    from surfacelog.gateway.errors import TokenConfigError

    auth = load_auth(environ={"SURFACELOG_GATEWAY_TOKENS": f"{FULL}; {LIMITED} a- b."})
    assert auth.authorize(f"Bearer {LIMITED}").prefixes == ("a-", "b.")
    assert auth.authorize(f"bearer {FULL}").prefixes is None
    assert FULL not in repr(auth) and LIMITED not in repr(auth)  # digests only
    bad = {"short": "tooshort", "prefix": f"{FULL} bad/prefix", "twice": f"{FULL}\n{FULL}",
           "none": "# only a comment"}
    for text in bad.values():
        path = tmp_path / "tokens"
        path.write_text(text)
        with pytest.raises(TokenConfigError) as info:
            load_auth(path)
        assert FULL not in str(info.value) and "tooshort" not in str(info.value)
    with pytest.raises(TokenConfigError):
        load_auth(environ={})
    with pytest.raises(TokenConfigError):
        load_auth(tmp_path / "missing")


def _serve_cli(*args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "SURFACELOG_GATEWAY_TOKENS"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "surfacelog.cli", "serve", *args],
                          capture_output=True, text=True, env=environ, cwd=REPO,
                          timeout=120)


def test_serve_refuses_to_start_unsafely(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    cases = [
        ((), None, 2, "no token configured"),
        (("--insecure-no-auth", "--host", "0.0.0.0"), None, 2, "loopback only"),
        (("--token-file", str(tmp_path / "missing")), None, 2, "cannot read token file"),
        (("--shard-map", str(tmp_path / "missing.json")), {
            "SURFACELOG_GATEWAY_TOKENS": FULL}, 2, "shard configuration"),
    ]
    for args, env, status, message in cases:
        out = _serve_cli("--db", db, *args, env=env) if "--shard-map" not in args \
            else _serve_cli(*args, env=env)
        assert out.returncode == status, (args, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        assert FULL not in out.stderr + out.stdout
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = _serve_cli("--db", db, "--port", str(port),
                         env={"SURFACELOG_GATEWAY_TOKENS": FULL})
    assert out.returncode == 1 and "in use" in out.stderr and "Traceback" not in out.stderr


def test_every_typed_error_maps_to_its_status() -> None:
    from ray.exceptions import RayActorError

    from surfacelog.actors.errors import ShardUnavailable
    from surfacelog.actors.protocol import Conflict, SessionUnavailable
    from surfacelog.gateway.errors import OutcomeUnknown
    from surfacelog.gateway.problems import problem_for
    from surfacelog.schema.errors import SurfaceError, SurfacelogError
    from surfacelog.session.errors import ForkError
    from surfacelog.store.errors import CommitFailed, CorruptStore, SessionNotFound

    cases: list[tuple[SurfacelogError | RayActorError, int]] = [
        (SurfaceError("range", "bad range", "user/message", 7), 422),
        (Conflict("stale"), 409), (SessionNotFound("gone"), 404),
        (ShardUnavailable("down"), 503), (SessionUnavailable("fenced"), 503),
        (CommitFailed("lost"), 503), (OutcomeUnknown("maybe"), 503),
        (RayActorError(), 503), (ForkError("OPEN_TURN", "open"), 409),
        (ForkError("INVALID_BOUNDARY", "no"), 422), (ForkError("SESSION_NOT_FOUND", "x"), 404),
        (CorruptStore("bad row", "s", 1), 500),
    ]
    for error, status in cases:
        reply = problem_for(error)
        assert reply.status == status, error
        assert reply.body["status"] == status and reply.body["title"] and reply.body["detail"]
        assert reply.body["type"].startswith("urn:surfacelog:problem:")
        assert ("Retry-After" in reply.headers) == (status == 503)
    refused = problem_for(SurfaceError("range", "bad range", "user/message", 7)).body
    assert (refused["rule"], refused["eventType"], refused["seq"]) == ("range", "user/message", 7)
    assert problem_for(ForkError("OPEN_TURN", "open")).body["code"] == "OPEN_TURN"


async def test_the_load_runs_http_handle_reads_seqs_at_once_and_events_on_use(
        gateway: Gateway, http: httpx.AsyncClient) -> None:
    """``HttpSession.append_batch`` (the load run's drivers) answers the seqs of what it
    appended from the reply's ``next``; its events, decoded on first use, are the ones
    the session logged; a conflict is the typed error a ``SessionHandle`` raises."""
    from surfacelog.actors.protocol import Conflict
    from surfacelog.gateway.httpclient import HttpSessions
    from surfacelog.session import AppendSpec

    sessions = HttpSessions(gateway.url, FULL, ShardMap.single(str(gateway.db)))
    try:
        assert await sessions.create("http-handle")
        handle = sessions.session("http-handle")
        first = await handle.append_batch([AppendSpec("turn/start", {"turn": 1})], 0)
        logged = await handle.append_batch(
            [AppendSpec("x-test/note", {"k": k}, ignorable=True) for k in range(3)], 1)
        assert first.seqs == range(0, 1) and logged.seqs == range(1, 4)
        r = await http.get("/v1/sessions/http-handle/events", params={"since": 1})
        assert [e.seq for e in logged] == [1, 2, 3]
        assert [json.loads(encode_json(e)) for e in logged] == r.json()["events"]
        with pytest.raises(Conflict):
            await handle.append_batch([AppendSpec("turn/end", {"turn": 1})], 1)
    finally:
        await sessions.close()


def test_an_append_reply_of_another_count_is_refused() -> None:
    from surfacelog.gateway.httpclient import _logged

    reply = b'{"events": [{"type": "x-test/note", "seq": 4, "time": 1}], "next": 5}'
    assert _logged(reply, 1).seqs == range(4, 5)
    with pytest.raises(ValueError, match="an append of 2 events was answered with 1"):
        _logged(reply, 2)
