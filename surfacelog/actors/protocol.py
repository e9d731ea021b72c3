"""Requests, replies and errors that cross Ray between clients and session actors.

Every reply is a msgspec struct (or a list of events/messages); every error is a typed
exception (a ``SurfacelogError``) that pickles to the same class and message on the
caller's side.

An append takes one of two paths, and the client chooses (``SessionHandle.append`` and
``append_batch`` in ``client.py``: they call ``encode_append`` and look at what it gives):

* JSON bytes, the usual path. ``encode_append`` makes the request one JSON document and
  the client calls the actor's ``append_wire`` with it; the actor decodes it
  (``decode_append``) and appends the decoded specs as data it owns (no second copy).
  The reply is msgpack, usually an ``AppendAck`` (the first seq and the time) from which
  the client makes the logged events itself when they are read (``LoggedEvents``).
* Pickled structs, the fallback. When a spec holds a value that a JSON round trip would
  change (``_plain`` says which: a scalar subclass such as an ``IntEnum``, a NaN or an
  infinity, which JSON writes as ``null``, a ``type`` that is not a ``str``, a set of
  seqs, a value JSON cannot hold at all...), ``encode_append`` gives ``None`` and the
  client sends the ``AppendSpec`` structs themselves to the actor's ``append`` or
  ``append_batch``, which Ray pickles; the reply is the logged events.

Both exist because a session behind an actor must report exactly what it reports
in-process: the same events for the same specs and, for a spec it refuses, the same
error with the same rule. JSON alone would turn a ``nan`` into ``null`` and an
``IntEnum`` into a plain ``int``, and the session would log and return other values than
the caller's; pickling alone would cost more than the Ray call itself, since Ray
pickles with cloudpickle, which calls back into Python for every struct and every
``UNSET`` field. So the common case travels as bytes and the odd one, exactly, as
structs. Both end in the same ``LiveSession.append_request`` (``surfacelog.runtime``),
so they append, refuse and answer retries (``expected_seq``) alike.

For the same reason as the JSON path, the rows of the database cross between a session
actor and the journal as msgpack bytes both ways: a session actor activates from the
journal's read of the session (``encode_stored``) and decodes and validates it itself,
and it encodes the rows of each batch it writes (``pack_batch``), which the journal
inserts as they are.

The replace requests (``CompactionRequest``, ``PruneRequest``) are the core's
(``surfacelog.session.compaction``); the errors a live session raises (``Conflict``,
``SessionUnavailable``) and its ``SessionStats`` are the runtime's
(``surfacelog.runtime``), re-exported here.
"""

from __future__ import annotations

import copyreg
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Final, overload

import msgspec
from msgspec import UNSET, Struct, UnsetType

from surfacelog.actors.config import Placement as Placement
from surfacelog.runtime.choices import Durability as Durability
from surfacelog.runtime.errors import Conflict as Conflict
from surfacelog.runtime.errors import SessionUnavailable as SessionUnavailable
from surfacelog.runtime.live import SessionStats as SessionStats
from surfacelog.schema.codec import JSON_DECODER, JSON_ENCODER
from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.schema.limits import (
    MAX_NESTING,
    gc_paused,
    may_nest_too_deep,
    nesting_depth,
    nesting_error,
)
from surfacelog.session import AppendSpec, build_event
from surfacelog.store.rows import EncodedBatch
from surfacelog.store.stored import StoredSession


def _unset() -> UnsetType:
    """Unpickles ``msgspec.UNSET``."""
    return UNSET


def _reduce_unset(_: UnsetType) -> tuple[Any, tuple[()]]:
    return (_unset, ())


# msgspec's UNSET (every absent optional key of an event) reduces to a bare name with no
# module, so pickle searches every loaded module for it (``pickle.whichmodule``): about
# a millisecond per pickled event in a Ray worker, which has ~700 modules loaded. Ray
# pickles through copyreg's table, so this makes it a plain reference to ``_unset``.
copyreg.pickle(UnsetType, _reduce_unset)

# -- the wire -------------------------------------------------------------------------

# Specs travel as JSON through the package's JSON encoder (``JSON_ENCODER``); the rest as
# msgpack through this module's, the package's one msgpack encoder (and below, its one
# untyped msgpack decoder, ``_VALUES_DECODER``: nothing else in the package uses msgpack).
_MSGPACK_ENCODER: Final = msgspec.msgpack.Encoder()
_EVENTS_DECODER: Final = msgspec.msgpack.Decoder(list[Event])

EventsPayload = bytes | list[Event]
"""Logged events as msgpack bytes, or as the list itself when msgpack cannot hold them
(an integer beyond 64 bits in ``data``)."""


