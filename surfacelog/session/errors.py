"""The session layer's error types: what the pure core refuses, besides the schema's
``LogError``s (``surfacelog.schema.errors``). Each pickles to the same class and
message (they cross Ray inside the actors' replies)."""

from __future__ import annotations

from surfacelog.schema.errors import SurfacelogError


class StaleRequest(SurfacelogError):
    """The request was computed from a surface the session has left (another replace
    ran since, or the range or target is no longer current). Nothing was appended;
    re-read the surface and decide again. The actors raise it to callers as
    ``surfacelog.runtime.errors.Conflict``, a subclass."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class SplitsToolCall(ValueError, SurfacelogError):
    """A compaction range would split a tool call from its result (docs/rules.md §13: a cut is
    allowed only where every tool call before it has its result before it). Nothing
    was appended; choose the range again (``choose_range`` only picks safe cuts)."""

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class ForkError(ValueError, SurfacelogError):
    """A fork was refused; ``code`` says why."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.code, self.detail))


class ContextError(ValueError, SurfacelogError):
    """A context message that names no plugin (``source.kind`` must be ``plugin``)."""


__all__ = ["ContextError", "ForkError", "SplitsToolCall", "StaleRequest"]
