"""The append wire of the actor layer (no Ray needed): specs travel as JSON, logged
events as msgpack, and what the session logs from the wire equals what it logs from the
structs in-process."""

from __future__ import annotations

import enum
import gc
import math
import pickle
import time

import pytest
from msgspec import UNSET

from surfacelog.actors.protocol import (
    LoggedEvents,
    append_reply,
    decode_append,
    decode_events,
    decode_messages,
    encode_append,
    encode_events,
    encode_messages,
    pack_batch,
    unpack_batch,
)
from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.schema.limits import gc_paused
from surfacelog.session import AppendSpec, Session
from surfacelog.store.rows import encode_batch


class Clock:
    def __init__(self) -> None:
        self.now = 1_760_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def _specs() -> list[AppendSpec]:
    user = {"id": "u-1", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "text", "text": "hé \u2028 \"quoted\" 1e400"}]}
    rewrite = {**user, "content": [{"type": "text", "text": "shorter"}],
               "extra": [1, 2.5, -0.0, None, True, 2**70]}
    return [
        AppendSpec("turn/start", {"turn": 1}),
        AppendSpec("user/message", user, surface_op="append"),
        AppendSpec("todo/write", {"todos": [{"content": "x", "status": "pending"}]}),
        AppendSpec("user/message", rewrite, surface_op=ReplaceOp(start=1, end=1),
                   source_event_seqs=(1, 2)),
        AppendSpec("x/unknown", {"k": [1, {"a": None}]}, ignorable=True),
    ]


def test_wire_appends_log_what_structs_log() -> None:
    specs = _specs()
    request = encode_append("s", specs, 0)
    assert request is not None
    req = decode_append(request)
    assert req.session_id == "s" and req.expected_seq == 0
    wired = Session(clock=Clock()).append_batch(req.specs, owned=True)
    direct = Session(clock=Clock()).append_batch(specs)
    assert wired == direct
    assert decode_events(encode_events(wired)) == wired


def test_a_fresh_append_is_answered_by_first_seq_and_time() -> None:
    specs = _specs()
    request = encode_append("s", specs, None)
    assert request is not None
    session = Session(clock=Clock())
    events = session.append_batch(decode_append(request).specs, owned=True)
    reply = append_reply(events, appended=True)
    assert isinstance(reply, bytes) and len(reply) < 40
    returned = LoggedEvents.from_reply(request, len(specs), reply)
    assert returned.seqs == range(0, 5) and len(returned) == 5
    assert returned == events and returned.to_list() is returned.to_list()
    assert returned[3] == events[3] and returned[1:3] == events[1:3]
    assert list(returned) == events and returned != events[:4]
    # Equal as JSON too: the rebuilt ReplaceOp and seqs are the logged kinds.
    assert encode_events(returned.to_list()) == encode_events(events)
    later = [specs[2], specs[4]]
    request = encode_append("s", later, None)
    assert request is not None
    events = session.append_batch(decode_append(request).specs, owned=True)
    returned = LoggedEvents.from_reply(request, 2, append_reply(events, appended=True))
    assert returned.seqs == range(5, 7) and returned == events == session.log[5:]


def test_events_made_later_are_made_once_and_must_be_as_many_as_announced() -> None:
    events = Session(clock=Clock()).append_batch(_specs()[:3])
    made: list[int] = []

    def make() -> list[Event]:
        made.append(1)
        return events

    logged = LoggedEvents.made_later(0, 3, make)
    assert logged.seqs == range(0, 3) and len(logged) == 3 and made == []
    assert logged == events and logged[2] == events[2] and made == [1]
    assert list(logged) == events and made == [1]
    short = LoggedEvents.made_later(0, 4, lambda: events)
    assert short.seqs == range(0, 4)
    with pytest.raises(ValueError, match="4 logged events were made as 3"):
        short.to_list()


