"""Crash repair: the events that close a turn a crash left open (docs/rules.md §9)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from surfacelog.schema.events import Event

OUTCOME_UNKNOWN_TEXT = (
    "The session stopped while this tool call was running, so its outcome is unknown: it "
    "may or may not have taken effect. Retry it only if it is read-only or idempotent; "
    "otherwise first verify the external state it would change, or ask the user."
)
NOT_STARTED_TEXT = (
    "The session stopped before this tool call was started, so it never ran. It may be "
    "retried if it is still needed."
)


class _Pending:
    __slots__ = ("call_seq", "step")

    def __init__(self, step: int | None) -> None:
        self.step = step
        self.call_seq: int | None = None


def interrupted_turn_closers(events: Sequence[Event]) -> list[Event]:
    """The events that close the log's open turn, seqs continuing the log.

    One ``tool/result`` per pending call (outcome unknown when its ``tool/call`` was
    logged, not started otherwise), then ``step/end`` if a step is open, then
    ``turn/end`` with reason ``interrupted``; every ``time`` is the last event's. Empty
    when the log is empty or its last turn is closed.
    """
    turn: Any = None
    step: Any = None
    pending: dict[str, _Pending] = {}
    for event in events:
        etype = event.type
        if etype == "turn/start":
            turn, step, pending = event.data["turn"], None, {}
        elif etype == "turn/end":
            turn, step, pending = None, None, {}
        elif etype == "step/start":
            step = event.data["step"]
        elif etype == "step/end":
            step = None
            pending = {}
        elif etype == "assistant/message":
            for blk in event.data["message"]["content"]:
                if blk.get("type") == "tool-call":
                    pending[blk["id"]] = _Pending(event.data.get("step", step))
        elif etype == "tool/call":
            entry = pending.get(event.data["callId"])
            if entry is not None:
                entry.call_seq = event.seq
        elif etype == "tool/result":
            pending.pop(event.data["message"]["source"]["callId"], None)
    if turn is None:
        return []
    seq = len(events)
    at = events[-1].time
    out: list[Event] = []
    for call_id, entry in pending.items():
        out.append(_closer(seq, at, turn, entry.step, call_id, entry.call_seq))
        seq += 1
    if step is not None:
        out.append(Event(type="step/end", seq=seq, time=at, data={"turn": turn, "step": step}))
        seq += 1
    out.append(Event(type="turn/end", seq=seq, time=at,
                     data={"turn": turn, "reason": {"kind": "interrupted"}}))
    return out


def _closer(seq: int, at: int, turn: Any, step: Any, call_id: str,
            call_seq: int | None) -> Event:
    logged = call_seq is not None
    block = {
        "type": "tool-result",
        "toolCallId": call_id,
        "content": [{"type": "text", "text": OUTCOME_UNKNOWN_TEXT if logged
                     else NOT_STARTED_TEXT}],
        "isError": True,
    }
    data = {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"interrupted-tool-result-{call_id}-{seq}",
            "role": "user",
            "source": {"kind": "tool", "callId": call_id},
            "content": [block],
        },
        "error": ({"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
                  if logged else
                  {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}),
    }
    if call_seq is not None:
        return Event(type="tool/result", seq=seq, time=at, data=data, surface_op="append",
                     source_event_seqs=(call_seq,))
    return Event(type="tool/result", seq=seq, time=at, data=data, surface_op="append")
