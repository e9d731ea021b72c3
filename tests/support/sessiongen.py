"""Valid sessions for the store tests: a deterministic turn builder and a hypothesis
strategy. Every event goes through ``Session.append``, so whatever is built here is a
log the core accepts."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from msgspec import UNSET

from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session import Session


def header(session_id: str, created_at: int = 1_700_000_000_000) -> SessionHeader:
    """A minimal valid header, as DSH writes it (``delegationDepth`` 0: every backend,
    a DSH sessions root included, gives it back unchanged)."""
    return SessionHeader(version=SESSION_FORMAT_VERSION, id=session_id, created_at=created_at,
                         delegation_depth=0)


class Clock:
    """A deterministic millisecond clock for ``Session(clock=...)``."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def user_message(session: Session, mid: str, body: str) -> None:
    session.append("user/message", {"id": mid, "role": "user", "source": {"kind": "user"},
                                    "content": [text(body)]}, surface_op="append")


def add_step(session: Session, turn: int, step: int, *, chunks: int, calls: list[str],
             body: str = "done", log_calls: bool = True, results: bool = True,
             meta: Any = None) -> None:
    """One model step: chunks, an assistant message citing them, then its tool calls
    and results (each result citing its logged ``tool/call``)."""
    session.append("step/start", {"turn": turn, "step": step})
    cited = []
    for i in range(chunks):
        ev = session.append("assistant/chunk", {
            "turn": turn, "step": step,
            "chunk": {"type": "text-delta", "index": 0, "text": f"{body[:3]}{i}"}})
        cited.append(ev.seq)
    content = [text(body)] + [
        {"type": "tool-call", "id": cid, "name": "bash", "arguments": '{"command":"ls"}'}
        for cid in calls]
    session.append("assistant/message", {
        "turn": turn, "step": step,
        "message": {"id": f"a-{turn}-{step}", "role": "assistant",
                    "source": {"kind": "model", "provider": "p", "model": "m"},
                    "content": content},
        "usage": {"inputTokens": 20, "outputTokens": 3}},
        surface_op="append", source_event_seqs=cited)
    for cid in calls:
        call_seq = None
        if log_calls:
            call_seq = session.append("tool/call", {"turn": turn, "step": step, "callId": cid,
                                                    "name": "bash", "arguments": "{}"}).seq
        if not results:
            continue
        data: dict[str, Any] = {
            "turn": turn, "step": step,
            "message": {"id": f"t-{cid}", "role": "user",
                        "source": {"kind": "tool", "callId": cid},
                        "content": [{"type": "tool-result", "toolCallId": cid,
                                     "content": [text(f"out of {cid}")]}]}}
        if meta is not None:
            data["meta"] = meta
        session.append("tool/result", data, surface_op="append",
                       source_event_seqs=[call_seq] if call_seq is not None else UNSET)
    session.append("step/end", {"turn": turn, "step": step})


def add_turn(session: Session, turn: int, *, steps: int = 2, chunks: int = 3,
             calls: int = 1) -> None:
    """A closed turn: user message, ``steps`` model steps (all but the last calling
    ``calls`` tools), ``turn/end``."""
    session.append("turn/start", {"turn": turn})
    user_message(session, f"u-{turn}", f"request {turn}")
    for step in range(1, steps + 1):
        ids = [f"c-{turn}-{step}-{k}" for k in range(calls)] if step < steps else []
        add_step(session, turn, step, chunks=chunks, calls=ids)
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def open_turn(session: Session, turn: int) -> None:
    """A turn a crash left open: a step whose tool call was logged but has no result,
    plus a call that was never logged."""
    session.append("turn/start", {"turn": turn})
    user_message(session, f"u-{turn}", "crash me")
    add_step(session, turn, 1, chunks=1, calls=[f"c-{turn}-x"], results=False)
    session.append("step/start", {"turn": turn, "step": 2})
    session.append("assistant/message", {
        "turn": turn, "step": 2,
        "message": {"id": f"a-{turn}-2", "role": "assistant",
                    "source": {"kind": "model", "provider": "p", "model": "m"},
                    "content": [{"type": "tool-call", "id": f"c-{turn}-y", "name": "bash",
                                 "arguments": "{}"}]}},
        surface_op="append", source_event_seqs=[])


