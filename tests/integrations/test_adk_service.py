"""``surfacelog.integrations.adk`` against the real Google ADK: the event mapping round
trips exactly, state/listing/deletion behave as ADK's own ``InMemorySessionService``
on the same operations, sessions survive a restart, and a real ``Runner`` with a
scripted ``BaseLlm`` (no network) and a tool runs on it, before and after a restart.

The service's behaviour tests run embedded (a SQLite file, or a memory store) and over
a real local Ray (``ray_local``): a one-shard deployment with a journal writer, and one
whose owner session actor holds the file, each shared by the module's tests (each test
names its app and sessions apart). Over Ray the events go through the session actors
and scopes, state, listing and deletion through the shard's writer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

adk = pytest.importorskip("google.adk", reason="google-adk is not installed "
                          "(pip install surfacelog[adk])")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps._configs import EventsCompactionConfig  # noqa: E402
from google.adk.apps.app import App  # noqa: E402
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer  # noqa: E402
from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import BaseSessionService, InMemorySessionService  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

from surfacelog.integrations.adk import (  # noqa: E402
    SessionAlreadyExists,
    SessionMissing,
    SurfacelogSessionService,
)
from surfacelog.integrations.adk.mapping import PART_BLOCK  # noqa: E402
from surfacelog.schema.events import ReplaceOp  # noqa: E402
from surfacelog.store.errors import SessionDeleted  # noqa: E402
from surfacelog.store.memory import MemoryEventStore  # noqa: E402
from surfacelog.store.sqlite import SqliteEventStore  # noqa: E402

from support.names import Names  # noqa: E402

U1, U2 = "u1", "u2"

RAY = [pytest.param("ray-journal", marks=pytest.mark.ray),
       pytest.param("ray-owner", marks=pytest.mark.ray)]
EVERYWHERE = ["sqlite", *RAY]


class Deployment:
    """Where a test's services keep their sessions: ``sqlite`` (a file, embedded),
    ``memory`` (a memory store, embedded), or a one-shard Ray deployment of a file on
    the shared local Ray, its writer a journal actor (``ray-journal``) or the owner
    session actor (``ray-owner``).

    An embedded deployment is the test's own. A Ray deployment is shared by the
    module's tests (each would otherwise start and stop its actors, about a second of
    CPU): each test names its app and sessions apart (``name``)."""

    def __init__(self, kind: str, path: Path, client: Any = None) -> None:
        self.kind = kind
        self.path = path
        self.memory: MemoryEventStore | None = None
        self.client = client
        self.name = Names()
        self.app = self.name("app")

    @property
    def embedded(self) -> bool:
        return self.client is None

    async def service(self) -> SurfacelogSessionService:
        """A new service on the deployment (as a new process would make)."""
        if self.client is not None:
            return SurfacelogSessionService(client=self.client)
        if self.kind == "memory":
            if self.memory is None:
                self.memory = await MemoryEventStore.open()
            return SurfacelogSessionService(store=self.memory)
        return SurfacelogSessionService(path=self.path)

    async def restart(self, service: SurfacelogSessionService) -> SurfacelogSessionService:
        """Close ``service`` and start another; over Ray every session actor first
        drops its sessions, which are then loaded again from the file."""
        await service.close()
        if self.client is not None:
            assert await self.client.passivate_all() == []
        return await self.service()


@pytest.fixture(scope="module")
def ray_deployments(tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[dict[str, tuple[Path, Any]]]:
    """The module's Ray deployments by kind (``ray-journal``, ``ray-owner``), each its
    file and its client, started by the first test that asks."""
    made: dict[str, tuple[Path, Any]] = {}
    try:
        yield made
    finally:
        for _, client in made.values():
            client.shutdown()


@pytest.fixture(params=EVERYWHERE)
def where(request: pytest.FixtureRequest, tmp_path: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    kind = str(request.param)
    if not kind.startswith("ray-"):
        return Deployment(kind, tmp_path / "adk.db")
    request.getfixturevalue("ray_local")
    made = request.getfixturevalue("ray_deployments")
    if kind not in made:
        from surfacelog.actors.client import connect

        path = tmp_path_factory.mktemp("adk") / f"{kind}.db"
        made[kind] = (path, connect(db=str(path), placement="packed", packs=1,
                                    writer="owner" if kind == "ray-owner" else "journal"))
    path, client = made[kind]
    return Deployment(kind, path, client)


@pytest.fixture
async def service(where: Deployment) -> AsyncIterator[SurfacelogSessionService]:
    s = await where.service()
    try:
        yield s
    finally:
        await s.close()


def _events() -> list[Event]:
    """Events of every shape the mapping knows, and some it keeps whole."""
    part = types.Part
    fc = types.FunctionCall
    fr = types.FunctionResponse
    return [
        Event(invocation_id="i1", author="user", timestamp=1000.25,
              content=types.Content(role="user", parts=[part(text="weather in Paris?")])),
        Event(invocation_id="i1", author="agent", timestamp=1001.5,
              content=types.Content(role="model", parts=[
                  part(text="let me think", thought=True), part(text="checking"),
                  part(function_call=fc(id="c1", name="get_weather",
                                        args={"city": "Paris", "n": [1, 2.5, None]}))]),
              actions=EventActions(state_delta={"k": 1, "app:a": {"x": True}})),
        Event(invocation_id="i1", author="agent", timestamp=1002.0,
              content=types.Content(role="user", parts=[part(function_response=fr(
                  id="c1", name="get_weather", response={"result": "sunny"}))]),
              actions=EventActions(state_delta={"user:last": "Paris"})),
        Event(invocation_id="i1", author="agent", timestamp=1003.0,
              content=types.Content(role="user", parts=[
                  part(function_response=fr(id="c2", name="a", response={"r": 1})),
                  part(function_response=fr(id="c3", name="b", response={"r": 2}))])),
        Event(invocation_id="i1", author="agent", timestamp=1004.0, branch="root.agent",
              content=types.Content(role="model", parts=[
                  part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG\x00\xff")),
                  part(function_call=fc(name="no_id", args={})),
                  part(text="signed", thought_signature=b"sig")]),
              actions=EventActions(transfer_to_agent="other", escalate=True)),
        Event(invocation_id="i2", author="agent", timestamp=1005.0,
              actions=EventActions(state_delta={"done": True}, skip_summarization=True)),
        Event(invocation_id="i2", author="agent", timestamp=1006.0,
              content=types.Content(parts=[part(text="no role")]), turn_complete=True),
    ]


async def test_mapping_round_trip_and_restart(where: Deployment) -> None:
    service = await where.service()
    app, sid = where.app, where.name("s1")
    session = await service.create_session(app_name=app, user_id=U1, session_id=sid)
    originals = _events()
    for event in originals:
        await service.append_event(session, event.model_copy(deep=True))
    # a new process reads the file: the events come back equal, field for field
    service = await where.restart(service)
    back = await service.get_session(app_name=app, user_id=U1, session_id=sid)
    assert back is not None
    assert back.events == originals
    assert back.state == {"k": 1, "app:a": {"x": True}, "user:last": "Paris", "done": True}
    # the log holds DSH messages: blocks where they say everything, parts kept whole else
    store = service.store
    assert store is not None
    if where.embedded:
        assert isinstance(store, SqliteEventStore)
    log = (await store.load(sid)).log
    types_ = [e.type for e in log if e.type != "session/end-seed"]
    assert types_ == ["user/message", "assistant/message", "tool/result", "user/message",
                      "assistant/message", "assistant/message", "assistant/message"]
    call_seq = next(e.seq for e in log if e.type == "assistant/message")
    result = next(e for e in log if e.type == "tool/result")
    assert list(result.source_event_seqs) == [call_seq]  # provenance: the call it answers
    blocks = [b["type"] for b in log[call_seq].data["message"]["content"]]
    assert blocks == ["reasoning", "text", "tool-call"]
    kept = next(e for e in log if e.type == "assistant/message" and e.data["message"][
        "source"]["adk"]["event"].get("branch") == "root.agent")
    assert [b["type"] for b in kept.data["message"]["content"]] == [PART_BLOCK] * 3
    await service.close()


async def test_get_session_config(service: SurfacelogSessionService,
                                  where: Deployment) -> None:
    app = where.app
    session = await service.create_session(app_name=app, user_id=U1)
    reference = InMemorySessionService()
    ref = await reference.create_session(app_name=app, user_id=U1, session_id=session.id)
    for event in _events():
        await service.append_event(session, event.model_copy(deep=True))
        await reference.append_event(ref, event.model_copy(deep=True))
    configs = [GetSessionConfig(num_recent_events=n) for n in (0, 1, 3, 50)] + [
        GetSessionConfig(after_timestamp=t) for t in (0, 1002.0, 1002.1, 9999)] + [
        GetSessionConfig(num_recent_events=3, after_timestamp=1004.0)]
    for config in configs:
        ours = await service.get_session(app_name=app, user_id=U1, session_id=session.id,
                                         config=config)
        theirs = await reference.get_session(app_name=app, user_id=U1,
                                             session_id=session.id, config=config)
        assert ours is not None and theirs is not None
        assert ours.events == theirs.events, config


async def _script(svc: BaseSessionService, where: Deployment) -> list[Any]:
    """The same operations on a session service; what ADK callers observe (the app's
    and the sessions' names ``where``'s)."""
    app, other = where.app, where.name("other")
    s1, s2, s3, s4 = (where.name(f"s{k}") for k in range(1, 5))
    seen: list[Any] = []
    first = await svc.create_session(app_name=app, user_id=U1, session_id=s1,
                                     state={"k": 1, "app:a": 1, "user:u": "one", "temp:t": 0})
    seen.append(dict(first.state))
    second = await svc.create_session(app_name=app, user_id=U1, session_id=s2)
    third = await svc.create_session(app_name=app, user_id=U2, session_id=s3,
                                     state={"user:u": "two"})
    await svc.create_session(app_name=other, user_id=U1, session_id=s4,
                             state={"app:a": "elsewhere"})
    seen += [dict(second.state), dict(third.state)]
    event = Event(invocation_id="i", author="agent", timestamp=2000.0,
                  actions=EventActions(state_delta={"k": 2, "temp:scratch": 5,
                                                    "app:a": 2, "user:u": "uno"}))
    appended = await svc.append_event(first, event)
    seen.append(dict(first.state))  # temp: applied in memory for the invocation
    seen.append(appended.actions.state_delta)  # temp: trimmed from what is stored
    await svc.append_event(third, Event(invocation_id="i", author="agent", timestamp=2001.0,
                                        actions=EventActions(state_delta={"n": None})))
    for sid, user in ((s1, U1), (s2, U1), (s3, U2)):
        got = await svc.get_session(app_name=app, user_id=user, session_id=sid)
        assert got is not None
        seen.append((sid, got.state, [e.actions.state_delta for e in got.events]))
    seen.append(await svc.get_session(app_name=app, user_id=U2, session_id=s1))
    seen.append(await svc.get_user_state(app_name=app, user_id=U1))
    for user in (U1, U2, None, "nobody"):
        listed = await svc.list_sessions(app_name=app, user_id=user)
        seen.append(sorted((s.id, s.user_id, sorted(s.state.items()), len(s.events))
                           for s in listed.sessions))
    await svc.delete_session(app_name=app, user_id=U1, session_id=s2)
    await svc.delete_session(app_name=app, user_id=U1, session_id="missing")
    seen.append(await svc.get_session(app_name=app, user_id=U1, session_id=s2))
    seen.append(sorted(s.id for s in (await svc.list_sessions(app_name=app)).sessions))
    with pytest.raises(AlreadyExistsError, match=f"Session with id {s1} already exists"):
        await svc.create_session(app_name=app, user_id=U1, session_id=s1)
    return seen


async def test_state_listing_deletion_as_in_memory_service(
        service: SurfacelogSessionService, where: Deployment) -> None:
    assert await _script(service, where) == await _script(InMemorySessionService(), where)


@pytest.mark.parametrize("where", ["memory", *RAY], indirect=True)
async def test_delete_is_a_tombstone_and_append_refused(where: Deployment) -> None:
    service = await where.service()
    store = service.store
    assert store is not None
    app, sid = where.app, where.name("s")
    session = await service.create_session(app_name=app, user_id=U1, session_id=sid)
    await service.append_event(session, _events()[0])
    await service.delete_session(app_name=app, user_id=U1, session_id=sid)
    with pytest.raises(SessionMissing):
        await service.append_event(session, _events()[1])
    with pytest.raises(SessionDeleted):  # hidden from loading, kept until a purge
        await store.load(sid)
    await store.purge_session(sid)
    again = await service.create_session(app_name=app, user_id=U1, session_id=sid)
    assert again.events == [] and again.state == {}
    first = _events()[0]
    await service.append_event(again, first.model_copy(deep=True))  # a new one, same id
    back = await service.get_session(app_name=app, user_id=U1, session_id=sid)
    assert back is not None and back.events == [first]
    await service.close()


async def test_wrong_scope_sees_nothing(service: SurfacelogSessionService,
                                       where: Deployment) -> None:
    app, sid = where.app, where.name("s")
    s = await service.create_session(app_name=app, user_id=U1, session_id=sid)
    assert await service.get_session(app_name="x", user_id=U1, session_id=sid) is None
    await service.delete_session(app_name=app, user_id=U2, session_id=sid)  # not theirs
    assert await service.get_session(app_name=app, user_id=U1, session_id=sid) == s


# -- a real Runner with a scripted model and a tool --------------------------------------

def get_weather(city: str, tool_context: ToolContext) -> dict[str, str]:
    """The weather in a city."""
    tool_context.state["user:last_city"] = city
    tool_context.state["temp:calls"] = 1
    return {"city": city, "weather": "sunny"}


class ScriptedLlm(BaseLlm):
    """Calls ``get_weather`` for the user's last text, then answers from its result."""

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1].parts or []
        if not llm_request.tools_dict:  # ADK's LlmEventSummarizer asks for a summary
            yield LlmResponse(content=types.Content(role="model", parts=[
                types.Part(text=f"summary of {len(llm_request.contents)} contents")]))
            return
        answer = next((p.function_response for p in last if p.function_response), None)
        if answer is not None:
            text = f"{answer.response['city']}: {answer.response['weather']}"
            yield LlmResponse(content=types.Content(role="model",
                                                    parts=[types.Part(text=text)]))
            return
        city = next(p.text for p in last if p.text)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(
            function_call=types.FunctionCall(name="get_weather", args={"city": city}))]))


