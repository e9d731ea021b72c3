"""The wire schema (SPEC sections 2, 4 and 11): exact round trips, integer fields,
``null`` versus absent, the envelope's keys, extension types and the header."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from surfacelog.schema import (
    EVENT_TYPES,
    MAX_SAFE_INT,
    DecodeError,
    SessionHeader,
    SurfaceError,
    decode_event,
    decode_log,
    encode_event,
    encode_log,
    register_event_type,
)
from surfacelog.session import Session, replay

from support.shared_examples import EXAMPLES

LOGS = sorted(EXAMPLES.glob("*.jsonl"))


def lines_of(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_every_example_line_round_trips_exactly(path: Path) -> None:
    lines = lines_of(path)
    assert lines
    for line in lines:
        event = decode_event(line)
        assert json.loads(encode_event(event)) == json.loads(line)
        assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_every_example_log_round_trips_as_a_file(path: Path) -> None:
    log = decode_log(path.read_bytes())
    assert log.header is None
    out = encode_log(None, log.events).splitlines()
    original = lines_of(path)
    assert len(out) == len(original) == len(log.events)
    for ours, theirs in zip(out, original, strict=True):
        assert json.loads(ours) == json.loads(theirs)
    assert [e.seq for e in log.events] == list(range(len(log.events)))


SPEC_SECTION_4 = [
    '{"type":"turn/start","data":{"turn":1}}',
    '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}',
    '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"user"}}}}',
    '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"hook",'
    '"reason":"no"}}}}',
    '{"type":"turn/end","data":{"turn":1,"reason":{"kind":"error","error":{"message":"m",'
    '"code":"c"}}}}',
    '{"type":"step/start","data":{"turn":1,"step":1}}',
    '{"type":"step/end","data":{"turn":1,"step":1}}',
    '{"type":"assistant/chunk","data":{"turn":1,"step":1,"chunk":{"type":"text-delta",'
    '"index":0,"text":"Hel"}}}',
    '{"type":"assistant/chunk","data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta",'
    '"index":1,"id":"call-1","argumentsDelta":"{"}}}',
    '{"type":"assistant/chunk","data":{"turn":1,"step":1,"chunk":{"type":"usage","usage":'
    '{"inputTokens":1,"outputTokens":2,"cacheReadTokens":0}}}}',
    '{"type":"assistant/chunk","data":{"turn":1,"step":1,"chunk":{"type":"finish",'
    '"reason":{"kind":"stop"},"replayState":{"x":[1,2]}}}}',
    '{"type":"tool/call","data":{"turn":1,"step":1,"callId":"call-1","name":"bash",'
    '"arguments":"{}"}}',
    '{"type":"session/end-seed","data":{}}',
    '{"type":"todo/write","data":{"todos":[{"content":"ship","status":"pending"}]}}',
    '{"type":"request/header","data":{"header":{"config":{"provider":"p","model":"m"}},'
    '"reason":"initial"}}',
    '{"type":"request/context","data":{"provider":"p","model":"m","contextWindow":128000}}',
    '{"type":"user/message","data":{"id":"u-1","role":"user","source":{"kind":"user"},'
    '"content":[{"type":"text","text":"fix it"}]},"surfaceOp":"append"}',
    '{"type":"context/message","data":{"id":"c-1","role":"user","source":{"kind":"plugin",'
    '"plugin":"workspace"},"content":[{"type":"text","text":"<context>...</context>"}]},'
    '"surfaceOp":"append"}',
    '{"type":"assistant/message","data":{"turn":1,"step":1,"message":{"id":"a-1","role":'
    '"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":'
    '"text","text":"done"}]},"usage":{"inputTokens":20,"outputTokens":3}},'
    '"sourceEventSeqs":[5,6,7],"surfaceOp":"append"}',
    '{"type":"tool/result","data":{"turn":1,"step":1,"message":{"id":"t-1","role":"user",'
    '"source":{"kind":"tool","callId":"call-1"},"content":[{"type":"tool-result",'
    '"toolCallId":"call-1","content":[{"type":"text","text":"ok"}]}]},"error":{"name":"E",'
    '"code":"C"},"meta":{}},"sourceEventSeqs":[9],"surfaceOp":"append"}',
    '{"type":"compaction/start","data":{"compactionId":"c-9","turn":null}}',
    '{"type":"compaction/summary","data":{"compactionId":"c-9","summary":[{"type":"text",'
    '"text":"..."}],"shadowedRange":{"start":4,"end":40},"shadowedSeqs":[4,9,12,40],'
    '"shadowedTokenCount":9120,"provider":"p","model":"m"}}',
    '{"type":"compaction/end","data":{"compactionId":"c-9","turn":3,"error":"not smaller"}}',
    '{"type":"compaction/prune","data":{"shadowedRange":{"start":15,"end":15},'
    '"shadowedSeqs":[15],"shadowedTokenCount":2301}}',
    '{"type":"user/message","data":{"id":"k","role":"user","source":{"kind":"plugin",'
    '"plugin":"c"},"content":[]},"sourceEventSeqs":[1,2],'
    '"surfaceOp":{"end":2,"op":"replace","start":1}}',
    '{"type":"approval/asked","data":[1,"two",{"three":3.5}],"ignorable":true}',
    '{"type":"acme/unknown","data":{"n":-0.0,"big":1e300,"s":"\\u00e9\\n"},"ignorable":true}',
]


@pytest.mark.parametrize("body", SPEC_SECTION_4)
def test_spec_payload_examples_round_trip(body: str) -> None:
    value = json.loads(body)
    line = json.dumps({**value, "seq": 3, "time": -12})
    event = decode_event(line)
    assert json.loads(encode_event(event)) == json.loads(line)
    assert event.seq == 3 and event.time == -12


# -- integer fields ------------------------------------------------------------------------------

PREFIX = [
    '{"type":"user/message","seq":0,"time":1,"data":{"id":"u-0","role":"user","source":'
    '{"kind":"user"},"content":[]},"surfaceOp":"append"}',
    '{"type":"user/message","seq":1,"time":1,"data":{"id":"u-1","role":"user","source":'
    '{"kind":"user"},"content":[]},"surfaceOp":"append"}',
    '{"type":"assistant/chunk","seq":2,"time":1,"data":{"turn":1,"step":1,"chunk":'
    '{"type":"text-delta","index":0,"text":"x"}}}',
]
MSG = '{"id":"k","role":"user","source":{"kind":"plugin","plugin":"c"},"content":[]}'


def candidate_line(field: str, value: str, seq: str = "3") -> str:
    """A line at ``seq`` whose ``field`` holds the raw JSON ``value``."""
    if field == "seq":
        return f'{{"type":"turn/start","seq":{value},"time":1,"data":{{"turn":1}}}}'
    if field == "time":
        return f'{{"type":"turn/start","seq":{seq},"time":{value},"data":{{"turn":1}}}}'
    if field == "sourceEventSeqs":
        return (f'{{"type":"user/message","seq":{seq},"time":1,"data":{MSG},'
                f'"surfaceOp":"append","sourceEventSeqs":[2,{value}]}}')
    if field == "start":
        return (f'{{"type":"user/message","seq":{seq},"time":1,"data":{MSG},"surfaceOp":'
                f'{{"op":"replace","start":{value},"end":1}},"sourceEventSeqs":[0,1]}}')
    assert field == "end"
    return (f'{{"type":"user/message","seq":{seq},"time":1,"data":{MSG},"surfaceOp":'
            f'{{"op":"replace","start":0,"end":{value}}},"sourceEventSeqs":[0,1]}}')


def field_value(event: Any, field: str) -> Any:
    if field == "seq":
        return event.seq
    if field == "time":
        return event.time
    if field == "sourceEventSeqs":
        return event.source_event_seqs[1]
    return getattr(event.surface_op, field)


RULE_OF = {
    "seq": "is not contiguous; expected",
    "time": "time",
    "sourceEventSeqs": "must densely contain non-negative safe integers",
    "start": "invalid replace surfaceOp",
    "end": "invalid replace surfaceOp",
}

# (field, raw value, index it is placed at): each bad value is numerically equal to a
# value that would be legal there, where such a value exists.
BAD_INTEGERS = [
    *[("seq", v, at) for v, at in [("true", 1), ("1.0", 1), ("1e0", 1), ("-0", 0),
                                   ("-0.0", 0), (str(2**53), 3), ("1e400", 3),
                                   ("false", 0), ('"3"', 3), ("null", 3)]],
    *[("time", v, 3) for v in ["true", "1.0", "-0", str(2**53), str(-(2**53)), "1e400",
                               "-1e400", "null", '"1"']],
    *[(f, v, 3) for f in ["sourceEventSeqs", "start", "end"]
      for v in ["true", "1.0", "-0", str(2**53), "1e400", "-1", "null"]],
    ("start", "false", 3), ("end", "false", 3), ("start", "0.0", 3),
]


def decode_prefix(at: int) -> list[Any]:
    return [decode_event(line) for line in PREFIX[:at]]


@pytest.mark.parametrize(("field", "value", "at"), BAD_INTEGERS)
def test_bad_integer_decodes_then_session_refuses_under_its_rule(
        field: str, value: str, at: int) -> None:
    line = candidate_line(field, value, str(at))
    event = decode_event(line)  # values are not judged by the decoder ...
    got = field_value(event, field)
    low = -MAX_SAFE_INT if field == "time" else 0
    assert type(got) is not int or not low <= got <= MAX_SAFE_INT
    prefix = decode_prefix(at)
    session = replay(prefix)
    before = (len(session.log), list(session.surface.nodes),
              session.surface.replace_generation)
    with pytest.raises(SurfaceError) as info:  # ... the session is
        session.append_event(event)
    assert isinstance(info.value, ValueError)
    assert RULE_OF[field] in str(info.value)
    assert event.type in str(info.value)
    assert f"seq {event.seq}" in str(info.value)
    assert (len(session.log), list(session.surface.nodes),
            session.surface.replace_generation) == before
    good = str(at) if field == "seq" else "1"
    session.append_event(decode_event(candidate_line(field, good, str(at))))
    assert len(session.log) == before[0] + 1
    # the same through a whole file
    content = "\n".join([*PREFIX[:at], line]).encode()
    with pytest.raises(SurfaceError) as whole:
        replay(decode_log(content).events)
    assert str(whole.value).startswith(f"invalid seed event at index {at}: ")
    assert RULE_OF[field] in str(whole.value)


@pytest.mark.parametrize("field", ["seq", "time", "sourceEventSeqs", "start", "end"])
def test_good_integer_in_the_same_place_is_accepted(field: str) -> None:
    good = {"seq": "3", "time": str(-MAX_SAFE_INT), "sourceEventSeqs": "1", "start": "1",
            "end": "1"}[field]
    line = candidate_line(field, good)
    event = decode_event(line)
    assert type(field_value(event, field)) is int
    session = replay([*decode_prefix(3), event])
    assert len(session.log) == 4
    assert json.loads(encode_event(session.log[3])) == json.loads(line)


def test_max_safe_integers_are_accepted() -> None:
    big = MAX_SAFE_INT
    line = f'{{"type":"turn/start","seq":0,"time":{big},"data":{{"turn":{big}}}}}'
    event = decode_event(line)
    assert event.time == big
    assert json.loads(encode_event(replay([event]).log[0])) == json.loads(line)


def test_negative_zero_inside_data_keeps_its_json_value() -> None:
    line = '{"type":"acme/x","seq":0,"time":0,"data":{"a":-0,"b":-0.0,"c":"-0"},"ignorable":true}'
    event = decode_event(line)
    assert json.loads(encode_event(event)) == json.loads(line)


# -- null is not absent ---------------------------------------------------------------------------


def test_null_surface_op_is_distinct_from_absent() -> None:
    base = f'{{"type":"user/message","seq":3,"time":1,"data":{MSG}'
    null = decode_event(base + ',"surfaceOp":null}')
    absent = decode_event(base + "}")
    assert null.surface_op is None
    assert absent.surface_op is UNSET
    assert null != absent
    assert json.loads(encode_event(null))["surfaceOp"] is None
    assert "surfaceOp" not in json.loads(encode_event(absent))
    prefix = decode_prefix(3)
    with pytest.raises(SurfaceError) as info:
        replay([*prefix, null])
    assert "invalid surfaceOp" in str(info.value)
    with pytest.raises(SurfaceError) as info:
        replay([*prefix, absent])
    assert "requires a surfaceOp marker" in str(info.value)


def test_null_markers_on_log_only_events_are_present_values() -> None:
    prefix = decode_prefix(3)
    op_null = decode_event('{"type":"turn/start","seq":3,"time":1,"data":{"turn":1},'
                           '"surfaceOp":null}')
    with pytest.raises(SurfaceError) as info:
        replay([*prefix, op_null])
    assert "is not surface-eligible and cannot carry surfaceOp" in str(info.value)
    seqs_null = decode_event('{"type":"turn/start","seq":3,"time":1,"data":{"turn":1},'
                             '"sourceEventSeqs":null}')
    assert seqs_null.source_event_seqs is None
    with pytest.raises(SurfaceError) as info:
        replay([*prefix, seqs_null])
    assert "cannot carry sourceEventSeqs" in str(info.value)
    on_message = decode_event(f'{{"type":"user/message","seq":3,"time":1,"data":{MSG},'
                              '"surfaceOp":"append","sourceEventSeqs":null}')
    with pytest.raises(SurfaceError) as info:
        replay([*prefix, on_message])
    assert "must be an array" in str(info.value)
    assert json.loads(encode_event(on_message))["sourceEventSeqs"] is None


# -- the envelope -------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"extra":1}',
    '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"source_event_seqs":[0]}',
    '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"surface_op":"append"}',
    '{"type":"turn/start","Seq":0,"time":1,"data":{"turn":1}}',
    '{"type":"turn/start","seq":-0,"time":1,"data":{"turn":1},"x":null}',
    '[{"type":"turn/start","seq":0,"time":1}]',
    '"turn/start"',
    '{"type":5,"seq":0,"time":1,"data":{"turn":1}}',
])
def test_unknown_envelope_keys_and_non_objects_are_decode_errors(line: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_event(line)
    assert isinstance(info.value, ValueError)
    assert info.value.rule == "envelope"
    good = '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'
    with pytest.raises(DecodeError) as info:
        decode_log(f"{good}\n{line}\n".encode())
    assert "line 2" in str(info.value)


@pytest.mark.parametrize("line", ['{"type":"turn/start",', "not json", "{}}", ""])
def test_non_json_lines_are_decode_errors(line: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_event(line)
    assert info.value.rule == "json"


def test_decode_error_names_the_physical_line() -> None:
    good = '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'
    content = f"{good}\n\n   \n{{bad\n".encode()
    with pytest.raises(DecodeError) as info:
        decode_log(content)
    assert "line 4" in str(info.value)


def test_an_event_split_over_two_lines_is_not_jsonl() -> None:
    content = (b'{"type":"turn/start","seq":0,"time":1\n'
               b'"data":{"turn":1}}\n')
    with pytest.raises(DecodeError) as info:
        decode_log(content)
    assert info.value.rule == "json"
    assert "line 1" in str(info.value)
    two_on_one_line = (b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}},'
                       b'{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":'
                       b'{"kind":"completed"}}}\n')
    with pytest.raises(DecodeError):
        decode_log(two_on_one_line)


def test_blank_lines_are_skipped() -> None:
    good = b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'
    log = decode_log(b"\n" + good + b"\n\n  \n")
    assert len(log.events) == 1
    assert decode_log(b"").events == []


# -- extension types ---------------------------------------------------------------------------


class Widget(msgspec.Struct, rename="camel"):
    widget_id: str
    count: int


@pytest.fixture
def registry() -> Iterator[None]:
    saved = dict(EVENT_TYPES)
    yield
    EVENT_TYPES.clear()
    EVENT_TYPES.update(saved)


def test_register_struct_payload_type(registry: None) -> None:
    register_event_type("test-plugin/widget", Widget)
    register_event_type("test-plugin/widget", Widget)  # same again: a no-op
    line = ('{"type":"test-plugin/widget","seq":0,"time":7,"data":{"widgetId":"w","count":2,'
            '"kept":[1,{"x":null}]}}')
    event = decode_event(line)
    session = replay([event])
    assert json.loads(encode_event(session.log[0])) == json.loads(line)
    assert json.loads(encode_log(None, session.log)) == json.loads(line)
    assert list(session.surface.nodes) == []
    with pytest.raises(SurfaceError) as info:
        session.append("test-plugin/widget", {"widgetId": "w", "count": "2"})
    assert "test-plugin/widget" in str(info.value)
    assert len(session.log) == 1
    with pytest.raises(SurfaceError) as info:
        session.append("test-plugin/widget", {"count": 1}, surface_op="append")
    assert "cannot carry surfaceOp" in str(info.value)
    session.append("test-plugin/widget", Widget("w2", 3))
    assert session.log[1].data == {"widgetId": "w2", "count": 3}


def test_register_opaque_type(registry: None) -> None:
    with pytest.raises(SurfaceError):
        replay([decode_event('{"type":"test-plugin/blob","seq":0,"time":1,"data":1}')])
    register_event_type("test-plugin/blob")
    for data in ["1", "null", '"s"', '[1,2.5,{"a":[]}]', '{"z":1,"a":{"b":true}}']:
        line = f'{{"type":"test-plugin/blob","seq":0,"time":1,"data":{data}}}'
        session = replay([decode_event(line)])
        assert json.loads(encode_event(session.log[0])) == json.loads(line)
    no_data = '{"type":"test-plugin/blob","seq":0,"time":1}'
    assert json.loads(encode_event(replay([decode_event(no_data)]).log[0])) == json.loads(
        no_data)


def test_register_refusals(registry: None) -> None:
    register_event_type("test-plugin/widget", Widget)
    with pytest.raises(ValueError):
        register_event_type("test-plugin/widget")
    with pytest.raises(ValueError):
        register_event_type("user/message")
    with pytest.raises(ValueError):
        register_event_type("nonamespace")


# -- header ----------------------------------------------------------------------------------


EVENT = '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'


def test_header_line_round_trips() -> None:
    head = ('{"type":"session","version":0,"id":"s-1","createdAt":1786314515669,'
            '"delegationDepth":0,"cwd":"/work","parentSession":"s-0","seedLength":4}')
    log = decode_log(f"{head}\n{EVENT}\n".encode())
    assert log.header == SessionHeader(version=0, id="s-1", created_at=1786314515669,
                                       cwd="/work", parent_session="s-0", seed_length=4,
                                       delegation_depth=0)
    assert len(log.events) == 1
    out = encode_log(log.header, log.events).splitlines()
    assert json.loads(out[0]) == json.loads(head)
    assert json.loads(out[1]) == json.loads(EVENT)
    session = Session(log.events, header=log.header)
    assert session.id == "s-1"


@pytest.mark.parametrize("head", [
    '{"type":"session","version":1,"id":"s","createdAt":1}',
    '{"type":"session","version":-1,"id":"s","createdAt":1}',
    '{"type":"session","version":"0","id":"s","createdAt":1}',
    '{"type":"session","version":true,"id":"s","createdAt":1}',
    '{"type":"session","version":0.0,"id":"s","createdAt":1}',
    '{"type":"session","version":null,"id":"s","createdAt":1}',
    '{"type":"session","id":"s","createdAt":1}',
    '{"type":"session","version":0,"id":"","createdAt":1}',
    '{"type":"session","version":0,"id":"s","createdAt":1,"cwd":"relative/path"}',
    '{"type":"session","version":0,"id":"s","createdAt":1.5}',
])
def test_bad_headers_are_refused(head: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_log(f"{head}\n{EVENT}\n".encode())
    assert info.value.rule == "header"