_STORED_DECODER: Final = msgspec.msgpack.Decoder(StoredSession)


def encode_stored(stored: StoredSession) -> bytes:
    """A whole-session read as the journal sends it to a session actor: rows of strings
    and integers (SQLite's), which msgpack carries exactly."""
    return _MSGPACK_ENCODER.encode(stored)


def decode_stored(payload: bytes) -> StoredSession:
    """The read of ``encode_stored``."""
    with gc_paused():
        return _STORED_DECODER.decode(payload)


BatchPayload = bytes | EncodedBatch
"""A batch of rows on its way to the journal: msgpack bytes, or the batch itself when
msgpack cannot hold a value of it (an integer beyond 64 bits, which the database then
refuses with ``BadEvent`` exactly as it would in process)."""

# Typed: the journal gets the rows as tuples, which decodes faster than untyped lists.
_BATCH_DECODER: Final = msgspec.msgpack.Decoder(EncodedBatch)


def pack_batch(batch: EncodedBatch) -> BatchPayload:
    """A batch of rows (``encode_batch``) for ``unpack_batch``: the rows are strings and
    integers already, so this is little more than a copy, and Ray moves bytes faster
    than any other value."""
    try:
        return _MSGPACK_ENCODER.encode(batch)
    except (TypeError, OverflowError, msgspec.EncodeError):
        return batch


def unpack_batch(payload: BatchPayload) -> EncodedBatch:
    """The batch of ``pack_batch``, equal to the packed one."""
    if isinstance(payload, bytes):
        with gc_paused():
            return _BATCH_DECODER.decode(payload)
    return payload


_EXACT_DATA: Final = frozenset({dict, list, str, int, bool, type(None), UnsetType})
_SCALARS: Final = (str, int, float)


def _plain(spec: AppendSpec) -> bool:
    """True when a JSON round trip of ``spec`` gives exactly what ``build_event`` would
    make of it: its ``data`` is then the private JSON copy ``build_event`` takes, and
    the other fields come back as values ``build_event`` treats the same way.

    This decides the append's path (see the module docstring): a plain spec can travel
    as JSON bytes (``append_wire``); any other is sent as the struct itself (``append``,
    ``append_batch``, pickled by Ray), so that the session builds and judges exactly the
    caller's values. Not plain: ``data`` a scalar of a subclass (an ``IntEnum``, a
    ``str`` subclass: ``build_event`` keeps it as it is, JSON would give the base type)
    or a non-finite float (JSON has none: ``null``); a ``type`` that is not a ``str``;
    a ``surfaceOp`` other than ``"append"`` or a ``ReplaceOp`` of ``int`` bounds;
    ``sourceEventSeqs`` other than a list or tuple of ``int``; ``ignorable`` other than
    ``True``. Being wrong here in the safe direction only costs speed: a spec refused
    here travels pickled and is judged in the session as in-process."""
    data = spec.data
    kind = type(data)
    if kind not in _EXACT_DATA and isinstance(data, _SCALARS) and not (
            kind is float and math.isfinite(float(data))):
        return False  # a scalar subclass or a non-finite float: build keeps it as it is
    op, seqs, ignorable = spec.surface_op, spec.source_event_seqs, spec.ignorable
    if op is UNSET and seqs is UNSET and ignorable is UNSET:  # most events
        return type(spec.type) is str
    if not (op is UNSET or (type(op) is str and op == "append") or (
            type(op) is ReplaceOp and type(op.start) is int and type(op.end) is int)):
        return False
    if seqs is not UNSET and not (type(seqs) in (list, tuple)
                                  and all(type(s) is int for s in seqs)):
        return False
    return type(spec.type) is str and (ignorable is UNSET or ignorable is True)


class AppendRequest(Struct, array_like=True):
    """An append as it travels: one JSON array, so that the Ray call has one argument
    (Ray serialises every argument on its own, at a cost per argument)."""

    session_id: str
    specs: list[AppendSpec]
    expected_seq: int | None = None


_REQUEST_DECODER: Final = msgspec.json.Decoder(AppendRequest)