def _runner(svc: BaseSessionService, app: str) -> Runner:
    agent = LlmAgent(name="weather", model=ScriptedLlm(model="scripted"),
                     instruction="Answer with the weather.", tools=[get_weather])
    return Runner(app_name=app, agent=agent, session_service=svc)


async def _turn(runner: Runner, session_id: str, text: str) -> list[str]:
    out = []
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=U1, session_id=session_id,
                                        new_message=message):
        for part in (event.content.parts or []) if event.content else []:
            if part.text:
                out.append(part.text)
    return out


def _shape(events: list[Event]) -> list[Any]:
    """What a run wrote, without its ids and clocks."""
    out = []
    for e in events:
        parts = []
        for p in (e.content.parts or []) if e.content else []:
            if p.function_call:
                parts.append(("call", p.function_call.name, p.function_call.args))
            elif p.function_response:
                parts.append(("result", p.function_response.response))
            else:
                parts.append(("text", p.text))
        out.append((e.author, parts, e.actions.state_delta))
    return out


async def test_runner_end_to_end_with_restart(where: Deployment) -> None:
    path = where.path
    app, sid = where.app, where.name("r")
    reference = InMemorySessionService()
    await reference.create_session(app_name=app, user_id=U1, session_id=sid)
    ref_runner = _runner(reference, app)
    ours = await where.service()
    await ours.create_session(app_name=app, user_id=U1, session_id=sid)
    assert await _turn(_runner(ours, app), sid, "Paris") == ["Paris: sunny"]
    assert await _turn(ref_runner, sid, "Paris") == ["Paris: sunny"]
    before = await ours.get_session(app_name=app, user_id=U1, session_id=sid)
    await ours.close()
    # a restart in another process: the file alone holds the history and the state
    # (over Ray too: an embedded service reads what the shard's writer committed)
    code = ("import asyncio, sys\n"
            "from surfacelog.integrations.adk import SurfacelogSessionService\n"
            "async def main():\n"
            "    s = SurfacelogSessionService(path=sys.argv[1])\n"
            "    got = await s.get_session(app_name=sys.argv[2], user_id='u1',\n"
            "                              session_id=sys.argv[3])\n"
            "    print(len(got.events), sorted(got.state))\n"
            "    await s.close()\n"
            "asyncio.run(main())\n")
    done = subprocess.run([sys.executable, "-c", code, str(path), app, sid], check=True,
                          capture_output=True, text=True)
    assert done.stdout.split("\n")[0] == "4 ['user:last_city']"
    ours = await where.restart(ours)
    after = await ours.get_session(app_name=app, user_id=U1, session_id=sid)
    assert before is not None and after is not None and after.events == before.events
    assert await _turn(_runner(ours, app), sid, "Oslo") == ["Oslo: sunny"]
    assert await _turn(ref_runner, sid, "Oslo") == ["Oslo: sunny"]
    got = await ours.get_session(app_name=app, user_id=U1, session_id=sid)
    ref = await reference.get_session(app_name=app, user_id=U1, session_id=sid)
    assert got is not None and ref is not None
    assert _shape(got.events) == _shape(ref.events)
    assert len(got.events) == 8 and got.state == ref.state == {"user:last_city": "Oslo"}
    await ours.close()


