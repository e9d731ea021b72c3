"""The event envelope (docs/rules.md §2), surface markers, and the event type registry.

``Event`` is the one envelope struct. Its ``data`` stays the JSON value it was decoded
from (dicts, lists, strings, numbers): msgspec structs drop keys they do not declare,
and DSH payloads carry keys beyond the ones we model, so keeping the value is what makes
a decode/encode round trip exact. The typed view of a payload is its struct in the
registry (``EVENT_TYPES``), used to check shapes and to build events.

msgspec does not check types when a struct is built in Python, so an ``Event`` built by
a caller may hold anything; ``surfacelog.session`` checks every candidate before it is
accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NewType, get_args

from msgspec import UNSET, Struct, UnsetType

from surfacelog.schema import payloads as p
from surfacelog.schema.errors import InvalidArgument
from surfacelog.schema.messages import Message
from surfacelog.schema.payloads import SafeInt, SeqInt

MAX_SAFE_INT: Final = 2**53 - 1


class ReplaceOp(Struct, tag_field="op", tag="replace", forbid_unknown_fields=True,
                frozen=True):
    """``{"op":"replace","start":S,"end":E}``: the positional range S..E, both included."""

    start: SeqInt
    end: SeqInt


SurfaceOp = Literal["append"] | ReplaceOp
"""How a surface event enters the surface."""

APPEND: Final = "append"


def surface_op_from_json(value: Any) -> Any:
    """A replace marker read as JSON (``{"op":"replace","start":S,"end":E}``, exactly
    those keys) becomes a ``ReplaceOp`` holding the values as read; anything else is
    returned unchanged for the session to judge (``"append"``, or an invalid marker)."""
    if isinstance(value, dict) and value.keys() == {"op", "start", "end"} \
            and value["op"] == "replace":
        return ReplaceOp(start=value["start"], end=value["end"])
    return value


class Event(Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True,
            frozen=True, gc=False):
    """One logged event. Absent optional keys are ``UNSET``; a JSON ``null`` is ``None``.

    ``gc=False``: events hold no reference cycles, and a million tracked structs make
    every garbage collection pass slower.
    """

    type: str
    seq: SeqInt
    time: SafeInt
    data: Any = UNSET
    source_event_seqs: tuple[SeqInt, ...] | UnsetType = UNSET
    surface_op: SurfaceOp | UnsetType = UNSET
    ignorable: Literal[True] | UnsetType = UNSET


@dataclass(frozen=True)
class EventTypeSpec:
    """What the core knows of one event type.

    ``payload`` is the struct ``data`` must convert to, or ``None`` for an opaque JSON
    payload. ``eligible`` marks the four message-producing types.
    """

    name: str
    payload: type[Struct] | None
    eligible: bool = False


SURFACE_ELIGIBLE_TYPES: Final = frozenset(
    {"user/message", "context/message", "assistant/message", "tool/result"}
)

# -- the types of a typed append ---------------------------------------------------------
# ``Session.append`` and ``SessionHandle.append`` are overloaded on these, so that mypy
# refuses a surface type without its ``surface_op``, a replace without its
# ``source_event_seqs``, and a marker on a log-only type, before anything runs (the
# session still checks every rule at run time). tests/session/test_typed_append.py checks that
# they spell the registry's names.

SurfaceType = Literal["user/message", "context/message", "assistant/message",
                      "tool/result"]
"""The four surface-eligible types: an append of one must carry ``surface_op``."""

DshLogOnlyType = Literal[
    "agent-preset/selected", "agent/inbox/spliced", "approval/asked", "approval/decided",
    "approval/policy", "command/done", "command/run", "feedback/record", "goal/change",
    "hook/invoked", "hook/result", "llm/retry", "llm/retry-started", "permission/preset",
    "plan/mode", "sandbox/mode", "schedule/change", "session/title",
    "session/title-llm-request", "subagent/descriptor", "team/member",
    "team/message/delivered", "team/message/queued", "team/task",
    "tool-workflow/agent-end", "tool-workflow/agent-start", "tool-workflow/run-end",
    "tool-workflow/run-start", "tool/code-dispatch", "tool/code-dispatch-start",
    "web/deepseek-search-llm-request"]
"""DSH's plugin vocabulary: log-only, opaque JSON payloads (docs/rules.md §2)."""

