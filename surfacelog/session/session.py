"""``Session``: one log, one ``SurfaceManager``, one derived-message cache (docs/rules.md §7)."""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, overload

from msgspec import UNSET, Struct, UnsetType

from surfacelog.schema.codec import decode_json, encode_json
from surfacelog.schema.errors import DecodeError, LogError, SeqOutOfRange
from surfacelog.schema.events import (
    Event,
    ExtensionType,
    LogOnlyType,
    ReplaceOp,
    SurfacePayload,
    SurfaceType,
    surface_op_from_json,
)
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import check_scalar, gc_paused, own_json
from surfacelog.session import shapes
from surfacelog.session.derive import MessageCache, MessagesView, derive_from_nodes
from surfacelog.session.surface import ListView, Replacement, SurfaceManager, SurfaceTally
from surfacelog.session.timetravel import SurfaceHistory
from surfacelog.session.turns import last_turn_boundary, turn_opened_by

A = TypeVar("A")

END_SEED = "session/end-seed"


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds."""
    return _time.time_ns() // 1_000_000


class AppendSpec(Struct, frozen=True):
    """One event to append, as a caller describes it (seq and time are assigned)."""

    type: str
    data: Any = UNSET
    surface_op: Any = UNSET
    source_event_seqs: Any = UNSET
    ignorable: Any = UNSET


class SurfaceSnapshot(Struct, frozen=True):
    """The surface at one moment: nodes, ``replace_generation``, log length."""

    nodes: tuple[int, ...]
    replace_generation: int
    length: int


class SessionSurface:
    """Read-only view of a session's ``SurfaceManager``."""

    __slots__ = ("_manager",)

    def __init__(self, manager: SurfaceManager) -> None:
        self._manager = manager

    @property
    def nodes(self) -> ListView[int]:
        return self._manager.nodes

    @property
    def replace_generation(self) -> int:
        return self._manager.replace_generation


def _own(value: Any) -> Any:
    """A private JSON copy of a caller's value (structs become JSON objects)."""
    if value is UNSET or value is None or isinstance(value, (str, int, float, bool)):
        return value
    return decode_json(encode_json(value))


def _own_data(value: Any, event_type: object, seq: int) -> Any:
    """A private JSON copy of a caller's ``data``, refused (``JsonValueError``,
    ``NestingError``) when JSON cannot carry it exactly or it nests deeper than
    ``MAX_NESTING`` (see ``surfacelog.schema.limits``). A scalar (of a subclass too,
    such as an ``IntEnum``) is kept as it is."""
    if value is UNSET or value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        check_scalar(value, event_type, seq)
        return value
    return own_json(value, event_type, seq)


