"""One test per rule and per error of SPEC sections 3 and 5-10.

Every rejected candidate goes through ``assert_rejected``: the error is a ``SurfaceError``
(a ``ValueError``) whose message holds the SPEC fragment, the event type and the seq; the
log, the nodes, the replacements, the generation and the derived messages are exactly as
before; and the next valid append works normally.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from surfacelog.schema import (
    Event,
    ReplaceOp,
    SurfaceError,
    decode_json,
    encode_event,
    encode_log,
    is_append_surface_event,
    is_replacement_surface_event,
    is_surface_eligible_type,
    is_surface_event,
    read_log,
)
from surfacelog.schema.header import SessionHeader
from surfacelog.session import (
    Session,
    derive_messages_linear,
    fold_surface,
    fork,
    interrupted_turn_closers,
    replay,
    upgrade_legacy,
)
from surfacelog.session.errors import ForkError

from support.shared_examples import EXAMPLES, blank_texts

T0 = 1_000


# -- builders ----------------------------------------------------------------------------


def user_msg(mid: str, text: str = "hi", source: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": mid, "role": "user", "source": source or {"kind": "user"},
            "content": [{"type": "text", "text": text}]}


def ctx_msg(mid: str, text: str = "<context/>") -> dict[str, Any]:
    return user_msg(mid, text, {"kind": "plugin", "plugin": "workspace"})


def checkpoint(mid: str, text: str = "summary") -> dict[str, Any]:
    return user_msg(mid, text, {"kind": "plugin", "plugin": "compaction"})


def assistant_data(mid: str, content: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    blocks = [{"type": "text", "text": "done"}] if content is None else content
    return {"turn": 1, "step": 1, "usage": {"inputTokens": 3, "outputTokens": 1},
            "message": {"id": mid, "role": "assistant",
                        "source": {"kind": "model", "provider": "p", "model": "m"},
                        "content": blocks}}


def tool_result_data(mid: str, call_id: str, text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"turn": 1, "step": 1,
            "message": {"id": mid, "role": "user", "source": {"kind": "tool", "callId": call_id},
                        "content": [{"type": "tool-result", "toolCallId": call_id,
                                     "content": [{"type": "text", "text": text}]}]},
            **extra}


def chunk(text: str = "hi") -> dict[str, Any]:
    return {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}}


TR_DATA = tool_result_data("t-1", "call-1", meta={"n": 1, "flag": True})


def new_session() -> Session:
    return Session(clock=lambda: T0)


def base_session() -> Session:
    """Log seqs 0..9; nodes [2, 4, 6, 7]; the next seq is 10."""
    s = new_session()
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("user/message", user_msg("u-1"), surface_op="append")
    s.append("assistant/chunk", chunk())
    s.append("assistant/message",
             assistant_data("a-1", [{"type": "text", "text": "calling"},
                                    {"type": "tool-call", "id": "call-1", "name": "bash",
                                     "arguments": "{}"}]),
             surface_op="append", source_event_seqs=[3])
    s.append("tool/call", {"turn": 1, "step": 1, "callId": "call-1", "name": "bash",
                           "arguments": "{}"})
    s.append("tool/result", TR_DATA, surface_op="append", source_event_seqs=[5])
    s.append("context/message", ctx_msg("c-1"), surface_op="append")
    s.append("step/end", {"turn": 1, "step": 1})
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert list(s.surface.nodes) == [2, 4, 6, 7]
    return s


N = 10  # next seq of base_session()


def ev(etype: str, data: Any = UNSET, *, op: Any = UNSET, src: Any = UNSET, seq: Any = N,
       time: Any = T0, ignorable: Any = UNSET) -> Event:
    return Event(type=etype, seq=seq, time=time, data=data, source_event_seqs=src,
                 surface_op=op, ignorable=ignorable)


def rep(start: Any, end: Any) -> ReplaceOp:
    return ReplaceOp(start=start, end=end)


def with_meta(meta: Any) -> dict[str, Any]:
    data = copy.deepcopy(TR_DATA)
    data["message"]["content"][0]["content"] = [{"type": "text", "text": "[pruned]"}]
    data["meta"] = meta
    return data


def rewrite(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(TR_DATA)
    data["message"]["content"][0]["content"] = [{"type": "text", "text": "[pruned]"}]
    mutate(data)
    return data


# -- the rejected-leaves-state-unchanged pattern -------------------------------------------


def state(s: Session) -> tuple[Any, ...]:
    return (len(s.log), encode_log(None, s.log), list(s.surface.nodes),
            s.surface.replace_generation, list(s.replacements()),
            s.derive_messages().to_list(), s.snapshot())


def submit(s: Session, candidate: Event | dict[str, Any]) -> Event:
    if isinstance(candidate, Event):
        return s.append_event(candidate)
    return s.append(**candidate)


def names_seq(message: str, seq: object) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(str(seq))}(?![\w.])", message) is not None


def assert_rejected(s: Session, candidate: Event | dict[str, Any], fragment: str,
                    etype: str, seq: object) -> SurfaceError:
    before = state(s)
    nodes_before = list(s.surface.nodes)
    with pytest.raises(SurfaceError) as info:
        submit(s, candidate)
    err = info.value
    assert isinstance(err, ValueError)
    message = str(err)
    assert fragment in message
    assert etype in message
    assert names_seq(message, seq), message
    assert err.event_type == etype
    assert err.seq == seq or (err.seq is seq)
    assert state(s) == before
    # ... and the session goes on normally.
    nxt = len(s.log)
    appended = s.append("user/message", user_msg(f"after-{nxt}"), surface_op="append")
    assert appended.seq == nxt
    assert list(s.surface.nodes) == [*nodes_before, nxt]
    assert s.derive_messages()[-1]["id"] == f"after-{nxt}"
    assert s.surface.replace_generation == before[3]
    return err


REJECTED = [
    # 6.1 contiguity
    pytest.param(ev("user/message", user_msg("x"), op="append", seq=11),
                 "session event seq 11 is not contiguous; expected 10", "user/message", 11,
                 id="contiguity-gap"),
    pytest.param(ev("turn/start", {"turn": 2}, seq=9),
                 "session event seq 9 is not contiguous; expected 10", "turn/start", 9,
                 id="contiguity-repeat"),
    pytest.param(ev("turn/start", {"turn": 2}, seq=0),
                 "is not contiguous; expected 10", "turn/start", 0, id="contiguity-zero"),
    pytest.param(ev("turn/start", {"turn": 2}, seq=10.0),
                 "is not contiguous; expected 10", "turn/start", 10.0, id="contiguity-float"),
    # 6.2 eligibility
    pytest.param(ev("turn/start", {"turn": 2}, op="append"),
                 "is not surface-eligible and cannot carry surfaceOp", "turn/start", N,
                 id="eligibility-op-on-log-only"),
    pytest.param(ev("turn/start", {"turn": 2}, op=None),
                 "is not surface-eligible and cannot carry surfaceOp", "turn/start", N,
                 id="eligibility-null-op-on-log-only"),
    pytest.param(ev("assistant/chunk", chunk(), op=rep(2, 2), src=[2]),
                 "is not surface-eligible and cannot carry surfaceOp", "assistant/chunk", N,
                 id="eligibility-op-checked-before-seqs"),
    pytest.param(ev("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n",
                                  "arguments": "{}"}, src=[3]),
                 "is not surface-eligible and cannot carry sourceEventSeqs", "tool/call", N,
                 id="eligibility-seqs-on-log-only"),
    pytest.param(ev("session/title", {"title": "t"}, src=[]),
                 "cannot carry sourceEventSeqs", "session/title", N,
                 id="eligibility-empty-seqs-on-dsh-type"),
    pytest.param(ev("user/message", user_msg("x")),
                 "is surface-eligible and requires a surfaceOp marker", "user/message", N,
                 id="eligibility-user-without-op"),
    pytest.param(ev("context/message", ctx_msg("x")),
                 "is surface-eligible and requires a surfaceOp marker", "context/message", N,
                 id="eligibility-context-without-op"),
    pytest.param(ev("assistant/message", assistant_data("x"), src=[3]),
                 "is surface-eligible and requires a surfaceOp marker", "assistant/message", N,
                 id="eligibility-assistant-without-op"),
    pytest.param(ev("tool/result", tool_result_data("x", "call-1"), src=[5]),
                 "is surface-eligible and requires a surfaceOp marker", "tool/result", N,
                 id="eligibility-tool-result-without-op"),
    # 6.3 marker shape
    *[pytest.param(ev("user/message", user_msg("x"), op=bad), "invalid surfaceOp",
                   "user/message", N, id=f"marker-{name}")
      for name, bad in [("null", None), ("int", 5), ("list", []), ("float", 1.5),
                        ("true", True), ("false", False), ("prepend", "prepend"),
                        ("empty-string", ""), ("APPEND", "APPEND")]],
    *[pytest.param(ev("user/message", checkpoint("x"), op=bad, src=[2, 4]),
                   "invalid replace surfaceOp", "user/message", N, id=f"marker-{name}")
      for name, bad in [
          ("extra-key", {"op": "replace", "start": 2, "end": 4, "x": 1}),
          ("op-not-replace", {"op": "splice", "start": 2, "end": 4}),
          ("missing-end", {"op": "replace", "start": 2}),
          ("start-float", rep(2.0, 4)),
          ("start-bool", rep(True, 4)),
          ("end-bool", rep(2, False)),
          ("start-negative", rep(-1, 4)),
          ("start-string", rep("2", 4)),
          ("end-null", rep(2, None)),
          ("end-out-of-range", rep(2, 2**53)),
      ]],
    # 6.4 range
    pytest.param(ev("user/message", checkpoint("x"), op=rep(3, 4), src=[2, 3, 4]),
                 "surface replace: start seq 3 not found in surface", "user/message", N,
                 id="range-start-log-only"),
    pytest.param(ev("user/message", checkpoint("x"), op=rep(99, 4), src=[2, 4]),
                 "surface replace: start seq 99 not found in surface", "user/message", N,
                 id="range-start-unknown"),
    pytest.param(ev("user/message", checkpoint("x"), op=rep(98, 99), src=[2, 4]),
                 "surface replace: start seq 98 not found in surface", "user/message", N,
                 id="range-both-unknown-start-first"),
    pytest.param(ev("user/message", checkpoint("x"), op=rep(2, 5), src=[2, 4, 5]),
                 "surface replace: end seq 5 not found in surface", "user/message", N,
                 id="range-end-log-only"),
    pytest.param(ev("user/message", checkpoint("x"), op=rep(6, 2), src=[2, 4, 6]),
                 "surface replace: start seq 6 (index 2) is after end seq 2 (index 0)",
                 "user/message", N, id="range-start-after-end"),
    # 6.5 provenance
    *[pytest.param(ev("user/message", user_msg("x"), op="append", src=bad),
                   "must be an array", "user/message", N, id=f"provenance-{name}")
      for name, bad in [("int", 5), ("string", "1,2"), ("object", {"0": 1}), ("null", None)]],
    *[pytest.param(ev(etype, data, op="append", src=[]),
                   "must not be empty except on assistant/message", etype, N,
                   id=f"provenance-empty-{etype}")
      for etype, data in [("user/message", user_msg("x")), ("context/message", ctx_msg("x")),
                          ("tool/result", tool_result_data("x", "call-1"))]],
    *[pytest.param(ev("user/message", user_msg("x"), op="append", src=[1, bad]),
                   "must densely contain non-negative safe integers", "user/message", N,
                   id=f"provenance-element-{name}")
      for name, bad in [("true", True), ("false", False), ("float", 1.5),
                        ("integral-float", 3.0), ("string", "3"), ("null", None),
                        ("negative", -1), ("out-of-range", 2**53), ("list", [3])]],
    pytest.param(ev("user/message", user_msg("x"), op="append", src=[3, 1, 3]),
                 "must not contain duplicates", "user/message", N, id="provenance-duplicates"),
    pytest.param(ev("user/message", user_msg("x"), op="append", src=[1, 10]),
                 "must reference earlier events: 10 >= current seq 10", "user/message", N,
                 id="provenance-own-seq"),
    pytest.param(ev("assistant/message", assistant_data("x"), op="append", src=[3, 12]),
                 "must reference earlier events: 12 >= current seq 10", "assistant/message", N,
                 id="provenance-future-seq"),
    # 6.6 coverage
    pytest.param(ev("user/message", checkpoint("x"), op=rep(2, 6), src=[2, 4]),
                 "sourceEventSeqs must include every shadowed surface node; missing 6",
                 "user/message", N, id="coverage-missing-one"),
    pytest.param(ev("user/message", checkpoint("x"), op=rep(2, 6), src=[2, 8]),
                 "sourceEventSeqs must include every shadowed surface node; missing 4, 6",
                 "user/message", N, id="coverage-missing-two"),
    pytest.param(ev("user/message", checkpoint("x"), op=rep(4, 7)),
                 "sourceEventSeqs must include every shadowed surface node; missing 4, 6, 7",
                 "user/message", N, id="coverage-replace-without-seqs"),
    pytest.param(ev("assistant/message", assistant_data("x"), op=rep(7, 7), src=[]),
                 "missing 7", "assistant/message", N, id="coverage-empty-seqs-on-assistant"),
    # 6.7 tool/result rewrite
    pytest.param(ev("tool/result", rewrite(lambda d: None), op=rep(4, 6), src=[4, 6]),
                 "must rewrite exactly one current node", "tool/result", N,
                 id="rewrite-two-nodes"),
    pytest.param(ev("tool/result", rewrite(lambda d: None), op=rep(4, 4), src=[4]),
                 "must target a current tool/result", "tool/result", N,
                 id="rewrite-targets-assistant"),
    pytest.param(ev("tool/result", rewrite(lambda d: None), op=rep(7, 7), src=[7]),
                 "must target a current tool/result", "tool/result", N,
                 id="rewrite-targets-context"),
    *[pytest.param(ev("tool/result", with_meta(meta), op=rep(6, 6), src=[6]),
                   "may change only content", "tool/result", N, id=f"rewrite-meta-{name}")
      for name, meta in [("changed", {"n": 2, "flag": True}),
                         ("true-vs-1", {"n": 1, "flag": 1}),
                         ("1-vs-true", {"n": True, "flag": True}),
                         ("dropped-key", {"n": 1}),
                         ("added-key", {"n": 1, "flag": True, "x": None}),
                         ("null", None)]],
    *[pytest.param(ev("tool/result", rewrite(mutate), op=rep(6, 6), src=[5, 6]),
                   "may change only content", "tool/result", N, id=f"rewrite-{name}")
      for name, mutate in [
          ("message-id", lambda d: d["message"].update(id="t-2")),
          ("turn", lambda d: d.update(turn=2)),
          ("step", lambda d: d.update(step=2)),
          ("error-added", lambda d: d.update(error={"name": "E", "code": "C"})),
          ("is-error-added", lambda d: d["message"]["content"][0].update(isError=False)),
          ("source-extra", lambda d: d["message"]["source"].update(note="x")),
          ("call-id", lambda d: (d["message"]["source"].update(callId="call-2"),
                                 d["message"]["content"][0].update(toolCallId="call-2"))),
          ("message-extra", lambda d: d["message"].update(note="x")),
      ]],
    # section 2: unknown types
    pytest.param(ev("acme/unknown", {"x": 1}), "acme/unknown", "acme/unknown", N,
                 id="unknown-type-not-ignorable"),
    pytest.param(ev("acme/unknown", {"x": 1}, ignorable=False), "ignorable", "acme/unknown",
                 N, id="ignorable-false"),
    pytest.param(ev("turn/start", {"turn": 1}, ignorable=1), "ignorable", "turn/start", N,
                 id="ignorable-one"),
    pytest.param(ev("acme/unknown", {"x": 1}, op="append", ignorable=True),
                 "cannot carry surfaceOp", "acme/unknown", N, id="ignorable-with-surface-op"),
    pytest.param(ev("turn/start", {"turn": 1}, time=1.0), "time", "turn/start", N,
                 id="time-float"),
    pytest.param(ev("turn/start", {"turn": 1}, time=2**53), "time", "turn/start", N,
                 id="time-out-of-range"),
    pytest.param(ev("turn/start", {"turn": 1}, time=True), "time", "turn/start", N,
                 id="time-bool"),
]


@pytest.mark.parametrize(("candidate", "fragment", "etype", "seq"), REJECTED)
def test_rejected_candidate_leaves_state_unchanged(
        candidate: Event, fragment: str, etype: str, seq: object) -> None:
    s = base_session()
    assert_rejected(s, candidate, fragment, etype, seq)


@pytest.mark.parametrize(("candidate", "fragment", "etype", "seq"), REJECTED)
def test_check_refuses_like_append_and_fold_surface_like_append(
        candidate: Event, fragment: str, etype: str, seq: object) -> None:
    s = base_session()
    before = state(s)
    with pytest.raises(SurfaceError) as checked:
        s.check(candidate)
    assert state(s) == before
    with pytest.raises(SurfaceError) as appended:
        s.append_event(candidate)
    assert str(checked.value) == str(appended.value)
    with pytest.raises(SurfaceError) as folded:
        fold_surface([*s.log, candidate])
    assert str(folded.value) == str(appended.value)
    # replay refuses it too, prefixed with its index.
    with pytest.raises(SurfaceError) as replayed:
        replay([*s.log, candidate])
    assert str(replayed.value).startswith(f"invalid seed event at index {N}: ")
    assert fragment in str(replayed.value)


APPEND_KWARGS_REJECTED = [
    pytest.param(dict(type="user/message", data=user_msg("x"), surface_op=None),
                 "invalid surfaceOp", id="kw-null-op"),
    pytest.param(dict(type="user/message", data=user_msg("x"),
                      surface_op={"op": "replace", "start": 2, "end": 2, "extra": 0},
                      source_event_seqs=[2]),
                 "invalid replace surfaceOp", id="kw-extra-key"),
    pytest.param(dict(type="user/message", data=user_msg("x"),
                      surface_op={"op": "replace", "start": 2.0, "end": 2},
                      source_event_seqs=[2]),
                 "invalid replace surfaceOp", id="kw-float-start"),
    pytest.param(dict(type="user/message", data=user_msg("x"),
                      surface_op={"op": "replace", "start": True, "end": 2},
                      source_event_seqs=[2]),
                 "invalid replace surfaceOp", id="kw-bool-start"),
    pytest.param(dict(type="user/message", data=user_msg("x"),
                      surface_op={"op": "replace", "start": 2, "end": 4},
                      source_event_seqs=[4]),
                 "missing 2", id="kw-coverage"),
    pytest.param(dict(type="user/message", data=user_msg("x"), surface_op="append",
                      source_event_seqs=(1, 1)),
                 "must not contain duplicates", id="kw-tuple-duplicates"),
    pytest.param(dict(type="user/message", data=user_msg("x")),
                 "requires a surfaceOp marker", id="kw-missing-op"),
    pytest.param(dict(type="turn/start", data={"turn": 1}, source_event_seqs=None),
                 "cannot carry sourceEventSeqs", id="kw-null-seqs-on-log-only"),
]


@pytest.mark.parametrize(("kwargs", "fragment"), APPEND_KWARGS_REJECTED)
def test_append_keyword_path_rejects(kwargs: dict[str, Any], fragment: str) -> None:
    s = base_session()
    assert_rejected(s, kwargs, fragment, kwargs["type"], N)


# -- accepted edge cases -------------------------------------------------------------------


def test_positional_range_with_start_greater_than_end_is_legal() -> None:
    s = new_session()
    s.append("user/message", user_msg("u-0"), surface_op="append")
    s.append("user/message", user_msg("u-1"), surface_op="append")
    s.append("user/message", checkpoint("k-2"), surface_op={"op": "replace", "start": 0,
                                                             "end": 0},
             source_event_seqs=[0])
    assert list(s.surface.nodes) == [2, 1]
    s.append("user/message", checkpoint("k-3"), surface_op={"op": "replace", "start": 2,
                                                             "end": 1},
             source_event_seqs=[1, 2])
    assert list(s.surface.nodes) == [3]
    assert s.surface.replace_generation == 2
    assert [(r.seq, r.start, r.end, r.shadowed_seqs) for r in s.replacements()] == [
        (2, 0, 0, (0,)), (3, 2, 1, (2, 1))]
    assert [m["id"] for m in s.derive_messages()] == ["k-3"]
    assert list(fold_surface(s.log).nodes) == [3]


def test_single_node_replace_and_replace_of_whole_surface() -> None:
    s = base_session()
    s.append("user/message", checkpoint("k"), surface_op=rep(4, 4), source_event_seqs=[4])
    assert list(s.surface.nodes) == [2, 10, 6, 7]
    s.append("user/message", checkpoint("k2"), surface_op=rep(2, 7),
             source_event_seqs=[7, 6, 10, 2, 0])
    assert list(s.surface.nodes) == [11]
    assert s.replacements()[-1].shadowed_seqs == (2, 10, 6, 7)


def test_provenance_accepts_any_earlier_events_in_any_order() -> None:
    s = base_session()
    s.append("user/message", user_msg("x"), surface_op="append", source_event_seqs=[9, 0, 3, 5])
    s.append("assistant/message", assistant_data("a-2"), surface_op="append",
             source_event_seqs=[])
    s.append("assistant/message", assistant_data("a-3"), surface_op="append")
    assert list(s.surface.nodes) == [2, 4, 6, 7, 10, 11, 12]
    assert s.log[11].source_event_seqs == ()
    assert s.log[12].source_event_seqs is UNSET


def test_empty_provenance_is_legal_on_an_assistant_replace_only_when_nothing_is_shadowed(
) -> None:
    # [] on assistant/message passes provenance; coverage still needs every shadowed node.
    s = base_session()
    s.append("assistant/message", assistant_data("a-2"), surface_op=rep(4, 4),
             source_event_seqs=[4])
    assert list(s.surface.nodes) == [2, 10, 6, 7]


@pytest.mark.parametrize(("name", "meta"), [("int-vs-float", {"n": 1.0, "flag": True}),
                                            ("key-order", {"flag": True, "n": 1})])
def test_tool_result_rewrite_equal_as_json_accepted(name: str, meta: dict[str, Any]) -> None:
    s = base_session()
    s.append("compaction/prune", {"shadowedRange": {"start": 6, "end": 6},
                                  "shadowedSeqs": [6], "shadowedTokenCount": 10})
    s.append("tool/result", with_meta(meta), surface_op=rep(6, 6), source_event_seqs=[10, 6])
    assert list(s.surface.nodes) == [2, 4, 11, 7]
    assert s.derive_messages()[2]["content"][0]["content"] == [
        {"type": "text", "text": "[pruned]"}]


def test_tool_result_rewrite_content_only_accepted_and_chains() -> None:
    s = base_session()
    reordered = {"step": 1, "meta": {"flag": True, "n": 1},
                 "message": {"content": [{"content": [], "toolCallId": "call-1",
                                          "type": "tool-result"}],
                             "source": {"callId": "call-1", "kind": "tool"},
                             "role": "user", "id": "t-1"},
                 "turn": 1}
    s.append("tool/result", reordered, surface_op=rep(6, 6), source_event_seqs=[6])
    assert list(s.surface.nodes) == [2, 4, 10, 7]
    # a rewrite of the rewrite compares against the current node (seq 10)
    again = copy.deepcopy(reordered)
    again["message"]["content"][0]["content"] = [{"type": "text", "text": "x"}]
    s.append("tool/result", again, surface_op=rep(10, 10), source_event_seqs=[10])
    assert list(s.surface.nodes) == [2, 4, 11, 7]
    assert s.surface.replace_generation == 2
    # a rewrite may not target the shadowed original any more
    assert_rejected(s, ev("tool/result", again, op=rep(6, 6), src=[6], seq=12),
                    "surface replace: start seq 6 not found in surface", "tool/result", 12)


def test_tool_result_may_replace_as_a_compaction_of_a_tool_result_only_range() -> None:
    """A non-tool/result checkpoint may shadow tool results (rule 6.7 is for tool/result)."""
    s = base_session()
    s.append("user/message", checkpoint("k"), surface_op=rep(6, 6), source_event_seqs=[6])
    assert list(s.surface.nodes) == [2, 4, 10, 7]


# -- section 3: message shapes -------------------------------------------------------------


def _mutated(base: dict[str, Any], mutate: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    data = copy.deepcopy(base)
    mutate(data)
    return data


SHAPES: list[Any] = [
    *[pytest.param(etype, _mutated(base, mutate), fragment, id=f"{etype}-{name}")
      for etype, base in [("user/message", user_msg("x")), ("context/message", ctx_msg("x"))]
      for name, mutate, fragment in [
          ("role-assistant", lambda d: d.update(role="assistant"), "role"),
          ("role-system", lambda d: d.update(role="system"), "role"),
          ("id-empty", lambda d: d.update(id=""), "id"),
          ("id-missing", lambda d: d.pop("id"), "id"),
          ("id-int", lambda d: d.update(id=5), "id"),
          ("source-missing", lambda d: d.pop("source"), "source"),
          ("source-kind-empty", lambda d: d.update(source={"kind": ""}), "kind"),
          ("source-kind-missing", lambda d: d.update(source={"plugin": "p"}), "kind"),
          ("source-not-object", lambda d: d.update(source="user"), "source"),
          ("content-not-list", lambda d: d.update(content="hi"), "content"),
          ("content-block-not-object", lambda d: d.update(content=["hi"]), "content"),
      ]],
    pytest.param("user/message", None, "user/message", id="user-data-null"),
    pytest.param("user/message", UNSET, "user/message", id="user-data-absent"),
    *[pytest.param("assistant/message", _mutated(assistant_data("x"), mutate), fragment,
                   id=f"assistant-{name}")
      for name, mutate, fragment in [
          ("role-user", lambda d: d["message"].update(role="user"), "role"),
          ("source-user", lambda d: d["message"].update(source={"kind": "user"}), "model"),
          ("provider-empty", lambda d: d["message"]["source"].update(provider=""), "provider"),
          ("model-missing", lambda d: d["message"]["source"].pop("model"), "model"),
          ("message-missing", lambda d: d.pop("message"), "message"),
          ("turn-missing", lambda d: d.pop("turn"), "turn"),
          ("turn-bool", lambda d: d.update(turn=True), "turn"),
          ("usage-bad", lambda d: d.update(usage={"inputTokens": "3"}), "usage"),
          ("interrupted-false", lambda d: d.update(interrupted=False), "interrupted"),
      ]],
    *[pytest.param("tool/result", _mutated(tool_result_data("x", "call-1"), mutate), fragment,
                   id=f"tool-result-{name}")
      for name, mutate, fragment in [
          ("role-assistant", lambda d: d["message"].update(role="assistant"), "role"),
          ("source-model", lambda d: d["message"].update(
              source={"kind": "model", "provider": "p", "model": "m", "callId": "call-1"}),
           "callId"),
          ("call-id-empty", lambda d: d["message"]["source"].update(callId=""), "callId"),
          ("call-id-missing", lambda d: d["message"]["source"].pop("callId"), "callId"),
          ("no-block", lambda d: d["message"].update(content=[]), "tool-result"),
          ("two-blocks", lambda d: d["message"]["content"].append(
              copy.deepcopy(d["message"]["content"][0])), "tool-result"),
          ("text-block", lambda d: d["message"].update(
              content=[{"type": "text", "text": "ok"}]), "tool-result"),
          ("tool-call-id-mismatch",
           lambda d: d["message"]["content"][0].update(toolCallId="call-2"), "toolCallId"),
          ("block-content-not-list",
           lambda d: d["message"]["content"][0].update(content="ok"), "content"),
          ("block-content-missing",
           lambda d: d["message"]["content"][0].pop("content"), "content"),
          ("is-error-string",
           lambda d: d["message"]["content"][0].update(isError="yes"), "isError"),
          ("error-incomplete", lambda d: d.update(error={"name": "E"}), "error"),
      ]],
]


@pytest.mark.parametrize(("etype", "data", "fragment"), SHAPES)
def test_message_shape_rules(etype: str, data: Any, fragment: str) -> None:
    s = base_session()
    src = [5] if etype == "tool/result" else UNSET
    assert_rejected(s, ev(etype, data, op="append", src=src), fragment, etype, N)


def test_message_shapes_that_are_accepted_and_projected_verbatim() -> None:
    s = new_session()
    other_source = user_msg("u-1", source={"kind": "subagent", "agent": "x", "depth": 2})
    unknown_block = {"id": "u-2", "role": "user", "source": {"kind": "user"},
                     "content": [{"type": "hologram", "payload": {"a": [1, 2.5, None]}},
                                 {"type": "image", "attachment": {
                                     "attachmentId": "att-1", "mediaType": "image/png",
                                     "bytes": 2048, "width": 64, "height": 64}}],
                     "extraKey": True}
    dsh_context = user_msg("u-3", source={"kind": "plugin", "plugin": "@x/y",
                                          "form": "snapshot", "sections": []})
    tool = tool_result_data("t-1", "call-1", error={"name": "E", "code": "C"}, meta=[1, "x"])
    tool["message"]["content"][0]["isError"] = True
    for etype, data in [("user/message", other_source), ("user/message", unknown_block),
                        ("user/message", dsh_context), ("tool/result", tool)]:
        s.append(etype, data, surface_op="append")
    s.append("assistant/message", {**assistant_data("a-1"), "interrupted": True},
             surface_op="append", source_event_seqs=[])
    assert s.derive_messages().to_list() == [
        other_source, unknown_block, dsh_context, tool["message"],
        assistant_data("a-1")["message"]]


# -- section 2: unknown types --------------------------------------------------------------


def test_unknown_ignorable_event_is_kept_verbatim_and_off_the_surface() -> None:
    s = base_session()
    line = ('{"type":"acme/whatever","seq":10,"time":5,"data":{"z":[1,{"b":null}],"a":1.5},'
            '"ignorable":true}')
    event = msgspec.json.decode(line, type=Event)
    s.append_event(event)
    assert json.loads(encode_event(s.log[10])) == json.loads(line)
    assert list(s.surface.nodes) == [2, 4, 6, 7]
    reloaded = replay(s.log)
    assert json.loads(encode_event(reloaded.log[10])) == json.loads(line)


def test_known_types_do_not_need_ignorable_and_dsh_vocabulary_is_registered() -> None:
    s = new_session()
    for etype in ["approval/asked", "session/title", "web/deepseek-search-llm-request",
                  "tool-workflow/run-end", "team/message/queued"]:
        s.append(etype, {"anything": [1, 2]})
        assert not is_surface_eligible_type(etype)
    assert len(s.log) == 5
    assert list(s.surface.nodes) == []


# -- section 5: replace_generation ---------------------------------------------------------


def test_replace_generation_counts_committed_replaces_only() -> None:
    s = base_session()
    assert s.surface.replace_generation == 0
    s.append("user/message", user_msg("x"), surface_op="append")
    assert s.surface.replace_generation == 0
    s.append("user/message", checkpoint("k"), surface_op=rep(2, 4), source_event_seqs=[2, 4])
    assert s.surface.replace_generation == 1
    with pytest.raises(SurfaceError):
        s.append("user/message", checkpoint("k"), surface_op=rep(2, 4),
                 source_event_seqs=[2, 4])
    assert s.surface.replace_generation == 1
    s.append("tool/result", with_meta({"n": 1, "flag": True}), surface_op=rep(6, 6),
             source_event_seqs=[6])
    assert s.surface.replace_generation == 2
    s.append("assistant/message", assistant_data("a"), surface_op="append",
             source_event_seqs=[])
    assert s.surface.replace_generation == 2
    assert len(s.replacements()) == 2


def test_surface_is_a_read_only_view_of_the_live_manager() -> None:
    s = base_session()
    view = s.surface
    nodes = view.nodes
    s.append("user/message", user_msg("x"), surface_op="append")
    assert list(nodes) == [2, 4, 6, 7, 10]
    assert view.replace_generation == 0
    with pytest.raises(AttributeError):
        view.nodes = []  # type: ignore[misc]
    assert not hasattr(nodes, "append")


def test_surface_predicates() -> None:
    s = base_session()
    s.append("user/message", checkpoint("k"), surface_op=rep(2, 2), source_event_seqs=[2])
    log = s.log
    assert [is_surface_event(e) for e in log] == [
        False, False, True, False, True, False, True, True, False, False, True]
    assert [e.seq for e in log if is_append_surface_event(e)] == [2, 4, 6, 7]
    assert [e.seq for e in log if is_replacement_surface_event(e)] == [10]
    assert all(is_surface_eligible_type(t) for t in
               ["user/message", "context/message", "assistant/message", "tool/result"])
    assert not any(is_surface_eligible_type(t) for t in
                   ["turn/start", "compaction/summary", "assistant/chunk", "tool/call"])


# -- section 7: seeds ----------------------------------------------------------------------


def test_seed_error_is_prefixed_with_its_index_and_nothing_is_built() -> None:
    log = list(base_session().log)
    bad = [*log[:5], ev("user/message", user_msg("x"), seq=5)]
    with pytest.raises(SurfaceError) as info:
        Session(bad)
    assert str(info.value).startswith("invalid seed event at index 5: ")
    assert "requires a surfaceOp marker" in str(info.value)
    assert "user/message" in str(info.value)
    gap = [*log[:3], log[4]]
    with pytest.raises(SurfaceError) as info:
        Session(gap)
    assert str(info.value).startswith("invalid seed event at index 3: ")
    assert "session event seq 4 is not contiguous; expected 3" in str(info.value)


def test_seed_gets_one_end_seed_marker() -> None:
    log = list(base_session().log)
    s = Session(log, clock=lambda: 7)
    assert len(s.log) == len(log) + 1
    marker = s.log[-1]
    assert (marker.type, marker.seq, marker.data) == ("session/end-seed", len(log), {})
    assert marker.surface_op is UNSET and marker.source_event_seqs is UNSET
    assert s.first_live_seq == len(log)
    assert list(s.surface.nodes) == [2, 4, 6, 7]
    assert [e.type for e in s.log].count("session/end-seed") == 1
    # reopening a log that ends in the marker adds nothing
    again = Session(s.log)
    assert len(again.log) == len(s.log)
    assert encode_log(None, again.log) == encode_log(None, s.log)
    assert again.first_live_seq == len(s.log)
    # the live session continues after the marker
    e = again.append("user/message", user_msg("live"), surface_op="append")
    assert e.seq == len(log) + 1


def test_empty_seed_gets_a_marker_and_no_seed_gets_none() -> None:
    s = Session([], clock=lambda: 42)
    assert [e.type for e in s.log] == ["session/end-seed"]
    assert s.log[0].seq == 0
    assert s.first_live_seq == 0
    bare = Session()
    assert len(bare.log) == 0
    assert bare.first_live_seq is None


def test_seed_marker_is_not_added_after_a_seed_that_ends_with_it_mid_log() -> None:
    s = Session([], clock=lambda: 1)
    s.append("user/message", user_msg("u"), surface_op="append")
    reopened = Session(s.log)
    assert [e.type for e in reopened.log] == ["session/end-seed", "user/message",
                                              "session/end-seed"]
    assert reopened.first_live_seq == 2


# -- section 7: derive ---------------------------------------------------------------------


def test_projection_rules() -> None:
    s = new_session()
    u = user_msg("u-1")
    c = ctx_msg("c-1")
    empty = assistant_data("a-empty", [])
    a = assistant_data("a-1")
    t = tool_result_data("t-1", "call-1")
    s.append("user/message", u, surface_op="append")
    s.append("context/message", c, surface_op="append")
    s.append("assistant/message", empty, surface_op="append", source_event_seqs=[])
    s.append("assistant/message", a, surface_op="append", source_event_seqs=[])
    s.append("tool/result", t, surface_op="append")
    s.append("todo/write", {"todos": [{"content": "ship", "status": "pending"}]})
    assert list(s.surface.nodes) == [0, 1, 2, 3, 4]
    assert s.derive_messages().to_list() == [u, c, a["message"], t["message"]]
    # the empty assistant message stays on the surface: it can be replaced like any node
    s.append("user/message", checkpoint("k"), surface_op=rep(2, 2), source_event_seqs=[2])
    assert list(s.surface.nodes) == [0, 1, 6, 3, 4]
    assert [m["id"] for m in s.derive_messages()] == ["u-1", "c-1", "k", "a-1", "t-1"]


def _rich_session() -> Session:
    s = base_session()
    s.append("user/message", user_msg("u-2"), surface_op="append")              # 10
    s.append("user/message", checkpoint("k-1"), surface_op=rep(4, 6),
             source_event_seqs=[4, 6])                                           # 11
    s.append("assistant/message", assistant_data("a-2"), surface_op="append",
             source_event_seqs=[])                                               # 12
    s.append("user/message", checkpoint("k-2"), surface_op=rep(2, 7),
             source_event_seqs=[2, 11, 7])                                       # 13
    s.append("context/message", ctx_msg("c-2"), surface_op="append")            # 14
    return s


def test_time_travel() -> None:
    s = _rich_session()
    log = list(s.log)
    for k in range(len(log)):
        snap = s.surface_at(k)
        assert snap.length == k + 1
        assert list(snap.nodes) == list(fold_surface(log[: k + 1]).nodes)
        past = replay(log[: k + 1])
        assert snap.replace_generation == past.surface.replace_generation
        assert s.derive_messages(as_of=k).to_list() == past.derive_messages().to_list()
    assert list(s.surface_at(11).nodes) == [2, 11, 7, 10]
    assert [m["id"] for m in s.derive_messages(as_of=11)] == ["u-1", "k-1", "c-1", "u-2"]
    assert list(s.surface.nodes) == [13, 10, 12, 14]
    assert s.derive_messages(as_of=len(log) - 1) == s.derive_messages()
    for bad in [len(log), -1]:
        with pytest.raises(IndexError):
            s.surface_at(bad)
        with pytest.raises(IndexError):
            s.derive_messages(as_of=bad)


def test_caller_owned_inputs_are_copied() -> None:
    s = base_session()
    data = user_msg("u-mut", "original")
    seqs = [0, 3]
    s.append("user/message", data, surface_op="append", source_event_seqs=seqs)
    op = {"op": "replace", "start": 10, "end": 10}
    k_data = checkpoint("k")
    k_seqs = [10]
    s.append("user/message", k_data, surface_op=op, source_event_seqs=k_seqs)
    before = state(s)
    data["id"] = "changed"
    data["content"][0]["text"] = "changed"
    data["content"].append({"type": "text", "text": "more"})
    seqs.append(9)
    op["start"] = 2
    k_data["content"].clear()
    k_seqs.clear()
    assert state(s) == before
    assert s.log[10].data["content"] == [{"type": "text", "text": "original"}]
    assert s.log[10].source_event_seqs == (0, 3)
    assert s.log[11].surface_op == rep(10, 10)
    assert [m["id"] for m in s.derive_messages()] == ["u-1", "a-1", "t-1", "c-1", "k"]
    assert replay(s.log).derive_messages() == s.derive_messages()


def test_derived_list_of_a_caller_never_changes() -> None:
    s = base_session()
    first = s.derive_messages()
    first_copy = copy.deepcopy(first.to_list())
    s.append("user/message", user_msg("u-2"), surface_op="append")
    second = s.derive_messages()
    second_copy = copy.deepcopy(second.to_list())
    s.append("user/message", checkpoint("k"), surface_op=rep(2, 6), source_event_seqs=[2, 4, 6])
    third = s.derive_messages()
    s.append("assistant/message", assistant_data("a-9"), surface_op="append",
             source_event_seqs=[])
    with pytest.raises(SurfaceError):
        s.append("user/message", user_msg("bad"), surface_op="prepend")
    fourth = s.derive_messages()
    assert len(first) == 4 and first.to_list() == first_copy and list(first) == first_copy
    assert len(second) == 5 and second.to_list() == second_copy
    assert [m["id"] for m in third] == ["k", "c-1", "u-2"]
    assert [m["id"] for m in fourth] == ["k", "c-1", "u-2", "a-9"]
    assert fourth == replay(s.log).derive_messages()


def test_batch_is_all_or_nothing() -> None:
    from surfacelog.session import AppendSpec

    s = base_session()
    s.derive_messages()
    before = state(s)
    with pytest.raises(SurfaceError) as info:
        s.append_batch([
            AppendSpec("user/message", user_msg("b-1"), "append"),
            AppendSpec("user/message", checkpoint("b-2"), rep(2, 10), (2, 4, 6, 7, 10)),
            AppendSpec("user/message", user_msg("b-3"), "append", [99]),
        ])
    assert "must reference earlier events: 99 >= current seq 12" in str(info.value)
    assert state(s) == before
    done = s.append_batch([AppendSpec("user/message", user_msg("b-1"), "append")])
    assert [e.seq for e in done] == [10]
    assert s.derive_messages() == replay(s.log).derive_messages()


def test_batch_copies_caller_data() -> None:
    from surfacelog.session import AppendSpec

    s = base_session()
    data = user_msg("b-1", "original")
    s.append_batch([AppendSpec("user/message", data, "append")])
    data["content"][0]["text"] = "changed"
    assert s.log[10].data["content"][0]["text"] == "original"


def test_atomic_block_rolls_back_derived_history_too() -> None:
    s = base_session()
    outside = s.derive_messages()
    before = state(s)
    inside: list[Any] = []
    with pytest.raises(RuntimeError), s.atomic():
        s.append("user/message", user_msg("in-1"), surface_op="append")
        inside.append(s.derive_messages())
        s.append("user/message", checkpoint("in-2"), surface_op=rep(2, 10),
                 source_event_seqs=[2, 4, 6, 7, 10])
        inside.append(s.derive_messages())
        s.append("user/message", user_msg("in-3"), surface_op="append")
        inside.append(s.derive_messages())
        raise RuntimeError("abort")
    assert state(s) == before
    assert [m["id"] for m in outside] == ["u-1", "a-1", "t-1", "c-1"]
    assert [[m["id"] for m in v] for v in inside] == [
        ["u-1", "a-1", "t-1", "c-1", "in-1"], ["in-2"], ["in-2", "in-3"]]
    s.append("user/message", user_msg("after"), surface_op="append")
    assert s.derive_messages() == replay(s.log).derive_messages()
    assert [m["id"] for m in s.derive_messages()] == ["u-1", "a-1", "t-1", "c-1", "after"]


# -- section 9: crash repair ---------------------------------------------------------------



def test_crash_tail_closers_match_the_expected_ones() -> None:
    events = read_log(EXAMPLES / "crash-tail.jsonl").events
    expected = json.loads((EXAMPLES / "crash-tail.repair.expected.json").read_text())
    closers = interrupted_turn_closers(events)
    got = decode_json(encode_log(None, closers).replace(b"\n", b",").rstrip(b",").join(
        [b"[", b"]"]))
    assert blank_texts(got) == blank_texts(expected)
    texts = [c.data["message"]["content"][0]["content"][0]["text"]
             for c in closers if c.type == "tool/result"]
    assert len(texts) == 2 and all(texts) and texts[0] != texts[1]
    # the closers are valid appends and close the turn
    repaired = replay([*events, *closers])
    assert interrupted_turn_closers(repaired.log) == []
    assert list(repaired.surface.nodes)[-2:] == [closers[0].seq, closers[1].seq]


def test_no_closers_for_empty_or_closed_logs() -> None:
    assert interrupted_turn_closers([]) == []
    assert interrupted_turn_closers(base_session().log) == []
    for name in ["basic-turns", "tool-calls", "compaction", "nested-replaces"]:
        events = read_log(EXAMPLES / f"{name}.jsonl").events
        last_turn = [e.type for e in events if e.type in ("turn/start", "turn/end")][-1]
        assert (interrupted_turn_closers(events) == []) == (last_turn == "turn/end")
    no_turn = new_session()
    no_turn.append("user/message", user_msg("u"), surface_op="append")
    assert interrupted_turn_closers(no_turn.log) == []


def _open_turn_with_calls() -> Session:
    s = new_session()
    s.append("turn/start", {"turn": 3})                                           # 0
    s.append("step/start", {"turn": 3, "step": 2})                                # 1
    s.append("assistant/message", {**assistant_data("a", [
        {"type": "tool-call", "id": cid, "name": "bash", "arguments": "{}"}
        for cid in ["c1", "c2", "c3"]]), "turn": 3, "step": 2},
        surface_op="append", source_event_seqs=[])                                # 2
    s.append("tool/call", {"turn": 3, "step": 2, "callId": "c1", "name": "bash",
                           "arguments": "{}"})                                    # 3
    s.append("tool/call", {"turn": 3, "step": 2, "callId": "c3", "name": "bash",
                           "arguments": "{}"})                                    # 4
    s.append("tool/result", {**tool_result_data("r3", "c3"), "turn": 3, "step": 2},
             surface_op="append", source_event_seqs=[4], time=T0 + 5)            # 5
    return s


def test_closers_outcome_unknown_vs_not_started() -> None:
    s = _open_turn_with_calls()
    closers = interrupted_turn_closers(s.log)
    assert [(e.type, e.seq, e.time) for e in closers] == [
        ("tool/result", 6, T0 + 5), ("tool/result", 7, T0 + 5), ("step/end", 8, T0 + 5),
        ("turn/end", 9, T0 + 5)]
    unknown, not_started, step_end, turn_end = closers
    assert unknown.data["error"] == {"name": "ToolOutcomeUnknownError",
                                     "code": "TOOL_OUTCOME_UNKNOWN"}
    assert unknown.source_event_seqs == (3,)
    assert unknown.data["message"]["id"] == "interrupted-tool-result-c1-6"
    assert not_started.data["error"] == {"name": "ToolNotStartedError",
                                         "code": "TOOL_NOT_STARTED"}
    assert not_started.source_event_seqs is UNSET
    assert not_started.data["message"]["id"] == "interrupted-tool-result-c2-7"
    for closer, cid in [(unknown, "c1"), (not_started, "c2")]:
        assert closer.surface_op == "append"
        msg = closer.data["message"]
        assert (closer.data["turn"], closer.data["step"]) == (3, 2)
        assert msg["source"] == {"kind": "tool", "callId": cid}
        assert msg["content"][0]["toolCallId"] == cid
        assert msg["content"][0]["isError"] is True
    assert "unknown" in unknown.data["message"]["content"][0]["content"][0]["text"]
    assert step_end.data == {"turn": 3, "step": 2}
    assert turn_end.data == {"turn": 3, "reason": {"kind": "interrupted"}}
    s.append_batch(closers)
    assert interrupted_turn_closers(s.log) == []


def test_closers_without_an_open_step_or_pending_calls() -> None:
    s = new_session()
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("assistant/message", assistant_data("a", [
        {"type": "tool-call", "id": "c1", "name": "bash", "arguments": "{}"}]),
        surface_op="append", source_event_seqs=[])
    s.append("step/end", {"turn": 1, "step": 1})  # clears the pending calls
    closers = interrupted_turn_closers(s.log)
    assert [(e.type, e.seq) for e in closers] == [("turn/end", 4)]
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    s.append("turn/start", {"turn": 2})
    closers = interrupted_turn_closers(s.log)
    assert [(e.type, e.data) for e in closers] == [
        ("turn/end", {"turn": 2, "reason": {"kind": "interrupted"}})]


# -- section 10: fork ----------------------------------------------------------------------


def _fork_sessions() -> dict[str, Session]:
    closed = base_session()
    open_ = base_session()
    open_.append("turn/start", {"turn": 2})
    open_.append("user/message", user_msg("u-9"), surface_op="append")
    header = SessionHeader(version=0, id="closed", created_at=1, cwd="/work")
    return {"closed": Session(closed.log, header=header), "open": open_}


@pytest.mark.parametrize(("source", "boundary", "child", "code"), [
    ("closed", 3, "open", "SESSION_ALREADY_EXISTS"),
    ("missing", 99, "open", "SESSION_ALREADY_EXISTS"),
    ("missing", 3, "new", "SESSION_NOT_FOUND"),
    ("missing", -5, "new", "SESSION_NOT_FOUND"),
    ("closed", 11, "new", "INVALID_BOUNDARY"),
    ("closed", -1, "new", "INVALID_BOUNDARY"),
    ("closed", True, "new", "INVALID_BOUNDARY"),
    ("closed", 2.0, "new", "INVALID_BOUNDARY"),
    ("closed", "3", "new", "INVALID_BOUNDARY"),
    ("open", 12, "new", "INVALID_BOUNDARY"),
    ("closed", 3, "new", "OPEN_TURN"),
    ("closed", 0, "new", "OPEN_TURN"),
    ("open", 10, "new", "OPEN_TURN"),
    ("open", None, "new", "OPEN_TURN"),
])
def test_fork_errors_in_check_order(source: str, boundary: Any, child: str,
                                    code: str) -> None:
    sessions = _fork_sessions()
    lengths = {k: len(v.log) for k, v in sessions.items()}
    with pytest.raises(ForkError) as info:
        fork(sessions, source, boundary, child)
    assert info.value.code == code
    assert code in str(info.value)
    assert {k: len(v.log) for k, v in sessions.items()} == lengths


def test_fork_child_gets_the_prefix_and_a_marker() -> None:
    sessions = _fork_sessions()
    source = sessions["closed"]
    child = fork(sessions, "closed", 9, "kid", created_at=5)
    assert child.header is not None
    assert child.header.parent_session == "closed"
    assert child.header.seed_length == 10
    assert child.header.id == "kid"
    assert child.header.cwd == "/work"
    assert encode_log(None, child.log[:10]) == encode_log(None, source.log[:10])
    assert child.log[10].type == "session/end-seed"
    assert child.first_live_seq == 10
    assert list(child.surface.nodes) == [2, 4, 6, 7]
    # default boundary: the last event (here the source's own marker): nothing added
    whole = fork(sessions, "closed", None, "kid2")
    assert len(whole.log) == len(source.log)
    assert whole.header is not None and whole.header.seed_length == len(source.log)
    # a boundary before any turn is fine
    early = fork(sessions, "open", 9, "kid3")
    assert len(early.log) == 11
    assert "kid" not in sessions  # the caller registers the child


# -- section 8: legacy ---------------------------------------------------------------------


def _strip_markers(events: list[Event]) -> list[Event]:
    return [msgspec.structs.replace(e, surface_op=UNSET) for e in events]


@pytest.mark.parametrize("name", ["basic-turns", "tool-calls", "crash-tail"])
def test_legacy_upgrade_and_linear_derive(name: str) -> None:
    current = read_log(EXAMPLES / f"{name}.jsonl").events
    assert not any(is_replacement_surface_event(e) for e in current)
    legacy = _strip_markers(current)
    first = next(e for e in legacy if is_surface_eligible_type(e.type))
    with pytest.raises(SurfaceError) as info:
        replay(legacy)
    assert "requires a surfaceOp marker" in str(info.value)
    assert names_seq(str(info.value), first.seq)
    upgraded = upgrade_legacy(legacy)
    assert encode_log(None, upgraded) == encode_log(None, current)
    assert derive_messages_linear(legacy) == replay(upgraded).derive_messages().to_list()
    assert derive_messages_linear(legacy) == replay(current).derive_messages().to_list()


def test_legacy_mixed_log_refused() -> None:
    current = list(base_session().log)
    mixed = [msgspec.structs.replace(e, surface_op=UNSET) if e.seq == 6 else e
             for e in current]
    with pytest.raises(SurfaceError) as info:
        upgrade_legacy(mixed)
    assert isinstance(info.value, ValueError)
    assert "tool/result" in str(info.value)
    assert names_seq(str(info.value), 6)
    # a current log is returned as it is
    assert encode_log(None, upgrade_legacy(current)) == encode_log(None, current)
