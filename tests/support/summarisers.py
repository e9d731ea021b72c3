"""Summarisers loaded by import path in the tests (``support.summarisers:by_model``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from surfacelog.schema.events import Event

NOT_CALLABLE = 3


async def by_model(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Stands for a summariser that awaits a model: async, and says what it saw."""
    await asyncio.sleep(0)
    return [{"type": "text", "text": f"model summary of {len(events)} events"}]
