"""JSON encoding of events and JSONL session logs.

Decoding is exact about the envelope: unknown keys and non-JSON lines are refused here
with a ``DecodeError`` that names the line. Field *values* are not judged here: an event
whose ``seq`` is ``1.0`` or whose ``surfaceOp`` is ``null`` decodes to an ``Event``
holding that value, and the session's validation refuses it under the rule docs/rules.md orders
first (eligibility before marker shape, and so on).

``JSON_ENCODER`` and ``JSON_DECODER`` are the package's one untyped JSON encoder and
decoder: the store's rows and headers, the actors' append requests and the core's copies
of values all go through them. A decoder for one type (``Decoder(Event)`` here,
``Decoder(ReplaceOp)`` in the store's rows...) lives beside the code that reads that
type.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Final, TypeAlias, cast

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from surfacelog.schema.dsh import (
    ZSTD_MAGIC,
    PackedRun,
    ReadNotes,
    decode_packed_row,
    expand_packed_row,
    is_packed_row,
    zstd_lines,
)
from surfacelog.schema.errors import (
    DecodeError,
    InvalidArgument,
    LineTooLong,
    LogError,
    UnreadableLog,
)
from surfacelog.schema.events import Event, ReplaceOp, surface_op_from_json
from surfacelog.schema.header import SessionHeader, header_from_json, header_to_json
from surfacelog.schema.limits import (
    MAX_LINE_BYTES,
    MAX_NESTING,
    check_duplicate_keys,
    gc_paused,
    may_nest_too_deep,
    may_repeat_keys,
    nesting_depth,
    nesting_error,
)

JSON_ENCODER: Final = msgspec.json.Encoder()
"""The package's JSON encoder: any JSON value or struct, as compact JSON bytes."""
JSON_DECODER: Final = msgspec.json.Decoder()
"""The package's untyped JSON decoder: a document as plain Python values."""
_EVENT_DECODER: Final = msgspec.json.Decoder(Event)


class _LooseEvent(Struct, rename="camel", forbid_unknown_fields=True):
    """The envelope with every value raw, to read events the strict decoder refuses."""

    type: str | UnsetType = UNSET
    seq: Raw | UnsetType = UNSET
    time: Raw | UnsetType = UNSET
    data: Any = UNSET
    source_event_seqs: Raw | UnsetType = UNSET
    surface_op: Raw | UnsetType = UNSET
    ignorable: Any = UNSET


_LOOSE_DECODER: Final = msgspec.json.Decoder(_LooseEvent)


def _value(raw: Raw) -> Any:
    """Decode one raw JSON value, keeping integer ``-0`` visible as the float ``-0.0``
    so that integer checks refuse it."""
    text = bytes(raw).strip()
    if text == b"-0":
        return -0.0
    if text.startswith(b"["):
        return [_value(item) for item in msgspec.json.decode(text, type=list[Raw])]
    if text.startswith(b"{"):
        return {k: _value(v) for k, v in msgspec.json.decode(text, type=dict[str, Raw]).items()}
    try:
        return JSON_DECODER.decode(text)
    except msgspec.ValidationError:
        # A number beyond the float range (``1e400``) reads as an infinity, as JSON.parse
        # reads it; the integer checks then refuse it.
        return float(text)


def _surface_op(raw: Raw | UnsetType) -> Any:
    return UNSET if raw is UNSET else surface_op_from_json(_value(raw))


