"""Checks of one candidate on its own: envelope values, type registry, marker placement,
payload and message shapes (docs/rules.md §§2, 3, 6.2 and 6.3).

Each check raises ``SurfaceError`` naming its rule, the event type and the seq.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from surfacelog.schema.errors import SurfaceError
from surfacelog.schema.events import (
    APPEND,
    EVENT_TYPES,
    MAX_SAFE_INT,
    SURFACE_ELIGIBLE_TYPES,
    Event,
    ReplaceOp,
)


def is_seq(value: object) -> bool:
    """True for an int (not a bool) in ``0 ..= 2**53-1``."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INT


def check_contiguity(event: Event, expected: int) -> None:
    """Rule 6.1: ``seq`` is the expected next seq."""
    if event.seq != expected or not is_seq(event.seq):
        raise SurfaceError(
            "contiguity",
            f"session event seq {event.seq!r} is not contiguous; expected {expected}",
            event.type, event.seq,
        )


def check_envelope(event: Event) -> None:
    """Envelope values of docs/rules.md §2 and the type registry.

    An unknown type is accepted only when the event is ``ignorable``.
    """
    etype, seq = event.type, event.seq
    if type(etype) is not str or not etype:
        raise SurfaceError("envelope", f"event type must be a non-empty string, got {etype!r}",
                           etype, seq)
    t = event.time
    if type(t) is not int or not -MAX_SAFE_INT <= t <= MAX_SAFE_INT:
        raise SurfaceError("envelope", f"event time must be a safe integer, got {t!r}",
                           etype, seq)
    if event.ignorable is not UNSET and event.ignorable is not True:
        raise SurfaceError("envelope", f"ignorable must be the literal true, got "
                           f"{event.ignorable!r}", etype, seq)
    if etype not in EVENT_TYPES and event.ignorable is not True:
        raise SurfaceError("unknown-type", f"unknown event type {etype!r} is not ignorable",
                           etype, seq)


def check_eligibility(event: Event) -> bool:
    """Rule 6.2. Returns whether the event is a surface event."""
    if event.type in SURFACE_ELIGIBLE_TYPES:
        if event.surface_op is UNSET:
            raise SurfaceError(
                "eligibility",
                f"{event.type} is surface-eligible and requires a surfaceOp marker",
                event.type, event.seq,
            )
        return True
    if event.surface_op is not UNSET:
        raise SurfaceError(
            "eligibility",
            f"{event.type} is not surface-eligible and cannot carry surfaceOp",
            event.type, event.seq,
        )
    if event.source_event_seqs is not UNSET:
        raise SurfaceError(
            "eligibility",
            f"{event.type} is not surface-eligible and cannot carry sourceEventSeqs",
            event.type, event.seq,
        )
    return False


def check_marker(event: Event) -> ReplaceOp | None:
    """Rule 6.3. Returns the replace op, or ``None`` for an append."""
    op = event.surface_op
    if type(op) is str and op == APPEND:
        return None
    if isinstance(op, ReplaceOp):
        if is_seq(op.start) and is_seq(op.end):
            return op
        raise SurfaceError("marker", f"invalid replace surfaceOp: start {op.start!r}, "
                           f"end {op.end!r} must be valid seqs", event.type, event.seq)
    if isinstance(op, dict):
        raise SurfaceError("marker", f"invalid replace surfaceOp: {op!r}",
                           event.type, event.seq)
    raise SurfaceError("marker", f"invalid surfaceOp: {op!r}", event.type, event.seq)


def _shape_error(event: Event, detail: str) -> SurfaceError:
    return SurfaceError("shape", detail, event.type, event.seq)


def _non_empty_str(value: object) -> bool:
    return type(value) is str and value != ""