def encode_append(session_id: str, specs: Sequence[AppendSpec],
                  expected_seq: int | None) -> bytes | None:
    """An append request as JSON bytes for ``decode_append`` (the actor's
    ``append_wire``: the usual path); ``None`` when a spec holds a value the JSON round
    trip would change (``_plain``) or one JSON cannot hold at all. On ``None`` the
    caller sends the specs as structs instead (the actor's ``append`` or
    ``append_batch``, pickled by Ray), so that the session reports exactly what it
    reports in-process. ``SessionHandle.append`` / ``append_batch`` (``client.py``)
    make this choice for every append."""
    if not all(_plain(s) for s in specs):
        return None
    try:
        payload = JSON_ENCODER.encode(AppendRequest(session_id, list(specs), expected_seq))
        # Nested values a JSON round trip changes (a tuple, a set, bytes, NaN, a non-str
        # key, a struct...): one C-level round trip and comparison of all the data at
        # once (~1 us an event); such a batch travels as structs, and the session
        # refuses it (``JsonValueError``) or logs the struct's JSON exactly as
        # in-process.
        datas = [s.data for s in specs]
        if JSON_DECODER.decode(JSON_ENCODER.encode(datas)) != datas:
            return None
    except RecursionError as exc:  # far past MAX_NESTING: refused before it travels
        _refuse_deep(specs, expected_seq)
        raise nesting_error(specs[0].type, expected_seq) from exc
    except (TypeError, ValueError, msgspec.EncodeError, msgspec.DecodeError):
        return None
    # Refused here, naming the event, whatever the recursion limit of this process (a
    # caller's may be raised far above the actor's, which would then fail to decode the
    # request without knowing which event was too deep).
    if may_nest_too_deep(payload):
        _refuse_deep(specs, expected_seq)
    return payload


def _refuse_deep(specs: Sequence[AppendSpec], expected_seq: int | None) -> None:
    """Raise the ``NestingError`` of the first spec whose data nests deeper than
    ``MAX_NESTING``, naming its type and seq; return when none does."""
    for k, spec in enumerate(specs):
        if nesting_depth(spec.data, MAX_NESTING) > MAX_NESTING:
            raise nesting_error(spec.type, None if expected_seq is None
                                else expected_seq + k)


def decode_append(payload: bytes) -> AppendRequest:
    """The request of ``encode_append``; its specs' ``data`` are fresh JSON values, owned
    by the receiver (``Session.append_batch(..., owned=True)``). Their nesting is
    checked when the batch is encoded to rows (``encode_batch``), before anything is
    stored or acknowledged; a payload too deep to decode raises ``NestingError``."""
    try:
        with gc_paused():
            return _REQUEST_DECODER.decode(payload)
    except RecursionError as exc:  # far past MAX_NESTING (the rows' check refuses less)
        raise nesting_error(None, None) from exc


def encode_events(events: list[Event]) -> EventsPayload:
    """Logged events for ``decode_events``."""
    try:
        return _MSGPACK_ENCODER.encode(events)
    except (TypeError, OverflowError, msgspec.EncodeError):
        return events


class AppendAck(Struct, frozen=True):
    """The usual reply to an append: the logged events are the request's specs built
    (``build_event``, owned) at consecutive seqs from ``first_seq``, all at ``time``."""

    first_seq: int
    time: int


AppendReply = EventsPayload
"""What an ``append_wire`` returns, as msgpack bytes: an ``AppendAck`` for an append that
appended (every fresh one), else (a retried request answered from the log) the logged
events, as ``encode_events`` makes them. The usual reply is then two integers, not the
batch a second time; and bytes, which Ray moves faster than any other value."""

_REPLY_DECODER: Final = msgspec.msgpack.Decoder(AppendAck | list[Event])


def append_reply(events: list[Event], appended: bool) -> AppendReply:
    """The reply to an append request that logged ``events`` (``appended``: just now,
    built from the request's specs; else found in the log)."""
    if appended and events:
        return _MSGPACK_ENCODER.encode(AppendAck(events[0].seq, events[0].time))
    return encode_events(events)


def _rebuilt(request: bytes, first_seq: int, time: int) -> list[Event]:
    """The events an ``AppendAck`` acknowledged, rebuilt from the append's request."""
    specs = decode_append(request).specs
    with gc_paused():
        return [build_event(spec, first_seq + k, time, owned=True)
                for k, spec in enumerate(specs)]


