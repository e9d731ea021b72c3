"""Deprecated location of the compaction and pruning policy, kept importable for one
release: import these names from ``surfacelog.session`` (or
``surfacelog.session.compaction_policy`` and ``surfacelog.session.tokens``) instead.

The rules moved to the pure core, where the rest of SPEC.md lives; this module only
re-exports them and will be removed in the next release.
"""

from __future__ import annotations

from surfacelog.session.compaction import CompactionRequest, PruneRequest, safe_cuts
from surfacelog.session.compaction_policy import (
    PRUNE_MARKER,
    SUMMARY_NOT_SMALLER,
    CompactionChoice,
    choose_range,
    compaction_request,
    extractive_summary,
    prune_requests,
)
from surfacelog.session.tokens import block_tokens, event_tokens

__all__ = [
    "PRUNE_MARKER",
    "SUMMARY_NOT_SMALLER",
    "CompactionChoice",
    "CompactionRequest",
    "PruneRequest",
    "block_tokens",
    "choose_range",
    "compaction_request",
    "event_tokens",
    "extractive_summary",
    "prune_requests",
    "safe_cuts",
]
