"""The OpenAI Agents SDK adapter (issue 14, item 1): the exact item mapping, pop and clear
on an append-only log, a real ``agents.Runner`` with a scripted ``Model`` over the
embedded store (with a compaction and a restart in a fresh process), and one run
through a real Ray ``SessionHandle``.

The SDK ships no session conformance suite (``agents`` 0.24 has ``agents.testing`` with
a scripted model only), so the SDK's own ``SQLiteSession`` is the reference: the same
run must leave the same items in both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from surfacelog.integrations.openai_agents import (
    PopRefused,
    SurfacelogSession,
    UnmappableItem,
    items_of,
    map_item,
)
from surfacelog.integrations.openai_agents.mapping import (
    OPAQUE_ITEM,
    OPAQUE_PART,
    RESIDUAL,
    foreign_items,
    residual_of,
)
from surfacelog.schema.codec import decode_json, encode_json
from surfacelog.session import Session
from surfacelog.store.errors import SessionNotFound
from surfacelog.store.sqlite import SqliteEventStore

from support import paths
from support.installed import require

require("agents", "openai-agents is not installed (pip install surfacelog[openai-agents])")

ROOT = paths.REPO

# -- items -------------------------------------------------------------------------------

EXAMPLES: list[dict[str, Any]] = [
    {"role": "user", "content": "hi"},
    {"role": "user", "content": ""},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
    {"role": "system", "content": "be brief"},
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}],
     "id": "m1", "status": "completed"},
    {"role": "assistant", "content": "plain"},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "hello", "annotations": [],
                  "logprobs": []},
                 {"type": "refusal", "refusal": "no"}]},
    {"id": "msg_2", "type": "message", "role": "assistant", "status": "completed",
     "content": []},
    {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{\"d\":1}",
     "id": "fc_1", "status": "completed"},
    {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
    {"type": "function_call_output", "call_id": "c2", "id": "x", "status": None,
     "output": [{"type": "input_text", "text": "t"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA",
                 "detail": "low"},
                {"type": "input_file", "file_id": "file-1"}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "s"}],
     "content": [{"type": "reasoning_text", "text": "r"}], "encrypted_content": "gAAA"},
    {"type": "reasoning", "id": "rs_3", "summary": [], "content": []},
    {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                 {"type": "input_image", "image_url": "https://x/y.png",
                                  "detail": "auto"},
                                 {"type": "input_file", "filename": "a.pdf",
                                  "file_data": "data:application/pdf;base64,JVBE"},
                                 {"type": "input_audio", "input_audio": {"data": "UklG",
                                                                         "format": "wav"}}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "q"}},
    {"type": "computer_call_output", "call_id": "cc", "output": {"type": "computer_screenshot",
                                                                 "image_url": "u"}},
    {"type": "item_reference", "id": "ref_1"},
    {"type": "compaction", "encrypted_content": "xyz"},
    {"type": "function_call", "call_id": "", "name": "n", "arguments": "{}"},  # empty id
    {"type": "message", "role": "user", "content": 5},
]

JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53 + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8)
EXTRA = st.dictionaries(st.sampled_from(["id", "status", "extra", "namespace", "openai"]),
                        JSON_VALUE, max_size=2)
TEXT_PART = st.builds(lambda t, kind, extra: {**extra, "type": kind, "text": t},
                      st.text(max_size=10), st.sampled_from(["input_text", "output_text"]),
                      st.dictionaries(st.sampled_from(["annotations", "logprobs", "x"]),
                                      JSON_VALUE, max_size=2))
PART = TEXT_PART | st.dictionaries(st.text(max_size=5), JSON_VALUE, max_size=3) | JSON_VALUE
ITEM = st.one_of(
    st.builds(lambda role, content, extra: {**extra, "role": role, "content": content},
              st.sampled_from(["user", "assistant", "system", "developer"]),
              st.text(max_size=10) | st.lists(PART, max_size=3), EXTRA),
    st.builds(lambda cid, name, args, extra: {**extra, "type": "function_call",
                                              "call_id": cid, "name": name,
                                              "arguments": args},
              st.text(max_size=6), st.text(max_size=6), st.text(max_size=10), EXTRA),
    st.builds(lambda cid, out, extra: {**extra, "type": "function_call_output",
                                       "call_id": cid, "output": out},
              st.text(max_size=6), st.text(max_size=10) | st.lists(PART, max_size=3), EXTRA),
    st.builds(lambda summary, content, extra: {
        **extra, "type": "reasoning", "summary": summary,
        **({} if content is None else {"content": content})},
        st.lists(st.builds(lambda t: {"type": "summary_text", "text": t}, st.text(max_size=5))
                 | PART, max_size=3),
        st.none() | st.lists(st.builds(lambda t: {"type": "reasoning_text", "text": t},
                                       st.text(max_size=5)) | PART, max_size=2), EXTRA),
    st.dictionaries(st.text(max_size=8), JSON_VALUE, max_size=4),
)


def _event_of(item: dict[str, Any]) -> Session:
    """A pure session holding ``item`` as the adapter would log it (validated by the
    core on append)."""
    mapped = map_item(item, "m")
    session = Session()
    if mapped.event_type == "tool/result":
        cid = mapped.message["source"]["callId"]
        session.append("tool/call", {"turn": 0, "step": 0, "callId": cid, "name": "",
                                     "arguments": ""})
        session.append("tool/result", {"turn": 0, "step": 0, "message": mapped.message},
                       surface_op="append", source_event_seqs=[0])
    elif mapped.event_type == "assistant/message":
        session.append("assistant/message", {"turn": 0, "step": 0,
                                             "message": mapped.message},
                       surface_op="append")
    else:
        session.append(mapped.event_type, mapped.message, surface_op="append")
    return session


def _round_trip(item: dict[str, Any]) -> None:
    session = _event_of(item)
    messages = session.derive_messages().to_list()
    assert len(messages) == 1, "every item is exactly one visible message"
    stored = decode_json(encode_json(messages[0]))  # as it comes back from the store
    assert items_of(stored) == [item]


@pytest.mark.parametrize("item", EXAMPLES, ids=lambda i: str(i.get("type", i.get("role"))))
def test_each_example_round_trips_exactly(item: dict[str, Any]) -> None:
    _round_trip(item)


@settings(max_examples=300, deadline=None)
@given(ITEM)
# Found by the property (CI, 4 December 2026): a "type" that is not a string was looked
# up among the mappers and raised TypeError (unhashable).
@example({"type": []})
@example({"type": {"k": 1}, "role": "user"})
@example({"type": 3})
# Found by the property again (a clean-clone CI run, 6 December 2026): a content part
# whose "type" is not a string was looked up among the text parts' types and raised
# TypeError (unhashable), where it must be kept as an opaque part.
@example({"role": "user", "content": [{"type": []}]})
@example({"type": "message", "role": "assistant",
          "content": [{"type": {"k": 1}, "text": "x"}]})
def test_any_json_item_round_trips_exactly(item: dict[str, Any]) -> None:
    _round_trip(item)


@pytest.mark.parametrize("named", [[], {"k": 1}, None, 3, "no such item"])
def test_a_residual_naming_no_item_is_read_as_a_foreign_message(named: Any) -> None:
    """A stored message whose residual names no item the adapter writes (a list, an
    object: whatever a file holds) is read as a message the adapter did not write."""
    message = {"id": "m1", "role": "user", "content": [{"type": "text", "text": "hi"}],
               "source": {"kind": "user", RESIDUAL: {"item": named}}}
    assert residual_of(message) is None
    assert items_of(message) == foreign_items(message) == [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


WELL_FORMED = st.one_of(
    st.builds(lambda role, content, extra: {**extra, "role": role, "content": content},
              st.sampled_from(["user", "assistant", "system", "developer"]),
              st.text(max_size=10) | st.lists(PART, max_size=3), EXTRA),
    st.builds(lambda cid, name, args, extra: {**extra, "type": "function_call",
                                              "call_id": cid, "name": name,
                                              "arguments": args},
              st.text(min_size=1, max_size=6), st.text(max_size=6), st.text(max_size=10),
              EXTRA),
    st.builds(lambda cid, out, extra: {**extra, "type": "function_call_output",
                                       "call_id": cid, "output": out},
              st.text(min_size=1, max_size=6),
              st.text(max_size=10) | st.lists(PART, max_size=3), EXTRA),
    st.builds(lambda summary, content, extra: {
        **extra, "type": "reasoning", "summary": summary,
        **({} if content is None else {"content": content})},
        st.lists(st.builds(lambda t: {"type": "summary_text", "text": t}, st.text(max_size=5))
                 | PART, max_size=3),
        st.none() | st.lists(PART, max_size=2), EXTRA),
)


@settings(max_examples=300, deadline=None)
@given(WELL_FORMED)
def test_the_specific_rules_are_exact_without_the_opaque_fallback(item: dict[str, Any]
                                                                  ) -> None:
    """``map_item`` falls back to an opaque block when a rule is not exact; that net
    must not hide a broken rule: each rule alone round-trips its well-formed items."""
    from surfacelog.integrations.openai_agents import mapping

    kind = item.get("type", "message")
    mapped = mapping._MAPPERS[kind](item, "m")
    assert mapped is not None
    assert items_of(decode_json(encode_json(mapped.message))) == [item]
    content = map_item(item, "m").message["content"]
    assert content == mapped.message["content"]  # the rule's blocks, not the fallback's
    assert all(b["type"] != OPAQUE_ITEM for b in content)


def test_items_become_dsh_blocks_where_dsh_has_them() -> None:
    """The mapping is not all opaque: text, tool calls, results and reasoning are DSH
    blocks other DSH readers (token estimate, compaction's safe cuts) understand."""
    user = map_item({"role": "user", "content": "hi"}, "m")
    assert (user.event_type, user.message["content"]) == \
        ("user/message", [{"type": "text", "text": "hi"}])
    call = map_item(EXAMPLES[8], "m")
    assert call.event_type == "assistant/message"
    assert call.message["content"] == [{"type": "tool-call", "id": "c1", "name": "ls",
                                        "arguments": "{\"d\":1}"}]
    out = map_item(EXAMPLES[9], "m")
    assert out.event_type == "tool/result"
    assert out.message["content"] == [{"type": "tool-result", "toolCallId": "c1",
                                       "content": [{"type": "text", "text": "a.txt"}]}]
    reasoning = map_item(EXAMPLES[12], "m").message["content"]
    assert [b["type"] for b in reasoning] == ["reasoning", "reasoning"]
    image = map_item(EXAMPLES[14], "m").message["content"]
    assert [b["type"] for b in image] == ["text", OPAQUE_PART, OPAQUE_PART, OPAQUE_PART]
    assert map_item(EXAMPLES[15], "m").message["content"][0]["type"] == OPAQUE_ITEM
    # An item the specific rule cannot carry (empty call id) is kept whole, exactly.
    assert map_item(EXAMPLES[19], "m").message["content"][0]["type"] == OPAQUE_ITEM


@pytest.mark.parametrize("bad", [["not", "a", "dict"], {"role": "user", "content": ("t",)},
                                 {"role": "user", "content": math.nan}, {1: "x"}])
def test_items_a_json_round_trip_would_change_are_refused(bad: Any) -> None:
    with pytest.raises(UnmappableItem) as err:
        map_item(bad, "m", 3)
    assert err.value.rule == "openai-item" and "item 3" in str(err.value)


# -- pop and clear on the embedded store ---------------------------------------------------

async def _log(path: Path, session_id: str) -> Session:
    store = await SqliteEventStore.open(path)
    try:
        return await store.load(session_id)
    finally:
        await store.close()


async def test_pop_and_clear_keep_the_log_append_only(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    s = SurfacelogSession("p", db)
    first = [EXAMPLES[0], EXAMPLES[8], EXAMPLES[9], EXAMPLES[6]]
    await s.add_items(first)
    assert await s.get_items() == first
    assert await s.get_items(limit=2) == first[2:]
    assert await s.get_items(limit=0) == []
    assert await s.get_items(limit=-1) == first

    assert await s.pop_item() == EXAMPLES[6]
    assert await s.get_items() == first[:3]
    await s.close()
    log = await _log(db, "p")
    eraser = log.log[-1]
    assert eraser.type == "assistant/message" and eraser.data["message"]["content"] == []
    popped_seq = eraser.source_event_seqs[0]
    assert log.event(popped_seq).data["message"]["id"]  # still in the log, off the surface
    assert popped_seq not in log.surface.nodes
    length = len(log)

    s = SurfacelogSession("p", db)
    assert await s.get_items() == first[:3]  # reopened
    assert await s.pop_item() == EXAMPLES[9]  # skips the eraser, merges it
    await s.add_items([EXAMPLES[1]])
    assert await s.get_items() == [*first[:2], EXAMPLES[1]]
    await s.clear_session()
    assert await s.get_items() == []
    assert await s.pop_item() is None
    await s.clear_session()  # nothing to clear: nothing appended
    await s.close()

    log = await _log(db, "p")
    assert len(log) > length
    every = [e for e in log.log if e.type in ("user/message", "assistant/message",
                                              "tool/result")]
    assert len(every) == 8  # 5 items + 3 erasers: nothing was ever removed
    clear = log.log[-1]
    assert clear.surface_op.start == log.event(clear.source_event_seqs[0]).seq
    assert list(log.surface.nodes) == [clear.seq]
    assert log.derive_messages().to_list() == []
    # Time travel still shows the popped and cleared items.
    before = log.derive_messages(as_of=clear.seq - 1).to_list()
    assert [i for m in before for i in items_of(m)] == [*first[:2], EXAMPLES[1]]


OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.sampled_from(EXAMPLES[:19]), max_size=3)),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("clear"), st.none()),
    st.tuples(st.just("get"), st.none() | st.integers(-1, 6))), max_size=12)