def _loose_event(line: bytes, where: str) -> Event:
    try:
        loose = _LOOSE_DECODER.decode(line)
    except msgspec.ValidationError as exc:
        raise DecodeError("envelope", f"{where}: invalid event envelope: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise DecodeError("json", f"{where}: not JSON: {exc}") from exc
    seqs = UNSET if loose.source_event_seqs is UNSET else _value(loose.source_event_seqs)
    if isinstance(seqs, list):
        seqs = tuple(seqs)
    seq: Any = UNSET if loose.seq is UNSET else _value(loose.seq)
    time: Any = UNSET if loose.time is UNSET else _value(loose.time)
    etype: Any = loose.type  # a string, or UNSET for a missing key (the session refuses)
    return Event(
        type=etype,
        seq=seq,
        time=time,
        data=loose.data,
        source_event_seqs=seqs,
        surface_op=_surface_op(loose.surface_op),
        ignorable=loose.ignorable,
    )


def decode_event(line: bytes | str, where: str = "event") -> Event:
    """Decode one JSON event. Raises ``DecodeError``: rule ``json`` for a line that is
    not JSON, rule ``envelope`` for a value that is not an object of the envelope's keys
    (an unknown key, a ``type`` that is not a string...)."""
    raw = line.encode() if isinstance(line, str) else line
    try:
        event = _EVENT_DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        return _strict_refused(raw, where, exc)
    return _minus_zero_kept(event, raw, where)


def _strict_refused(raw: bytes, where: str, exc: msgspec.DecodeError) -> Event:
    """What ``raw`` decodes to once the strict decoder refused it with ``exc``: the loose
    decoder's event or error for a value outside the strict types (a
    ``ValidationError``), and for any line holding "-0", as when that decoder read every
    such line (the two can word the same bad byte differently where they type its key
    differently: '"time":-' cut short is an invalid number to the strict one, an invalid
    character to the loose one); else the strict decoder's own error."""
    if isinstance(exc, msgspec.ValidationError) or b"-0" in raw:
        return _loose_event(raw, where)
    raise DecodeError("json", f"{where}: not JSON: {exc}") from exc


def _minus_zero_kept(event: Event, raw: bytes, where: str) -> Event:
    """``event``, as the strict decoder read it from ``raw``, or ``raw`` read again by
    the loose decoder when it may hold an envelope integer written ``-0``: the strict
    decoder reads that as 0, the loose one keeps -0.0 for the rules to refuse. Only an
    envelope integer that came out 0 can have been one (what the bulk path of
    ``decode_records`` also relies on). The text "-0" alone is common (one random UUID
    in eight holds it, and dates do) and cost the loose decoder's time, about 3.5 times
    the strict one's; it is looked for last, as the search costs more than the
    decoded envelope's test."""
    if _may_hold_minus_zero(event) and b"-0" in raw:
        return _loose_event(raw, where)
    return event


def encode_event(event: Event) -> bytes:
    """The event as one line of compact JSON (no newline)."""
    return JSON_ENCODER.encode(event)


def encode_json(value: object) -> bytes:
    """Any JSON-encodable value (structs included) as compact JSON."""
    return JSON_ENCODER.encode(value)


def decode_json(data: bytes | str) -> Any:
    """Decode a JSON document into plain Python values. Raises ``DecodeError`` (rule
    ``json``; ``NestingError`` for one too deep for Python to hold)."""
    try:
        return JSON_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError("json", f"not JSON: {exc}") from exc
    except RecursionError as exc:
        raise nesting_error(None, None) from exc


class LogFile(Struct, frozen=True):
    """A JSONL session log: the optional DSH header line and the events in file order
    (packed chunk rows expanded). ``torn`` says what torn tail the reader dropped
    (``None``: none); ``packed_rows`` counts the packed rows expanded."""

    header: SessionHeader | None
    events: list[Event]
    torn: str | None = None
    packed_rows: int = 0


def is_line_of_type(line: bytes, etype: str) -> bool:
    """Whether ``line`` is one JSON object whose ``type`` is ``etype`` (the header line
    is of type ``session``). False for a line that is not JSON. Raises
    ``RecursionError`` for JSON nested beyond msgspec's own limit."""
    # Most lines are of another type: one that does not hold the type as a JSON string,
    # written plainly, is not decoded at all.
    if b'"' + etype.encode() + b'"' not in line:
        return False
    try:
        value = JSON_DECODER.decode(line)
    except msgspec.DecodeError:
        return False
    return isinstance(value, dict) and value.get("type") == etype


_BLOCK_LINES: Final = 4096
"""Lines decoded per msgspec call by ``decode_records``'s bulk path."""
_RAWS_DECODER: Final = msgspec.json.Decoder(list[Raw])
_EVENTS_DECODER: Final = msgspec.json.Decoder(list[Event])


def _line_events(n: int, line: bytes, unit: str, notes: ReadNotes) -> list[Event]:
    """The events of one non-blank event line (one, or a packed row's expansion): the
    per-line path, which names the line of any error."""
    try:
        try:
            event = _minus_zero_kept(_EVENT_DECODER.decode(line), line, f"{unit} {n}")
        except msgspec.DecodeError as exc:
            if is_packed_row(line):
                expanded = expand_packed_row(line, f"{unit} {n}")
                notes.packed_rows += 1
                return expanded
            event = _strict_refused(line, f"{unit} {n}", exc)
        if line.count(b"[") + line.count(b"{") > MAX_NESTING and \
                nesting_depth(event.data) > MAX_NESTING:
            raise nesting_error(event.type, event.seq, prefix=f"{unit} {n}: ")
        check_duplicate_keys(line, JSON_ENCODER.encode(event), f"{unit} {n}: ",
                             event.type, event.seq)
    except RecursionError as exc:  # msgspec's own limit, far past ours
        raise nesting_error(None, None, prefix=f"{unit} {n}: ") from exc
    return [event]


Record: TypeAlias = "Event | PackedRun"
"""What ``LogStream.records()`` yields: an event, or a packed row not expanded."""


def _line_records(n: int, line: bytes, unit: str, notes: ReadNotes) -> list[Record]:
    """``_line_events``, except that a packed row stays one ``PackedRun`` (the same
    checks, the same errors: expanding a row only builds what the run describes)."""
    try:
        if is_packed_row(line):
            run = decode_packed_row(line, f"{unit} {n}")
            notes.packed_rows += 1
            return [run]
    except RecursionError as exc:  # msgspec's own limit, far past ours
        raise nesting_error(None, None, prefix=f"{unit} {n}: ") from exc
    return list(_line_events(n, line, unit, notes))


def _may_hold_minus_zero(event: Event) -> bool:
    """Whether an integer of the envelope is ``0`` (which the strict decoder also reads
    from ``-0``, where the per-line path reads ``-0.0`` for the rules to refuse)."""
    if event.seq == 0 or event.time == 0:
        return True
    seqs = event.source_event_seqs
    if seqs is not UNSET and 0 in seqs:
        return True
    op = event.surface_op
    return isinstance(op, ReplaceOp) and (op.start == 0 or op.end == 0)


def _bulk_events(lines: list[bytes]) -> list[Event] | None:
    """The events of ``lines`` (each a non-blank event line) decoded in two msgspec
    calls over the lines joined into one JSON array, or ``None`` when that cannot stand
    for decoding each line on its own (a line that is not one JSON object, is not a
    valid event, is a packed row...): the caller then takes the per-line path, which
    names the line and rule of the error exactly as before.

    Joining alone would accept an event split over two lines; the array's elements are
    therefore also read as raw JSON and each must be exactly as long as its line. With
    nothing but one comma between lines, that means every element is exactly one line.

    msgspec keeps the last of a key named twice: a block in which a key may be repeated
    (``limits.may_repeat_keys``, over the events encoded again in one call) is left to
    the per-line path, which refuses the line that repeats one.
    """
    joined = b",".join(lines)
    # No count of ``},{`` to refuse a bad block early: the length check below decides
    # alone, and counting cost about a fifth of decoding the block (``bytes.count`` is
    # slow among the many ``-`` and ``}`` of a log).
    if joined[:1] != b"{" or joined[-1:] != b"}":
        return None
    doc = b"[" + joined + b"]"
    try:
        raws = _RAWS_DECODER.decode(doc)
        if len(raws) != len(lines) or list(map(len, raws)) != list(map(len, lines)):
            return None
        events: list[Event] = _EVENTS_DECODER.decode(doc)
        if _may_repeat_keys_in(doc, events):
            return None
        return events
    except (msgspec.DecodeError, RecursionError):
        return None


def _may_repeat_keys_in(doc: bytes, events: list[Event]) -> bool:
    """Whether the JSON array ``doc``, which msgspec decoded to ``events``, may name a
    key twice in one of its objects (``limits.may_repeat_keys``: the events encoded
    again, in one call, and compared with ``doc``)."""
    return may_repeat_keys(doc, JSON_ENCODER.encode(events))


_BATCH_EVENTS: Final = 16_384
"""Events per list ``_block_batches`` yields on the per-line path (a block of packed rows
expands to up to 4,096 x 1,024 events: this keeps one list to about a block's worth)."""


def _block_batches(block: list[tuple[int, bytes]], unit: str, notes: ReadNotes,
                   runs: bool) -> Iterator[list[Record]]:
    """The events of ``block`` (physical lines after the first non-blank one), in lists
    of at most about ``_BATCH_EVENTS`` events: in bulk when every line is an ordinary
    event line, else line by line. Either way the same events, and the same first
    error. ``runs``: a packed row is yielded as its ``PackedRun`` (counting its
    members), else expanded. The collector is paused while decoding (thousands of
    fresh acyclic containers), never across a ``yield``."""
    if not block:
        return
    lines = [line for _, line in block]
    with gc_paused():
        bulk = _bulk_events(lines)
        if bulk is not None:
            _redo_suspects(bulk, block, lines, unit, notes)
    if bulk is not None:
        yield cast(list[Record], bulk)
        return
    one_line = _line_records if runs else _line_events
    k, total = 0, len(block)
    while k < total:
        out: list[Record] = []
        size = 0
        with gc_paused():
            while k < total and size < _BATCH_EVENTS:
                n, line = block[k]
                k += 1
                if line.strip():
                    got = one_line(n, line, unit, notes)
                    out.extend(got)
                    first = got[0]  # a packed row's run alone, or the line's events
                    size += len(first) if isinstance(first, PackedRun) else len(got)
        if out:
            yield out


def _redo_suspects(bulk: list[Event], block: list[tuple[int, bytes]], lines: list[bytes],
                   unit: str, notes: ReadNotes) -> None:
    """Decode again, on the per-line path, the lines that path reads differently from
    the bulk one: data possibly nested too deep, and ``-0`` where the envelope holds a
    0. Every other line decoded as it would alone, so the first error of the block is
    the first of these to fail."""
    # Both tests run over the block's lines joined by newlines, in C: a Python test of
    # each of 4,096 lines cost as much as checking their payloads. A line holding a
    # newline (JSON whitespace, from a caller's own lines) gets the per-line tests.
    text = b"\n".join(lines)
    brackets = text.translate(None, _NOT_OPENING).split(b"\n")  # one entry per line
    if len(brackets) != len(lines):
        _redo_suspects_by_line(bulk, block, lines, unit, notes)
        return
    again: list[int] = []
    if max(map(len, brackets)) > MAX_NESTING:
        again = [k for k, opening in enumerate(brackets) if len(opening) > MAX_NESTING]
    # Only the few lines holding ``-0`` (a UUID may) are looked at: line k is the one
    # after k newlines, counted from the last hit on. (A compiled pattern finds ``-0``
    # about three times as fast as ``bytes.find`` among the many ``-`` of a log.)
    hit, k, counted = _MINUS_ZERO.search(text), 0, 0
    while hit is not None:
        pos = hit.start()
        k += text.count(b"\n", counted, pos)
        if _may_hold_minus_zero(bulk[k]):
            again.append(k)
        counted = text.find(b"\n", pos)
        if counted < 0:
            break
        hit = _MINUS_ZERO.search(text, counted)
    if again:
        again = sorted(set(again))
    for k in again:
        n, line = block[k]
        (bulk[k],) = _line_events(n, line, unit, notes)


def _redo_suspects_by_line(bulk: list[Event], block: list[tuple[int, bytes]],
                           lines: list[bytes], unit: str, notes: ReadNotes) -> None:
    """``_redo_suspects`` testing each line on its own (lines that hold newlines)."""
    again = [k for k, line in enumerate(lines) if may_nest_too_deep(line)]
    again.extend(k for k, line in enumerate(lines)
                 if _may_hold_minus_zero(bulk[k]) and b"-0" in line)
    for k in sorted(set(again)):
        n, line = block[k]
        (bulk[k],) = _line_events(n, line, unit, notes)


_MINUS_ZERO: Final = re.compile(rb"-0")
_NOT_OPENING: Final = bytes(b for b in range(256) if b not in b"[{\n")
"""Every byte but the opening brackets and the newline (``bytes.translate`` deletes
these to count each line's opening brackets, as ``may_nest_too_deep`` counts them)."""


def decode_records(numbered: Iterable[tuple[int, bytes]], notes: ReadNotes | None = None,
                   *, unit: str = "line") -> LogFile:
    """Decode physical lines (line numbers count blank lines, so that an error names
    the line an editor shows): an optional header line, then one event per non-blank
    line. Each line is decoded as on its own: blocks of lines are decoded in one msgspec
    call where that is provably the same (``_bulk_events``), else line by line. A line
    with more opening brackets than ``MAX_NESTING`` has its data's depth checked. A DSH
    packed chunk row stands for the events it expands to (``dsh.expand_packed_row``).
    ``unit`` is how errors name a record (``line 5``; a database reader says ``seq``)."""
    return _decode_blocks(_blocks(numbered), notes, unit)


def _blocks(numbered: Iterable[tuple[int, bytes]]) -> Iterator[list[tuple[int, bytes]]]:
    block: list[tuple[int, bytes]] = []
    append = block.append
    size = _BLOCK_LINES
    for record in numbered:
        append(record)
        if len(block) == size:
            yield block
            block = []
            append = block.append
    if block:
        yield block


def _decode_blocks(blocks: Iterable[list[tuple[int, bytes]]], notes: ReadNotes | None,
                   unit: str) -> LogFile:
    """``decode_records`` of the numbered lines in ``blocks`` (in order)."""
    notes = ReadNotes() if notes is None else notes
    with gc_paused():  # as in ``read_log``: every event is kept
        stream = _event_blocks(blocks, notes, unit, runs=False)
        header = next(stream)
        assert not isinstance(header, list)
        events: list[Event] = []
        for batch in stream:
            assert isinstance(batch, list)
            events.extend(cast(list[Event], batch))
    return LogFile(header, events, notes.torn, notes.packed_rows)


def _event_blocks(blocks: Iterable[list[tuple[int, bytes]]], notes: ReadNotes,
                  unit: str, *, runs: bool) -> Generator[SessionHeader | list[Record] | None]:
    """The header of the numbered lines in ``blocks`` (``None`` when the first
    non-blank line is an event), then their events in lists of at most a block's
    worth (``_block_batches``; packed rows expanded, or with ``runs`` kept as
    ``PackedRun``s): the streamed form of ``_decode_blocks``, with the same errors in
    the same order."""
    first = True
    for block in blocks:
        if first:
            k = next((k for k, (_, line) in enumerate(block) if line.strip()), None)
            if k is None:
                continue
            first = False
            n, line = block[k]
            head: list[Event] = []
            with gc_paused():
                header = _first_line(n, line, unit, notes, head)
            yield header
            if head:
                yield cast(list[Record], head)
            block = block[k + 1:]
        yield from _block_batches(block, unit, notes, runs)
    if first:
        yield None


def _first_line(n: int, line: bytes, unit: str, notes: ReadNotes,
                events: list[Event]) -> SessionHeader | None:
    """The first non-blank line: the header, or (returning ``None``) the first event
    line, whose events are appended to ``events``."""
    try:
        is_header = is_line_of_type(line, "session")
    except RecursionError as exc:  # msgspec's own limit, far past ours
        raise nesting_error(None, None, prefix=f"{unit} {n}: ") from exc
    if not is_header:
        events.extend(_line_events(n, line, unit, notes))
        return None
    try:
        value = JSON_DECODER.decode(line)
        check_duplicate_keys(line, JSON_ENCODER.encode(value))
        return header_from_json(value, dsh_line=True)
    except RecursionError as exc:  # past Python's own limit, far past ours
        raise nesting_error(None, None, prefix=f"{unit} {n}: ") from exc
    except DecodeError as exc:
        raise exc.with_prefix(f"{unit} {n}: ") from exc


def decode_log(content: bytes) -> LogFile:
    """Decode JSONL: an optional header line, then one event per line; blank lines are
    skipped. Raises ``DecodeError`` naming the line number of the first bad line
    (``NestingError`` for data nested deeper than ``MAX_NESTING``)."""
    return decode_records(enumerate(content.splitlines(), 1))


_READ_BYTES: Final = 1 << 20
"""Bytes read at a time by ``_file_blocks``."""


def _file_blocks(handle: BinaryIO, path: str | Path, max_line_bytes: int,
                 notes: ReadNotes) -> Iterator[list[tuple[int, bytes]]]:
    """The numbered lines of a plain regular file, in blocks: read ``_READ_BYTES`` at a
    time and split at the newlines, for as long as every line is an ordinary one (no
    ``\\r``, within the line limit, ended by a newline). From the first line that is
    not, the file is read from that line's start by ``_file_lines`` (line by line, as
    the reader always did), so line numbers, the line limit and torn tails come out
    exactly the same."""
    n = 0
    offset = 0  # of the first line not yet yielded
    carry = b""
    limit = max_line_bytes
    while True:
        chunk = handle.read(_READ_BYTES)
        if not chunk:
            break
        data = carry + chunk if carry else chunk
        end = data.rfind(b"\n")
        if end < 0:
            carry = data
            if len(carry) > limit + 1:
                break
            continue
        carry = data[end + 1:]
        body = data[:end]
        if b"\r" in body:
            break
        lines = body.split(b"\n")
        if max(map(len, lines)) > limit:
            break
        yield list(zip(range(n + 1, n + 1 + len(lines)), lines, strict=True))
        n += len(lines)
        offset += end + 1
    handle.seek(offset)
    yield from _blocks(_file_lines(handle, path, max_line_bytes, notes, n))


def _file_lines(handle: BinaryIO, path: str | Path, max_line_bytes: int,
                notes: ReadNotes, n: int = 0) -> Iterator[tuple[int, bytes]]:
    """The numbered lines of a plain file from its current position, line ``n + 1``."""
    while True:
        line = handle.readline(max_line_bytes + 2)  # the line and \r\n at most
        if not line:
            return
        n += 1
        body = line.rstrip(b"\r\n")
        if len(body) > max_line_bytes:
            raise LineTooLong("line-length", f"{path}: line {n} is longer than "
                              f"{max_line_bytes} bytes (the line limit)")
        if n > 1 and not line.endswith(b"\n") and body.startswith(b"{") \
                and not _parses(body):
            notes.torn = (f"torn tail: line {n}, the last, is a partial line "
                          f"({len(body)} bytes, no newline); dropped")
            return
        if b"\r" in body:  # splitlines() also splits at a lone \r, as decode_log does
            parts = body.splitlines()
            for k, part in enumerate(parts):
                yield n + k, part
            n += max(len(parts) - 1, 0)
        else:
            yield n, body


def _parses(line: bytes) -> bool:
    try:
        JSON_DECODER.decode(line)
    except msgspec.DecodeError:
        return False
    return True


def read_log(path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> LogFile:
    """Read a session log file, streamed: memory holds one block of lines (1 MiB of a
    regular file, or one line of at most ``max_line_bytes`` bytes, newline excluded) —
    one zstd frame's lines for a zstd file — besides the decoded events
    (``LogStream`` reads the same file without holding its events).

    Every DSH JSONL encoding is read: plain lines, or (a file starting with the zstd
    magic) a concatenation of zstd frames (``dsh.zstd_lines``); packed chunk rows are
    expanded. Torn tails are dropped as DSH drops them and said in ``LogFile.torn``: an
    incomplete final zstd frame's partial line, or a plain file's final fragment with no
    newline that starts like a JSON object but does not parse (when it is not the only
    line: a file of one bad line is not JSONL). A bad line anywhere else is an error.

    Raises ``OSError``, ``DecodeError`` (``LineTooLong`` naming the file and line for a
    longer line, after reading no more of it than the limit and 1 MiB; ``NestingError``; rule
    ``zstd`` naming the file, frame and byte offset of a corrupt frame; rule
    ``packed-row`` naming the line of a malformed packed row), ``InvalidArgument`` for
    a limit below 1."""
    # The collector stays paused for the whole read, not per block as ``LogStream``
    # pauses it: every event read is kept, and a collection would traverse them all.
    with LogStream(path, max_line_bytes=max_line_bytes) as stream, gc_paused():
        events: list[Event] = []
        for batch in stream.batches():
            events.extend(batch)
        return LogFile(stream.header, events, stream.notes.torn, stream.notes.packed_rows)


class LogStream:
    """A session log file read as ``read_log`` reads it, without holding its events:
    the header is read on opening, then ``batches()`` yields the events in file order,
    one block of lines at a time (at most 4,096 lines; a packed row counts as one line
    and yields every event it stands for), so memory holds one block. ``notes`` says,
    once ``batches()`` is exhausted, what ``LogFile.torn`` and ``LogFile.packed_rows``
    would. The errors are ``read_log``'s, in the same order (the first bad line of the
    file, wherever it is), raised by the constructor for the first block and by
    ``batches()`` for the rest. Close it (or use it as a context manager).

    Raises ``OSError``, ``DecodeError``, ``InvalidArgument`` as ``read_log`` does."""

    def __init__(self, path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES,
                 runs: bool = False) -> None:
        if max_line_bytes < 1:
            raise InvalidArgument(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        self.path = path
        self.notes = ReadNotes()
        self.runs = runs
        self._handle = Path(path).open("rb")  # noqa: SIM115 (closed by close())
        try:
            self._stream = self._open(max_line_bytes)
            first = next(self._stream)
        except BaseException:
            self._handle.close()
            raise
        assert not isinstance(first, list)
        self.header: SessionHeader | None = first

    def _open(self, max_line_bytes: int) -> Generator[SessionHeader | list[Record] | None]:
        handle, path, notes, runs = self._handle, self.path, self.notes, self.runs
        if handle.peek(len(ZSTD_MAGIC))[:len(ZSTD_MAGIC)] == ZSTD_MAGIC:
            return _prefixed(_event_blocks(_blocks(zstd_lines(handle, max_line_bytes, notes)),
                                           notes, "line", runs=runs), f"{path}: ")
        if stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return _event_blocks(_file_blocks(handle, path, max_line_bytes, notes), notes,
                                 "line", runs=runs)
        return _event_blocks(_blocks(_file_lines(handle, path, max_line_bytes, notes)),
                             notes, "line", runs=runs)

    def batches(self) -> Iterator[list[Event]]:
        """The events after the header, a block at a time (each list is the caller's).
        Raises ``InvalidArgument`` on a stream opened with ``runs``."""
        if self.runs:
            raise InvalidArgument("this LogStream keeps packed rows: read records()")
        for batch in self._stream:
            assert isinstance(batch, list)
            yield cast(list[Event], batch)

    def records(self) -> Iterator[list[Record]]:
        """With ``runs``: the records after the header, a block at a time, each an event
        or a packed row as its ``PackedRun`` (not expanded: what an import that checks
        and stores a run as a whole reads). Raises ``InvalidArgument`` on a stream
        opened without ``runs``."""
        if not self.runs:
            raise InvalidArgument("this LogStream expands packed rows: read batches()")
        for batch in self._stream:
            assert isinstance(batch, list)
            yield batch

    def close(self) -> None:
        self._stream.close()
        self._handle.close()

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def reading(path: str | Path, *, limit_option: str | None = None) -> Iterator[None]:
    """Reading the log file at ``path`` (``read_log``, ``LogStream`` and its batches):
    an error that means the file cannot be read as a log becomes ``UnreadableLog`` with
    a one-line message, and any other ``LogError`` (an invalid event, a bad packed
    row...) passes unchanged. ``limit_option`` names the option that raises the line
    limit, added to a too-long line's message (``(see --max-line-bytes)``).

    Raises ``UnreadableLog`` for an ``OSError`` (``cannot read PATH: why``), a line
    longer than the limit, a line that is not JSON (``PATH is not JSONL: ...``) or a
    corrupt zstd frame (``PATH is not a readable zstd session file: ...``)."""
    try:
        yield
    except OSError as exc:
        raise UnreadableLog(f"cannot read {path}: {exc.strerror or exc}") from exc
    except LineTooLong as exc:
        hint = f" (see {limit_option})" if limit_option else ""
        raise UnreadableLog(f"{exc}{hint}") from exc
    except LogError as exc:
        if exc.rule == "json":
            raise UnreadableLog(f"{path} is not JSONL: {exc}") from exc
        if exc.rule == "zstd":
            raise UnreadableLog(f"{path} is not a readable zstd session file: {exc}"
                                ) from exc
        raise


def _prefixed(items: Iterator[SessionHeader | list[Record] | None],
              prefix: str) -> Generator[SessionHeader | list[Record] | None]:
    """``items``, every ``DecodeError`` they raise prefixed with ``prefix``."""
    try:
        yield from items
    except DecodeError as exc:
        raise exc.with_prefix(prefix) from exc


def encode_log(header: SessionHeader | None, events: Iterable[Event]) -> bytes:
    """JSONL: a DSH header line when ``header`` is given, then one line per event."""
    out = []
    if header is not None:
        out.append(JSON_ENCODER.encode(header_to_json(header, dsh_line=True)))
    out.extend(JSON_ENCODER.encode(e) for e in events)
    return b"\n".join(out) + b"\n" if out else b""
