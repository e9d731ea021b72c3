"""``DshRootEventStore``: the ``EventStore`` primitives over a DeepSeek Harness JSONL
sessions root, in DSH's own layout and encodings, so that DSH sessions are served where
they are (``connect(db=...)`` pointing at the root) and DSH can open them afterwards.

- **Layout**: ``<root>/--<cwd>--/<escaped id>/session.jsonl.zstd`` (or
  ``session.jsonl`` for ``compression="none"``), ``_no-cwd/`` for a header without cwd.
  Existing sessions are found by listing the root and reading each file's header (the
  directory names are not trusted for ids): a root holds one encoding only, and a root
  that holds both is refused. New sessions get ``--<cwd, "/" as "-">--`` and the id
  percent-escaped (``urllib.parse.quote``, a leading dot escaped too): our choice where
  DSH-FORMATS.md does not say how DSH normalises them.
- **Files**: line 1 the header (``delegationDepth`` always written), then one storage
  record per line, events verbatim (DSH also reads its packed rows, which are expanded
  here when read; appends write events verbatim, which DSH reads as well). With zstd,
  the header is the first frame and each appended batch one more frame. A new session
  is written to a temporary file, fsynced and published by a hard link (never over an
  existing file); an append is written and fsynced, and on failure the file is cut back
  to its previous size.
- **Torn tails**, as DSH's reader: a final partial line, or a complete line that does
  not parse with no later ``turn/end``, is torn (plain); an incomplete final frame is
  torn, its complete lines recovered (zstd). A read returns the kept prefix; the next
  append (activation's crash-repair closers) first cuts the torn tail off (plain) or
  cuts at the torn frame's start and writes the recovered lines again in the new frame
  with the batch (zstd). A bad line before a later ``turn/end`` is corruption.
- **Writer epochs** are not part of DSH's files: they are kept by this store instance
  (one writer per root, as DSH has one writer per session file), starting at 1 for a
  session it has not taken yet.

File I/O is synchronous inside the async methods (sessions are small files read whole
once and cached while their size and mtime are unchanged).

The lines are split here, not by ``codec``'s reader (``read_log``): the store must know
the byte offset where the torn tail starts, to cut it off, and its rules differ from
that reader's (a line of its own layout whose data is not JSON is kept, a final line
with no newline is torn even when it parses, there is no line limit, a lone ``\r``
does not split a line). What the two share is the test for a ``turn/end`` line
(``codec.is_line_of_type``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import quote

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from surfacelog.schema.codec import JSON_DECODER, JSON_ENCODER, is_line_of_type
from surfacelog.schema.dsh import ZSTD_MAGIC, expand_packed_row, is_packed_row
from surfacelog.schema.errors import LogError
from surfacelog.schema.header import SessionHeader, header_from_json, header_to_json
from surfacelog.store.base import SessionInfo
from surfacelog.store.deferred_errors import DeferredErrors
from surfacelog.store.dirsync import fsync_dir
from surfacelog.store.dsh_sources import SESSION_FILES, session_files
from surfacelog.store.errors import (
    CommitFailed,
    CorruptStore,
    DshFileCorrupt,
    SeqMismatch,
    SessionExists,
    SessionNotFound,
    WriterFenced,
)
from surfacelog.store.rows import EncodedBatch, Row, StoredRow, encode_batch, stored_rows
from surfacelog.store.stored import StoredSession, stored_page

Compression = Literal["zstd", "none"]


class _Line(Struct, rename="camel", forbid_unknown_fields=True):
    type: str
    seq: int
    time: int
    data: Raw | UnsetType = UNSET
    source_event_seqs: Raw | UnsetType = UNSET
    surface_op: Raw | UnsetType = UNSET
    ignorable: bool | UnsetType = UNSET


_LINE: Final = msgspec.json.Decoder(_Line)
_OWN_HEAD: Final = re.compile(rb'^\{"type":("(?:[^"\\]|\\.)*"),"seq":(\d+),"time":(-?\d+)')
_OWN_TAILS: Final = (
    (b',"ignorable":true', 6),
    (rb',"surfaceOp":("append"|\{"op":"replace","start":\d+,"end":\d+\})', 5),
    (rb',"sourceEventSeqs":(\[[\d,]*\])', 4),
)


def _own_line(line: bytes) -> StoredRow | None:
    """A line this store wrote from a row whose data is not JSON (so the line does not
    parse), taken apart by its fixed layout so that the row reads back as stored and
    the core refuses it exactly as it refuses that row in any backend. ``None`` when
    the line is not of that layout."""
    head = _OWN_HEAD.match(line)
    if head is None or not line.endswith(b"}"):
        return None
    rest = line[head.end():-1]
    found: dict[int, bytes] = {}
    for suffix, slot in _OWN_TAILS:
        match = re.search(suffix + rb"$", rest)
        if match:
            found[slot] = match.group(1) if match.groups() else b"true"
            rest = rest[:match.start()]
    data: str | None = None
    if rest.startswith(b',"data":'):
        data = rest[len(b',"data":'):].decode("utf-8", "replace")
    elif rest:
        return None
    try:
        etype = JSON_DECODER.decode(head.group(1))
    except msgspec.DecodeError:
        return None
    return (int(head.group(2)), etype, int(head.group(3)), data,
            found[4].decode() if 4 in found else None,
            found[5].decode() if 5 in found else None, 1 if 6 in found else None)


def _rows_of(line: bytes, session_id: str, where: str) -> list[StoredRow] | None:
    """The rows one storage record stands for (a packed row: one per member), or
    ``None`` when the line cannot be read (an issue, in DSH's words)."""
    try:
        rec = _LINE.decode(line)
    except msgspec.DecodeError:
        if is_packed_row(line):
            try:
                events = expand_packed_row(line, where)
            except LogError:
                return None
            return [r[1:] for r in encode_batch(session_id, events).rows]
        own = _own_line(line)
        return None if own is None else [own]
    if rec.ignorable is False:
        return None
    return [(rec.seq, rec.type, rec.time,
             None if rec.data is UNSET else bytes(rec.data).decode(),
             None if rec.source_event_seqs is UNSET else bytes(rec.source_event_seqs).decode(),
             None if rec.surface_op is UNSET else bytes(rec.surface_op).decode(),
             1 if rec.ignorable is True else None)]


def _row_line(row: Row) -> bytes:
    """A row as the event line it stands for (compact JSON, DSH's key order)."""
    _, seq, etype, time, data, seqs, op, ignorable = row
    parts = [b'{"type":', JSON_ENCODER.encode(etype), b',"seq":%d,"time":%d' % (seq, time)]
    if data is not None:
        parts += [b',"data":', data.encode()]
    if seqs is not None:
        parts += [b',"sourceEventSeqs":', seqs.encode()]
    if op is not None:
        parts += [b',"surfaceOp":', op.encode()]
    if ignorable is not None:
        parts.append(b',"ignorable":true')
    parts.append(b"}")
    return b"".join(parts)


@dataclass
class _Parsed:
    """One session file as read: header text, rows of the kept prefix, torn tail."""

    header: str
    created_at: int
    rows: list[StoredRow]
    stamp: tuple[int, int]
    truncate_to: int | None = None  # the torn tail starts here (None: none)
    recovered: list[bytes] = field(default_factory=list)  # zstd: lines to write again


def _scan_lines(lines: list[bytes], session_id: str, path: Path, first_line: int,
                rows: list[StoredRow], in_torn_frame: bool) -> int | None:
    """Add the rows of ``lines`` to ``rows`` by DSH's rule; the index of the first line
    of the torn tail, or ``None`` when every line was kept. Raises ``DshFileCorrupt``
    for an issue followed by a ``turn/end`` (or, outside a torn frame, any issue in a
    zstd frame: ``in_torn_frame`` False with zstd is handled by the caller)."""
    for k, line in enumerate(lines):
        n = first_line + k
        got = _rows_of(line, session_id, f"line {n}") if line.strip() else []
        expected = len(rows)
        problem = None
        if got is None:
            problem = f"unparsable committed event at line {n}"
        elif got and got[0][0] != expected:
            problem = (f"seq gap in committed region at line {n} (expected {expected}, "
                       f"got {got[0][0]})")
        if problem is None:
            rows.extend(got or [])
            continue
        if (got and any(r[1] == "turn/end" for r in got)) or \
                any(is_line_of_type(later, "turn/end") for later in lines[k + 1:]):
            raise DshFileCorrupt(f"session {session_id!r}: {path}: {problem}", session_id)
        return k
    return None


def _read_file(path: Path, session_id: str | None) -> _Parsed:
    """Parse one session file whole. Raises ``DshFileCorrupt``, ``OSError``."""
    data = path.read_bytes()
    st = path.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    sid = session_id or str(path)
    if data.startswith(ZSTD_MAGIC):
        return _read_zstd(data, path, sid, stamp)
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    if not lines:
        raise DshFileCorrupt(f"session {sid!r}: {path}: no complete header line", sid)
    header, created = _header(lines[0], path, sid)
    rows: list[StoredRow] = []
    torn_at = _scan_lines(lines[1:], sid, path, 2, rows, False)
    offsets = len(lines[0]) + 1
    if torn_at is not None:
        offsets += sum(len(line) + 1 for line in lines[1:1 + torn_at])
        return _Parsed(header, created, rows, stamp, offsets)
    if tail:
        return _Parsed(header, created, rows, stamp, len(data) - len(tail))
    return _Parsed(header, created, rows, stamp)


def _header(line: bytes, path: Path, sid: str) -> tuple[str, int]:
    try:
        value = JSON_DECODER.decode(line)
        if not isinstance(value, dict) or value.get("type") != "session":
            raise DshFileCorrupt(f"session {sid!r}: {path}: first line is not a session "
                                 f"header", sid)
        parsed = header_from_json(value, dsh_line=True)
    except (msgspec.DecodeError, LogError) as exc:
        raise DshFileCorrupt(f"session {sid!r}: {path}: bad session header: {exc}",
                             sid) from exc
    body = header_to_json(parsed)
    return JSON_ENCODER.encode(body).decode(), parsed.created_at


def _frames(data: bytes, path: Path, sid: str) -> list[tuple[int, bytes, bool]]:
    """``(start offset, plaintext, complete)`` of every frame, the last maybe
    incomplete. Raises ``DshFileCorrupt`` for a frame that does not decode."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    out: list[tuple[int, bytes, bool]] = []
    pos = 0
    while pos < len(data):
        obj = dctx.decompressobj()
        try:
            plain = obj.decompress(data[pos:])
        except zstandard.ZstdError as exc:
            raise DshFileCorrupt(f"session {sid!r}: {path}: frame {len(out) + 1} (at byte "
                                 f"{pos}): corrupt zstd frame: {exc}", sid) from exc
        if not obj.eof:
            out.append((pos, plain, False))
            break
        used = len(data) - pos - len(obj.unused_data)
        out.append((pos, plain, True))
        pos += used
    return out


def _read_zstd(data: bytes, path: Path, sid: str, stamp: tuple[int, int]) -> _Parsed:
    frames = _frames(data, path, sid)
    if not frames or not frames[0][2] or not frames[0][1].endswith(b"\n"):
        raise DshFileCorrupt(f"session {sid!r}: {path}: no complete header frame", sid)
    head_lines = frames[0][1].split(b"\n")[:-1]
    header, created = _header(head_lines[0], path, sid)
    rows: list[StoredRow] = []
    number = 1 + len(head_lines)
    if len(head_lines) > 1:
        frames[0] = (frames[0][0], b"\n".join(head_lines[1:]) + b"\n", True)
    else:
        frames = frames[1:]
    for k, (start, plain, complete) in enumerate(frames):
        lines = plain.split(b"\n")
        partial = lines.pop()
        if complete:
            if partial:
                raise DshFileCorrupt(f"session {sid!r}: {path}: frame at byte {start} ends "
                                     f"in the middle of a line", sid)
            kept = len(rows)
            torn = _scan_lines(lines, sid, path, number, rows, False)
            if torn is not None:
                del rows[kept:]
                raise DshFileCorrupt(f"session {sid!r}: {path}: unreadable line "
                                     f"{number + torn} in a complete zstd frame", sid)
            number += len(lines)
            continue
        assert k == len(frames) - 1
        kept = len(rows)
        torn = _scan_lines(lines, sid, path, number, rows, True)
        recovered = lines if torn is None else lines[:torn]
        return _Parsed(header, created, rows, stamp, start,
                       [line for line in recovered if line.strip()])
    return _Parsed(header, created, rows, stamp)


def _header_id(text: str) -> str:
    """The id of a header's JSON text. (A function: ``open`` may be pickled by value,
    as a journal actor's opener, and must not refer to a decoder object itself.)"""
    return str(JSON_DECODER.decode(text)["id"])


def _cwd_dir(header: SessionHeader) -> str:
    if header.cwd is UNSET:
        return "_no-cwd"
    return "--" + re.sub(r"[^A-Za-z0-9._-]", "-", header.cwd.strip("/")) + "--"


def _escaped(session_id: str) -> str:
    name = quote(session_id, safe="")
    return "%2E" + name[1:] if name.startswith(".") else name


@dataclass
class _Session:
    path: Path
    parsed: _Parsed | None = None
    epoch: int = 1


class DshRootEventStore(DeferredErrors):
    """Sessions of a DSH JSONL sessions root (see the module's docstring). A
    non-durable batch's failure is kept for ``flush``/``flush_session``
    (``DeferredErrors``); every write is fsynced before its call returns."""

    def __init__(self, root: Path, compression: Compression = "zstd") -> None:
        super().__init__()
        self.root = root
        self.compression: Compression = compression
        self._sessions: dict[str, _Session] = {}

    @classmethod
    async def open(cls, root: str | Path, compression: Compression = "zstd"
                   ) -> DshRootEventStore:
        """Index the root (created when missing): each session file's header gives its
        id. The root's own encoding wins over ``compression`` when it holds sessions.
        Raises ``DshSourceError`` (a root holding both encodings), ``CorruptStore`` (a
        header that cannot be read, an id found twice), ``OSError``."""
        store = cls(Path(root), compression)
        store.root.mkdir(parents=True, exist_ok=True)
        for path in session_files(store.root):
            store.compression = "zstd" if path.name.endswith(".zstd") else "none"
            parsed = _read_file(path, None)
            sid = _header_id(parsed.header)
            if sid in store._sessions:
                raise CorruptStore(f"session {sid!r} is stored twice in {store.root}: "
                                   f"{store._sessions[sid].path} and {path}", sid)
            store._sessions[sid] = _Session(path, parsed)
        return store

    # -- helpers -----------------------------------------------------------------------

    def _store_name(self) -> str:
        """How errors name this store."""
        return f"the DSH root store {self.root}"

    def _session(self, session_id: str) -> _Session:
        found = self._sessions.get(session_id)
        if found is None:
            raise SessionNotFound(f"session {session_id!r} is not stored")
        return found

    def _parsed(self, session_id: str, found: _Session) -> _Parsed:
        """The session's file as read now (re-read when it changed on disk)."""
        st = found.path.stat()
        if found.parsed is None or found.parsed.stamp != (st.st_size, st.st_mtime_ns):
            found.parsed = _read_file(found.path, session_id)
        return found.parsed

    def _encode(self, pieces: list[bytes]) -> bytes:
        """One write's bytes: the lines (each ending with a newline), one zstd frame."""
        plain = b"".join(pieces)
        if self.compression == "none":
            return plain
        import zstandard

        return bytes(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(plain))

    # -- the primitives ----------------------------------------------------------------

    async def create_stored(self, header: SessionHeader, batch: EncodedBatch) -> int:
        """Write the new session's file (header frame or line, then the batch), publish
        it without overwriting anything. Raises ``SessionExists``, ``BadEvent``,
        ``CommitFailed`` (nothing published)."""
        self._check_open()
        if header.id in self._sessions:
            raise SessionExists(f"session {header.id!r} is already stored")
        rows = stored_rows(header.id, batch)
        name = SESSION_FILES[1] if self.compression == "zstd" else SESSION_FILES[0]
        directory = self.root / _cwd_dir(header) / _escaped(header.id)
        path = directory / name
        head = JSON_ENCODER.encode(header_to_json(header, dsh_line=True)) + b"\n"
        content = self._encode([head])
        if batch.rows:
            content += self._encode([_row_line(r) + b"\n" for r in batch.rows])
        temp = directory / f".{name}.tmp"
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(temp, path)
            except FileExistsError as exc:
                raise SessionExists(f"session {header.id!r}: {path} already exists") \
                    from exc
            finally:
                temp.unlink()
            fsync_dir(directory)
        except OSError as exc:
            raise CommitFailed(f"session {header.id!r}: cannot write {path}: {exc}") \
                from exc
        st = path.stat()
        text, created = _header(head[:-1], path, header.id)  # as a re-read gives it
        self._sessions[header.id] = _Session(path, _Parsed(
            text, created, rows, (st.st_size, st.st_mtime_ns)))
        return 1

    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None:
        """Append ``batch`` as lines (one zstd frame), fsynced, after cutting off a torn
        tail (see the module's docstring). Raises, when ``durable`` (else at the next
        flush): ``SessionNotFound``, ``WriterFenced``, ``SeqMismatch``, ``BadEvent``,
        ``CommitFailed`` (the file cut back to what it was)."""
        self._check_open()
        if not batch.rows:
            return
        with self._reported(session_id, durable):
            self._append(session_id, batch, epoch, resend)

    def _append(self, session_id: str, batch: EncodedBatch, epoch: int,
                resend: bool) -> None:
        found = self._session(session_id)
        if found.epoch != epoch:
            raise WriterFenced(f"session {session_id!r}: writer epoch {epoch} is stale, "
                               f"the session was taken by epoch {found.epoch}; nothing "
                               f"written")
        parsed = self._parsed(session_id, found)
        end = batch.start + len(batch.rows)
        if resend and len(parsed.rows) >= end:
            return
        if batch.start != len(parsed.rows):
            raise SeqMismatch(f"session {session_id!r}: batch starts at seq {batch.start}, "
                              f"the stored next seq is {len(parsed.rows)}; nothing written")
        rows = stored_rows(session_id, batch)
        lines = [line + b"\n" for line in parsed.recovered]
        lines += [_row_line(r) + b"\n" for r in batch.rows]
        content = self._encode(lines)
        size = parsed.stamp[0] if parsed.truncate_to is None else parsed.truncate_to
        try:
            with found.path.open("r+b") as handle:
                handle.truncate(size)
                handle.seek(size)
                try:
                    handle.write(content)
                    handle.flush()
                    os.fsync(handle.fileno())
                except OSError:
                    handle.truncate(size)
                    raise
        except OSError as exc:
            found.parsed = None
            raise CommitFailed(f"session {session_id!r}: cannot append to {found.path}: "
                               f"{exc}; nothing written") from exc
        st = found.path.stat()
        found.parsed = _Parsed(parsed.header, parsed.created_at, parsed.rows + rows,
                               (st.st_size, st.st_mtime_ns))
        self._count_batch(len(rows))

    async def read_stored(self, session_id: str, *, since: int = 0,
                          limit: int | None = None, bump: bool = False) -> StoredSession:
        """The session's kept rows from ``since`` (at most ``limit``); ``bump`` takes it
        for writing. Raises ``SessionNotFound``, ``CorruptStore`` (``DshFileCorrupt``)."""
        self._check_open()
        found = self._session(session_id)
        parsed = self._parsed(session_id, found)
        if bump:
            found.epoch += 1
        return stored_page(parsed.header, found.epoch, parsed.rows, since, limit)

    async def list_sessions(self) -> list[SessionInfo]:
        """Every session of the root, ordered by id."""
        self._check_open()
        out = []
        for sid, found in sorted(self._sessions.items()):
            parsed = self._parsed(sid, found)
            last = parsed.rows[-1][2] if parsed.rows else None
            out.append(SessionInfo(sid, parsed.created_at, len(parsed.rows), last,
                                   found.epoch))
        return out


def dsh_root_backend(root: str, compression: Compression = "zstd") -> Any:
    """An opener for a journal actor (picklable): ``DshRootEventStore.open(root,
    compression)``."""
    return partial(DshRootEventStore.open, root, compression)


__all__ = ["DshFileCorrupt", "DshRootEventStore", "dsh_root_backend"]