@settings(max_examples=25, deadline=None)
@given(OPS)
def test_any_sequence_of_calls_behaves_like_sqlite_session(ops: list[Any]) -> None:
    """Against the SDK's ``SQLiteSession`` as the reference: the same answers to every
    call, while the log only grows (every event ever logged stays, in place)."""
    from agents import SQLiteSession

    async def run(root: Path) -> None:
        ref = SQLiteSession("x")
        store = await SqliteEventStore.open(root / "h.db")
        ours = SurfacelogSession("x", store=store, durable=False)
        assert await ours.get_items() == []  # reading stores nothing (see below)
        before: list[Any] = []
        for op, arg in ops:
            if op == "add":
                await ours.add_items(arg)
                await ref.add_items(arg)
            elif op == "pop":
                assert await ours.pop_item() == await ref.pop_item()
            elif op == "clear":
                await ours.clear_session()
                await ref.clear_session()
            else:
                assert await ours.get_items(arg) == await ref.get_items(arg)
            await ours.flush()
            try:
                log = list((await store.load("x")).log)
            except SessionNotFound:  # only a write stores the session, as in the SDK
                assert not before
                log = []
            assert log[: len(before)] == before
            before = log
        assert await ours.get_items() == await ref.get_items()
        await ours.close()
        await store.close()
        ref.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(Path(tmp)))


