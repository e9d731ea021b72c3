"""Context pressure: when a session should be compacted, as DeepSeek Harness decides.

DSH compacts when the request context fills up (the model's context window, announced
by ``request/context``, times 0.8) and when the provider refuses a request because the
context overflowed. ``PressureTracker`` reads a session's log incrementally and keeps
what those two triggers need: the latest context window, the input tokens the provider
last reported, and whether an overflow happened since the last successful compaction.
``compaction_threshold`` turns that into the token count above which to compact; a
fixed threshold stays the fallback for a log that announces no window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from surfacelog.schema.events import Event
from surfacelog.session.tokens import event_tokens

CONTEXT_PRESSURE: Final = 0.8
"""Compact once the context holds this share of the model's window (DSH's rule)."""

_OVERFLOW: Final = re.compile(
    r"context[ _-]?(length|window|overflow)|maximum context|prompt is too long|"
    r"too many tokens|token limit|input is too long", re.IGNORECASE)
"""How providers word a refused, overflowing request (OpenAI's
``context_length_exceeded``, Anthropic's "prompt is too long", DeepSeek's "maximum
context length", ...), matched in an error's code or message."""


class ContextPressure(msgspec.Struct, frozen=True):
    """One session's context pressure: ``context_window`` (latest ``request/context``;
    ``None`` when none announced one), ``input_tokens`` (the provider's last reported
    count, from an ``assistant/message``'s usage, since the last compaction),
    ``overflow_seq`` (the event that reported a context overflow since the last
    successful compaction, or ``None``) and ``surface_tokens`` (the core's estimate of
    the surface now)."""

    context_window: int | None
    input_tokens: int | None
    overflow_seq: int | None
    surface_tokens: int


def is_context_overflow(error: Any) -> bool:
    """True when ``error`` (a ``{message, code}`` object, or a text) says the request
    overflowed the model's context."""
    if isinstance(error, str):
        return bool(_OVERFLOW.search(error))
    if isinstance(error, Mapping):
        return any(isinstance(error.get(k), str) and bool(_OVERFLOW.search(error[k]))
                   for k in ("code", "message", "name", "type"))
    return False


def _error_of(event: Event) -> Any:
    data = event.data
    if not isinstance(data, Mapping):
        return None
    if event.type == "turn/end":
        reason = data.get("reason")
        return reason.get("error") if isinstance(reason, Mapping) else None
    # DSH's llm/retry family and tool-free error reports carry ``error`` at the top.
    return data.get("error")


class PressureTracker:
    """Follows one log, event by event (``observe``), for ``pressure``."""

    def __init__(self) -> None:
        self.context_window: int | None = None
        self.input_tokens: int | None = None
        self.overflow_seq: int | None = None
        self.seen = 0
        """How many of the log's events were observed (the next seq to observe)."""

    def observe(self, events: Iterable[Event]) -> None:
        """Take the next events of the log into account, in seq order."""
        for event in events:
            self.seen = event.seq + 1
            kind, data = event.type, event.data
            if kind == "request/context" and isinstance(data, Mapping):
                window = data.get("contextWindow")
                if isinstance(window, int) and not isinstance(window, bool) and window > 0:
                    self.context_window = window
            elif kind == "assistant/message" and isinstance(data, Mapping):
                usage = data.get("usage")
                tokens = usage.get("inputTokens") if isinstance(usage, Mapping) else None
                if isinstance(tokens, int) and not isinstance(tokens, bool):
                    self.input_tokens = tokens
            elif kind == "compaction/end" and isinstance(data, Mapping) \
                    and "error" not in data:
                # A compaction rewrote the context: what was reported before is stale.
                self.input_tokens = None
                self.overflow_seq = None
            elif kind in ("turn/end", "llm/retry", "llm/retry-started") \
                    and is_context_overflow(_error_of(event)):
                self.overflow_seq = event.seq

    def pressure(self, surface_tokens: int) -> ContextPressure:
        """The pressure now, with ``surface_tokens`` the current surface's estimate
        (``event_tokens`` summed over its events: ``count_tokens``)."""
        return ContextPressure(self.context_window, self.input_tokens, self.overflow_seq,
                               surface_tokens)


def count_tokens(total: int, seq: int, event: Event) -> int:
    """A ``SurfaceTally`` step: ``total`` plus ``event``'s estimated tokens."""
    return total + event_tokens(event)


def compaction_threshold(pressure: ContextPressure, fallback: int,
                         ratio: float = CONTEXT_PRESSURE) -> int:
    """Compact when the context holds more tokens than this: 0 right after an overflow
    (compact now), the window times ``ratio`` when a window was announced, else
    ``fallback``."""
    if pressure.overflow_seq is not None:
        return 0
    if pressure.context_window is not None:
        return int(pressure.context_window * ratio)
    return fallback


def context_tokens(pressure: ContextPressure) -> int:
    """The context's size as best known: the provider's last count when it reported
    one and it is the larger, else the surface's estimate (which grows with every
    event since that report)."""
    return max(pressure.surface_tokens, pressure.input_tokens or 0)


__all__ = ["CONTEXT_PRESSURE", "ContextPressure", "PressureTracker", "compaction_threshold",
           "context_tokens", "count_tokens", "is_context_overflow"]
