"""The session-writer runtime: one live session's lifecycle, without Ray.

This layer sits between the store and the actors. ``LiveSession`` (``live``) is a
session loaded from a store (not taken: nothing written), taken for writing at its
first write (writer epoch, seed marker, crash repair), appended to inside
``Session.atomic()``, fenced by a newer writer, closed to reload after a write of
unknown outcome. The Ray session actor hosts it (``surfacelog.actors``); in-process,
``EmbeddedHandle`` (``handle``) wraps it as a ``SessionLike``, the protocol the Ray
``SessionHandle`` satisfies too, so the framework adapters run on either.

Its names are imported lazily, so that ``surfacelog.runtime.choices`` is importable
without loading the runtime (the CLI builds its options from it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from surfacelog.runtime.choices import Durability
    from surfacelog.runtime.errors import Conflict, SessionUnavailable, StreamBroken
    from surfacelog.runtime.handle import (
        MAX_REPLANS,
        EmbeddedHandle,
        SessionLike,
        SurfaceView,
        append_planned,
        compact_planned,
    )
    from surfacelog.runtime.live import RELOAD, Appended, LiveSession, SessionStats, StateDelta
    from surfacelog.runtime.stream import AppendStream

_WHERE = {
    "Durability": "surfacelog.runtime.choices",
    "Conflict": "surfacelog.runtime.errors",
    "SessionUnavailable": "surfacelog.runtime.errors",
    "StreamBroken": "surfacelog.runtime.errors",
    "MAX_REPLANS": "surfacelog.runtime.handle",
    "EmbeddedHandle": "surfacelog.runtime.handle",
    "SessionLike": "surfacelog.runtime.handle",
    "SurfaceView": "surfacelog.runtime.handle",
    "append_planned": "surfacelog.runtime.handle",
    "compact_planned": "surfacelog.runtime.handle",
    "RELOAD": "surfacelog.runtime.live",
    "Appended": "surfacelog.runtime.live",
    "LiveSession": "surfacelog.runtime.live",
    "SessionStats": "surfacelog.runtime.live",
    "StateDelta": "surfacelog.runtime.live",
    "AppendStream": "surfacelog.runtime.stream",
}

__all__ = ["MAX_REPLANS", "RELOAD", "AppendStream", "Appended", "Conflict", "Durability",
           "EmbeddedHandle", "LiveSession", "SessionLike", "SessionStats", "SessionUnavailable",
           "StateDelta", "StreamBroken", "SurfaceView", "append_planned", "compact_planned"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'surfacelog.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
