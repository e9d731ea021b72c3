"""The root of the package's errors, and the error types of the log.

``SurfacelogError`` is the base of every typed error of the package, whatever layer
raises it. The log's errors (``LogError`` and its subclasses) are also ``ValueError``
instances that name their rule: an error about one event carries ``rule`` (a short
stable id such as ``"range"`` or ``"coverage"``), ``event_type`` and ``seq``, and its
message contains the docs/rules.md fragment for that rule followed by the event it concerns.
"""

from __future__ import annotations


class SurfacelogError(Exception):
    """The base of every typed error of the package, in every layer: the log's
    (``LogError``), the store's (``StoreError``), the core's refusals (``StaleRequest``,
    ``SplitsToolCall``, ``ForkError``), the shard configuration's (``ShardConfigError``),
    the actors' (``Conflict``, ``SessionUnavailable``)...

    ``except SurfacelogError`` catches any error of ours and nothing of Ray's or
    Python's. Each error keeps its standard base beside this one (``LogError`` is still
    a ``ValueError``, ``StaleRequest`` an ``Exception``), so handlers written for those
    still work. Every one pickles to the same class and message, which Ray needs to
    raise it on the caller's side (``tests/test_errors.py`` checks both for every
    exception class of the package)."""


class LogError(ValueError, SurfacelogError):
    """A log, event or candidate breaks a rule of docs/rules.md.

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


class InvalidArgument(ValueError, SurfacelogError):
    """A public call was given an argument outside its domain (a negative limit, an
    unknown option value...). Still a ``ValueError``."""


class UnreadableLog(SurfacelogError):
    """A log file cannot be read (an ``OSError``), is not JSONL, is not a readable zstd
    session file, or has a line longer than the reader's limit: the file as a whole, not
    one of its events (``codec.reading`` raises it). Not a ``LogError``: an invalid log
    is one that was read."""


class SeqOutOfRange(IndexError, SurfacelogError):
    """A seq (or message index) that is not in the log. Still an ``IndexError``."""


class DecodeError(LogError):
    """A line is not JSON, not an object of the envelope's keys, or a field has the
    wrong JSON type."""


class SurfaceError(LogError):
    """A candidate event breaks a rule of docs/rules.md §§2, 3, 6 or 8."""


class NestingError(DecodeError):
    """A value nests arrays and objects deeper than ``MAX_NESTING`` (rule ``nesting``;
    see ``surfacelog.schema.limits``)."""


class DuplicateKeyError(DecodeError):
    """A JSON object names the same key more than once (rule ``duplicate-key``; see
    ``surfacelog.schema.limits``): the message names the key and the path of the
    object holding it."""


class JsonValueError(LogError):
    """A value given through the Python API that JSON cannot carry exactly: NaN or an
    infinity, a tuple or set, bytes, a non-string object key, any other Python
    object (rule ``json-value``)."""


class LineTooLong(DecodeError):
    """An input line is longer than the reader's line limit (rule ``line-length``)."""