def _compacting_runner(svc: BaseSessionService, name: str) -> Runner:
    agent = LlmAgent(name="weather", model=ScriptedLlm(model="scripted"),
                     instruction="Answer with the weather.", tools=[get_weather])
    app = App(name=name, root_agent=agent, events_compaction_config=EventsCompactionConfig(
        compaction_interval=2, overlap_size=0,
        summarizer=LlmEventSummarizer(llm=ScriptedLlm(model="summarizer"))))
    return Runner(app=app, session_service=svc)


# ADK marks its events compaction experimental and says so on every App that uses it:
# this test uses it on purpose, and the notice would only repeat in every run's summary.
@pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] EventsCompactionConfig:UserWarning")
async def test_runner_compaction_is_a_surface_replace(where: Deployment) -> None:
    """ADK's own compaction (every 2 invocations) through our service, with a restart
    between turns: the events ADK reads back match ADK's in-memory service; the
    compaction event replaces what it summarises on the surface, citing it."""
    app, sid = where.app, where.name("c")
    reference = InMemorySessionService()
    await reference.create_session(app_name=app, user_id=U1, session_id=sid)
    ref_runner = _compacting_runner(reference, app)
    ours = await where.service()
    await ours.create_session(app_name=app, user_id=U1, session_id=sid)
    for n, city in enumerate(["Paris", "Oslo", "Rome"]):
        if n == 2:  # restart
            ours = await where.restart(ours)
        assert await _turn(_compacting_runner(ours, app), sid, city) == [f"{city}: sunny"]
        assert await _turn(ref_runner, sid, city) == [f"{city}: sunny"]
    got = await ours.get_session(app_name=app, user_id=U1, session_id=sid)
    ref = await reference.get_session(app_name=app, user_id=U1, session_id=sid)
    assert got is not None and ref is not None
    assert _shape(got.events) == _shape(ref.events)
    compactions = [e for e in got.events if e.actions.compaction]
    assert len(compactions) == 1 == len([e for e in ref.events if e.actions.compaction])
    store = ours.store
    assert store is not None
    log = await store.load(sid)
    checkpoint = next(e for e in log.log if e.type == "user/message"
                      and e.data["source"]["adk"]["event"]["actions"].get("compaction"))
    assert isinstance(checkpoint.surface_op, ReplaceOp)
    cited = list(checkpoint.source_event_seqs)
    assert len(cited) == 8  # two invocations of 4 events each
    assert checkpoint.data["content"][0]["text"].startswith("summary of")
    nodes = log.surface.nodes
    assert checkpoint.seq in nodes and not set(cited) & set(nodes)  # hidden, not gone
    assert all(log.event(s).type for s in cited)
    await ours.close()


