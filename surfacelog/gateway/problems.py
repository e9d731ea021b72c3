"""Typed errors as HTTP problem documents (RFC 9457 style).

A problem body is ``{"type", "title", "status", "detail"}`` plus, when the error knows
them, ``rule``, ``eventType`` and ``seq`` (a ``LogError``'s) or ``code`` (a
``ForkError``'s). ``503`` answers carry ``Retry-After``. The mapping goes by class, most
specific first; an error of the package not listed is a 500 that still names its
class; anything else is not ours and is left to the framework (a 500 with the
traceback in the replica's log), never hidden.
"""

from __future__ import annotations

from typing import Any, Final

from ray.exceptions import RayActorError

from surfacelog.actors.protocol import SessionUnavailable
from surfacelog.gateway.errors import (
    BadRequest,
    BodyTooLarge,
    Forbidden,
    GatewayBusy,
    InvalidSessionId,
    OutcomeUnknown,
    Unauthorized,
)
from surfacelog.schema.errors import (
    DuplicateKeyError,
    LogError,
    SeqOutOfRange,
    SurfacelogError,
)
from surfacelog.session.errors import ContextError, ForkError, SplitsToolCall, StaleRequest
from surfacelog.session.fork import (
    INVALID_BOUNDARY,
    OPEN_TURN,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
)
from surfacelog.store.errors import (
    BadEvent,
    CommitFailed,
    SessionExists,
    SessionNotFound,
    WriterFenced,
)

PROBLEM_BASE: Final = "urn:surfacelog:problem:"
PROBLEM_MEDIA_TYPE: Final = "application/problem+json"
RETRY_AFTER_S: Final = 1


_BY_CLASS: Final[tuple[tuple[type[BaseException], int, str, str], ...]] = (
    (Unauthorized, 401, "unauthorized", "Unauthorized"),
    (Forbidden, 403, "forbidden", "Forbidden"),
    (InvalidSessionId, 400, "invalid-session-id", "Invalid session id"),
    (BadRequest, 400, "bad-request", "Bad request"),
    (DuplicateKeyError, 400, "duplicate-key", "Duplicate JSON key"),  # before LogError
    (BodyTooLarge, 413, "body-too-large", "Body too large"),
    (GatewayBusy, 503, "busy", "Gateway busy"),
    (SessionNotFound, 404, "unknown-session", "Unknown session"),
    (SessionExists, 409, "session-exists", "Session already exists"),
    (StaleRequest, 409, "conflict", "Conflict"),  # Conflict is one
    (SplitsToolCall, 422, "splits-tool-call", "Replace would split a tool call"),
    (ContextError, 422, "context", "Invalid context"),
    (SeqOutOfRange, 422, "seq-out-of-range", "Seq out of range"),
    (LogError, 422, "surface", "Event refused"),  # SurfaceError, DecodeError
    (BadEvent, 422, "bad-event", "Event refused by the store"),
    (SessionUnavailable, 503, "unavailable", "Session unavailable"),  # ShardUnavailable
    (WriterFenced, 503, "unavailable", "Session unavailable"),
    (CommitFailed, 503, "commit-failed", "Commit failed"),
    (OutcomeUnknown, 503, "outcome-unknown", "Outcome unknown"),
)

_FORK: Final = {
    SESSION_ALREADY_EXISTS: (409, "session-exists", "Session already exists"),
    SESSION_NOT_FOUND: (404, "unknown-session", "Unknown session"),
    INVALID_BOUNDARY: (422, "invalid-boundary", "Invalid fork boundary"),
    OPEN_TURN: (409, "open-turn", "Fork at an open turn"),
}


class ProblemReply:
    """One problem document, its status and headers."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.status, self.body, self.headers = status, body, headers


def problem(status: int, slug: str, title: str, detail: str,
            **extra: Any) -> ProblemReply:
    """A problem document; ``extra`` members whose value is ``None`` are left out."""
    body: dict[str, Any] = {"type": PROBLEM_BASE + slug, "title": title, "status": status,
                            "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    headers: dict[str, str] = {}
    if status == 503:
        headers["Retry-After"] = str(RETRY_AFTER_S)
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="surfacelog"'
    return ProblemReply(status, body, headers)


def problem_for(error: SurfacelogError | RayActorError) -> ProblemReply:
    """The problem document that answers ``error``."""
    if isinstance(error, RayActorError):
        return problem(503, "unavailable", "Session unavailable",
                       "the session's actor died or is restarting; retry")
    if isinstance(error, ForkError):
        status, slug, title = _FORK.get(error.code, (422, "fork", "Fork refused"))
        return problem(status, slug, title, error.detail, code=error.code)
    for cls, status, slug, title in _BY_CLASS:
        if isinstance(error, cls):
            if isinstance(error, LogError):
                return problem(status, slug, title, str(error), rule=error.rule,
                               eventType=_json_scalar(error.event_type),
                               seq=_json_scalar(error.seq))
            return problem(status, slug, title, str(error))
    return problem(500, "internal", "Internal error", f"{type(error).__name__}: {error}")


def _json_scalar(value: object) -> object:
    """``value`` when JSON holds it as it is, else its ``repr`` (a refused event's type
    or seq may be anything the client sent)."""
    if value is None or type(value) in (str, int, bool):
        return value
    return repr(value)
