"""Requests, replies and errors that cross Ray between clients and session actors.

Every reply is a msgspec struct (or a list of events/messages); every error is a typed
exception that pickles to the same class and message on the caller's side.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, Struct, UnsetType

Placement = Literal["dedicated", "packed"]
Durability = Literal["durable", "buffered"]


class Conflict(Exception):
    """The request was computed from a state the session has left (a stale
    ``replace_generation``, or an ``expected_seq`` taken by other events). Nothing was
    appended; re-read and retry."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class SessionUnavailable(Exception):
    """The session's actor lost its writer role (fenced by a newer incarnation) or was
    shut down; re-resolve the session and retry."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class CompactionRequest(Struct, frozen=True):
    """Replace ``shadowed`` (a contiguous run of current nodes) with a checkpoint.

    ``generation`` and ``shadowed`` are what the compactor read; the session refuses the
    request with ``Conflict`` when its surface moved on. With ``error`` set the session
    records a failed compaction (start and end, no checkpoint).
    """

    compaction_id: str
    generation: int
    shadowed: tuple[int, ...]
    summary: list[dict[str, Any]]
    shadowed_token_count: int
    checkpoint_id: str
    provider: str = "surfacelog"
    model: str = "extractive-v1"
    error: str | None = None


class PruneRequest(Struct, frozen=True):
    """Shorten the tool result at seq ``target``: a ``compaction/prune`` then a
    content-only ``tool/result`` rewrite with ``content``."""

    generation: int
    target: int
    content: list[dict[str, Any]]
    shadowed_token_count: int


class SessionStats(Struct, frozen=True):
    """What a session actor reports about one session."""

    session_id: str
    length: int
    nodes: int
    replace_generation: int
    epoch: int
    appends: int
    replaces: int
    conflicts: int
    activated_at_ms: int
    last_activity_ms: int
    activation_ms: float
    pid: int


class HostStats(Struct, frozen=True):
    """What one session-host actor reports: its sessions and process."""

    active_sessions: int
    activations: int
    passivations: int
    pid: int
    rss_bytes: int
    uss_bytes: int | UnsetType = UNSET
