"""The exact mapping between a Google ADK ``Event`` (as its camelCase JSON object,
``event.model_dump(mode="json", by_alias=True, exclude_none=True)``) and one DSH event.

Content parts become DSH blocks where the block says all the part says, and are kept
whole otherwise:

- ``{"text": t}`` -> ``{"type":"text","text":t}``; ``{"text": t, "thought": true}`` ->
  ``{"type":"reasoning","text":t}``;
- ``{"functionCall": {"id","name","args"}}`` -> ``{"type":"tool-call","id","name",
  "arguments": <args as JSON text>}``;
- ``{"functionResponse": {"id","name","response"}}`` -> ``{"type":"tool-result",
  "toolCallId": id, "content": [{"type":"text","text": <response as JSON text>}]}`` (the
  function's name is kept in the residual's ``functionNames``);
- any other part (inline data, files, code, a call without id or args, a part with
  extra fields...) -> ``{"type":"adk-part","part": <the part>}``, a block type DSH
  passes through untouched.

The event type follows the content: one function response -> ``tool/result`` (source
``{"kind":"tool","callId"}``, citing the ``assistant/message`` that made the call when
the adapter knows it); author ``user`` -> ``user/message`` (source ``user``); content
role ``user`` of an agent (several function responses, injected text) ->
``user/message`` with a ``plugin`` source; anything else -> ``assistant/message``
(source ``model``, provider ``google-adk``, model = the author). Everything of the
event besides its parts (id, invocationId, author, timestamp, actions with their
``stateDelta``, branch...) is kept under the source's ``adk`` key (the *residual*), so
``adk_event_of`` rebuilds the very object: ``Event.model_validate`` of it equals the
original event.

An ADK compaction event (``actions.compaction``, which ADK's contents builder shows the
model in place of the events between its start and end timestamps) becomes a
``user/message`` (``plugin`` source) that *replaces* those events on the surface and
cites them (``sourceEventSeqs``), its blocks the summary's parts: the surface is then
what ADK shows the model, and the log keeps every event. When those events are not one
run of surface nodes, it is appended like any event.

The adapter writes no turns: its events carry ``turn 0, step 0`` (as the OpenAI Agents
adapter does), so reopening a session adds no crash-repair results ADK did not write.
Nothing here imports ADK.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from surfacelog.schema.codec import decode_json, encode_json
from surfacelog.schema.errors import SurfacelogError
from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.session import AppendSpec

PROVIDER: Final = "google-adk"
"""``provider`` of the model source of the adapter's ``assistant/message`` events."""
RESIDUAL: Final = "adk"
"""The source key holding what the blocks do not say."""
PART_BLOCK: Final = "adk-part"
"""The block type of a part kept whole."""

_MESSAGE_TYPES: Final = frozenset({"user/message", "context/message", "assistant/message",
                                   "tool/result"})


class UnmappableEvent(ValueError, SurfacelogError):
    """An ADK event that cannot be stored as it is (not a JSON object, a content that is
    not an object...). Nothing was appended."""


def _json_text(value: Any) -> str:
    return encode_json(value).decode()


