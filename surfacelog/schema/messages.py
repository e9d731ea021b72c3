"""Messages, sources and content blocks (docs/rules.md §3), as msgspec structs.

The structs are the typed way to build and check messages. Logged events keep their
``data`` as the JSON value they arrived with (see ``events``), so keys a producer adds
beyond these fields (DSH plugin sources carry ``form``, ``sections``...) survive a round
trip; the structs therefore ignore unknown keys instead of refusing them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

NonEmptyStr = Annotated[str, Meta(min_length=1)]
Count = Annotated[int, Meta(ge=0, le=2**53 - 1)]


class _Wire(Struct, rename="camel", omit_defaults=True):
    """Base for every wire struct: camelCase keys, absent optionals omitted."""


class TextBlock(_Wire, tag_field="type", tag="text"):
    text: str


class ReasoningBlock(_Wire, tag_field="type", tag="reasoning"):
    text: str


class Attachment(_Wire):
    attachment_id: str
    media_type: str
    bytes: Count | UnsetType = UNSET
    width: Count | UnsetType = UNSET
    height: Count | UnsetType = UNSET


class ImageBlock(_Wire, tag_field="type", tag="image"):
    attachment: Attachment


class ToolCallBlock(_Wire, tag_field="type", tag="tool-call"):
    id: str
    name: str
    arguments: str


class ToolResultBlock(_Wire, tag_field="type", tag="tool-result"):
    tool_call_id: str
    content: list[Any]
    is_error: bool | UnsetType = UNSET


Block = TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock
"""The known content blocks. Unknown block types stay plain JSON objects."""


class Source(_Wire):
    """A message source. ``kind`` is open: other kinds are allowed and kept."""

    kind: NonEmptyStr


class UserSource(_Wire, tag_field="kind", tag="user"):
    pass


class PluginSource(_Wire, tag_field="kind", tag="plugin"):
    plugin: str


class ModelSource(_Wire, tag_field="kind", tag="model"):
    provider: NonEmptyStr
    model: NonEmptyStr


class ToolSource(_Wire, tag_field="kind", tag="tool"):
    call_id: NonEmptyStr


class Message(_Wire):
    """``{id, role, source, content}``; ``content`` holds blocks as JSON objects."""

    id: NonEmptyStr
    role: Literal["user", "assistant"]
    source: Source
    content: list[dict[str, Any]]


def block(value: Block) -> dict[str, Any]:
    """Return ``value`` as the JSON object it is on the wire."""
    out: dict[str, Any] = msgspec.to_builtins(value)
    return out


def message(
    id: str,
    role: Literal["user", "assistant"],
    source: UserSource | PluginSource | ModelSource | ToolSource | dict[str, Any],
    content: list[Block | dict[str, Any]],
) -> dict[str, Any]:
    """Build a message as its JSON object (the shape events carry in ``data``)."""
    src = source if isinstance(source, dict) else msgspec.to_builtins(source)
    blocks = [b if isinstance(b, dict) else block(b) for b in content]
    return {"id": id, "role": role, "source": src, "content": blocks}
