"""Turns in a log: which turn the log is inside, read back from the tail.

A turn opens with ``turn/start {turn}`` and closes with ``turn/end {turn}``; the log is
inside a turn when the last of these two is a ``turn/start``. Compaction records the
open turn in its start and end events, fork refuses a boundary inside a turn, and the
session actor keeps a session inside a turn active longer.
"""

from __future__ import annotations

from collections.abc import Sequence

from surfacelog.schema.events import Event

TURN_BOUNDARIES = frozenset({"turn/start", "turn/end"})


def last_turn_boundary(events: Sequence[Event], start: int = 0,
                       end: int | None = None) -> Event | None:
    """The last ``turn/start`` or ``turn/end`` among ``events[start:end]``, or ``None``.

    Scans backwards from ``end`` (default: the end) and stops at the first hit, so a
    log that is not inside a long turn answers after a few events."""
    stop = len(events) if end is None else min(end, len(events))
    for k in range(stop - 1, max(start, 0) - 1, -1):
        event = events[k]
        if event.type in TURN_BOUNDARIES:
            return event
    return None


def turn_opened_by(boundary: Event | None) -> int | None:
    """The number of the turn ``boundary`` leaves open: its ``turn`` when it is a
    ``turn/start``, ``None`` for a ``turn/end`` or no boundary."""
    if boundary is None or boundary.type != "turn/start":
        return None
    turn: int = boundary.data["turn"]
    return turn


def open_turn_start(events: Sequence[Event], end: int | None = None) -> Event | None:
    """The ``turn/start`` of the turn ``events[:end]`` is inside, or ``None``."""
    boundary = last_turn_boundary(events, end=end)
    return boundary if boundary is not None and boundary.type == "turn/start" else None


def open_turn(events: Sequence[Event], end: int | None = None) -> int | None:
    """The number of the turn ``events[:end]`` is inside, or ``None`` when it is not
    inside one (its last turn boundary is a ``turn/end``, or it has none)."""
    return turn_opened_by(last_turn_boundary(events, end=end))


__all__ = ["TURN_BOUNDARIES", "last_turn_boundary", "open_turn", "open_turn_start",
           "turn_opened_by"]
