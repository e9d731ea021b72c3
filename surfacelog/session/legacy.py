"""Legacy logs written before surface markers existed (docs/rules.md §8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from surfacelog.schema.errors import SurfaceError
from surfacelog.schema.events import APPEND, SURFACE_ELIGIBLE_TYPES, Event
from surfacelog.session.derive import project


def upgrade_legacy(events: Sequence[Event]) -> list[Event]:
    """The same log with every unmarked surface-eligible event marked ``"append"``.

    Raises ``SurfaceError`` (rule ``legacy``) for a log that mixes marked and unmarked
    message events.
    """
    marked = [e for e in events if e.type in SURFACE_ELIGIBLE_TYPES and e.surface_op is not UNSET]
    unmarked = [e for e in events if e.type in SURFACE_ELIGIBLE_TYPES and e.surface_op is UNSET]
    if marked and unmarked:
        first = unmarked[0]
        raise SurfaceError(
            "legacy",
            f"log mixes marked and unmarked message events (first marked at seq "
            f"{marked[0].seq}); it is neither legacy nor current",
            first.type, first.seq,
        )
    return [
        msgspec.structs.replace(e, surface_op=APPEND)
        if e.type in SURFACE_ELIGIBLE_TYPES and e.surface_op is UNSET else e
        for e in events
    ]


def derive_messages_linear(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Messages of a legacy log by a plain scan of its message events, in log order."""
    out = []
    for e in events:
        if e.type in SURFACE_ELIGIBLE_TYPES:
            m = project(e)
            if m is not None:
                out.append(m)
    return out
