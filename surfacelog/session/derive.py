"""Derived history: projecting surface nodes to the messages the model sees (docs/rules.md §7).

``MessageCache`` keeps the projection of the nodes it has seen. While no replace is
committed the node list only grows at the tail, so it projects the new tail nodes; a
changed ``replace_generation`` means nodes were removed somewhere, so it rebuilds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from surfacelog.schema.errors import SeqOutOfRange
from surfacelog.schema.events import Event
from surfacelog.session.surface import SurfaceManager


def project(event: Event) -> dict[str, Any] | None:
    """The message a surface event contributes, or ``None``.

    ``user/message`` and ``context/message`` project their ``data``; ``assistant/message``
    and ``tool/result`` their ``data.message``, except an assistant message with empty
    content, which only hosts usage and projects nothing.
    """
    etype = event.type
    if etype == "user/message" or etype == "context/message":
        data: dict[str, Any] = event.data
        return data
    if etype == "assistant/message":
        message: dict[str, Any] = event.data["message"]
        return message if message["content"] else None
    if etype == "tool/result":
        result: dict[str, Any] = event.data["message"]
        return result
    return None


class MessagesView(Sequence[dict[str, Any]]):
    """An immutable snapshot of derived messages: a fixed-length window on a list that
    only ever grows, so taking one is O(1) and it never changes afterwards.

    The message objects are the events' own JSON values: treat them as read-only.
    """

    __slots__ = ("_items", "_len")

    def __init__(self, items: list[dict[str, Any]], length: int) -> None:
        self._items = items
        self._len = length

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self._items[: self._len][i]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise SeqOutOfRange("message index out of range")
        return self._items[i]

    def __iter__(self) -> Any:
        items = self._items
        return (items[k] for k in range(self._len))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (MessagesView, list, tuple)):
            return len(self) == len(other) and all(
                a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def to_list(self) -> list[dict[str, Any]]:
        """A plain list copy."""
        return self._items[: self._len]

    def __repr__(self) -> str:
        return f"MessagesView({self.to_list()!r})"


class MessageCache:
    """Incremental ``derive_messages`` over one manager and its log."""

    __slots__ = ("_generation", "_messages", "_seen")

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._seen = 0
        self._generation = -1

    def derive(self, manager: SurfaceManager, log: Sequence[Event]) -> MessagesView:
        """Messages of the manager's current nodes. O(new nodes) unless a replace was
        committed since the last call."""
        nodes = manager.nodes
        if manager.replace_generation != self._generation:
            # A fresh list: views handed out earlier keep the old one unchanged.
            self._messages = []
            self._seen = 0
            self._generation = manager.replace_generation
        messages = self._messages
        for k in range(self._seen, len(nodes)):
            m = project(log[nodes[k]])
            if m is not None:
                messages.append(m)
        self._seen = len(nodes)
        return MessagesView(messages, len(messages))


def derive_from_nodes(nodes: Sequence[int], log: Sequence[Event]) -> list[dict[str, Any]]:
    """From-scratch projection of ``nodes`` (the reference the cache must equal)."""
    out = []
    for n in nodes:
        m = project(log[n])
        if m is not None:
            out.append(m)
    return out
