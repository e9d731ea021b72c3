"""Ray actors: session actors, the journal, compaction and pruning, the agent-loop driver.

This layer composes the core and the store inside Ray; it adds no surface rules
(compaction and pruning included: those are ``surfacelog.session.compaction``).
"""

from surfacelog.actors.client import Client, SessionHandle, connect
from surfacelog.actors.protocol import (
    CompactionRequest,
    Conflict,
    LoggedEvents,
    PruneRequest,
    SessionStats,
    SessionUnavailable,
)

__all__ = [
    "Client",
    "CompactionRequest",
    "Conflict",
    "LoggedEvents",
    "PruneRequest",
    "SessionHandle",
    "SessionStats",
    "SessionUnavailable",
    "connect",
]
