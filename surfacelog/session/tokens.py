"""The token estimate compaction and pruning decide with.

A block's cost is the length of its text divided by 4, rounded up, summed over the
blocks of a message (text, reasoning, a tool call's name and arguments, a tool result's
nested blocks; other blocks count 1 token). It is the usual rule of thumb for English and
code, deterministic, and needs no tokenizer; the actual model's count differs by tens of
percent, which only moves when a threshold trips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from surfacelog.schema.events import Event
from surfacelog.session.derive import project


def _block_chars(block: Any) -> int:
    if not isinstance(block, dict):
        return 4
    kind = block.get("type")
    if kind in ("text", "reasoning"):
        return len(str(block.get("text", "")))
    if kind == "tool-call":
        return len(str(block.get("name", ""))) + len(str(block.get("arguments", "")))
    if kind == "tool-result":
        inner = block.get("content")
        return sum(_block_chars(b) for b in inner) if isinstance(inner, list) else 4
    return 4


def block_tokens(blocks: Sequence[Any]) -> int:
    """Estimated tokens of a block list (characters / 4, rounded up; 0 for none)."""
    return -(-sum(_block_chars(b) for b in blocks) // 4)


def event_tokens(event: Event) -> int:
    """Estimated tokens the event's projected message costs (0 when it projects none:
    an event that is not on the surface costs the model nothing)."""
    message = project(event)
    return 0 if message is None else block_tokens(message.get("content", []))


__all__ = ["block_tokens", "event_tokens"]
