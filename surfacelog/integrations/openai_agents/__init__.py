"""The OpenAI Agents SDK ``Session`` protocol over surfacelog (issue 14).

``SurfacelogSession`` stores an agent's conversation as a surfacelog log, embedded (one
SQLite file, no Ray) or through a Ray ``SessionHandle``; ``mapping`` is the exact
Responses item <-> DSH message mapping. Nothing here imports the SDK: items are the
plain JSON objects the SDK passes, so ``import surfacelog`` (and this module) works
without ``openai-agents`` installed (``pip install surfacelog[openai-agents]`` for the
SDK itself).
"""

from surfacelog.integrations.openai_agents.mapping import UnmappableItem, items_of, map_item
from surfacelog.integrations.openai_agents.session import (
    ERASER_MODEL,
    PopRefused,
    SurfacelogSession,
)

__all__ = ["ERASER_MODEL", "PopRefused", "SurfacelogSession", "UnmappableItem", "items_of",
           "map_item"]