class LoggedEvents(Sequence[Event]):
    """The events an append logged, as the client sees them: their count and seqs are
    known at once, the events themselves made on first use where the reply allows it
    (rebuilt from the request for an ``AppendAck`` reply; decoded from the reply of an
    HTTP append, ``gateway.httpclient``). Compares equal to a list or tuple of the same
    events."""

    __slots__ = ("_count", "_events", "_first", "_make")

    def __init__(self, events: list[Event] | None, first_seq: int, count: int,
                 make: Callable[[], list[Event]] | None = None) -> None:
        if events is None and make is None:
            raise ValueError("LoggedEvents needs the events, or how to make them")
        self._events = events
        self._first, self._count = first_seq, count
        self._make = make

    @classmethod
    def of(cls, events: list[Event]) -> LoggedEvents:
        """The events themselves."""
        return cls(events, events[0].seq if events else 0, len(events))

    @classmethod
    def made_later(cls, first_seq: int, count: int,
                   make: Callable[[], list[Event]]) -> LoggedEvents:
        """``count`` events from ``first_seq`` on, made by ``make`` on first use (which
        raises what ``make`` raises, and ``ValueError`` when it makes another count)."""
        return cls(None, first_seq, count, make)

    @classmethod
    def from_reply(cls, request: bytes, count: int, reply: AppendReply) -> LoggedEvents:
        """What an ``append_wire`` of ``request`` (``count`` specs) answered."""
        if isinstance(reply, list):
            events = reply
        else:
            with gc_paused():
                decoded = _REPLY_DECODER.decode(reply)
            if isinstance(decoded, AppendAck):
                return cls(None, decoded.first_seq, count,
                           partial(_rebuilt, request, decoded.first_seq, decoded.time))
            events = decoded
        if len(events) != count:
            raise ValueError(f"an append of {count} events was answered with "
                             f"{len(events)}")
        return cls.of(events)

    @property
    def seqs(self) -> range:
        """The seqs of the events, without making them."""
        return range(self._first, self._first + self._count)

    def to_list(self) -> list[Event]:
        """The events (made once, then kept)."""
        if self._events is None:
            assert self._make is not None
            events = self._make()
            if len(events) != self._count:
                raise ValueError(f"{self._count} logged events were made as {len(events)}")
            self._events, self._make = events, None
        return self._events

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        return self.to_list()[index]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LoggedEvents):
            return self.to_list() == other.to_list()
        if isinstance(other, (list, tuple)):
            return self.to_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LoggedEvents(seqs={self.seqs!r})"


MessagesPayload = bytes | list[dict[str, Any]]
"""Derived messages as msgpack bytes, or the list itself when msgpack cannot hold them.
Ray would send the list through its own msgpack or pickle path, several times slower
than msgspec for a long history."""

_VALUES_DECODER: Final = msgspec.msgpack.Decoder()


def encode_messages(messages: list[dict[str, Any]]) -> MessagesPayload:
    """Derived messages (JSON values) for ``decode_messages``."""
    try:
        return _MSGPACK_ENCODER.encode(messages)
    except (TypeError, OverflowError, msgspec.EncodeError):
        return messages


def decode_messages(payload: MessagesPayload) -> list[dict[str, Any]]:
    """The messages of ``encode_messages``, equal to the derived ones."""
    if isinstance(payload, bytes):
        with gc_paused():
            messages: list[dict[str, Any]] = _VALUES_DECODER.decode(payload)
        return messages
    return payload


def decode_events(payload: EventsPayload) -> list[Event]:
    """The events of ``encode_events``, equal to the logged ones."""
    if isinstance(payload, bytes):
        with gc_paused():
            return _EVENTS_DECODER.decode(payload)
    return payload


def actor_error(exc: BaseException) -> BaseException:
    """The error an actor raised, when ``exc`` is Ray's ``RayTaskError`` carrying it
    (with the actor's traceback and terminal colours), unwrapped as often as it was
    wrapped (a journal's error relayed by a session actor); ``exc`` itself otherwise.
    Ray is not imported for this: an error is Ray's only once Ray is loaded."""
    exceptions = sys.modules.get("ray.exceptions")
    while exceptions is not None and isinstance(exc, exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException) or cause is exc:
            break
        exc = cause
    return exc


def error_line(exc: BaseException) -> str:
    """``ErrorClass: message`` of the error the actor raised (``actor_error``)."""
    error = actor_error(exc)
    return f"{type(error).__name__}: {error}"


def failure_line(subject: str, exc: BaseException) -> str:
    """How a failure is reported in lists of them (write failures, failed
    passivations): ``subject: ErrorClass: message`` (``error_line``); the subject is a
    session id or, for a shard's writer, ``writer_flush_subject`` /
    ``writer_close_subject``."""
    return f"{subject}: {error_line(exc)}"


def writer_flush_subject(shard: str) -> str:
    """The subject of ``failure_line`` for shard ``shard``'s writer (its journal or
    its owner actor) failing to flush: ``(shard NAME flush)``."""
    return f"(shard {shard} flush)"


def writer_close_subject(shard: str) -> str:
    """The subject of ``failure_line`` for shard ``shard``'s writer failing to commit
    its last batches as it closes: ``(shard NAME close)``."""
    return f"(shard {shard} close)"


class ActorStats(Struct, frozen=True):
    """What one session actor reports: its sessions and process."""

    active_sessions: int
    activations: int
    passivations: int
    pid: int
    rss_bytes: int
    uss_bytes: int | UnsetType = UNSET
    failed_passivations: tuple[str, ...] = ()
    """Idle sessions whose final flush failed (``session: error``), latest last."""
