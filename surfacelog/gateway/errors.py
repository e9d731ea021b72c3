"""The gateway's error types: a request refused at the HTTP edge (credentials, ids,
bodies), the gateway's own configuration, and what its HTTP client raises. The HTTP
status of every typed error is one table, ``problems._BY_CLASS``."""

from __future__ import annotations

from surfacelog.schema.errors import SurfacelogError


class InvalidSessionId(SurfacelogError):
    """A session id (or an id prefix) is empty, too long or has a character outside
    ``[A-Za-z0-9._-]`` (or does not start with a letter or digit)."""


class TokenConfigError(ValueError, SurfacelogError):
    """The token file or variable cannot be read or is malformed (the message names
    the line, not the token)."""


class Unauthorized(SurfacelogError):
    """A request without a bearer token, or with one that is not configured."""


class Forbidden(SurfacelogError):
    """The request's token is not allowed the session it names."""


class InsecureBind(SurfacelogError):
    """Authentication is off and the gateway would listen beyond loopback."""


class GatewayUnreachable(SurfacelogError):
    """The gateway was deployed but does not answer where it should: Serve already ran
    in this cluster with other HTTP options (``serve.start``'s options apply only when
    Serve starts), or its proxy did not come up."""


class BadRequest(SurfacelogError):
    """A request whose parameters or body cannot be read (not JSON, a wrong field)."""


class GatewayBusy(SurfacelogError):
    """The replica holds as many request bodies as its budget allows (``BodyBudget``):
    retry after a moment."""


class BodyTooLarge(SurfacelogError):
    """A request body beyond the gateway's limit (``MAX_BODY_BYTES``)."""


class OutcomeUnknown(SurfacelogError):
    """The session's actor died during an append sent without ``expectedSeq``: it may
    or may not have been logged. Resend with ``expectedSeq`` to make it exactly once."""


class GatewayClosed(ConnectionError, SurfacelogError):
    """The HTTP client's connection ended (or its response could not be parsed) before
    the response was complete (``keepalive.KeepAliveClient``): the request's outcome is
    unknown."""


class GatewayError(SurfacelogError):
    """The gateway refused a request with a problem this client has no type for."""

    def __init__(self, status: int, slug: str, detail: str) -> None:
        super().__init__(f"HTTP {status} {slug}: {detail}")
        self.status, self.slug, self.detail = status, slug, detail

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.status, self.slug, self.detail))