def test_a_retried_append_is_answered_by_the_logged_events() -> None:
    specs = _specs()[:3]
    request = encode_append("s", specs, 0)
    assert request is not None
    events = Session(clock=Clock()).append_batch(specs)
    reply = append_reply(events, appended=False)
    assert isinstance(reply, bytes)
    returned = LoggedEvents.from_reply(request, len(specs), reply)
    assert returned == events and returned.seqs == range(0, 3)
    with pytest.raises(ValueError, match="answered with 3"):
        LoggedEvents.from_reply(request, 4, reply)
    assert append_reply([], appended=True) == encode_events([])
    empty = LoggedEvents.from_reply(encode_append("s", [], None) or b"", 0, encode_events([]))
    assert len(empty) == 0 and empty.seqs == range(0, 0) and empty == []


@pytest.mark.parametrize("spec", [
    AppendSpec("x/y", math.nan, ignorable=True),
    AppendSpec("x/y", enum.IntEnum("E", "A").A, ignorable=True),
    AppendSpec("user/message", {}, surface_op={"op": "replace", "start": 0, "end": 0}),
    AppendSpec("user/message", {}, surface_op="append", source_event_seqs={1, 2}),
    AppendSpec("user/message", {}, surface_op="append", source_event_seqs=[1.0]),
    AppendSpec("turn/start", {"turn": 1}, ignorable=False),
    AppendSpec(7, {}),  # type: ignore[arg-type]
    AppendSpec("x/y", {"v": object()}, ignorable=True),
    AppendSpec("x/y", {"v": (1, 2)}, ignorable=True),
    AppendSpec("x/y", {"v": [math.nan]}, ignorable=True),
    AppendSpec("x/y", {"v": b"raw"}, ignorable=True),
])
def test_specs_the_json_round_trip_would_change_are_not_wired(spec: AppendSpec) -> None:
    assert encode_append("s", [_specs()[0], spec], None) is None


def test_events_msgpack_cannot_hold_travel_as_the_list() -> None:
    session = Session()
    events = session.append_batch([AppendSpec("x/y", {"big": 2**70}, ignorable=True)])
    payload = encode_events(events)
    assert payload == events
    assert decode_events(payload) == events


def test_rows_travel_to_the_journal_as_they_were_encoded() -> None:
    """The journal inserts exactly the rows the session actor encoded: every column,
    and values SQLite will refuse (a float time, ``ignorable`` false) as they were, so
    that it refuses them as it would in process."""
    session = Session(clock=Clock())
    events = session.append_batch(_specs())
    batch = encode_batch("s", events)
    payload = pack_batch(batch)
    assert isinstance(payload, bytes) and unpack_batch(payload) == batch
    odd = encode_batch("s", [Event("x/y", 0, 2.5, {}),  # type: ignore[arg-type]
                             Event("x/y", 1, 3, None, ignorable=False)])  # type: ignore[arg-type]
    back = unpack_batch(pack_batch(odd))
    assert back == odd and type(back.rows[0][3]) is float and back.rows[1][7] is False
    big = encode_batch("s", [Event("x/y", 0, 2**70, {})])  # beyond msgpack: the batch
    assert pack_batch(big) is big and unpack_batch(big) is big


def test_messages_travel_as_msgpack_or_as_the_list() -> None:
    session = Session()
    session.append_batch(_specs()[:3])
    messages = session.derive_messages().to_list()
    assert messages
    payload = encode_messages(messages)
    assert isinstance(payload, bytes)
    assert decode_messages(payload) == messages
    big = [{"role": "user", "n": 2**70}]
    assert encode_messages(big) is big
    assert decode_messages(encode_messages(big)) == big


def test_unset_pickles_fast_to_itself() -> None:
    events = Session().append_batch([AppendSpec("turn/start", {"turn": 1})])
    assert pickle.loads(pickle.dumps(UNSET)) is UNSET
    assert pickle.loads(pickle.dumps(events)) == events
    t0 = time.perf_counter()
    for _ in range(200):
        pickle.dumps(events)
    # Looked up by module search it took ~1 ms per event in a Ray worker.
    assert time.perf_counter() - t0 < 0.5


def test_gc_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError
    assert gc.isenabled()