def test_import_surfacelog_needs_no_adk() -> None:
    code = ("import sys\n"
            "import surfacelog, surfacelog.integrations.adk, surfacelog.integrations.adk.mapping\n"
            "assert 'google.adk' not in sys.modules, 'google.adk imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_duplicate_create_is_adk_already_exists(
        service: SurfacelogSessionService, where: Deployment) -> None:
    app, sid = where.app, where.name("d")
    await service.create_session(app_name=app, user_id=U1, session_id=sid)
    with pytest.raises(SessionAlreadyExists, match="already exists"):
        await service.create_session(app_name=app, user_id=U1, session_id=sid)


# -- capabilities, and several services on one deployment ---------------------------------

async def test_a_store_without_scopes_is_refused_when_the_service_is_built(
        tmp_path: Path) -> None:
    from surfacelog.store.dsh_root import DshRootEventStore
    from surfacelog.store.errors import Unsupported

    store = await DshRootEventStore.open(tmp_path / "root")
    try:
        with pytest.raises(Unsupported, match=r"DshRootEventStore does not support scopes"):
            SurfacelogSessionService(store=store)
    finally:
        await store.close()
    with pytest.raises(ValueError, match="exactly one"):
        SurfacelogSessionService()


async def test_a_second_service_on_the_same_sessions(where: Deployment) -> None:
    """Embedded, the service that writes last takes the session: the earlier writer is
    fenced. Over Ray the session actor is the one writer: both services append, each
    after what the other wrote (an append planned on an older read is mapped again)."""
    from surfacelog.runtime import SessionLike
    from surfacelog.store.errors import WriterFenced

    app, sid = where.app, where.name("two")
    first, second = await where.service(), await where.service()
    session = await first.create_session(app_name=app, user_id=U1, session_id=sid)
    events = _events()
    await first.append_event(session, events[0].model_copy(deep=True))
    seen = await second.get_session(app_name=app, user_id=U1, session_id=sid)
    assert seen is not None and seen.events == events[:1]
    await second.append_event(seen, events[1].model_copy(deep=True))
    if where.embedded:
        with pytest.raises(WriterFenced):
            await first.append_event(session, events[2].model_copy(deep=True))
        await first.close()
        first = await where.service()
        expected = events[:2]
    else:
        assert isinstance(where.client.session(sid), SessionLike)
        # first has not read events[1]: its append is re-mapped after it
        await first.append_event(session, events[2].model_copy(deep=True))
        expected = events[:3]
    for service in (first, second):
        got = await service.get_session(app_name=app, user_id=U1, session_id=sid)
        assert got is not None and got.events == expected
    await first.close()
    await second.close()


