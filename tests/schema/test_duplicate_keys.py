"""A JSON object that names a key twice is refused wherever a JSONL log is read (issue
27 item 8): a ``DuplicateKeyError`` (rule ``duplicate-key``) whose one-line message
names the line, the key and the path of the object holding it, on every path of the
reader (the first line, blocks decoded in bulk, lines decoded one by one, the header,
packed rows, zstd frames). Logs without a repeated key read as before, whatever their
spacing or escapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surfacelog.schema import codec
from surfacelog.schema.dsh import encode_dsh
from surfacelog.schema.errors import DecodeError, DuplicateKeyError
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import (
    DuplicateKey,
    check_duplicate_keys,
    find_duplicate_key,
    may_repeat_keys,
)

HEADER = b'{"type":"session","version":0,"id":"s","createdAt":1,"delegationDepth":0}'


def _note(seq: int, data: str = '{"k":1}') -> bytes:
    return b'{"type":"x/n","seq":%d,"time":5,"data":%s,"ignorable":true}' % (
        seq, data.encode())


def _log(bad: bytes, at: int, total: int = 6, header: bool = True) -> bytes:
    """A log of ``total`` note lines with ``bad`` (a line template holding ``%d`` for
    its seq) as event ``at``; a header line first when ``header``."""
    lines = [HEADER] if header else []
    lines += [bad % k if k == at else _note(k) for k in range(total)]
    return b"\n".join(lines) + b"\n"


REPEATS = {
    # name: (line template, key, path)
    "data": (b'{"type":"x/n","seq":%d,"time":5,"data":{"a":1,"a":2},"ignorable":true}',
             "a", "$.data"),
    "deep": (b'{"type":"x/n","seq":%d,"time":5,"data":{"m":{"content":[{"t":1},'
             b'{"x":{"y":1,"y":2}}]}},"ignorable":true}', "y", "$.data.m.content[1].x"),
    "envelope": (b'{"type":"x/n","seq":%d,"time":5,"time":6,"data":{},"ignorable":true}',
                 "time", "$"),
    "marker": (b'{"type":"user/message","seq":%d,"time":5,"data":{},"surfaceOp":'
               b'{"op":"replace","start":1,"end":2,"end":3}}', "end", "$.surfaceOp"),
    # A ':' written as an escape inside a string makes up, in a count of ':', for the
    # member a repeated key loses: the count alone would miss this one.
    "escaped colon": (b'{"type":"x/n","seq":%d,"time":5,"data":{"a\\u003a":1,"b":{"c":1,'
                      b'"c":2}},"ignorable":true}', "c", "$.data.b"),
    "odd key": (b'{"type":"x/n", "seq":%d,"time":5,"data":{"k k":{"k\\"":1, "k\\"" : 2}},'
                b'"ignorable":true}', 'k\\"', '$.data["k k"]'),
    # ``-0`` sends a line down the per-line path.
    "minus zero": (b'{"type":"x/n","seq":%d,"time":-0,"data":{"a":1,"a":1},'
                   b'"ignorable":true}', "a", "$.data"),
}


def _refusal(content: bytes) -> DuplicateKeyError:
    with pytest.raises(DuplicateKeyError) as caught:
        codec.decode_log(content)
    return caught.value


@pytest.mark.parametrize("name", sorted(REPEATS))
@pytest.mark.parametrize("at", [0, 3])
@pytest.mark.parametrize("header", [True, False])
def test_a_repeated_key_is_refused_naming_line_key_and_path(name: str, at: int,
                                                            header: bool) -> None:
    template, key, path = REPEATS[name]
    error = _refusal(_log(template, at, header=header))
    line = at + 1 + header
    assert error.rule == "duplicate-key"
    assert str(error).startswith(f'line {line}: duplicate key "{key}" in the object at '
                                 f"{path}"), str(error)
    assert "\n" not in str(error)


def test_a_repeated_key_is_found_in_a_block_read_in_bulk() -> None:
    """One repeated key among thousands of lines (the bulk path's blocks)."""
    lines = [_note(k) for k in range(9_000)]
    lines[7_777] = REPEATS["deep"][0] % 7_777
    error = _refusal(b"\n".join(lines) + b"\n")
    assert str(error).startswith('line 7778: duplicate key "y" in the object at '
                                 "$.data.m.content[1].x")


def test_the_header_line_and_packed_rows_are_checked_too() -> None:
    header = b'{"type":"session","version":0,"id":"s","id":"t","createdAt":1,' \
             b'"delegationDepth":0}'
    error = _refusal(header + b"\n" + _note(0) + b"\n")
    assert str(error).startswith('line 1: duplicate key "id" in the object at $')
    row = (b'{"type":"text-chunks","seq0":1,"time0":5,"data":{"turn":1,"step":1,'
           b'"index":0,"index":0,"dt":[1,1],"texts":["a","b","c"]}}')
    content = b"\n".join([HEADER, _note(0), row]) + b"\n"
    error = _refusal(content)
    assert 'line 3: duplicate key "index" in the object at $.data' in str(error)


def _events(n: int) -> list[Event]:
    return [Event("x/n", k, 5, {"k": k, "o": {"a": [1, {"b": "c:d"}]}}, ignorable=True)
            for k in range(n)]


def test_zstd_files_and_regular_files_are_checked(tmp_path: Path) -> None:
    header = SessionHeader(version=0, id="z", created_at=1)
    good = encode_dsh(header, _events(3000), zstd=True)
    (tmp_path / "good.jsonl.zstd").write_bytes(good)
    assert len(codec.read_log(tmp_path / "good.jsonl.zstd").events) == 3000
    plain = codec.encode_log(header, _events(3000)).split(b"\n")
    plain[2001] = REPEATS["data"][0] % 2000
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(plain))
    with pytest.raises(DuplicateKeyError, match=r'^line 2002: duplicate key "a"'):
        codec.read_log(tmp_path / "bad.jsonl")
    bad = codec.decode_log(b"\n".join(plain[:2001]) + b"\n")
    assert len(bad.events) == 2000
    lines = [encode_dsh(header, [], zstd=False).rstrip(b"\n")]
    lines += [REPEATS["data"][0] % 0]
    import zstandard

    (tmp_path / "bad.jsonl.zstd").write_bytes(
        zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n"))
    with pytest.raises(DuplicateKeyError, match=r'line 2: duplicate key "a"'):
        codec.read_log(tmp_path / "bad.jsonl.zstd")


def test_logs_without_a_repeated_key_read_as_before() -> None:
    """Spacing, escapes and ':' in keys and texts: none of it is a repeated key."""
    lines = [
        b'{"type": "x/n", "seq": 0, "time": 5, "data": {"a:b": "c:d", "e": {"a:b": 1}},'
        b' "ignorable": true}',
        b'{"type":"x/n","seq":1,"time":5,"data":{"\\u003a":":","x\\u003A":{":":1}},'
        b'"ignorable":true}',
        b'{"seq":2,"type":"x/n","time":5,"data":{"a":{"a":{"a":1}},"b":[{"a":1},{"a":1}]},'
        b'"ignorable":true}',
        b'{"type":"x/n","seq":3,"time":5,"data":{"t":"\\u00e9\\n\\/"},"ignorable":true}',
    ]
    for content in (b"\n".join(lines) + b"\n", b"\n".join(lines * 1) + b"\n"):
        log = codec.decode_log(content)
        assert [e.data for e in log.events] == [json.loads(x)["data"] for x in lines]


def test_a_line_that_is_not_json_is_still_a_json_error() -> None:
    with pytest.raises(DecodeError) as caught:
        codec.decode_log(_note(0) + b"\n" + b'{"type":"x/n","seq":1,"data":{"a":1,"a":}}\n')
    assert caught.value.rule == "json"


# -- the check itself --------------------------------------------------------------------

_KEYS = st.text(alphabet=st.sampled_from('ab:"\\é\u003a'), max_size=3)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | _KEYS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12)


