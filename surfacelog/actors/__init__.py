"""Ray actors: session hosts, the journal, compaction and pruning, the agent-loop driver.

This layer composes the core and the store inside Ray; it adds no surface rules
(compaction and pruning included: those are ``surfacelog.session.compaction``).
"""

from surfacelog.actors.client import Host, SessionHandle, connect
from surfacelog.actors.protocol import (
    CompactionRequest,
    Conflict,
    LoggedEvents,
    PruneRequest,
    SessionStats,
    SessionUnavailable,
)

__all__ = [
    "CompactionRequest",
    "Conflict",
    "Host",
    "LoggedEvents",
    "PruneRequest",
    "SessionHandle",
    "SessionStats",
    "SessionUnavailable",
    "connect",
]