def build_session(session_id: str, turns: int) -> Session:
    """A session of ``turns`` closed turns with a deterministic clock."""
    session = Session(header=header(session_id), clock=Clock())
    for turn in range(1, turns + 1):
        add_turn(session, turn)
    return session


# -- hypothesis ------------------------------------------------------------------------

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)

_ACTION = st.one_of(
    st.tuples(st.just("turn"), st.integers(1, 3), st.integers(0, 3), st.integers(0, 2),
              _TEXT, st.booleans(), _JSON),
    st.tuples(st.just("context"), _TEXT),
    st.tuples(st.just("compact"), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.just("prune"), st.integers(0, 50), _TEXT),
    st.tuples(st.just("ignorable"), _TEXT, _JSON),
    st.tuples(st.just("todo"), _TEXT),
)


def _apply(session: Session, action: tuple[Any, ...], turn: int) -> int:
    kind = action[0]
    if kind == "turn":
        _, steps, chunks, calls, body, log_calls, meta = action
        turn += 1
        session.append("turn/start", {"turn": turn})
        user_message(session, f"u-{turn}", body)
        for step in range(1, steps + 1):
            ids = [f"c-{turn}-{step}-{k}" for k in range(calls)] if step < steps else []
            add_step(session, turn, step, chunks=chunks, calls=ids, body=body or "x",
                     log_calls=log_calls, meta=meta)
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    elif kind == "context":
        session.append("context/message", {
            "id": f"ctx-{len(session)}", "role": "user",
            "source": {"kind": "plugin", "plugin": "workspace"}, "content": [text(action[1])]},
            surface_op="append")
    elif kind == "compact":
        nodes = list(session.surface.nodes)
        if len(nodes) >= 2:
            i = action[1] % len(nodes)
            j = i + action[2] % (len(nodes) - i)
            shadowed = nodes[i:j + 1]
            cid = f"k-{len(session)}"
            start = session.append("compaction/start", {"compactionId": cid, "turn": None})
            summary = session.append("compaction/summary", {
                "compactionId": cid, "summary": [text("sum")],
                "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
                "shadowedSeqs": shadowed, "shadowedTokenCount": 10 * len(shadowed)})
            session.append("user/message", {
                "id": f"chk-{cid}", "role": "user",
                "source": {"kind": "plugin", "plugin": "compaction"},
                "content": [text("summary")]},
                surface_op={"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
                source_event_seqs=[start.seq, summary.seq, *shadowed])
            session.append("compaction/end", {"compactionId": cid, "turn": None})
    elif kind == "prune":
        results = [n for n in session.surface.nodes if session.event(n).type == "tool/result"]
        if results:
            target = session.event(results[action[1] % len(results)])
            session.append("compaction/prune", {
                "shadowedRange": {"start": target.seq, "end": target.seq},
                "shadowedSeqs": [target.seq], "shadowedTokenCount": 5})
            data = target.data
            block = dict(data["message"]["content"][0], content=[text(action[2])])
            message = dict(data["message"], content=[block])
            session.append("tool/result", dict(data, message=message),
                           surface_op={"op": "replace", "start": target.seq,
                                       "end": target.seq},
                           source_event_seqs=[target.seq])
    elif kind == "ignorable":
        session.append("x-plugin/note", {"note": action[1], "value": action[2]},
                       ignorable=True)
    elif kind == "todo":
        session.append("todo/write", {"todos": [{"content": action[1], "status": "pending"}]})
    return turn


@st.composite
def sessions(draw: st.DrawFn, max_actions: int = 6) -> Session:
    """A valid session built from a few drawn actions, maybe ending in an open turn."""
    session = Session(header=header(draw(st.text("abcdefgh-", min_size=1, max_size=8))),
                      clock=Clock(draw(st.integers(0, 2**40))))
    turn = 0
    for action in draw(st.lists(_ACTION, max_size=max_actions)):
        turn = _apply(session, action, turn)
    if draw(st.booleans()):
        open_turn(session, turn + 1)
    return session
