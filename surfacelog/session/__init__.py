"""The pure core: Session, SurfaceManager, fold, derive, repair, fork, legacy.

No I/O, no asyncio, no Ray: everything about the rules of SPEC.md lives here.
"""

from surfacelog.schema.errors import LogError, SurfaceError
from surfacelog.schema.events import (
    is_append_surface_event,
    is_replacement_surface_event,
    is_surface_eligible_type,
    is_surface_event,
)
from surfacelog.session.derive import MessagesView, derive_from_nodes, project
from surfacelog.session.fork import ForkError, fork
from surfacelog.session.legacy import derive_messages_linear, upgrade_legacy
from surfacelog.session.repair import interrupted_turn_closers
from surfacelog.session.session import (
    END_SEED,
    AppendSpec,
    Session,
    SessionSurface,
    SurfaceSnapshot,
    build_event,
    now_ms,
    replay,
)
from surfacelog.session.surface import (
    FoldResult,
    Replacement,
    SurfaceManager,
    SurfacePlan,
    fold_surface,
)
from surfacelog.session.turns import last_turn_boundary, open_turn, open_turn_start

__all__ = [
    "END_SEED",
    "AppendSpec",
    "FoldResult",
    "ForkError",
    "LogError",
    "MessagesView",
    "Replacement",
    "Session",
    "SessionSurface",
    "SurfaceError",
    "SurfaceManager",
    "SurfacePlan",
    "SurfaceSnapshot",
    "build_event",
    "derive_from_nodes",
    "derive_messages_linear",
    "fold_surface",
    "fork",
    "interrupted_turn_closers",
    "is_append_surface_event",
    "is_replacement_surface_event",
    "is_surface_eligible_type",
    "is_surface_event",
    "last_turn_boundary",
    "now_ms",
    "open_turn",
    "open_turn_start",
    "project",
    "replay",
    "upgrade_legacy",
]
