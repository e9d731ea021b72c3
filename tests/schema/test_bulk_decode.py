"""The JSONL decoder's bulk path (blocks of lines in one msgspec call) reads exactly what
the per-line path reads: the same events, and for a bad file the same first error (type,
rule, text naming the line)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from surfacelog.schema import codec
from surfacelog.schema.dsh import ReadNotes
from surfacelog.schema.errors import DecodeError
from surfacelog.schema.limits import MAX_NESTING


def _line(seq: int, data: str = '{"k":"v"}') -> bytes:
    return b'{"type":"x/y","seq":%d,"time":5,"data":%s}' % (seq, data.encode())


def _lines(n: int) -> list[bytes]:
    return [_line(k, f'{{"text":"2026-05-01","n":{k}}}') for k in range(n)]


def _outcome(content: bytes) -> tuple[str, ...]:
    try:
        log = codec.decode_log(content)
    except DecodeError as exc:
        return ("error", type(exc).__name__, exc.rule, str(exc))
    return ("ok", repr(log.header), *(repr(e) for e in log.events))


def _both(content: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple[str, ...], int]:
    """The outcome with the bulk path (and how many blocks it decoded) and the outcome
    of the per-line path; asserts that they are the same."""
    used = 0
    real: Callable[[list[bytes]], object] = codec._bulk_events

    def counting(lines: list[bytes]) -> object:
        nonlocal used
        got = real(lines)
        used += got is not None
        return got

    with monkeypatch.context() as m:
        m.setattr(codec, "_bulk_events", counting)
        bulk = _outcome(content)
    with monkeypatch.context() as m:
        m.setattr(codec, "_bulk_events", lambda lines: None)
        per_line = _outcome(content)
    assert bulk == per_line
    return bulk, used


def test_a_valid_log_is_decoded_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(3 * codec._BLOCK_LINES + 17)
    outcome, used = _both(b"\n".join(lines) + b"\n", monkeypatch)
    assert outcome[0] == "ok" and len(outcome) == 2 + len(lines)
    assert used == 4


def test_split_and_joined_lines_are_refused_as_line_by_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # One event split over two lines and two events on one line: joined into one
    # array, the element count would come out right.
    lines = _lines(2 * codec._BLOCK_LINES)
    lines[100] = b'{"type":"x/y","seq":100,"time":5,"data":[[1'
    lines[101] = b'2]]}'
    lines[300] = _line(300) + b"," + _line(301)
    outcome, used = _both(b"\n".join(lines), monkeypatch)
    assert outcome[:3] == ("error", "DecodeError", "json")
    assert outcome[3].startswith("line 101: ")
    assert used == 0


def test_minus_zero_in_the_envelope_is_read_as_line_by_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(codec._BLOCK_LINES + 5)
    lines[0] = b'{"type":"x/y","seq":-0,"time":5,"data":{"at":"2026-01-01"}}'
    lines[50] = b'{"type":"x/y","seq":50,"time":-0,"data":{}}'
    lines[60] = b'{"type":"x/y","seq":60,"time":5,"sourceEventSeqs":[-0,3],"data":{}}'
    lines[70] = (b'{"type":"x/y","seq":70,"time":5,"data":{},'
                 b'"surfaceOp":{"op":"replace","start":-0,"end":2}}')
    lines[80] = b'{"type":"x/y","seq":80,"time":5,"data":{"v":-0}}'
    outcome, used = _both(b"\n".join(lines), monkeypatch)
    assert outcome[0] == "ok" and used == 2
    assert "seq=-0.0" in outcome[2] and "time=-0.0" in outcome[52]
    assert "source_event_seqs=(-0.0, 3)" in outcome[62]
    assert "ReplaceOp(start=-0.0, end=2)" in outcome[72]


def test_data_nested_too_deep_is_refused_naming_its_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(codec._BLOCK_LINES + 5)
    deep = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
    lines[4000] = _line(4000, deep)
    lines[4001] = _line(4001, "[" * MAX_NESTING + "]" * MAX_NESTING)
    outcome, _ = _both(b"\n".join(lines), monkeypatch)
    assert outcome[:2] == ("error", "NestingError")
    assert outcome[3].startswith("line 4001: ")


def test_lines_holding_newlines_get_the_per_line_tests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # ``decode_records`` takes a caller's lines, which may hold JSON whitespace
    # newlines: the block tests, which join lines with newlines, must not misplace
    # the -0 and the deep data that follow such a line.
    lines = _lines(codec._BLOCK_LINES)
    lines[10] = b'{"type":"x/y",\n"seq":10,"time":5,"data":{}}'
    lines[20] = b'{"type":"x/y","seq":20,"time":-0,"data":{}}'
    lines[30] = _line(30, "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))

    def outcome() -> tuple[str, ...]:
        try:
            log = codec.decode_records(enumerate(lines, 1))
        except DecodeError as exc:
            return ("error", type(exc).__name__, exc.rule, str(exc))
        return ("ok", *(repr(e) for e in log.events))

    bulk = outcome()
    with monkeypatch.context() as m:
        m.setattr(codec, "_bulk_events", lambda lines: None)
        assert bulk == outcome()
    assert bulk[:2] == ("error", "NestingError") and bulk[3].startswith("line 31: ")
    del lines[30]
    bulk = outcome()
    assert bulk[0] == "ok" and "time=-0.0" in bulk[21]
    with monkeypatch.context() as m:
        m.setattr(codec, "_bulk_events", lambda lines: None)
        assert bulk == outcome()


def test_blank_lines_bad_lines_and_headers_keep_their_numbers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(codec._BLOCK_LINES + 5)
    header = b'{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0}'
    content = b"\n".join([b"", header, *lines[:10], b"", b"   ", *lines[10:]])
    outcome, _ = _both(content, monkeypatch)
    assert outcome[0] == "ok" and "id='s'" in outcome[1]
    bad = [*lines]
    bad[3000] = b'{"type":"x/y","seq":3000,"time":5,"extra":1}'
    bad[3500] = b"not json"
    outcome, _ = _both(b"\n".join(bad), monkeypatch)
    assert outcome[:3] == ("error", "DecodeError", "envelope")
    assert outcome[3].startswith("line 3001: ")


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch,
               max_line_bytes: int = 1 << 20) -> tuple[str, ...]:
    """``read_log`` of ``path`` with the block reader (4 KiB reads) and with the
    line-by-line reader; asserts the same events, torn tail note and first error."""

    def outcome(read: Callable[[], codec.LogFile]) -> tuple[str, ...]:
        try:
            log = read()
        except DecodeError as exc:
            return ("error", type(exc).__name__, exc.rule, str(exc))
        return ("ok", repr(log.torn), *(repr(e) for e in log.events))

    def line_by_line() -> codec.LogFile:
        notes = ReadNotes()
        with path.open("rb") as handle:
            return codec.decode_records(
                codec._file_lines(handle, path, max_line_bytes, notes), notes)

    monkeypatch.setattr(codec, "_READ_BYTES", 4096)
    fast = outcome(lambda: codec.read_log(path, max_line_bytes=max_line_bytes))
    assert fast == outcome(line_by_line)
    return fast


def test_the_block_reader_reads_what_the_line_reader_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(2000)
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert len(_read_both(path, monkeypatch)) == 2 + 2000
    # A CRLF, a lone CR and blank lines past the first reads; a torn tail.
    mixed = [*lines]
    mixed[1500] += b"\r"
    mixed[1600] = mixed[1600] + b"\r" + _line(1601)
    del mixed[1601]
    mixed[1700] = b""
    path.write_bytes(b"\n".join(mixed) + b'\n{"type":"x/y","seq":20')
    got = _read_both(path, monkeypatch)
    assert got[0] == "error" or "torn tail" in got[1]
    # An over-long line past the first reads.
    long = [*lines]
    long[1800] = _line(1800, '"' + "x" * 5000 + '"')
    path.write_bytes(b"\n".join(long) + b"\n")
    got = _read_both(path, monkeypatch, max_line_bytes=4000)
    assert got[:2] == ("error", "LineTooLong") and "line 1801 " in got[3]
    # A last line without a newline that parses is an event, not a torn tail.
    path.write_bytes(b"\n".join(lines))
    assert _read_both(path, monkeypatch)[1] == "None"
