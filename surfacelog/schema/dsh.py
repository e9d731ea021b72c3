"""DeepSeek Harness's on-disk encodings of a session log (``../shared/DSH-FORMATS.md``).

- **Packed chunk rows** (``text-chunks``, ``reasoning-chunks``, ``tool-call-chunks``):
  one storage record standing for a run of ``assistant/chunk`` events. Member k has seq
  ``seq0 + k`` and time ``time0 + sum(dt[:k])``. ``expand_packed_row`` checks a row as
  DSH's decoder does (exact keys, non-empty string arrays, ``len(dt) == n - 1``, safe
  integers) and expands it; ``pack_records`` packs where DSH's packer would (runs of
  ``MIN_RUN``..``MAX_RUN`` members, at most ``MAX_ROW_BYTES`` of row data).
- **zstd framing**: the file is a concatenation of independent zstd frames, the header
  line in the first, one more frame per durable append batch. ``zstd_lines`` decodes it
  frame by frame, feeding the decompressor small slices so that memory stays bounded
  by the line limit whatever the compression ratio.
- **Torn tails**: ``ReadNotes.torn`` says what a reader dropped: the incomplete final
  frame's partial line (and, as DSH does, its lines from the first unparsable one on
  when no later line holds a ``turn/end``), or a plain file's final unterminated
  fragment. Crash repair then closes the turn.

This module does not import ``codec`` (``codec`` uses it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import accumulate, pairwise
from typing import Any, BinaryIO, Final

import msgspec
from msgspec import UNSET, Struct, UnsetType

from surfacelog.schema.errors import DecodeError, LineTooLong
from surfacelog.schema.events import MAX_SAFE_INT, Event
from surfacelog.schema.header import SessionHeader, header_to_json
from surfacelog.schema.limits import check_duplicate_keys

ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
"""The first four bytes of a zstd frame (and so of a DSH ``session.jsonl.zstd``)."""
MIN_RUN: Final = 3
MAX_RUN: Final = 1024
MAX_ROW_BYTES: Final = 1 << 20
"""At most this many bytes of row ``data`` JSON (uncompressed) per packed row."""
PACKED_TYPES: Final = {"text-chunks": "text-delta", "reasoning-chunks": "reasoning-delta",
                       "tool-call-chunks": "tool-call-delta"}
"""Packed row type -> the chunk kind of its members."""
_ROW_OF_KIND: Final = {v: k for k, v in PACKED_TYPES.items()}
_FEED: Final = 2048
"""Compressed bytes handed to the decompressor at a time: a zstd block of 128 KiB costs
at least 4 bytes, so one call yields at most 64 MiB whatever the file holds."""

Number = int | float


class _TextRun(Struct, forbid_unknown_fields=True):
    turn: Number
    step: Number
    index: Number
    dt: list[int]
    texts: list[str]


class _ToolRun(Struct, forbid_unknown_fields=True):
    turn: Number
    step: Number
    index: Number
    dt: list[int]
    id: str
    args: list[str]
    name: str | UnsetType = UNSET


class _TextRow(Struct, tag_field="type", tag="text-chunks", forbid_unknown_fields=True):
    seq0: int
    time0: int
    data: _TextRun


class _ReasoningRow(Struct, tag_field="type", tag="reasoning-chunks",
                    forbid_unknown_fields=True):
    seq0: int
    time0: int
    data: _TextRun


class _ToolRow(Struct, tag_field="type", tag="tool-call-chunks", forbid_unknown_fields=True):
    seq0: int
    time0: int
    data: _ToolRun


_ROW_DECODER: Final = msgspec.json.Decoder(_TextRow | _ReasoningRow | _ToolRow)
_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()


class ReadNotes(Struct):
    """What a reader noticed besides the events, counted as it reads: packed rows
    expanded, zstd frames read, and the torn tail it dropped (``None`` when there was
    none)."""

    packed_rows: int = 0
    frames: int = 0
    torn: str | None = None


class _TypeOnly(Struct):
    type: Any = None


_TYPE_DECODER: Final = msgspec.json.Decoder(_TypeOnly)
_PACKED_PREFIXES: Final = tuple(b'{"type":"%s"' % t.encode() for t in PACKED_TYPES)


def is_packed_row(line: bytes) -> bool:
    """Whether a storage record is a packed row: its top-level ``type`` is one of
    ``PACKED_TYPES`` (no event has such a type). ``expand_packed_row`` then says what
    is wrong with it, if anything. A record that is not JSON is not one."""
    if line.startswith(_PACKED_PREFIXES):  # how DSH writes them: a prefix test suffices
        return True
    if b"-chunks" not in line:
        return False
    try:
        return _TYPE_DECODER.decode(line).type in PACKED_TYPES
    except msgspec.DecodeError:
        return False


def _safe(value: int) -> bool:
    return -MAX_SAFE_INT <= value <= MAX_SAFE_INT


def _row_error(where: str, row_type: object, seq: object, detail: str) -> DecodeError:
    return DecodeError("packed-row", f"{where}: invalid packed row: {detail}", row_type, seq)


class PackedRun:
    """One packed chunk row, decoded and checked (``decode_packed_row``) but not
    expanded: the ``assistant/chunk`` events it stands for differ from each other only
    in their seq (``seq0 + k``), their time (``times[k]``, every one a safe integer)
    and one string leaf of their data (``members[k]``: the chunk's ``text``, or a tool
    call chunk's ``argumentsDelta``). Everything else of their data (``turn``,
    ``step``, the chunk's ``type``, ``index``, ``id``, ``name``) is the row's, shared.
    Consumers that only need to check or store the events (an import) use that
    instead of building each one; ``events()`` builds them."""

    __slots__ = ("call_id", "index", "kind", "members", "name", "seq0", "step", "times",
                 "turn")

    def __init__(self, kind: str, seq0: int, times: list[int], turn: Number, step: Number,
                 index: Number, members: list[str], call_id: str | None = None,
                 name: str | UnsetType = UNSET) -> None:
        self.kind, self.seq0, self.times = kind, seq0, times
        self.turn, self.step, self.index = turn, step, index
        self.members, self.call_id, self.name = members, call_id, name

    def __len__(self) -> int:
        return len(self.members)

    def event(self, k: int) -> Event:
        """Member ``k`` as its event."""
        return self._events(k, k + 1)[0]

    def events(self) -> list[Event]:
        """Every member as its event, in seq order."""
        return self._events(0, len(self.members))

    def _events(self, start: int, stop: int) -> list[Event]:
        turn, step, index, kind = self.turn, self.step, self.index, self.kind
        seqs = range(self.seq0 + start, self.seq0 + stop)
        times, members = self.times[start:stop], self.members[start:stop]
        # One comprehension, dict displays and positional structs: a row of 1,024
        # members costs a fraction of building each event field by field.
        if self.call_id is not None:
            call = self.call_id
            if self.name is not UNSET:
                name = self.name
                return [Event("assistant/chunk", seq, time, {
                    "turn": turn, "step": step, "chunk": {
                        "type": kind, "index": index, "id": call, "name": name,
                        "argumentsDelta": member}})
                    for seq, time, member in zip(seqs, times, members, strict=True)]
            return [Event("assistant/chunk", seq, time, {
                "turn": turn, "step": step, "chunk": {
                    "type": kind, "index": index, "id": call, "argumentsDelta": member}})
                for seq, time, member in zip(seqs, times, members, strict=True)]
        return [Event("assistant/chunk", seq, time, {
            "turn": turn, "step": step, "chunk": {"type": kind, "index": index,
                                                  "text": member}})
            for seq, time, member in zip(seqs, times, members, strict=True)]


def expand_packed_row(line: bytes, where: str) -> list[Event]:
    """The ``assistant/chunk`` events one packed row stands for, in seq order
    (``decode_packed_row(line, where).events()``). Raises ``DecodeError`` as
    ``decode_packed_row`` does."""
    return decode_packed_row(line, where).events()


def decode_packed_row(line: bytes, where: str) -> PackedRun:
    """One packed row, checked as DSH's decoder checks it.

    Raises ``DecodeError`` (rule ``packed-row``, naming ``where``, the row type and its
    ``seq0``) for a row DSH's decoder refuses: unknown or missing keys, an empty or
    non-string member array, a ``dt`` whose length is not members - 1, a seq or time
    outside the safe integer range. Nothing is ever silently dropped."""
    try:
        row = _ROW_DECODER.decode(line)
    except msgspec.DecodeError as exc:
        head: Any = None
        try:
            value = _DECODER.decode(line)
            head = value if isinstance(value, dict) else None
        except msgspec.DecodeError:
            pass
        rtype = head.get("type") if head else None
        seq0 = head.get("seq0") if head else None
        raise _row_error(where, rtype, seq0, str(exc)) from exc
    # The row struct holds every member the line has but a repeated key's first value.
    check_duplicate_keys(line, _ENCODER.encode(row), f"{where}: ", row.__struct_config__.tag,
                         row.seq0)
    run = row.data
    members: list[str] = run.args if isinstance(run, _ToolRun) else run.texts
    rtype = type(row).__struct_config__.tag
    n = len(members)
    if n == 0:
        raise _row_error(where, rtype, row.seq0, "it has no members")
    if len(run.dt) != n - 1:
        raise _row_error(where, rtype, row.seq0, f"dt has {len(run.dt)} gaps for {n} "
                                                 f"members; expected {n - 1}")
    if row.seq0 < 0 or row.seq0 + n - 1 > MAX_SAFE_INT:
        raise _row_error(where, rtype, row.seq0, "its seqs are not safe non-negative "
                                                 "integers")
    kind = PACKED_TYPES[str(rtype)]
    seq0 = row.seq0
    times = list(accumulate(run.dt, initial=row.time0))
    if not (_safe(min(times)) and _safe(max(times))):
        k = next(k for k, time in enumerate(times) if not _safe(time))
        raise _row_error(where, rtype, seq0, f"member {k} has time {times[k]}, not a "
                                             f"safe integer")
    if isinstance(run, _ToolRun):
        return PackedRun(kind, seq0, times, run.turn, run.step, run.index, members,
                         run.id, run.name)
    return PackedRun(kind, seq0, times, run.turn, run.step, run.index, members)


# -- packing ----------------------------------------------------------------------------


def _number(value: object) -> bool:
    return type(value) in (int, float)


def _run_key(event: Event) -> tuple[Any, ...] | None:
    """The key a chunk event shares with the other members of its run, or ``None``
    when DSH would write it verbatim (not eligible for packing)."""
    if event.type != "assistant/chunk" or event.source_event_seqs is not UNSET \
            or event.surface_op is not UNSET or event.ignorable is not UNSET:
        return None
    if type(event.seq) is not int or type(event.time) is not int or event.seq < 0 \
            or not _safe(event.time):
        return None
    data = event.data
    if type(data) is not dict or data.keys() != {"turn", "step", "chunk"}:
        return None
    turn, step, chunk = data["turn"], data["step"], data["chunk"]
    if not (_number(turn) and _number(step)) or type(chunk) is not dict:
        return None
    kind = chunk.get("type")
    index = chunk.get("index")
    if not _number(index):
        return None
    if kind in ("text-delta", "reasoning-delta"):
        if chunk.keys() != {"type", "index", "text"} or type(chunk["text"]) is not str:
            return None
        return (kind, turn, step, index)
    if kind == "tool-call-delta":
        keys = chunk.keys()
        if keys != {"type", "index", "id", "argumentsDelta"} and \
                keys != {"type", "index", "id", "name", "argumentsDelta"}:
            return None
        name = chunk.get("name", UNSET)
        if type(chunk["id"]) is not str or type(chunk["argumentsDelta"]) is not str \
                or (name is not UNSET and type(name) is not str):
            return None
        return (kind, turn, step, index, chunk["id"], "name" in chunk, name)
    return None


def _member(event: Event) -> str:
    chunk = event.data["chunk"]
    return str(chunk["argumentsDelta"] if chunk["type"] == "tool-call-delta"
               else chunk["text"])


def _row(run: list[Event]) -> bytes:
    first = run[0]
    chunk = first.data["chunk"]
    kind = chunk["type"]
    dt = [b.time - a.time for a, b in pairwise(run)]
    data: dict[str, Any] = {"turn": first.data["turn"], "step": first.data["step"],
                            "index": chunk["index"], "dt": dt}
    if kind == "tool-call-delta":
        data["id"] = chunk["id"]
        if "name" in chunk:
            data["name"] = chunk["name"]
        data["args"] = [_member(e) for e in run]
    else:
        data["texts"] = [_member(e) for e in run]
    return _ENCODER.encode({"type": _ROW_OF_KIND[kind], "seq0": first.seq,
                            "time0": first.time, "data": data})


def _data_bytes(row: bytes) -> int:
    """Bytes of the row's ``data`` JSON (what the 1 MiB limit counts)."""
    return len(row) - row.index(b',"data":') - len(b',"data":') - 1


def _fitting(run: list[Event]) -> int:
    """How many of ``run``'s first members fit one row (at most ``MAX_RUN`` and
    ``MAX_ROW_BYTES`` of data): the largest such count, found by an exact measure of
    the members' encoded sizes, checked on the encoded row."""
    size = len(_row(run[:1]))
    m = 1
    limit = min(len(run), MAX_RUN)
    while m < limit:
        extra = len(_ENCODER.encode(_member(run[m]))) + 1
        extra += len(_ENCODER.encode(run[m].time - run[m - 1].time)) + (1 if m > 1 else 0)
        if size + extra > MAX_ROW_BYTES + 64:  # the row's envelope is ~64 bytes more
            break
        size += extra
        m += 1
    while m >= MIN_RUN and _data_bytes(_row(run[:m])) > MAX_ROW_BYTES:
        m -= 1
    return m


def _flush(run: list[Event]) -> Iterator[bytes | Event]:
    start = 0
    while len(run) - start >= MIN_RUN:
        m = _fitting(run[start:])
        if m < MIN_RUN:  # not even 3 members fit: this one goes verbatim
            yield run[start]
            start += 1
            continue
        yield _row(run[start:start + m])
        start += m
    yield from run[start:]


def pack_records(events: Iterable[Event]) -> Iterator[bytes | Event]:
    """The storage records DSH's packer writes for ``events``: a packed row (its JSON,
    ``bytes``) for every run of at least ``MIN_RUN`` eligible chunks (split greedily
    into the largest rows of at most ``MAX_RUN`` members and ``MAX_ROW_BYTES`` of data),
    every other event as itself. Runs follow DSH's rule: consecutive eligible chunks of
    the same kind, turn, step and index (and call id and name), seqs +1 each."""
    run: list[Event] = []
    key: tuple[Any, ...] | None = None
    for event in events:
        k = _run_key(event)
        if k is not None and run and k == key and event.seq == run[-1].seq + 1 \
                and _safe(event.time - run[-1].time):
            run.append(event)
            continue
        yield from _flush(run)
        run = []
        key = k
        if k is None:
            yield event
        else:
            run = [event]
    yield from _flush(run)


# -- zstd frames --------------------------------------------------------------------------


def _zstd_error(frame: int, offset: int, detail: str) -> DecodeError:
    return DecodeError("zstd", f"frame {frame} (at byte {offset}): {detail}")


def _torn_lines(lines: list[bytes], first: int, frame: int, offset: int,
                notes: ReadNotes) -> Iterator[tuple[int, bytes]]:
    """The complete lines of an incomplete final frame that DSH keeps: up to the first
    one that does not parse, unless a later one holds a ``turn/end`` (then the frame
    cannot be torn: it is corruption)."""
    for k, line in enumerate(lines):
        if not line.strip():
            yield first + k, line
            continue
        try:
            _DECODER.decode(line)
        except msgspec.DecodeError:
            for later in lines[k + 1:]:
                if b'"turn/end"' in later:
                    try:
                        _DECODER.decode(later)
                    except msgspec.DecodeError:
                        continue
                    raise _zstd_error(frame, offset, f"unparsable committed event at line "
                                                     f"{first + k}") from None
            notes.torn = (f"torn final zstd frame {frame} (at byte {offset}): kept "
                          f"{k} complete line(s), dropped the rest")
            return
        yield first + k, line
    notes.torn = (f"torn final zstd frame {frame} (at byte {offset}): kept its "
                  f"{len(lines)} complete line(s)")


def zstd_lines(handle: BinaryIO, max_line_bytes: int,
               notes: ReadNotes) -> Iterator[tuple[int, bytes]]:
    """The numbered lines (1-based, across frames) of a DSH zstd session file, decoded
    frame by frame: memory holds one frame's lines (one DSH append batch) and one
    decompressor call's output.

    Every complete frame must decode (magic, checksum...) and end at the end of a line;
    the final frame, when incomplete, is the torn tail (``notes.torn``): its complete
    lines are kept as DSH keeps them, its partial line dropped. Raises ``DecodeError``
    (rule ``zstd``) naming the frame and its byte offset, ``LineTooLong``."""
    import zstandard  # imported here: only zstd files need it

    dctx = zstandard.ZstdDecompressor()
    obj = dctx.decompressobj()
    frame, frame_start, fed = 1, 0, 0  # fed: bytes of the current frame given so far
    offset = 0  # bytes of the file consumed
    pending = b""
    first = 1  # the number of the current frame's first line
    lines: list[bytes] = []
    while True:
        data = handle.read(1 << 16)
        if not data:
            break
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            piece = view[pos:pos + _FEED]
            try:
                out = obj.decompress(piece)
            except zstandard.ZstdError as exc:
                raise _zstd_error(frame, frame_start, f"corrupt zstd frame: {exc}") from exc
            used = len(piece) - len(obj.unused_data) if obj.eof else len(piece)
            pos += used
            fed += used
            offset += used
            if out:
                pending += out
                if b"\n" in out:
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        if len(line) > max_line_bytes:
                            raise LineTooLong("line-length", f"line {first + len(lines)} is "
                                              f"longer than {max_line_bytes} bytes (the "
                                              f"line limit)")
                        lines.append(line)
                if len(pending) > max_line_bytes:
                    raise LineTooLong("line-length", f"line {first + len(lines)} is longer "
                                      f"than {max_line_bytes} bytes (the line limit)")
            if obj.eof:
                if pending:
                    raise _zstd_error(frame, frame_start, f"the frame ends in the middle "
                                                          f"of line {first + len(lines)}")
                for k, line in enumerate(lines):
                    yield first + k, line
                first += len(lines)
                lines = []
                notes.frames += 1
                frame += 1
                frame_start = offset
                fed = 0
                obj = dctx.decompressobj()
    if fed:  # an incomplete final frame: the torn tail
        yield from _torn_lines(lines, first, frame, frame_start, notes)
        if pending:
            notes.torn = f"{notes.torn}; dropped {len(pending)} byte(s) of a partial line"


# -- writing ------------------------------------------------------------------------------


def dsh_frames(header: SessionHeader, events: Iterable[Event], *,
               batch: int = 1024) -> Iterator[bytes]:
    """DSH's file content as plaintext pieces: the header line (with
    ``delegationDepth``) alone first, then the storage records (``pack_records``) of
    each ``batch`` events, each piece ending with a newline: one piece per zstd frame
    DSH would write (the header frame, then one per append batch)."""
    yield _ENCODER.encode(header_to_json(header, dsh_line=True)) + b"\n"
    chunk: list[Event] = []
    for event in events:
        chunk.append(event)
        if len(chunk) >= batch:
            yield _batch_lines(chunk)
            chunk = []
    if chunk:
        yield _batch_lines(chunk)


def _batch_lines(events: list[Event]) -> bytes:
    out = [r if isinstance(r, bytes) else _ENCODER.encode(r) for r in pack_records(events)]
    return b"\n".join(out) + b"\n"


def encode_dsh(header: SessionHeader, events: Iterable[Event], *, zstd: bool = False,
               batch: int = 1024) -> bytes:
    """A session as DSH's JSONL backend writes it: header line, then packed chunk rows
    where DSH would pack them and every other event verbatim; with ``zstd``, one
    checksummed zstd frame for the header and one per ``batch`` events (DSH's default
    ``session.jsonl.zstd``)."""
    pieces = dsh_frames(header, events, batch=batch)
    if not zstd:
        return b"".join(pieces)
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
    return b"".join(compressor.compress(piece) for piece in pieces)
