"""The runtime's choices as ``Literal`` types, in a module that imports nothing, so that
the CLI builds its options from them without loading the runtime."""

from __future__ import annotations

from typing import Literal

Durability = Literal["durable", "buffered"]
"""When an append is acknowledged: once committed, or once queued for the writer
(``flush`` being the barrier)."""

__all__ = ["Durability"]
