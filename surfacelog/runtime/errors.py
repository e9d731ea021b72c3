"""The errors a live session raises to its callers, wherever it runs (in a Ray actor or
in this process): both pickle to the same class and message, so a Ray caller catches
exactly what the session raised."""

from __future__ import annotations

from surfacelog.schema.errors import SurfacelogError
from surfacelog.session.errors import StaleRequest


class Conflict(StaleRequest):
    """The request was computed from a state the session has left (a stale
    ``replace_generation``, or an ``expected_seq`` taken by other events). Nothing was
    appended; re-read and retry. The live session raises the core's ``StaleRequest``
    to callers as this."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class SessionUnavailable(SurfacelogError):
    """The session lost its writer role (fenced by a newer writer) or was shut down;
    re-resolve the session and retry."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class StreamBroken(SurfacelogError):
    """A write of an ``AppendStream`` was not sent because an earlier write of the
    stream failed (its cause is ``__cause__`` and is named in the message): a stream
    never logs a write without the ones before it. Nothing of this write was
    appended; start a new stream from the session's length."""

    @classmethod
    def after(cls, cause: BaseException) -> StreamBroken:
        """The error of a write after the one that failed with ``cause``."""
        error = cls(f"not sent: an earlier write of the stream failed "
                    f"({type(cause).__name__}: {cause})")
        error.__cause__ = cause
        return error

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


__all__ = ["Conflict", "SessionUnavailable", "StreamBroken"]
