"""surfacelog: event-sourced agent session logs with a replaceable surface, on Ray.

Every name here is imported on first use, so that ``import surfacelog`` (which any
``surfacelog.x`` import runs first) costs nothing: the CLI's ``--help`` needs none of
the core, its offline commands need no Ray (``surfacelog.connect``). Every typed error
of the package derives from ``SurfacelogError``.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at start-up
if TYPE_CHECKING:
    from typing import Any

    from surfacelog.actors.client import connect
    from surfacelog.schema import Event, SessionHeader, SurfacelogError
    from surfacelog.session import Session, fold_surface

_WHERE = {
    "Event": "surfacelog.schema",
    "SessionHeader": "surfacelog.schema",
    "SurfacelogError": "surfacelog.schema",
    "Session": "surfacelog.session",
    "fold_surface": "surfacelog.session",
    "connect": "surfacelog.actors.client",
}

__all__ = ["Event", "Session", "SessionHeader", "SurfacelogError", "connect", "fold_surface"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'surfacelog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
