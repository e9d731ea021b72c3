"""Issue 12, Python API: the nesting limit at every entry and values JSON cannot carry
exactly, refused with typed errors (no RecursionError, no silent null/list/base64)."""

from __future__ import annotations

import enum
import math
from pathlib import Path
from typing import Any

import pytest

from surfacelog.actors.protocol import AppendRequest, decode_append, encode_append
from surfacelog.runtime.live import LiveSession
from surfacelog.schema.codec import JSON_ENCODER, decode_log, read_log
from surfacelog.schema.errors import (
    JsonValueError,
    LineTooLong,
    NestingError,
    SurfacelogError,
)
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import MAX_NESTING
from surfacelog.session import AppendSpec, Session
from surfacelog.store.sqlite import SqliteEventStore


def nested(depth: int) -> Any:
    value: Any = 1
    for k in range(depth):
        value = [value] if k % 2 else {"k": value}
    return value


def line(seq: int, data: bytes) -> bytes:
    return b'{"type":"x/y","seq":%d,"time":1,"data":%s,"ignorable":true}' % (seq, data)


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1000, 50_000])
def test_session_append_refuses_data_nested_too_deep(depth: int) -> None:
    session = Session()
    session.append("x/y", nested(MAX_NESTING), ignorable=True)
    with pytest.raises(NestingError) as info:
        session.append("x/y", nested(depth), ignorable=True)
    assert info.value.rule == "nesting"
    assert info.value.event_type == "x/y" and info.value.seq == 1
    assert str(MAX_NESTING) in str(info.value)
    assert len(session) == 1
    session.append("x/y", {"ok": True}, ignorable=True)  # the next append works


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1000, 20_000])
def test_jsonl_lines_nested_too_deep_are_refused(tmp_path: Path, depth: int) -> None:
    ok = line(0, b"[" * MAX_NESTING + b"]" * MAX_NESTING)
    deep = line(1, b"[" * depth + b"]" * depth)
    content = ok + b"\n\n" + deep + b"\n"
    for read in (lambda: decode_log(content), lambda: read_log(_write(tmp_path, content))):
        with pytest.raises(NestingError) as info:
            read()
        assert info.value.rule == "nesting" and "line 3" in str(info.value)


def _write(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "log.jsonl"
    path.write_bytes(content)
    return path


def test_read_log_streams_with_a_bounded_line(tmp_path: Path) -> None:
    path = _write(tmp_path, line(0, b"{}") + b"\n" + line(1, b'"' + b"x" * 5000 + b'"') + b"\n")
    assert len(read_log(path).events) == 2
    with pytest.raises(LineTooLong) as info:
        read_log(path, max_line_bytes=1000)
    assert "line 2" in str(info.value) and str(path) in str(info.value)
    with pytest.raises(LineTooLong, match="line 1"):
        read_log("/dev/zero", max_line_bytes=1 << 20)


async def test_store_append_and_create_refuse_deep_data(tmp_path: Path) -> None:
    store = await SqliteEventStore.open(tmp_path / "s.db")
    try:
        header = SessionHeader(version=0, id="s", created_at=1)
        deep = Event("x/y", 0, 1, nested(MAX_NESTING + 1), ignorable=True)
        with pytest.raises(NestingError, match=r"x/y at seq 0"):
            await store.create(header, [deep])
        epoch = await store.create(header)
        with pytest.raises(NestingError):
            await store.append("s", [deep], epoch=epoch)
        assert await store.read_since("s") == []
    finally:
        await store.close()


async def test_wire_append_refuses_deep_data_before_acknowledging(tmp_path: Path) -> None:
    store = await SqliteEventStore.open(tmp_path / "s.db")
    try:
        host = await LiveSession.activate("s", store)
        before = len(host.session)
        deep = [AppendSpec("x/y", nested(500), ignorable=True)]
        # The client refuses it before it travels, naming the event...
        with pytest.raises(NestingError, match="x/y"):
            encode_append("s", deep, 7)
        # ...and a request made some other way is refused by the session actor.
        request = JSON_ENCODER.encode(AppendRequest("s", deep, None))
        specs = decode_append(request).specs
        with pytest.raises(NestingError, match="x/y"):
            await host.append_batch(specs, owned=True)
        assert len(host.session) == before
        assert host.closed is None  # still serving: nothing was sent to the store
        await host.append_batch([AppendSpec("x/y", {"ok": 1}, ignorable=True)])
        before += 1
        with pytest.raises(NestingError):
            encode_append("s", [AppendSpec("x/y", nested(50_000), ignorable=True)], 3)
        with pytest.raises(NestingError):
            decode_append(b'["s",[{"type":"x/y","data":' + b"[" * 50_000 + b"]" * 50_000
                          + b"}]]")
        assert len(await store.read_since("s")) == before
    finally:
        await store.close()


class Colour(enum.Enum):
    RED = 1


@pytest.mark.parametrize(("data", "why"), [
    ({"x": math.nan}, "data.x is nan"),
    ({"x": [1, math.inf]}, r"data.x\[1\] is inf"),
    (-math.inf, "data is -inf"),
    ({"x": (1, 2)}, "data.x is a tuple"),
    ((1, 2), "data is a tuple"),
    ({"x": {1, 2}}, "data.x is a set"),
    ({"x": b"raw"}, "data.x is a bytes"),
    ({"x": Colour.RED}, "data.x is a Colour"),
    ({1: "a"}, "int key"),
    ({"x": object()}, "data.x is a object"),
])
def test_values_json_cannot_carry_exactly_are_refused(data: Any, why: str) -> None:
    session = Session()
    with pytest.raises(JsonValueError, match=why) as info:
        session.append("x/y", data, ignorable=True)
    assert info.value.rule == "json-value" and info.value.seq == 0
    assert isinstance(info.value, SurfacelogError)
    with pytest.raises(JsonValueError):
        session.append_batch([AppendSpec("turn/start", {"turn": 1}),
                              AppendSpec("x/y", data, ignorable=True)])
    assert len(session) == 0


def test_exact_values_still_append() -> None:
    session = Session()
    data = {"a": [1, 2.5, -0.0, None, True, "s", 2**70], "b": {}}
    event = session.append("x/y", data, ignorable=True)
    assert event.data == data and event.data is not data
    assert session.append("x/y", enum.IntEnum("E", "A").A, ignorable=True).data == 1


async def test_public_api_errors_are_typed(tmp_path: Path) -> None:
    from surfacelog.schema.codec import decode_json
    from surfacelog.session import replay
    from surfacelog.store.errors import DatabaseNotFound

    session = Session()
    session.append("turn/start", {"turn": 1})
    calls: list[Any] = [
        lambda: session.derive_messages(5),
        lambda: session.derive_messages(-1),
        lambda: session.surface_at(9),
        lambda: session.event(9),
        lambda: session.derive_messages()[3],
        lambda: replay([{"type": "turn/start"}]),  # type: ignore[list-item]
        lambda: decode_json(b"{"),
        lambda: decode_json(b"[" * 100_000),
        lambda: read_log(tmp_path / "x.jsonl", max_line_bytes=0),
    ]
    for call in calls:
        with pytest.raises(SurfacelogError):
            call()
    with pytest.raises(IndexError):  # still the builtin kind too
        session.event(9)
    with pytest.raises(DatabaseNotFound):
        await SqliteEventStore.open(tmp_path / "absent.db", read_only=True)
    with pytest.raises(FileNotFoundError):
        await SqliteEventStore.open(tmp_path / "absent.db", create=False)
    with pytest.raises(SurfacelogError):
        await SqliteEventStore.open(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]
    assert not (tmp_path / "absent.db").exists()
