"""``gc_paused``, from ``surfacelog.schema.gcpause`` (the lowest layer that uses it)."""

from __future__ import annotations

from surfacelog.schema.gcpause import gc_paused

__all__ = ["gc_paused"]
