"""The error types of the log. Every one is a ``ValueError`` that names its rule.

An error about one event carries ``rule`` (a short stable id such as ``"range"`` or
``"coverage"``), ``event_type`` and ``seq``, and its message contains the SPEC fragment
for that rule followed by the event it concerns.
"""

from __future__ import annotations


class LogError(ValueError):
    """A log, event or candidate breaks a rule of SPEC.md.

    ``event_type`` and ``seq`` are ``None`` when the problem is not about one event.
    """

    def __init__(
        self,
        rule: str,
        detail: str,
        event_type: object = None,
        seq: object = None,
        *,
        prefix: str = "",
    ) -> None:
        self.rule = rule
        self.detail = detail
        self.event_type = event_type
        self.seq = seq
        self.prefix = prefix
        where = ""
        if event_type is not None or seq is not None:
            where = f" ({event_type} at seq {seq})"
        super().__init__(f"{prefix}{detail}{where}")

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments are lost by the default pickling; Ray needs them.
        return (_rebuild, (type(self), self.rule, self.detail, self.event_type, self.seq,
                           self.prefix))

    def with_prefix(self, prefix: str) -> LogError:
        """Return the same error with ``prefix`` put before its message."""
        return type(self)(self.rule, self.detail, self.event_type, self.seq,
                          prefix=prefix + self.prefix)


def _rebuild(cls: type[LogError], rule: str, detail: str, event_type: object, seq: object,
             prefix: str) -> LogError:
    return cls(rule, detail, event_type, seq, prefix=prefix)


class DecodeError(LogError):
    """A line is not JSON, not an object of the envelope's keys, or a field has the
    wrong JSON type."""


class SurfaceError(LogError):
    """A candidate event breaks a rule of SPEC sections 3, 5 or 6."""