def test_it_is_a_compaction_aware_sdk_session(tmp_path: Path) -> None:
    from agents.memory import Session as SdkSession
    from agents.memory.session import is_openai_responses_compaction_aware_session

    s = SurfacelogSession("k", tmp_path / "k.db")
    assert isinstance(s, SdkSession)
    assert is_openai_responses_compaction_aware_session(s)


async def test_a_tool_result_cites_its_tool_call(tmp_path: Path) -> None:
    s = SurfacelogSession("t", tmp_path / "t.db")
    await s.add_items([EXAMPLES[8]])
    await s.add_items([EXAMPLES[9]])  # the output of an earlier call, another batch
    await s.close()
    log = await _log(tmp_path / "t.db", "t")
    call, result = log.log[-2], log.log[-1]
    assert call.type == "tool/call" and result.type == "tool/result"
    assert call.data == {"turn": 0, "step": 0, "callId": "c1", "name": "ls",
                         "arguments": "{\"d\":1}"}
    assert list(result.source_event_seqs) == [call.seq]


async def test_pop_refuses_a_node_of_several_items(tmp_path: Path) -> None:
    store = await SqliteEventStore.open(tmp_path / "f.db")
    s = SurfacelogSession("f", store=store)
    await s.add_items([EXAMPLES[0]])
    opened = await store.open_session("f")  # a DSH-style writer (fences the adapter)
    msg = {"id": "a", "role": "assistant", "source": {"kind": "model", "provider": "p",
                                                      "model": "m"},
           "content": [{"type": "text", "text": "x"},
                       {"type": "tool-call", "id": "k", "name": "n", "arguments": "{}"}]}
    event = opened.session.append("assistant/message", {"turn": 1, "step": 1,
                                                        "message": msg}, surface_op="append")
    await store.append("f", [event], epoch=opened.epoch)
    s = SurfacelogSession("f", store=store)
    assert await s.get_items() == [EXAMPLES[0], {"role": "assistant", "content": "x"},
                                   {"type": "function_call", "call_id": "k", "name": "n",
                                    "arguments": "{}"}]
    with pytest.raises(PopRefused) as err:
        await s.pop_item()
    assert err.value.seq == event.seq and err.value.event_type == "assistant/message"
    await s.close()
    with pytest.raises(RuntimeError, match="SurfacelogSession is closed"):
        await s.get_items()  # used after close: refused, as SQLiteSession's
    await s.close()
    await store.close()


