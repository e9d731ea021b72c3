"""The session-writer runtime: one live session's lifecycle, without Ray.

This layer sits between the store and the actors. ``LiveSession`` (``live``) is a
session loaded from a store (not taken: nothing written), taken for writing at its
first write (writer epoch, seed marker, crash repair), appended to inside
``Session.atomic()``, fenced by a newer writer, closed to reload after a write of
unknown outcome. The Ray session actor hosts it (``surfacelog.actors``); in-process,
``EmbeddedHandle`` (``handle``) wraps it as a ``SessionLike``, the protocol the Ray
``SessionHandle`` satisfies too, so the framework adapters run on either.
"""

from surfacelog.runtime.errors import Conflict, SessionUnavailable
from surfacelog.runtime.handle import (
    MAX_REPLANS,
    EmbeddedHandle,
    SessionLike,
    SurfaceView,
    append_planned,
    compact_planned,
)
from surfacelog.runtime.live import (
    RELOAD,
    Appended,
    Durability,
    LiveSession,
    SessionStats,
    StateDelta,
)

__all__ = ["MAX_REPLANS", "RELOAD", "Appended", "Conflict", "Durability", "EmbeddedHandle",
           "LiveSession", "SessionLike", "SessionStats", "SessionUnavailable", "StateDelta",
           "SurfaceView", "append_planned", "compact_planned"]
