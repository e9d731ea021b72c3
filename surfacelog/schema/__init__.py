"""Wire schema: msgspec structs for events, payloads, messages and the session header."""

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