async def test_unmappable_items_append_nothing(tmp_path: Path) -> None:
    s = SurfacelogSession("u", tmp_path / "u.db")
    await s.add_items([EXAMPLES[0]])
    with pytest.raises(UnmappableItem):
        await s.add_items([EXAMPLES[1], {"role": "user", "content": ("t",)}])
    assert await s.get_items() == [EXAMPLES[0]]
    # As SQLiteSession.add_items, a TypeError for what JSON cannot encode (issue 28).
    with pytest.raises(TypeError):
        await s.add_items([{"role": "user", "content": object()}])
    assert await s.get_items() == [EXAMPLES[0]]
    await s.close()


# -- a real Runner with a scripted model -----------------------------------------------------

EXPLANATION = "It follows from adding the two numbers the tool was given. " * 12


def _scripted_model() -> Any:
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseReasoningItem,
    )
    from openai.types.responses.response_reasoning_item import Summary

    class Scripted(Model):
        """Each turn: a reasoning item and a tool call, then (after the tool ran) a text
        answer. Records the input of every call."""

        def __init__(self) -> None:
            self.inputs: list[list[dict[str, Any]]] = []
            self.n = 0

        async def get_response(self, system_instructions: Any, input: Any,
                               model_settings: Any, tools: Any, output_schema: Any,
                               handoffs: Any, tracing: Any, *, previous_response_id: Any,
                               conversation_id: Any, prompt: Any) -> Any:
            items = [{"role": "user", "content": input}] if isinstance(input, str) else input
            self.inputs.append(json.loads(json.dumps(items)))
            self.n += 1
            last = items[-1]
            if isinstance(last, dict) and last.get("type") == "function_call_output":
                output: list[Any] = [ResponseOutputMessage(
                    id=f"msg_{self.n}", role="assistant", status="completed", type="message",
                    content=[ResponseOutputText(type="output_text", annotations=[],
                                                text=f"the answer is {last['output']}. "
                                                + EXPLANATION)])]
            else:
                output = [
                    ResponseReasoningItem(id=f"rs_{self.n}", type="reasoning",
                                          summary=[Summary(type="summary_text",
                                                           text=f"think {self.n}")]),
                    ResponseFunctionToolCall(id=f"fc_{self.n}", call_id=f"call_{self.n}",
                                             name="add", type="function_call",
                                             arguments=json.dumps({"a": self.n, "b": 1}),
                                             status="completed")]
            return ModelResponse(output=output, usage=Usage(), response_id=f"resp_{self.n}")

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("the test runs without streaming")

    return Scripted()


