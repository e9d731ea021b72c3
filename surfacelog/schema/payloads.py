"""Event payloads (docs/rules.md §4): one msgspec struct per ``data`` shape.

Payload structs check shapes and build events; they ignore keys they do not model, so
a DSH payload with extra keys still validates and its JSON value is kept verbatim.
Integer fields are safe integers: booleans, floats and out-of-range values fail.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from surfacelog.schema.messages import Message, NonEmptyStr

SafeInt = Annotated[int, Meta(ge=-(2**53 - 1), le=2**53 - 1)]
SeqInt = Annotated[int, Meta(ge=0, le=2**53 - 1)]


class _Payload(Struct, rename="camel", omit_defaults=True):
    pass


# -- turns and steps -------------------------------------------------------------------


class TurnStart(_Payload):
    turn: SafeInt


class AbortReason(_Payload):
    kind: str
    reason: str | UnsetType = UNSET


class TurnError(_Payload):
    message: str
    code: str | UnsetType = UNSET


class TurnEndReason(_Payload):
    """``completed | aborted | blocked | error | max-tokens | interrupted``."""

    kind: NonEmptyStr
    reason: AbortReason | UnsetType = UNSET
    error: TurnError | UnsetType = UNSET


class TurnEnd(_Payload):
    turn: SafeInt
    reason: TurnEndReason


class StepStart(_Payload):
    turn: SafeInt
    step: SafeInt


class StepEnd(_Payload):
    turn: SafeInt
    step: SafeInt


# -- model stream chunks ---------------------------------------------------------------


class Usage(_Payload):
    input_tokens: SafeInt
    output_tokens: SafeInt
    cache_read_tokens: SafeInt | UnsetType = UNSET
    cache_write_tokens: SafeInt | UnsetType = UNSET
    reasoning_tokens: SafeInt | UnsetType = UNSET


class BlockStartChunk(_Payload, tag_field="type", tag="block-start"):
    index: SafeInt
    block_type: str


class TextDeltaChunk(_Payload, tag_field="type", tag="text-delta"):
    index: SafeInt
    text: str


class ReasoningDeltaChunk(_Payload, tag_field="type", tag="reasoning-delta"):
    index: SafeInt
    text: str


class ToolCallDeltaChunk(_Payload, tag_field="type", tag="tool-call-delta"):
    index: SafeInt
    id: str
    arguments_delta: str
    name: str | UnsetType = UNSET


class BlockEndChunk(_Payload, tag_field="type", tag="block-end"):
    index: SafeInt
    block: dict[str, Any]


class UsageChunk(_Payload, tag_field="type", tag="usage"):
    usage: Usage


class FinishChunk(_Payload, tag_field="type", tag="finish"):
    reason: dict[str, Any]
    replay_state: Any = UNSET


Chunk = (
    BlockStartChunk
    | TextDeltaChunk
    | ReasoningDeltaChunk
    | ToolCallDeltaChunk
    | BlockEndChunk
    | UsageChunk
    | FinishChunk
)


class AssistantChunk(_Payload):
    turn: SafeInt
    step: SafeInt
    chunk: Chunk


class ToolCall(_Payload):
    turn: SafeInt
    step: SafeInt
    call_id: NonEmptyStr
    name: str
    arguments: str


# -- surface-eligible payloads ---------------------------------------------------------


class AssistantMessage(_Payload):
    turn: SafeInt
    step: SafeInt
    message: Message
    usage: Usage | UnsetType = UNSET
    interrupted: Literal[True] | UnsetType = UNSET


class ToolErrorInfo(_Payload):
    name: str
    code: str


class ToolResult(_Payload):
    turn: SafeInt
    step: SafeInt
    message: Message
    error: ToolErrorInfo | UnsetType = UNSET
    meta: Any = UNSET


# -- misc core payloads ----------------------------------------------------------------


class EndSeed(_Payload):
    pass


class Todo(_Payload):
    content: str
    status: str


class TodoWrite(_Payload):
    todos: list[Todo]


class RequestHeader(_Payload):
    header: dict[str, Any]
    reason: str


class RequestContext(_Payload):
    provider: str
    model: str
    context_window: SafeInt | UnsetType = UNSET  # optional in DSH, which writes it absent


# -- compaction trace ------------------------------------------------------------------


class SeqRange(_Payload):
    start: SeqInt
    end: SeqInt


class CompactionStart(_Payload):
    compaction_id: NonEmptyStr
    turn: SafeInt | None


class CompactionSummary(_Payload):
    compaction_id: NonEmptyStr
    summary: list[dict[str, Any]]
    shadowed_range: SeqRange
    shadowed_seqs: list[SeqInt]
    shadowed_token_count: SafeInt
    provider: str | UnsetType = UNSET
    model: str | UnsetType = UNSET


class CompactionEnd(_Payload):
    compaction_id: NonEmptyStr
    turn: SafeInt | None
    error: str | UnsetType = UNSET


class CompactionPrune(_Payload):
    shadowed_range: SeqRange
    shadowed_seqs: list[SeqInt]
    shadowed_token_count: SafeInt


__all__ = [
    "AbortReason",
    "AssistantChunk",
    "AssistantMessage",
    "BlockEndChunk",
    "BlockStartChunk",
    "Chunk",
    "CompactionEnd",
    "CompactionPrune",
    "CompactionStart",
    "CompactionSummary",
    "EndSeed",
    "FinishChunk",
    "ReasoningDeltaChunk",
    "RequestContext",
    "RequestHeader",
    "SafeInt",
    "SeqInt",
    "SeqRange",
    "StepEnd",
    "StepStart",
    "TextDeltaChunk",
    "TodoWrite",
    "ToolCall",
    "ToolCallDeltaChunk",
    "ToolErrorInfo",
    "ToolResult",
    "TurnEnd",
    "TurnEndReason",
    "TurnError",
    "TurnStart",
    "Usage",
    "UsageChunk",
]