def _own_seqs(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    return value


def _own_op(value: Any) -> Any:
    if isinstance(value, (str, ReplaceOp)):  # "append", or a marker already typed
        return value
    value = surface_op_from_json(value)
    if isinstance(value, ReplaceOp):
        return value
    return _own(value) if isinstance(value, (dict, list)) else value


def build_event(spec: AppendSpec, seq: int, time: int, *, owned: bool = False) -> Event:
    """The event ``spec`` becomes at ``seq`` and ``time``, with a private copy of the
    caller's data (``owned``: ``spec.data`` is already a JSON value nobody else holds,
    kept as it is). Validates nothing: appending the event does. Deterministic, so that
    whoever holds the spec can rebuild what was logged from it."""
    if spec.surface_op is UNSET and spec.source_event_seqs is UNSET:  # most events
        return Event(spec.type, seq, time,
                     spec.data if owned else _own_data(spec.data, spec.type, seq),
                     UNSET, UNSET, spec.ignorable)
    return Event(
        type=spec.type,
        seq=seq,
        time=time,
        data=spec.data if owned else _own_data(spec.data, spec.type, seq),
        source_event_seqs=_own_seqs(spec.source_event_seqs),
        surface_op=_own_op(spec.surface_op),
        ignorable=spec.ignorable,
    )


class Session:
    """An append-only event log with its surface and derived history.

    ``Session(seed)`` validates each seed event like an append (errors are prefixed
    ``invalid seed event at index N: ``) and, when a seed is given and does not end in
    ``session/end-seed``, appends that marker. ``first_live_seq`` is the seed's length
    (``None`` without a seed).
    """

    def __init__(
        self,
        seed: Iterable[Event] | None = None,
        *,
        header: SessionHeader | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.header = header
        self._clock = clock
        self._log: list[Event] = []
        self._manager = SurfaceManager()
        self._cache = MessageCache()
        self._in_atomic = False
        # (n, turn): the log's first n events are inside ``turn`` (or none). Only a
        # rollback ever removes events, and it drops this when it removes scanned ones,
        # so ``open_turn`` reads just the events appended since it last looked.
        self._turn_scan: tuple[int, int | None] = (0, None)
        self._history = SurfaceHistory()
        self.first_live_seq: int | None = None
        if seed is None:
            return
        for index, event in enumerate(seed):
            try:
                self._commit(event)
            except LogError as exc:
                raise exc.with_prefix(f"invalid seed event at index {index}: ") from exc
        self.first_live_seq = len(self._log)
        self.mark_seed_end()

    def mark_seed_end(self) -> Event | None:
        """Append the seed marker (``session/end-seed``, at the last event's time) unless
        the log already ends with one: what a seeded session adds before its first live
        event. Returns the marker appended, if any. Raises ``SurfaceError``."""
        if self._log and self._log[-1].type == END_SEED:
            return None
        last_time = self._log[-1].time if self._log else self._clock()
        return self._commit(Event(type=END_SEED, seq=len(self._log), time=last_time,
                                  data={}))

    # -- reading ---------------------------------------------------------------------

    @property
    def id(self) -> str | None:
        return None if self.header is None else self.header.id

    @property
    def log(self) -> ListView[Event]:
        """The events: a live read-only view (events are frozen structs)."""
        return ListView(self._log)

    def __len__(self) -> int:
        return len(self._log)

    def event(self, seq: int) -> Event:
        """The event at ``seq``. Raises ``SeqOutOfRange`` (an ``IndexError``)."""
        if type(seq) is not int or not 0 <= seq < len(self._log):
            raise SeqOutOfRange(f"seq {seq!r} is not in this log of {len(self._log)} events")
        return self._log[seq]

    def events(self, since_seq: int = 0, limit: int | None = None) -> list[Event]:
        """Events with ``seq >= since_seq``, at most ``limit`` of them."""
        end = len(self._log) if limit is None else min(len(self._log), since_seq + limit)
        return self._log[max(since_seq, 0):end]

    @property
    def surface(self) -> SessionSurface:
        return SessionSurface(self._manager)

    def snapshot(self) -> SurfaceSnapshot:
        """The current nodes (copied), generation and log length."""
        return SurfaceSnapshot(tuple(self._manager.nodes), self._manager.replace_generation,
                               len(self._log))

    def replacements(self) -> Sequence[Replacement]:
        """Every committed replace, in log order."""
        return self._manager.replacements

    def tally(self, tally: SurfaceTally[A]) -> A:
        """``tally`` brought up to this surface (``SurfaceTally.update``): O(nodes added
        since its last update) while no listed node changed."""
        return tally.update(self._manager, self._log.__getitem__)

    def derive_messages(self, as_of: int | None = None) -> MessagesView:
        """The messages the model sees: now, or as of the prefix ``log[0..as_of]``.

        Raises ``SeqOutOfRange`` (an ``IndexError``) when ``as_of`` is not a seq of this
        log.
        """
        if as_of is None:
            return self._cache.derive(self._manager, self._log)
        nodes = self.surface_at(as_of).nodes
        messages = derive_from_nodes(nodes, self._log)
        return MessagesView(messages, len(messages))

    def surface_at(self, as_of: int) -> SurfaceSnapshot:
        """The surface of the prefix ``log[0..as_of]`` (time travel): resumed from the
        nearest checkpoint (``timetravel.SurfaceHistory``), so a call folds at most
        ``CHECKPOINT_EVERY`` events. Raises ``SeqOutOfRange`` (an ``IndexError``) when
        ``as_of`` is not a seq of this log."""
        if type(as_of) is not int or not 0 <= as_of < len(self._log):
            raise SeqOutOfRange(f"seq {as_of!r} is not in this log of {len(self._log)} "
                                f"events")
        nodes, generation = self._history.surface_at(self._log, as_of + 1)
        return SurfaceSnapshot(nodes, generation, as_of + 1)

    def open_turn(self) -> int | None:
        """The number of the turn the log is inside (its last ``turn/start`` has no
        ``turn/end`` after it), or ``None``. Reads only the events appended since the
        previous call."""
        scanned, turn = self._turn_scan
        length = len(self._log)
        if length != scanned:
            boundary = last_turn_boundary(self._log, start=scanned)
            if boundary is not None:
                turn = turn_opened_by(boundary)
            self._turn_scan = (length, turn)
        return turn

    # -- writing ---------------------------------------------------------------------

    def check(self, event: Event) -> None:
        """Validate ``event`` as the next event without changing anything.

        Raises ``SurfaceError``.
        """
        self._manager.plan(event, self._log)

    def _commit(self, event: Event, payload_checked: bool = False) -> Event:
        plan = self._manager.plan(event, self._log, payload_checked=payload_checked)
        self._log.append(event)
        self._manager.apply(plan)
        return event

    def build(self, spec: AppendSpec, *, seq: int | None = None,
              time: int | None = None, owned: bool = False) -> Event:
        """``build_event`` of ``spec`` at ``seq`` (default: next) and ``time`` (default:
        now)."""
        return build_event(spec, len(self._log) if seq is None else seq,
                           self._clock() if time is None else time, owned=owned)

    @overload
    def append(self, type: SurfaceType, data: SurfacePayload, *,
               surface_op: Literal["append"],
               source_event_seqs: Sequence[int] | UnsetType = UNSET,
               ignorable: Literal[True] | UnsetType = UNSET,
               time: int | None = None) -> Event: ...

    @overload
    def append(self, type: SurfaceType, data: SurfacePayload, *, surface_op: ReplaceOp,
               source_event_seqs: Sequence[int],
               ignorable: Literal[True] | UnsetType = UNSET,
               time: int | None = None) -> Event: ...

    @overload
    def append(self, type: LogOnlyType | ExtensionType, data: Any = UNSET, *,
               ignorable: Literal[True] | UnsetType = UNSET,
               time: int | None = None) -> Event: ...

    def append(
        self,
        type: str,
        data: Any = UNSET,
        *,
        surface_op: Any = UNSET,
        source_event_seqs: Any = UNSET,
        ignorable: Any = UNSET,
        time: int | None = None,
    ) -> Event:
        """Append one event (seq = log length, time = now). Raises ``SurfaceError`` and
        then changes nothing.

        Typed per kind of event (``SurfaceType``, ``LogOnlyType``, ``ExtensionType``):
        mypy refuses a surface type without ``surface_op``, a replace without
        ``source_event_seqs`` and a marker on a log-only type. At run time every rule is
        checked whatever the caller's types said."""
        spec = AppendSpec(type, data, surface_op, source_event_seqs, ignorable)
        return self._commit(self.build(spec, time=time))

    def append_event(self, event: Event) -> Event:
        """Append an event built by the caller (its seq must be the next one). Raises
        ``SurfaceError``. Unlike ``append``, the event is taken as it is, not copied
        (replay and loading hand over millions of freshly decoded events): the caller
        gives up its ``data`` and must not mutate it afterwards."""
        return self._commit(event)

    def append_batch(self, items: Iterable[AppendSpec | Event], *,
                     owned: bool = False) -> list[Event]:
        """Append several events, all or nothing (one shared ``time``). Raises
        ``SurfaceError`` for the first bad one; then the log, nodes and generation are
        as before the call.

        ``owned``: the specs' ``data`` are JSON values nobody else holds (just decoded
        from JSON), so they are logged without the private copy ``build`` takes."""
        if isinstance(items, (list, tuple)) and len(items) == 1:
            # One event (a streamed chunk): the batch machinery would cost more than it
            # saves, and there is nothing to undo when its only check fails.
            item = items[0]
            event = item if isinstance(item, Event) else build_event(
                item, len(self._log), self._clock(), owned=owned)
            return [self._commit(event)]
        with self.atomic(), gc_paused():
            t = self._clock()
            base = len(self._log)
            events = [item if isinstance(item, Event) else build_event(item, k, t, owned=owned)
                      for k, item in enumerate(items, base)]
            self._manager.fold_batch(events, self._log, shapes.payloads_valid(events))
        return events

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """All appends inside the block stand or fall together: an exception leaves
        the log, nodes, generation and derived history as before the block. Nested
        blocks join the outer one. The block may ``await`` (an async caller can persist
        inside it) as long as nothing else appends meanwhile."""
        if self._in_atomic:
            yield
            return
        start = len(self._log)
        self._manager.begin()
        self._in_atomic = True
        try:
            yield
        except BaseException:
            del self._log[start:]
            self._manager.rollback()
            if self._turn_scan[0] > start:
                self._turn_scan = (0, None)
            self._history.truncate(start)
            # The cache may have seen rolled-back nodes; rebuilding once is cheap.
            self._cache = MessageCache()
            raise
        else:
            self._manager.commit()
        finally:
            self._in_atomic = False


def replay(events: Iterable[Event], header: SessionHeader | None = None) -> Session:
    """A session holding exactly ``events`` (no seed marker added), each validated.
    Raises ``LogError`` (``DecodeError`` for an item that is not an ``Event``)."""
    session = Session(header=header)
    pending: list[Event] = []
    with gc_paused():
        for index, event in enumerate(events):
            if type(event) is not Event:
                _replay_chunk(session, pending)
                raise DecodeError("envelope", f"invalid seed event at index {index}: not "
                                  f"an Event but a {type(event).__name__}")
            pending.append(event)
            if len(pending) == _REPLAY_CHUNK:
                _replay_chunk(session, pending)
                pending = []
        _replay_chunk(session, pending)
    return session


_REPLAY_CHUNK = 65_536
"""Events folded per ``fold_batch`` call by ``replay``: large enough that the payloads of
each type are checked in one msgspec call (``payloads_valid``), small enough that a
streamed log is not held twice."""


def _replay_chunk(session: Session, events: list[Event]) -> None:
    """Fold ``events`` into the new ``session`` (the batch path: the same checks, in log
    order, as one ``append_event`` each). Raises the first rule broken, prefixed with
    the index of its event (the events before it stay folded: ``replay`` fails)."""
    if not events:
        return
    try:
        session._manager.fold_batch(events, session._log, shapes.payloads_valid(events))
    except LogError as exc:
        raise exc.with_prefix(f"invalid seed event at index {len(session._log)}: ") from exc


__all__ = [
    "END_SEED",
    "AppendSpec",
    "Session",
    "SessionSurface",
    "SurfaceSnapshot",
    "build_event",
    "now_ms",
    "replay",
]