def _agent(model: Any) -> Any:
    from agents import Agent, function_tool

    @function_tool
    def add(a: int, b: int) -> str:
        """Add two numbers."""
        return str(a + b)

    return Agent(name="calc", instructions="use the tool", model=model, tools=[add])


async def _turns(session: Any, model: Any, prompts: list[str]) -> None:
    from agents import Runner

    agent = _agent(model)
    for prompt in prompts:
        result = await Runner.run(agent, prompt, session=session)
        assert result.final_output.startswith("the answer is")


async def test_runner_matches_the_sdks_own_sqlite_session(tmp_path: Path) -> None:
    """The same scripted run leaves exactly the same items as ``SQLiteSession``, and the
    model saw exactly the same inputs."""
    from agents import SQLiteSession

    ref_model, our_model = _scripted_model(), _scripted_model()
    ref = SQLiteSession("r", tmp_path / "sdk.db")
    ours = SurfacelogSession("r", tmp_path / "ours.db", compact_at=10**9)
    prompts = ["one", "two", "three"]
    await _turns(ref, ref_model, prompts)
    await _turns(ours, our_model, prompts)
    expected = await ref.get_items()
    assert len(expected) == 3 * 5  # user, reasoning, call, output, answer
    assert await ours.get_items() == expected
    assert our_model.inputs == ref_model.inputs
    assert await ours.pop_item() == await ref.pop_item()
    assert await ours.get_items() == await ref.get_items()
    ref.close()
    await ours.close()