def _id(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _block(part: Any) -> dict[str, Any]:
    if isinstance(part, dict):
        keys = part.keys()
        text = part.get("text")
        if keys == {"text"} and isinstance(text, str):
            return {"type": "text", "text": text}
        if keys == {"text", "thought"} and isinstance(text, str) and part["thought"] is True:
            return {"type": "reasoning", "text": text}
        call = part.get("functionCall")
        if (keys == {"functionCall"} and isinstance(call, dict)
                and call.keys() == {"id", "name", "args"} and _id(call["id"])
                and isinstance(call["name"], str) and isinstance(call["args"], dict)):
            return {"type": "tool-call", "id": call["id"], "name": call["name"],
                    "arguments": _json_text(call["args"])}
        answer = part.get("functionResponse")
        if (keys == {"functionResponse"} and isinstance(answer, dict)
                and answer.keys() == {"id", "name", "response"}
                and _id(answer["id"]) and isinstance(answer["name"], str)):
            return {"type": "tool-result", "toolCallId": answer["id"],
                    "content": [{"type": "text", "text": _json_text(answer["response"])}]}
    return {"type": PART_BLOCK, "part": part}


def _part(block: Mapping[str, Any], names: list[str]) -> Any:
    kind = block["type"]
    if kind == "text":
        return {"text": block["text"]}
    if kind == "reasoning":
        return {"text": block["text"], "thought": True}
    if kind == "tool-call":
        return {"functionCall": {"id": block["id"], "name": block["name"],
                                 "args": decode_json(block["arguments"])}}
    if kind == "tool-result":
        return {"functionResponse": {"id": block["toolCallId"], "name": names.pop(0),
                                     "response": decode_json(block["content"][0]["text"])}}
    return block["part"]


def compaction_span(event: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(startTimestamp, endTimestamp)`` of an ADK compaction event, else ``None``."""
    actions = event.get("actions")
    compaction = actions.get("compaction") if isinstance(actions, dict) else None
    if not isinstance(compaction, dict):
        return None
    start, end = compaction.get("startTimestamp"), compaction.get("endTimestamp")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)):
        return float(start), float(end)
    return None


def map_event(event: Mapping[str, Any], *, call_seqs: Mapping[str, int] | None = None,
              replace: Sequence[int] = ()) -> AppendSpec:
    """The DSH event storing ``event`` (ADK's camelCase JSON object). ``call_seqs``:
    the seq of the event holding each tool call id, cited by a ``tool/result``.
    ``replace``: a run of surface nodes the event replaces (an ADK compaction event: its
    DSH event replaces the events it summarises on the surface, citing them, and shows
    the summary's parts as its blocks). Raises ``UnmappableEvent``."""
    if not isinstance(event, Mapping):
        raise UnmappableEvent(f"an ADK event must be a JSON object, got {type(event)}")
    envelope = dict(event)
    content = envelope.pop("content", None)
    residual: dict[str, Any] = {"event": envelope}
    blocks: list[dict[str, Any]] = []
    role = None
    if content is not None:
        if not isinstance(content, dict):
            raise UnmappableEvent(f"ADK event content must be an object, got {content!r}")
        parts = content.get("parts")
        if content.keys() <= {"parts", "role"} and isinstance(parts, list):
            blocks = [_block(p) for p in parts]
            role = content.get("role")
            names = [p["functionResponse"]["name"] for p, b in zip(parts, blocks, strict=True)
                     if b["type"] == "tool-result"]
            if names:
                residual["functionNames"] = names
            residual["content"] = {"role": role} if "role" in content else {}
        else:
            residual["content"] = {"whole": content}
    elif replace:
        # No content: the blocks show the summary (a view only; the residual has no
        # "content", so the event is rebuilt without one).
        summary = envelope["actions"]["compaction"].get("compactedContent")
        parts = summary.get("parts") if isinstance(summary, dict) else None
        blocks = [_block(p) for p in parts] if isinstance(parts, list) else []
    author = envelope.get("author")
    message_id = "adk-" + str(envelope.get("id") or uuid.uuid4().hex)
    if len(blocks) == 1 and blocks[0]["type"] == "tool-result":
        call_id = blocks[0]["toolCallId"]
        message = {"id": message_id, "role": "user",
                   "source": {"kind": "tool", "callId": call_id, RESIDUAL: residual},
                   "content": blocks}
        data = {"turn": 0, "step": 0, "message": message}
        cited = (call_seqs or {}).get(call_id)
        if cited is None:
            return AppendSpec("tool/result", data, surface_op="append")
        return AppendSpec("tool/result", data, surface_op="append", source_event_seqs=[cited])
    if replace:
        checkpoint = {"kind": "plugin", "plugin": PROVIDER, RESIDUAL: residual}
        return AppendSpec("user/message", {"id": message_id, "role": "user",
                                           "source": checkpoint, "content": blocks},
                          surface_op=ReplaceOp(start=replace[0], end=replace[-1]),
                          source_event_seqs=list(replace))
    if author == "user" or role == "user":
        source: dict[str, Any] = ({"kind": "user"} if author == "user"
                                  else {"kind": "plugin", "plugin": PROVIDER})
        source[RESIDUAL] = residual
        return AppendSpec("user/message", {"id": message_id, "role": "user",
                                           "source": source, "content": blocks},
                          surface_op="append")
    model = author if isinstance(author, str) and author else "agent"
    message = {"id": message_id, "role": "assistant",
               "source": {"kind": "model", "provider": PROVIDER, "model": model,
                          RESIDUAL: residual},
               "content": blocks}
    return AppendSpec("assistant/message", {"turn": 0, "step": 0, "message": message},
                      surface_op="append")


def _message(event: Event) -> Mapping[str, Any] | None:
    if event.type not in _MESSAGE_TYPES or not isinstance(event.data, dict):
        return None
    message = event.data if event.type in ("user/message", "context/message") \
        else event.data.get("message")
    if not isinstance(message, dict):
        return None
    source = message.get("source")
    if not isinstance(source, dict) or not isinstance(source.get(RESIDUAL), dict):
        return None
    return message


def adk_event_of(event: Event) -> dict[str, Any] | None:
    """The ADK event (camelCase JSON object) a DSH event stores; ``None`` for an event
    the adapter did not write (markers, compaction checkpoints...)."""
    message = _message(event)
    if message is None:
        return None
    residual = message["source"][RESIDUAL]
    out = dict(residual["event"])
    content = residual.get("content")
    if content is not None:
        if "whole" in content:
            out["content"] = content["whole"]
        else:
            names = list(residual.get("functionNames", []))
            rebuilt: dict[str, Any] = {"parts": [_part(b, names) for b in message["content"]]}
            if "role" in content:
                rebuilt["role"] = content["role"]
            out["content"] = rebuilt
    return out


def tool_call_ids(spec: AppendSpec) -> list[str]:
    """The tool call ids an ``assistant/message`` spec carries."""
    if spec.type != "assistant/message":
        return []
    return [b["id"] for b in spec.data["message"]["content"] if b.get("type") == "tool-call"]


__all__ = ["PART_BLOCK", "PROVIDER", "RESIDUAL", "UnmappableEvent", "adk_event_of",
           "compaction_span", "map_event", "tool_call_ids"]
