"""surfacelog: event-sourced agent session logs with a replaceable surface, on Ray.

``surfacelog.connect`` is imported lazily so that the pure core and the CLI's offline
commands do not pay for importing Ray. Every typed error of the package derives from
``SurfacelogError``.
"""

from typing import Any

from surfacelog.schema import Event, SessionHeader, SurfacelogError
from surfacelog.session import Session, fold_surface

__all__ = ["Event", "Session", "SessionHeader", "SurfacelogError", "connect", "fold_surface"]


def __getattr__(name: str) -> Any:
    if name == "connect":
        from surfacelog.actors.client import connect

        return connect
    raise AttributeError(name)
