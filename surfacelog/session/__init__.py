"""The pure core: Session, SurfaceManager, fold, derive, repair, fork, legacy,
compaction and pruning.

No I/O, no asyncio, no Ray: everything about the rules of docs/rules.md lives here.
"""

from surfacelog.schema.errors import LogError, SurfaceError
from surfacelog.schema.events import (
    is_append_surface_event,
    is_replacement_surface_event,
    is_surface_eligible_type,
    is_surface_event,
)
from surfacelog.session.compaction import (
    CHECKPOINT_INTRO,
    CHECKPOINT_OUTRO,
    CompactionRequest,
    PruneRequest,
    check_compaction,
    check_prune,
    compaction_specs,
    prune_specs,
    safe_cuts,
)
from surfacelog.session.compaction_policy import (
    PRUNE_MARKER,
    SUMMARY_NOT_SMALLER,
    CompactionChoice,
    PruneCandidates,
    choose_range,
    compaction_request,
    extractive_summary,
    oversized_results,
    prune_requests,
    prune_requests_for,
)
from surfacelog.session.derive import MessagesView, derive_from_nodes, project
from surfacelog.session.errors import ForkError, SplitsToolCall, StaleRequest
from surfacelog.session.fork import fork
from surfacelog.session.legacy import derive_messages_linear, upgrade_legacy
from surfacelog.session.logcheck import LogCheck
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
from surfacelog.session.tokens import block_tokens, event_tokens
from surfacelog.session.turns import last_turn_boundary, open_turn, open_turn_start

__all__ = [
    "CHECKPOINT_INTRO",
    "CHECKPOINT_OUTRO",
    "END_SEED",
    "PRUNE_MARKER",
    "SUMMARY_NOT_SMALLER",
    "AppendSpec",
    "CompactionChoice",
    "CompactionRequest",
    "FoldResult",
    "ForkError",
    "LogCheck",
    "LogError",
    "MessagesView",
    "PruneCandidates",
    "PruneRequest",
    "Replacement",
    "Session",
    "SessionSurface",
    "SplitsToolCall",
    "StaleRequest",
    "SurfaceError",
    "SurfaceManager",
    "SurfacePlan",
    "SurfaceSnapshot",
    "block_tokens",
    "build_event",
    "check_compaction",
    "check_prune",
    "choose_range",
    "compaction_request",
    "compaction_specs",
    "derive_from_nodes",
    "derive_messages_linear",
    "event_tokens",
    "extractive_summary",
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
    "oversized_results",
    "project",
    "prune_requests",
    "prune_requests_for",
    "prune_specs",
    "replay",
    "safe_cuts",
    "upgrade_legacy",
]
