"""Wire schema: msgspec structs for events, payloads, messages and the session header.

Every name here is imported on first use (``surfacelog.schema.errors`` alone costs
nothing; ``codec`` loads msgspec).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from surfacelog.schema.codec import (
        LogFile,
        decode_event,
        decode_json,
        decode_log,
        encode_event,
        encode_json,
        encode_log,
        read_log,
    )
    from surfacelog.schema.errors import DecodeError, LogError, SurfaceError, SurfacelogError
    from surfacelog.schema.events import (
        APPEND,
        EVENT_TYPES,
        MAX_SAFE_INT,
        SURFACE_ELIGIBLE_TYPES,
        Event,
        EventTypeSpec,
        ReplaceOp,
        SurfaceOp,
        is_append_surface_event,
        is_replacement_surface_event,
        is_surface_eligible_type,
        is_surface_event,
        register_event_type,
    )
    from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader

_WHERE = {
    "APPEND": "surfacelog.schema.events",
    "EVENT_TYPES": "surfacelog.schema.events",
    "MAX_SAFE_INT": "surfacelog.schema.events",
    "SESSION_FORMAT_VERSION": "surfacelog.schema.header",
    "SURFACE_ELIGIBLE_TYPES": "surfacelog.schema.events",
    "DecodeError": "surfacelog.schema.errors",
    "Event": "surfacelog.schema.events",
    "EventTypeSpec": "surfacelog.schema.events",
    "LogError": "surfacelog.schema.errors",
    "LogFile": "surfacelog.schema.codec",
    "ReplaceOp": "surfacelog.schema.events",
    "SessionHeader": "surfacelog.schema.header",
    "SurfaceError": "surfacelog.schema.errors",
    "SurfaceOp": "surfacelog.schema.events",
    "SurfacelogError": "surfacelog.schema.errors",
    "decode_event": "surfacelog.schema.codec",
    "decode_json": "surfacelog.schema.codec",
    "decode_log": "surfacelog.schema.codec",
    "encode_event": "surfacelog.schema.codec",
    "encode_json": "surfacelog.schema.codec",
    "encode_log": "surfacelog.schema.codec",
    "is_append_surface_event": "surfacelog.schema.events",
    "is_replacement_surface_event": "surfacelog.schema.events",
    "is_surface_eligible_type": "surfacelog.schema.events",
    "is_surface_event": "surfacelog.schema.events",
    "read_log": "surfacelog.schema.codec",
    "register_event_type": "surfacelog.schema.events",
}

__all__ = [
    "APPEND",
    "EVENT_TYPES",
    "MAX_SAFE_INT",
    "SESSION_FORMAT_VERSION",
    "SURFACE_ELIGIBLE_TYPES",
    "DecodeError",
    "Event",
    "EventTypeSpec",
    "LogError",
    "LogFile",
    "ReplaceOp",
    "SessionHeader",
    "SurfaceError",
    "SurfaceOp",
    "SurfacelogError",
    "decode_event",
    "decode_json",
    "decode_log",
    "encode_event",
    "encode_json",
    "encode_log",
    "is_append_surface_event",
    "is_replacement_surface_event",
    "is_surface_eligible_type",
    "is_surface_event",
    "read_log",
    "register_event_type",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'surfacelog.schema' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
