"""Events to ``events`` rows and back (docs/rules.md §12).

A row is ``(session_id, seq, type, time, data, source_event_seqs, surface_op,
ignorable)``. ``data``, ``source_event_seqs`` and ``surface_op`` are compact JSON text,
NULL when the key is absent (so ``[]`` and ``null`` stay distinct from absent);
``ignorable`` is 1 or NULL. Decoding a row gives an ``Event`` equal to the one encoded.

Both directions work on whole batches: every ``data`` of a batch is encoded in one
msgspec call (``encode_lines``, split at the newlines compact JSON never contains) and
decoded in one call, which is what keeps the store within reach of raw ``executemany``.

**Digest and provenance** (``RowDigest``, ``SourceCheck``). An import records, in the
transaction that stores the session, its source (as given), how many events the source
held and a digest of the rows stored for them. ``verify`` reads the record back and
digests the session's first rows again: a session that holds fewer of its source's
events than the source held was cut short, one whose rows digest differently no longer
holds what was imported. Events appended after the import are not the source's and are
not digested.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple, cast

import msgspec
from msgspec import UNSET, Struct

from surfacelog.schema.codec import JSON_DECODER, JSON_ENCODER
from surfacelog.schema.dsh import PackedRun
from surfacelog.schema.errors import InvalidArgument
from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.schema.limits import (
    MAX_NESTING,
    gc_paused,
    may_nest_too_deep,
    nesting_depth,
    nesting_error,
)
from surfacelog.store.errors import BadEvent, CorruptStore, SeqMismatch

Row = tuple[str, int, Any, Any, str | None, str | None, str | None, Any]
"""An ``events`` row as bound to the INSERT statement."""

StoredRow = tuple[int, str, int, str | None, str | None, str | None, int | None]
"""An ``events`` row as the SQLite backend selects it (``sqlite.statements.
SELECT_EVENTS``, without ``session_id``)."""

_SEQS: Final = msgspec.json.Decoder(tuple[int, ...])
_OP: Final = msgspec.json.Decoder(ReplaceOp)
_APPEND_JSON: Final = '"append"'


class EncodedBatch(NamedTuple):
    """A batch ready to insert: its first seq, its rows, the last event's time (``None``
    for an empty batch, which only a create stores). Plain data (strings and integers),
    so it crosses processes as it is: the writer of a batch encodes it once, and whoever
    stores it inserts the rows without decoding them."""

    start: int
    rows: list[Row]
    last_time: int | None


NO_ROWS: Final = EncodedBatch(0, [], None)
"""The batch of a session created without events."""


def _json(value: Any, event: Event, field: str) -> str:
    try:
        return JSON_ENCODER.encode(value).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise BadEvent(f"{event.type} at seq {event.seq!r}: {field} is not JSON: {exc}") \
            from exc


def _datas(events: Sequence[Event]) -> Sequence[str | None]:
    datas = [e.data for e in events]
    if UNSET not in datas:
        try:
            return JSON_ENCODER.encode_lines(datas)[:-1].decode().split("\n")
        except (TypeError, msgspec.EncodeError):
            pass  # an event's data is not JSON: encode one by one below to name it
    return [None if e.data is UNSET else _json(e.data, e, "data") for e in events]


_SHORTEST_TOO_DEEP: Final = 2 * MAX_NESTING + 2
"""JSON text shorter than this cannot nest deeper than ``MAX_NESTING``."""


def _too_deep(text: str) -> bool:
    """Whether the JSON text ``text`` nests deeper than ``MAX_NESTING`` (one that
    Python cannot even decode counts as too deep)."""
    if not may_nest_too_deep(text):
        return False
    try:
        return nesting_depth(JSON_DECODER.decode(text)) > MAX_NESTING
    except RecursionError:
        return True


def _suspects(datas: Sequence[str | None]) -> list[int]:
    """The positions of the data texts long enough to nest too deep (cheap: a length
    test per row; the few long ones are then looked at)."""
    limit = _SHORTEST_TOO_DEEP
    return [k for k, d in enumerate(datas) if d is not None and len(d) >= limit]


def encode_batch(session_id: str, events: Sequence[Event]) -> EncodedBatch:
    """The rows of ``events``, which must be non-empty with contiguous seqs.

    Raises ``SeqMismatch`` when the seqs are not contiguous, ``BadEvent`` when a value
    cannot be written as JSON, ``NestingError`` (a ``LogError`` naming the event) when
    a ``data`` nests deeper than ``MAX_NESTING``. Types of the other columns are checked
    by SQLite (the tables are ``STRICT``) when the batch is committed.
    """
    if not events:
        raise InvalidArgument("an empty batch has no rows")
    start = events[0].seq
    if type(start) is not int:
        raise BadEvent(f"{events[0].type} seq {start!r} is not an integer")
    seqs = [e.seq for e in events]
    if seqs != list(range(start, start + len(events))):
        bad = next(i for i, s in enumerate(seqs) if s != start + i)
        raise SeqMismatch(f"session {session_id!r}: batch seqs are not contiguous: seq "
                          f"{seqs[bad]!r} at position {bad}, expected {start + bad}")
    datas = _datas(events)
    for k in _suspects(datas):
        text = datas[k]
        if text is not None and _too_deep(text):
            raise nesting_error(events[k].type, events[k].seq)
    enc = JSON_ENCODER.encode
    try:
        rows: list[Row] = [
            (session_id, e.seq, e.type, e.time, data,
             None if (s := e.source_event_seqs) is UNSET else enc(s).decode(),
             None if (o := e.surface_op) is UNSET
             else _APPEND_JSON if o == "append" else enc(o).decode(),
             None if (ig := e.ignorable) is UNSET else 1 if ig is True else ig)
            for e, data in zip(events, datas, strict=True)
        ]
    except (TypeError, msgspec.EncodeError) as exc:
        raise BadEvent(f"session {session_id!r}: a sourceEventSeqs or surfaceOp of the "
                       f"batch starting at seq {start} is not JSON: {exc}") from exc
    return EncodedBatch(start, rows, events[-1].time)


def run_rows(session_id: str, run: PackedRun) -> list[Row]:
    """The rows of a packed row's events, built from the run without building its
    events: the same rows, byte for byte, as ``encode_batch(session_id,
    run.events()).rows`` (each ``data`` is the JSON msgspec writes for the event's data
    dict: its shared head, the member's JSON string, the closing braces; JSON strings
    never hold a raw newline, so ``encode_lines`` encodes every member in one call)."""
    enc = JSON_ENCODER.encode
    head = (b'{"turn":' + enc(run.turn) + b',"step":' + enc(run.step)
            + b',"chunk":{"type":' + enc(run.kind) + b',"index":' + enc(run.index))
    if run.call_id is not None:
        head += b',"id":' + enc(run.call_id)
        if run.name is not UNSET:
            head += b',"name":' + enc(run.name)
        head += b',"argumentsDelta":'
    else:
        head += b',"text":'
    prefix = head.decode()
    members = JSON_ENCODER.encode_lines(run.members)[:-1].decode().split("\n")
    seq0 = run.seq0
    return [(session_id, seq, "assistant/chunk", time, f"{prefix}{member}}}}}", None, None,
             None)
            for seq, time, member in zip(range(seq0, seq0 + len(members)), run.times,
                                         members, strict=True)]


def encode_records(session_id: str, records: Sequence[Event | PackedRun]) -> EncodedBatch:
    """``encode_batch`` of the events ``records`` stand for (a ``PackedRun`` for the
    events of its row, encoded by ``run_rows``). Raises as ``encode_batch`` does."""
    if not any(type(r) is PackedRun for r in records):
        return encode_batch(session_id, cast(Sequence[Event], records))
    rows: list[Row] = []
    start: int | None = None
    last_time: int | None = None
    pending: list[Event] = []

    def add(piece: EncodedBatch) -> None:
        nonlocal start, last_time
        if start is None:
            start = piece.start
        elif piece.start != start + len(rows):
            raise SeqMismatch(f"session {session_id!r}: batch seqs are not contiguous: seq "
                              f"{piece.start!r} at position {len(rows)}, expected "
                              f"{start + len(rows)}")
        rows.extend(piece.rows)
        last_time = piece.last_time

    for record in records:
        if type(record) is PackedRun:
            if pending:
                add(encode_batch(session_id, pending))
                pending = []
            add(EncodedBatch(record.seq0, run_rows(session_id, record), record.times[-1]))
        else:
            pending.append(cast(Event, record))
    if pending:
        add(encode_batch(session_id, pending))
    assert start is not None
    return EncodedBatch(start, rows, last_time)


_TEXT: Final = (str, type(None))
_INT64: Final = range(-(2**63), 2**63)


def stored_rows(session_id: str, batch: EncodedBatch) -> list[StoredRow]:
    """``batch``'s rows as stored (without ``session_id``), for a backend that keeps
    rows itself and checks them as SQLite's STRICT columns do (``INTEGER``/``TEXT``
    types, ``ignorable`` 1 or NULL), so that every backend refuses the same rows.
    Raises ``BadEvent`` (naming the batch and the first bad row) for a row SQLite
    would refuse."""
    return [_stored_row(session_id, batch.start, row) for row in batch.rows]


def _stored_row(session_id: str, start: int, row: Row) -> StoredRow:
    sid, seq, etype, time, data, seqs, op, ignorable = row
    if not (sid == session_id and type(seq) is int and seq >= 0 and type(etype) is str
            and type(time) is int and time in _INT64 and isinstance(data, _TEXT)
            and isinstance(seqs, _TEXT) and isinstance(op, _TEXT)
            and (ignorable is None or (type(ignorable) is int and ignorable == 1))):
        raise BadEvent(f"session {session_id!r}: the batch starting at seq {start} cannot "
                       f"be stored: row {row[1:]!r} has a value of the wrong type; nothing "
                       f"written")
    return (seq, etype, time, data, seqs, op, ignorable)


def _op(text: str) -> Any:
    if text == _APPEND_JSON:
        return "append"
    try:
        return _OP.decode(text)
    except msgspec.ValidationError:
        return JSON_DECODER.decode(text)  # not a valid marker: kept for the core to refuse


def _seqs(text: str) -> Any:
    try:
        return _SEQS.decode(text)
    except msgspec.ValidationError:
        value = JSON_DECODER.decode(text)  # not a list of ints: kept for the core to refuse
        return tuple(value) if isinstance(value, list) else value


def _event(row: StoredRow, data: Any) -> Event:
    seq, etype, time, _, seqs, op, ignorable = row
    return Event(
        type=etype, seq=seq, time=time, data=data,
        source_event_seqs=UNSET if seqs is None else _seqs(seqs),
        surface_op=UNSET if op is None else _op(op),
        ignorable=UNSET if ignorable is None else True,
    )


def _decode_one(session_id: str, row: StoredRow) -> Event:
    try:
        if row[3] is not None and len(row[3]) >= _SHORTEST_TOO_DEEP and _too_deep(row[3]):
            raise _too_deep_stored(session_id, row)
        return _event(row, UNSET if row[3] is None else JSON_DECODER.decode(row[3]))
    except (msgspec.DecodeError, RecursionError) as exc:
        raise CorruptStore(f"session {session_id!r} seq {row[0]}: stored event cannot be "
                           f"decoded: {exc}", session_id, row[0]) from exc


def _too_deep_stored(session_id: str, row: StoredRow) -> CorruptStore:
    return CorruptStore(f"session {session_id!r} seq {row[0]}: stored {row[1]} data nests "
                        f"more than {MAX_NESTING} levels of arrays and objects (the "
                        f"nesting limit; written by an older build?)", session_id, row[0])


def decode_rows(session_id: str, rows: Sequence[StoredRow], first_seq: int) -> list[Event]:
    """The events of ``rows``, which must hold contiguous seqs from ``first_seq``.

    Raises ``CorruptStore`` naming the session and seq of the first row that is missing
    or cannot be decoded.
    """
    if rows and (rows[0][0] != first_seq or rows[-1][0] != first_seq + len(rows) - 1):
        expected = first_seq
        for seq, *_ in rows:
            if seq != expected:
                break
            expected += 1
        raise CorruptStore(f"session {session_id!r} seq {expected}: stored row is missing "
                           f"(rows are not contiguous)", session_id, expected)
    datas = [r[3] for r in rows]
    for k in _suspects(datas):
        text = datas[k]
        if text is not None and _too_deep(text):
            raise _too_deep_stored(session_id, rows[k])
    with gc_paused():
        if None not in datas:
            try:
                values = JSON_DECODER.decode("[" + ",".join(cast(list[str], datas)) + "]")
                # A bad row can only hide in the joined text by adding or losing elements.
                if len(values) == len(rows):
                    return [_event(r, d) for r, d in zip(rows, values, strict=True)]
            except (msgspec.DecodeError, RecursionError):
                pass  # one bad row: decode one by one below to name it
        return [_decode_one(session_id, r) for r in rows]


class RowDigest:
    """SHA-256 over ``events`` rows in seq order, each as the JSON array of its stored
    columns without the session id (``seq, type, time, data, source_event_seqs,
    surface_op, ignorable``), one per line: the same digest whether the rows are the
    ones an import binds or the ones a later read selects."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.rows = 0

    def add(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Digest ``rows`` (each the stored columns, session id excluded), in order."""
        update, encode = self._hash.update, JSON_ENCODER.encode
        count = 0
        for row in rows:
            update(encode(row))
            update(b"\n")
            count += 1
        self.rows += count

    def hexdigest(self) -> str:
        """The digest of every row added so far."""
        return self._hash.hexdigest()


class SourceCheck(Struct, frozen=True):
    """An imported session against its import record: imported from ``source`` with
    ``events`` events (rows digested as ``digest``); ``stored`` of them are stored now
    and ``matches`` says whether those rows digest as they did."""

    session_id: str
    source: str
    events: int
    stored: int
    matches: bool

    def problem(self) -> str | None:
        """One line saying how the session differs from its source; ``None`` when it
        holds every event of its source as imported."""
        if self.stored < self.events:
            return (f"cut short: imported from {self.source} with {self.events} events, "
                    f"only {self.stored} of them are stored")
        if not self.matches:
            return (f"differs from its source: its first {self.events} events are not "
                    f"those imported from {self.source}")
        return None


__all__ = ["NO_ROWS", "EncodedBatch", "Row", "RowDigest", "SourceCheck", "StoredRow",
           "decode_rows", "encode_batch", "stored_rows"]
