"""The actors layer's error types: what hosting sessions on Ray adds to the runtime's
(``surfacelog.runtime.errors``): a shard that does not answer, a driver's turn closed by
crash repair, a summariser that cannot be loaded, one request's own error inside a
coalesced call, a Ray without a private name the package uses."""

from __future__ import annotations

from surfacelog.runtime.errors import SessionUnavailable
from surfacelog.schema.errors import SurfacelogError


class ShardUnavailable(SessionUnavailable):
    """The shard that holds (or would hold) the session did not answer within the retry
    window: its node is lost or its writer cannot start. Sessions of other shards are
    unaffected; the shard serves again when a node offering its resource and holding
    its file returns."""


class TurnInterrupted(SurfacelogError):
    """Crash repair closed the turn the driver was in."""


class SummariserError(ValueError, SurfacelogError):
    """A summariser named by import path that cannot be loaded: names the path and why."""


class RayCompatError(RuntimeError, SurfacelogError):
    """A private Ray name this package uses is missing from the installed Ray (or this
    Ray predates it, e.g. token authentication): names it, the installed release and
    ``CHECKED_WITH``."""


class RequestError(SurfacelogError):
    """The exception ``error`` that one request of a coalesced call raised at the actor
    (its neighbours in the call are not concerned)."""

    __slots__ = ("_error",)  # held outside __dict__: an exception compares by identity

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self._error = error

    @property
    def error(self) -> BaseException:
        """The request's own exception, as the actor raised it."""
        return self._error

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.error,))
