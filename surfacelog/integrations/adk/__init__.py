"""Google ADK's ``BaseSessionService`` over surfacelog (issue 14).

``SurfacelogSessionService`` (in ``service``) keeps ADK sessions in a surfacelog store:
scoped by app and user, with ADK's state semantics, listing and deletion as store
features; ``mapping`` is the exact ADK event <-> DSH event mapping. ``mapping`` does not
import ADK; the service does, on first access (``import surfacelog`` and this package
work without ``google-adk``; ``pip install surfacelog[adk]`` for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from surfacelog.integrations.adk.mapping import UnmappableEvent, adk_event_of, map_event

if TYPE_CHECKING:
    from surfacelog.integrations.adk.service import (
        SessionAlreadyExists,
        SessionMissing,
        SurfacelogSessionService,
    )

_LAZY = frozenset({"SessionAlreadyExists", "SessionMissing", "SurfacelogSessionService"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from surfacelog.integrations.adk import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SessionAlreadyExists", "SessionMissing", "SurfacelogSessionService",
           "UnmappableEvent", "adk_event_of", "map_event"]