def check_payload(event: Event) -> None:
    """The payload struct of a registered type, and the message rules of docs/rules.md §3."""
    spec = EVENT_TYPES.get(event.type)
    if spec is None or spec.payload is None:
        return
    data = event.data
    if data is UNSET:
        raise _shape_error(event, f"{event.type} requires data")
    try:
        msgspec.convert(data, spec.payload)
    except msgspec.ValidationError as exc:
        raise _shape_error(event, f"{event.type} data is invalid: {exc}") from exc
    if event.type in ("user/message", "context/message"):
        if data["role"] != "user":
            raise _shape_error(event, f"{event.type} message must have role user")
    elif event.type == "assistant/message":
        _check_assistant(event, data["message"])
    elif event.type == "tool/result":
        _check_tool_result(event, data["message"])


def _check_assistant(event: Event, msg: dict[str, Any]) -> None:
    if msg["role"] != "assistant":
        raise _shape_error(event, "assistant/message message must have role assistant")
    src = msg["source"]
    if src["kind"] != "model" or not (_non_empty_str(src.get("provider"))
                                      and _non_empty_str(src.get("model"))):
        raise _shape_error(
            event, "assistant/message source must be a model source with non-empty "
            "provider and model")


def _check_tool_result(event: Event, msg: dict[str, Any]) -> None:
    if msg["role"] != "user":
        raise _shape_error(event, "tool/result message must have role user")
    src = msg["source"]
    call_id = src.get("callId")
    if src["kind"] != "tool" or not _non_empty_str(call_id):
        raise _shape_error(event, "tool/result source must be a tool source with a "
                           "non-empty callId")
    content = msg["content"]
    if len(content) != 1 or content[0].get("type") != "tool-result":
        raise _shape_error(event, "tool/result message must hold exactly one tool-result "
                           "block")
    blk = content[0]
    if blk.get("toolCallId") != call_id:
        raise _shape_error(event, f"tool/result block toolCallId {blk.get('toolCallId')!r} "
                           f"must equal source callId {call_id!r}")
    if not isinstance(blk.get("content"), list):
        raise _shape_error(event, "tool/result block content must be a list")
    is_error = blk.get("isError", UNSET)
    if is_error is not UNSET and type(is_error) is not bool:
        raise _shape_error(event, "tool/result block isError must be a boolean")


_LIST_TYPES: dict[type[msgspec.Struct], Any] = {}


def payloads_valid(events: Sequence[Event]) -> list[bool]:
    """For each event, whether it is of a registered log-only type and its payload is
    already known to be valid (``SurfaceManager.fold_batch`` relies on both).

    The payloads of each registered log-only type are converted in one msgspec call per
    window of ``_WINDOW`` events (a batch of chunks costs a call per window, not one
    each). A group that fails is left unmarked: the per-event checks then find and name
    its first bad event, in log order.
    """
    ok = [False] * len(events)
    for start in range(0, len(events), _WINDOW):
        _window_valid(events, start, min(start + _WINDOW, len(events)), ok)
    return ok


_WINDOW = 1024
"""Events whose payloads ``payloads_valid`` checks together. Far smaller than a replay
chunk on purpose: grouping and converting 64k events at once cost 1.7x the CPU of 1k
at a time (what is built and dropped outgrows the CPU caches)."""


def _window_valid(events: Sequence[Event], start: int, stop: int, ok: list[bool]) -> None:
    """``payloads_valid`` of ``events[start:stop]``, marked in ``ok``."""
    groups: dict[str, list[int]] = {}
    for k in range(start, stop):
        event = events[k]
        etype = event.type
        if type(etype) is not str or event.data is UNSET:
            continue
        spec = EVENT_TYPES.get(etype)
        if spec is not None and spec.payload is not None and not spec.eligible:
            groups.setdefault(etype, []).append(k)
    for etype, indexes in groups.items():
        payload = EVENT_TYPES[etype].payload
        assert payload is not None
        list_type = _LIST_TYPES.get(payload)
        if list_type is None:
            list_type = _LIST_TYPES[payload] = list[payload]  # type: ignore[valid-type]
        try:
            msgspec.convert([events[k].data for k in indexes], list_type)
        except msgspec.ValidationError:
            continue
        for k in indexes:
            ok[k] = True