@pytest.mark.parametrize("reverse", [False, True])
async def test_get_session_orders_by_timestamp_then_id(service: SurfacelogSessionService,
                                                       where: Deployment,
                                                       reverse: bool) -> None:
    """As ADK's database services (issue 28; ADK's own
    test_get_session_orders_tied_timestamps_by_id): events of one timestamp come back
    ordered by id whatever order they were appended in, and an event stamped earlier
    than those before it comes back in its place, with ``num_recent_events`` cutting
    that order; the same after a restart (read back from the log)."""
    app = where.app
    ids = ["event_a", "event_m", "event_z"]
    s = await service.create_session(app_name=app, user_id=U1)
    for event_id in reversed(ids) if reverse else ids:
        await service.append_event(s, Event(author="user", id=event_id, timestamp=100.0))
    await service.append_event(s, Event(author="user", id="early", timestamp=50.0))
    want = ["early", *ids]
    got = await service.get_session(app_name=app, user_id=U1, session_id=s.id)
    assert got is not None and [e.id for e in got.events] == want
    last = await service.get_session(app_name=app, user_id=U1, session_id=s.id,
                                     config=GetSessionConfig(num_recent_events=2))
    assert last is not None and [e.id for e in last.events] == want[-2:]
    again = await where.restart(service)
    try:
        got = await again.get_session(app_name=app, user_id=U1, session_id=s.id)
        assert got is not None and [e.id for e in got.events] == want
    finally:
        await again.close()
