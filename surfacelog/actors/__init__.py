"""Ray actors: session actors, the shard writers, compaction and pruning, the agent-loop
driver.

This layer hosts the runtime's live sessions (``surfacelog.runtime``: the core over a
store, one writer each) inside Ray; it adds no surface rules (compaction and pruning
included: those are ``surfacelog.session.compaction``).

Its names are imported lazily: ``surfacelog.actors.choices`` (the ``Placement``,
``Durability``, ``Writer`` and ``AppendMode`` types the CLI's options are built from)
and ``surfacelog.actors.config`` are importable without importing Ray, and ``Client``,
``connect`` and the protocol's types load Ray when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from surfacelog.actors.client import Client, SessionHandle, connect
    from surfacelog.actors.protocol import (
        Conflict,
        LoggedEvents,
        SessionStats,
        SessionUnavailable,
    )

_WHERE = {
    "Client": "surfacelog.actors.client",
    "SessionHandle": "surfacelog.actors.client",
    "connect": "surfacelog.actors.client",
    "Conflict": "surfacelog.actors.protocol",
    "LoggedEvents": "surfacelog.actors.protocol",
    "SessionStats": "surfacelog.actors.protocol",
    "SessionUnavailable": "surfacelog.actors.protocol",
}

__all__ = ["Client", "Conflict", "LoggedEvents", "SessionHandle", "SessionStats",
           "SessionUnavailable", "connect"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'surfacelog.actors' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