CoreLogOnlyType = Literal[
    "turn/start", "turn/end", "step/start", "step/end", "assistant/chunk", "tool/call",
    "session/end-seed", "todo/write", "request/header", "request/context",
    "compaction/start", "compaction/summary", "compaction/end", "compaction/prune"]

LogOnlyType = Literal[CoreLogOnlyType, DshLogOnlyType]
"""The core's and DSH's log-only types: an append of one carries no surface marker."""

ExtensionType = NewType("ExtensionType", str)
"""A plugin's log-only type (``register_event_type``), or any type name only known at
run time: ``ExtensionType("my/event")``. Typed as log-only; the session refuses a name
it does not know unless the event is ``ignorable``."""

SurfacePayload = Message | p.AssistantMessage | p.ToolResult | Mapping[str, Any]
"""What a surface event's ``data`` may be given as: its payload struct or JSON."""

_CORE: dict[str, type[Struct] | None] = {
    "turn/start": p.TurnStart,
    "turn/end": p.TurnEnd,
    "step/start": p.StepStart,
    "step/end": p.StepEnd,
    "assistant/chunk": p.AssistantChunk,
    "tool/call": p.ToolCall,
    "session/end-seed": p.EndSeed,
    "todo/write": p.TodoWrite,
    "request/header": p.RequestHeader,
    "request/context": p.RequestContext,
    "compaction/start": p.CompactionStart,
    "compaction/summary": p.CompactionSummary,
    "compaction/end": p.CompactionEnd,
    "compaction/prune": p.CompactionPrune,
    "user/message": Message,
    "context/message": Message,
    "assistant/message": p.AssistantMessage,
    "tool/result": p.ToolResult,
}

DSH_LOG_ONLY_TYPES: Final[tuple[str, ...]] = get_args(DshLogOnlyType)

EVENT_TYPES: dict[str, EventTypeSpec] = {
    name: EventTypeSpec(name, payload, name in SURFACE_ELIGIBLE_TYPES)
    for name, payload in _CORE.items()
}
EVENT_TYPES.update({name: EventTypeSpec(name, None) for name in DSH_LOG_ONLY_TYPES})


def register_event_type(name: str, payload: type[Struct] | None = None) -> EventTypeSpec:
    """Register an extension (plugin) event type: log-only, ``payload`` struct or opaque.

    Registering the same name again with the same payload is a no-op. Raises
    ``ValueError`` for a name without ``/``, a surface-eligible name, or a name already
    registered with another payload.
    """
    if "/" not in name:
        raise InvalidArgument(f"event type {name!r} must be namespaced with '/'")
    if name in SURFACE_ELIGIBLE_TYPES:
        raise InvalidArgument(f"event type {name!r} is a core surface type")
    spec = EventTypeSpec(name, payload)
    known = EVENT_TYPES.get(name)
    if known is not None and known != spec:
        raise InvalidArgument(f"event type {name!r} is already registered with another payload")
    EVENT_TYPES[name] = spec
    return spec


def is_surface_eligible_type(event_type: str) -> bool:
    """True for the four message-producing types."""
    return event_type in SURFACE_ELIGIBLE_TYPES


def is_surface_event(event: Event) -> bool:
    """True when ``event`` enters the surface (it carries a surface marker)."""
    return event.type in SURFACE_ELIGIBLE_TYPES and event.surface_op is not UNSET


def is_append_surface_event(event: Event) -> bool:
    """True for origin events: surface events appended at the tail (a transcript's lines)."""
    return is_surface_event(event) and event.surface_op == APPEND


def is_replacement_surface_event(event: Event) -> bool:
    """True for surface events that replace a range of the surface."""
    return is_surface_event(event) and isinstance(event.surface_op, ReplaceOp)