def _spellings(value: Any) -> list[bytes]:
    """``value`` as JSON written several ways (compact, spaced, ASCII-escaped)."""
    return [json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(),
            json.dumps(value, indent=1).encode(), json.dumps(value).encode()]


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_no_repeated_key_is_ever_reported_where_there_is_none(value: Any) -> None:
    for text in _spellings(value):
        canonical = msgspec.json.encode(msgspec.json.decode(text))
        check_duplicate_keys(text, canonical)
        assert find_duplicate_key(text) is None


@settings(max_examples=200, deadline=None)
@given(_JSON, _KEYS, st.integers(0, 1))
def test_a_repeated_key_is_always_found(value: Any, key: str, which: int) -> None:
    """Put a member twice into some object of ``value`` (its outermost one, or a new
    object wrapping it): the fast test never clears it, and the exact one names it."""
    inner = json.dumps(key) + ":1," + json.dumps(key) + ":" + json.dumps(value)
    text = ("{" + inner + "}" if which == 0 else '{"w":[{' + inner + "}]}").encode()
    canonical = msgspec.json.encode(msgspec.json.decode(text))
    assert may_repeat_keys(text, canonical)
    assert find_duplicate_key(text) == DuplicateKey(key, "$" if which == 0 else "$.w[0]")
    with pytest.raises(DuplicateKeyError):
        check_duplicate_keys(text, canonical)