READ_BACK = """
import asyncio, json, sys
from surfacelog.integrations.openai_agents import SurfacelogSession
async def main():
    s = SurfacelogSession(sys.argv[2], sys.argv[1])
    print(json.dumps(await s.get_items()))
    await s.close()
asyncio.run(main())
"""


async def test_runner_with_compaction_and_a_restart(tmp_path: Path) -> None:
    """Several turns with tool calls; the Runner's ``run_compaction`` compacts once the
    surface is large; a fresh process reads the same history back; the run continues
    after the restart with the model seeing that history."""
    from agents import SQLiteSession

    db = tmp_path / "agent.db"
    model, ref_model = _scripted_model(), _scripted_model()
    s = SurfacelogSession("conv", db, compact_at=400, retain_tokens=150)
    ref = SQLiteSession("conv", tmp_path / "sdk.db")
    await _turns(s, model, ["one", "two", "three", "four"])
    await _turns(ref, ref_model, ["one", "two", "three", "four"])
    history = await s.get_items()
    full = await ref.get_items()
    await s.close()

    log = await _log(db, "conv")
    checkpoints = [e for e in log.log if e.type == "user/message"
                   and e.data["source"].get("plugin") == "compact"]
    assert checkpoints, "the Runner's run_compaction compacted"
    last = checkpoints[-1]
    assert set(last.source_event_seqs) >= {last.surface_op.start, last.surface_op.end}
    # What the SDK sees: the checkpoint, then the kept tail exactly as the SDK wrote it.
    assert history[0]["role"] == "user" and "compacted-summary" in json.dumps(history[0])
    tail = history[1:]
    assert tail and tail == full[len(full) - len(tail):]
    assert len(history) < len(full)
    # Every original item is still in the log, off the surface.
    logged = [i for e in log.log if e.type in ("user/message", "assistant/message",
                                               "tool/result")
              for m in [e.data if e.type == "user/message" else e.data["message"]]
              if m["content"] and m["source"].get("plugin") != "compact"
              for i in items_of(m)]
    assert logged == full

    # A restart: a fresh process reads the same history.
    out = subprocess.run([sys.executable, "-c", READ_BACK, str(db), "conv"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == history

    # And the run goes on from it: the model's next input is that history plus the prompt.
    s = SurfacelogSession("conv", db, compact_at=10**9)
    model2 = _scripted_model()
    await _turns(s, model2, ["five"])
    assert model2.inputs[0] == [*history, {"content": "five", "role": "user"}]
    assert (await s.get_items())[: len(history)] == history
    await s.close()
    ref.close()


# -- event loops, threads and close (issue 28: as the SDK's SQLiteSession) -----------------

def _add_from_threads(session: SurfacelogSession, count: int) -> None:
    """Add ``count`` items, each from a thread of five with an event loop of its own."""
    def add(k: int) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(
                session.add_items([{"role": "user", "content": f"m{k}"}]))
        finally:
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(add, range(count)))


def _run_sync_in_thread(session: Any, model: Any, prompt: str) -> Any:
    """``Runner.run_sync`` as a sync caller makes it: in a thread with no running loop
    (it runs the agent on a loop of its own, then closes that loop)."""
    from agents import Runner

    return Runner.run_sync(_agent(model), prompt, session=session)


async def test_run_sync_then_run_on_another_loop(tmp_path: Path) -> None:
    """Before issue 28 the second run failed with ``RuntimeError: Event loop is
    closed``: the store opened on run_sync's loop was used after that loop closed."""
    from agents import SQLiteSession

    ours = SurfacelogSession("rs", tmp_path / "rs.db", compact_at=10**9)
    ref = SQLiteSession("rs", tmp_path / "sdk.db")
    for session, model in ((ours, _scripted_model()), (ref, _scripted_model())):
        result = await asyncio.to_thread(_run_sync_in_thread, session, model, "one")
        assert result.final_output.startswith("the answer is")
        await asyncio.to_thread(_run_sync_in_thread, session, model, "two")
        await _turns(session, model, ["three"])
    assert await ours.get_items() == await ref.get_items()
    ours.close()
    ref.close()


def test_used_from_threads_each_with_a_loop_at_once(tmp_path: Path) -> None:
    """Five threads, each with its own event loop, add to one session at once (the
    SDK's test_sqlite_session_concurrent_access): every item lands once."""
    session = SurfacelogSession("threads", tmp_path / "t.db")

    _add_from_threads(session, 20)
    items = asyncio.run(session.get_items())
    assert sorted(str(item["content"]) for item in items) == sorted(f"m{k}" for k in range(20))
    session.close()  # sync, as SQLiteSession.close()
    with pytest.raises(RuntimeError, match="SurfacelogSession is closed"):
        asyncio.run(session.get_items())


async def test_a_closed_session_refuses_every_operation(tmp_path: Path) -> None:
    """As ``SQLiteSession``: after ``close()`` (called without ``await`` too) every
    operation raises ``RuntimeError``, ``add_items([])`` included; closing again does
    nothing. Before issue 28 a closed session accepted writes (reopening itself)."""
    session = SurfacelogSession("closed", tmp_path / "c.db")
    await session.add_items([EXAMPLES[0]])
    session.close()
    for call in (lambda: session.add_items([]), lambda: session.add_items([EXAMPLES[0]]),
                 session.get_items, session.pop_item, session.clear_session,
                 session.flush, lambda: session.run_compaction({"force": True})):
        with pytest.raises(RuntimeError, match="SurfacelogSession is closed"):
            await call()
    await session.close()
    log = await _log(tmp_path / "c.db", "closed")
    assert [e.type for e in log.log].count("user/message") == 1


async def test_session_settings_normalised_as_the_sdk_does(tmp_path: Path) -> None:
    from agents.memory import SessionSettings

    s = SurfacelogSession("st", tmp_path / "st.db", session_settings={"limit": 1})
    assert s.session_settings == SessionSettings(limit=1)
    assert SurfacelogSession("st", tmp_path / "st.db").session_settings == SessionSettings()
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        SurfacelogSession("st", tmp_path / "st.db", session_settings={"limitt": 1})
    await s.add_items([EXAMPLES[0], EXAMPLES[5]])
    assert await s.get_items() == [EXAMPLES[5]]
    s.close()


# -- through Ray ---------------------------------------------------------------------------

@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
async def test_through_a_ray_session_handle(tmp_path: Path) -> None:
    from agents import SQLiteSession

    from surfacelog.actors.client import connect

    client = connect(db=str(tmp_path / "ray.db"), placement="packed", packs=1)
    try:
        ours = SurfacelogSession("ray-conv", handle=client.session("ray-conv"),
                                 compact_at=10**9)
        ref = SQLiteSession("ray-conv", tmp_path / "sdk.db")
        model, ref_model = _scripted_model(), _scripted_model()
        await _turns(ours, model, ["one", "two"])
        await _turns(ref, ref_model, ["one", "two"])
        assert await ours.get_items() == await ref.get_items()
        assert model.inputs == ref_model.inputs
        assert await ours.pop_item() == await ref.pop_item()
        assert await ours.get_items(limit=3) == await ref.get_items(limit=3)
        # A second adapter on the same handle sees and extends the same log.
        other = SurfacelogSession("ray-conv", handle=client.session("ray-conv"))
        await other.add_items([EXAMPLES[0]])
        await ref.add_items([EXAMPLES[0]])
        assert await ours.get_items() == await ref.get_items()
        ours.retain_tokens = 10
        await ours.run_compaction({"force": True})
        compacted = await ours.get_items()
        assert "compacted-summary" in json.dumps(compacted[0])
        await ours.clear_session()
        assert await other.get_items() == []
        events = await client.session("ray-conv").events()
        assert [e.type for e in events].count("tool/call") == 2
        ref.close()
        await ours.close()
    finally:
        client.shutdown()


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
def test_a_ray_handle_session_from_threads_each_with_a_loop(tmp_path: Path) -> None:
    """Over a Ray handle too, threads each with their own loop share one adapter at once
    and ``Runner.run_sync`` works (before issue 28 the adapter's lock, bound to the
    first caller's loop, failed the others)."""
    from surfacelog.actors.client import connect

    client = connect(db=str(tmp_path / "ray.db"), placement="packed", packs=1)
    try:
        session = SurfacelogSession("rt", handle=client.session("rt"), compact_at=10**9)

        _add_from_threads(session, 10)
        items = asyncio.run(session.get_items())
        assert sorted(str(i["content"]) for i in items) == sorted(f"m{k}" for k in range(10))
        result = _run_sync_in_thread(session, _scripted_model(), "one")
        assert result.final_output.startswith("the answer is")
        session.close()
        with pytest.raises(RuntimeError, match="SurfacelogSession is closed"):
            asyncio.run(session.get_items())
    finally:
        client.shutdown()
