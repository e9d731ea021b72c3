"""DeepSeek Harness interop: headers, encodings, packed rows, import and export."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.schema import DecodeError
from surfacelog.schema.codec import decode_log, encode_log, read_log
from surfacelog.schema.dsh import MAX_ROW_BYTES, ZSTD_MAGIC, encode_dsh, pack_records
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader, header_to_json
from surfacelog.session import replay

from support import paths
from support.dsh_database import dsh_database, encode_varints
from support.sessiongen import sessions

EVENT = '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


# -- 1. wire-compatibility bugs -------------------------------------------------------


def test_request_context_without_context_window_is_accepted() -> None:
    line = ('{"type":"request/context","seq":0,"time":1,'
            '"data":{"provider":"p","model":"m"}}')
    log = decode_log(line.encode() + b"\n")
    session = replay(log.events)
    assert session.log[0].data == {"provider": "p", "model": "m"}
    assert encode_log(None, log.events) == line.encode() + b"\n"


@pytest.mark.parametrize("depth", ['', ',"delegationDepth":-1', ',"delegationDepth":"0"',
                                   ',"delegationDepth":1.5', ',"delegationDepth":null'])
def test_header_without_a_valid_delegation_depth_is_corrupt(depth: str) -> None:
    head = '{"type":"session","version":0,"id":"s","createdAt":1' + depth + "}"
    with pytest.raises(DecodeError) as info:
        decode_log(f"{head}\n{EVENT}\n".encode())
    assert info.value.rule == "header"


HEAD = ('{"type":"session","version":0,"id":"s-1","createdAt":5,"cwd":"/w",'
        '"origin":{"kind":"acp","client":"zed"},"delegationDepth":2,"agentPreset":"coder",'
        '"futureKey":[1,{"a":null}]}')


def test_header_keeps_every_key_through_decode_and_encode() -> None:
    log = decode_log(f"{HEAD}\n{EVENT}\n".encode())
    assert log.header is not None
    assert log.header.origin == {"kind": "acp", "client": "zed"}
    assert log.header.agent_preset == "coder"
    assert log.header.other_keys == {"futureKey": [1, {"a": None}]}
    assert encode_log(log.header, log.events) == f"{HEAD}\n{EVENT}\n".encode()


def test_header_keeps_every_key_through_import_storage_and_export(
        tmp_path: Path, runner: CliRunner) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(f"{HEAD}\n{EVENT}\n")
    db = tmp_path / "s.db"
    assert runner.invoke(app, ["import", str(db), str(src)]).exit_code == 0
    out = runner.invoke(app, ["export", str(db), "s-1"])
    assert out.exit_code == 0, out.output
    assert out.stdout_bytes == f"{HEAD}\n{EVENT}\n".encode()
    assert list(json.loads(out.stdout_bytes.split(b"\n")[0])) == list(json.loads(HEAD))


def test_export_always_writes_delegation_depth(tmp_path: Path, runner: CliRunner) -> None:
    src = tmp_path / "plain.jsonl"
    src.write_text(EVENT + "\n")  # no header line: the session gets one without depth
    db = tmp_path / "s.db"
    assert runner.invoke(app, ["import", str(db), str(src)]).exit_code == 0
    out = runner.invoke(app, ["export", str(db), "plain"])
    header = msgspec.json.decode(out.stdout_bytes.split(b"\n")[0])
    assert header["delegationDepth"] == 0
    again = decode_log(out.stdout_bytes)  # DSH's rule: our export reads back
    assert again.header is not None and again.header.delegation_depth == 0


# -- 2. every DSH JSONL encoding ----------------------------------------------------------

FIXTURES = paths.SHARED / "dsh-fixtures"
if not FIXTURES.is_dir():  # a worktree beside /work/main, or the main checkout
    FIXTURES = Path("/work/shared/dsh-fixtures")

TEXT_ROW = ('{"type":"text-chunks","seq0":1,"time0":100,"data":{"turn":1,"step":1,'
            '"index":0,"dt":[5,-2,0],"texts":["The"," user"," asked","."]}}')
TOOL_ROW = ('{"type":"tool-call-chunks","seq0":5,"time0":200,"data":{"turn":1,"step":1,'
            '"index":1,"dt":[1,1],"id":"call-1","name":"bash","args":["{","\\"c","}"]}}')


def _lines(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def test_packed_rows_expand_to_the_chunks_they_stand_for() -> None:
    log = decode_log(_lines(EVENT, TEXT_ROW, TOOL_ROW))
    assert log.packed_rows == 2
    assert [(e.seq, e.time) for e in log.events] == [
        (0, 1), (1, 100), (2, 105), (3, 103), (4, 103), (5, 200), (6, 201), (7, 202)]
    assert log.events[2].data == {"turn": 1, "step": 1,
                                  "chunk": {"type": "text-delta", "index": 0,
                                            "text": " user"}}
    assert log.events[6].data["chunk"] == {"type": "tool-call-delta", "index": 1,
                                           "id": "call-1", "name": "bash",
                                           "argumentsDelta": '"c'}
    replay(log.events)  # a valid log


@pytest.mark.parametrize("row, fragment", [
    (TEXT_ROW.replace('"dt":[5,-2,0]', '"dt":[5,-2]'), "dt has 2 gaps for 4 members"),
    (TEXT_ROW.replace('"texts":["The"," user"," asked","."]', '"texts":[]'),
     "it has no members"),
    (TEXT_ROW.replace('"index":0,', '"index":0,"extra":1,'), "unknown field"),
    (TEXT_ROW.replace('"seq0":1', '"seq0":1.0'), "Expected `int`"),
    (TEXT_ROW.replace('" user"', '7'), "Expected `str`"),
    (TEXT_ROW.replace('"time0":100', '"time0":9007199254740991'), "not a safe integer"),
])
def test_malformed_packed_rows_are_refused_naming_the_line(row: str, fragment: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_log(_lines(EVENT, row))
    assert info.value.rule == "packed-row"
    assert str(info.value).startswith("line 2: invalid packed row")
    assert fragment in str(info.value)
    assert "text-chunks at seq 1" in str(info.value)


def _session_events() -> list[Any]:
    from support.sessiongen import build_session
    return list(build_session("s-gen", 3).log)


def _zstd_file(path: Path, batch: int = 7) -> list[Any]:
    events = _session_events()
    path.write_bytes(encode_dsh(SessionHeader(version=0, id="s-gen", created_at=1),
                                events, zstd=True, batch=batch))
    return events


def test_zstd_frames_are_read_frame_by_frame(tmp_path: Path, runner: CliRunner) -> None:
    path = tmp_path / "session.jsonl.zstd"
    events = _zstd_file(path)
    log = read_log(path)
    assert log.events == events and log.torn is None
    assert log.header is not None and log.header.id == "s-gen"
    assert log.packed_rows > 0  # the chunks went out packed
    folded = json.loads(runner.invoke(app, ["fold", "--json", str(path)]).stdout)
    assert folded["ok"] and folded["nodes"] == list(replay(events).surface.nodes)
    short = runner.invoke(app, ["fold", "--max-line-bytes", "20", str(path)])
    assert short.exit_code == 2 and "line 1 is longer than 20 bytes" in short.output


def _frame_starts(data: bytes) -> list[int]:
    return [i for i in range(len(data) - 3) if data[i:i + 4] == ZSTD_MAGIC]


def test_a_torn_final_zstd_frame_keeps_the_complete_lines(tmp_path: Path,
                                                          runner: CliRunner) -> None:
    path = tmp_path / "session.jsonl.zstd"
    events = _zstd_file(path)
    data = path.read_bytes()
    last = _frame_starts(data)[-1]
    path.write_bytes(data[:last + (len(data) - last) // 2])
    log = read_log(path)
    assert log.torn is not None and "torn final zstd frame" in log.torn
    assert log.events == events[:len(log.events)]
    assert len(log.events) < len(events)
    out = runner.invoke(app, ["repair", "--json", str(path)])
    assert out.exit_code == 0, out.output
    closers = json.loads(out.stdout)
    if any(e.type == "turn/start" for e in log.events[-20:]):
        assert closers and closers[-1]["type"] == "turn/end"


def test_a_corrupt_zstd_frame_in_the_middle_is_an_error_naming_it(
        tmp_path: Path, runner: CliRunner) -> None:
    path = tmp_path / "session.jsonl.zstd"
    _zstd_file(path)
    data = bytearray(path.read_bytes())
    starts = _frame_starts(bytes(data))
    middle = starts[len(starts) // 2]
    data[middle + 12] ^= 0xFF  # inside the frame's first block
    path.write_bytes(bytes(data))
    with pytest.raises(DecodeError) as info:
        read_log(path)
    assert info.value.rule == "zstd"
    assert f"frame {len(starts) // 2 + 1} (at byte {middle})" in str(info.value)
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["import", str(db), str(path)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert str(path) in result.output and "frame" in result.output
    listed = runner.invoke(app, ["digest", str(db), "--json"])
    assert json.loads(listed.stdout) == {}


def test_a_partial_last_line_is_a_torn_tail(tmp_path: Path, runner: CliRunner) -> None:
    path = tmp_path / "plain.jsonl"
    events = _session_events()
    content = encode_dsh(SessionHeader(version=0, id="plain", created_at=1), events)
    path.write_bytes(content[:-25])
    log = read_log(path)
    assert log.torn is not None and "partial line" in log.torn
    assert log.events == events[:len(log.events)]
    assert runner.invoke(app, ["fold", str(path)]).exit_code == 0


def test_bad_files_import_nothing_and_say_where(tmp_path: Path, runner: CliRunner) -> None:
    version = tmp_path / "version.jsonl"
    version.write_text('{"type":"session","version":3,"id":"v","createdAt":1,'
                       '"delegationDepth":0}\n' + EVENT + "\n")
    packed = tmp_path / "packed.jsonl"
    packed.write_bytes(_lines(EVENT, TEXT_ROW.replace('"dt":[5,-2,0]', '"dt":[5]')))
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["import", str(db), str(version), str(packed)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{version}: not imported: line 1: session format version 3")
    assert lines[1].startswith(f"{packed}: not imported: line 2: invalid packed row")
    assert json.loads(runner.invoke(app, ["digest", str(db), "--json"]).stdout) == {}


# -- 3. conformance with DSH's own fixtures ------------------------------------------------


def _js_number(value: float) -> str:
    """A float as JavaScript prints it (``1.0`` -> ``1``, ``1e-07`` -> ``1e-7``)."""
    from decimal import Decimal
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    if 1e-7 <= abs(value) < 1e-4:
        return format(Decimal(repr(value)), "f")
    text = repr(value)
    if "e" in text:
        mantissa, exp = text.split("e")
        return f"{mantissa}e{'+' if int(exp) > 0 else '-'}{abs(int(exp))}"
    return text


def canonical(value: Any) -> str:
    """DSH fixtures' canonical JSON: keys sorted, no whitespace, JS numbers, ASCII."""
    if value is True or value is False or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _js_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ",".join(json.dumps(k, ensure_ascii=True) + ":" + canonical(value[k])
                          for k in sorted(value)) + "}"


def events_sha256(path: Path) -> str:
    log = read_log(path)
    assert log.torn is None
    value = msgspec.json.decode(msgspec.json.encode(log.events))
    return hashlib.sha256(canonical(value).encode()).hexdigest()


FIXTURE_FILES = sorted(FIXTURES.glob("*.expected.json"))


def test_the_fixtures_are_there() -> None:
    assert len(FIXTURE_FILES) == 84


@pytest.mark.parametrize("expected_path", FIXTURE_FILES, ids=lambda p: p.name[:-14])
def test_dsh_fixture(expected_path: Path, tmp_path: Path, runner: CliRunner) -> None:
    expected = json.loads(expected_path.read_text())
    path = expected_path.with_name(expected_path.name[:-len(".expected.json")] + ".jsonl")
    out = runner.invoke(app, ["fold", "--json", str(path)])
    result = json.loads(out.stdout)
    assert result["ok"] is expected["ok"], result
    if not expected["ok"]:
        assert expected["stage"] == "header" and result["rule"] == "header"
        return
    assert result["nodes"] == expected["nodes"]
    assert result["replacements"] == expected["replacements"]
    assert result["messages"] == expected["messages"]
    assert read_log(path).packed_rows == expected["packedRows"]
    db = tmp_path / "s.db"
    imported = runner.invoke(app, ["import", str(db), str(path)])
    assert imported.exit_code == 0, imported.output
    for extra in ([], ["--format", "dsh"], ["--format", "dsh", "--zstd"]):
        exported = runner.invoke(app, ["export", str(db), expected["sessionId"], *extra])
        assert exported.exit_code == 0, exported.output
        out_path = tmp_path / f"out-{len(extra)}.jsonl"
        out_path.write_bytes(exported.stdout_bytes)
        assert exported.stdout_bytes.startswith(ZSTD_MAGIC) is ("--zstd" in extra)
        assert events_sha256(out_path) == expected["events_sha256"]
        header = read_log(out_path).header
        assert header is not None
        assert header_to_json(header, dsh_line=True) == json.loads(
            path.read_bytes().split(b"\n")[0])


# -- 4. export in DSH's format ---------------------------------------------------------------


def _chunks(n: int, *, text: str = "x", seq0: int = 0, kind: str = "text-delta",
            time_step: int = 1) -> list[Event]:
    def chunk(k: int) -> dict[str, Any]:
        if kind == "tool-call-delta":
            return {"type": kind, "index": 0, "id": "c-1", "argumentsDelta": text}
        return {"type": kind, "index": 0, "text": text}
    return [Event(type="assistant/chunk", seq=seq0 + k, time=1000 + k * time_step,
                  data={"turn": 1, "step": 1, "chunk": chunk(k)}) for k in range(n)]


def _shapes(records: list[bytes | Event]) -> list[Any]:
    return [len(msgspec.json.decode(r)["data"].get("texts") or
                msgspec.json.decode(r)["data"].get("args"))
            if isinstance(r, bytes) else "event" for r in records]


@pytest.mark.parametrize("n, shape", [
    (2, ["event", "event"]),
    (3, [3]),
    (1024, [1024]),
    (1025, [1024, "event"]),
    (1027, [1024, 3]),
    (2050, [1024, 1024, "event", "event"]),
])
def test_runs_pack_as_dsh_packs_them(n: int, shape: list[Any]) -> None:
    events = _chunks(n)
    records = list(pack_records(events))
    assert _shapes(records) == shape
    content = b"".join((r if isinstance(r, bytes) else msgspec.json.encode(r)) + b"\n"
                       for r in records)
    assert decode_log(content).events == events


def test_a_row_holds_at_most_one_mebibyte_of_data() -> None:
    big = _chunks(10, text="y" * 300_000, kind="tool-call-delta")  # 3 fit, 4 do not
    records = list(pack_records(big))
    assert _shapes(records) == [3, 3, 3, "event"]
    for row in records[:3]:
        assert isinstance(row, bytes)
        assert len(msgspec.json.encode(msgspec.json.decode(row)["data"])) <= MAX_ROW_BYTES
    huge = _chunks(5, text="z" * 400_000)  # not even 3 fit: one verbatim, then retry
    assert _shapes(list(pack_records(huge))) == ["event"] * 5


def test_runs_break_where_dsh_breaks_them() -> None:
    events = _chunks(3) + _chunks(3, seq0=3, kind="reasoning-delta")
    assert _shapes(list(pack_records(events))) == [3, 3]
    gap = _chunks(3) + _chunks(3, seq0=4)  # seq 3 missing: not one run
    assert _shapes(list(pack_records(gap))) == [3, 3]
    marked = _chunks(4)
    marked[1] = msgspec.structs.replace(marked[1], ignorable=True)  # envelope not exact
    assert _shapes(list(pack_records(marked))) == ["event", "event", "event", "event"]


@given(session=sessions(), zstd=st.booleans(), batch=st.integers(1, 40))
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_dsh_export_round_trips(session: Any, zstd: bool, batch: int,
                                tmp_path: Path) -> None:
    header = SessionHeader(version=0, id=session.id, created_at=1, delegation_depth=0)
    path = tmp_path / "rt.jsonl"
    path.write_bytes(encode_dsh(header, session.log, zstd=zstd, batch=batch))
    log = read_log(path)
    assert log.header == header
    assert log.events == list(session.log)
    assert log.torn is None


def test_export_format_dsh_through_the_cli(tmp_path: Path, runner: CliRunner) -> None:
    from support.sessiongen import build_session
    session = build_session("s-cli", 4)
    src = tmp_path / "in.jsonl"
    src.write_bytes(encode_log(SessionHeader(version=0, id="s-cli", created_at=1,
                                             delegation_depth=0), session.log))
    db = tmp_path / "s.db"
    assert runner.invoke(app, ["import", str(db), str(src)]).exit_code == 0
    out = tmp_path / "out.jsonl.zstd"
    done = runner.invoke(app, ["export", str(db), "s-cli", "--format", "dsh", "--zstd",
                               "-o", str(out)])
    assert done.exit_code == 0, done.output
    log = read_log(out)
    assert log.events == list(session.log) and log.packed_rows > 0
    refused = runner.invoke(app, ["export", str(db), "s-cli", "--zstd"])
    assert refused.exit_code == 2 and "--zstd needs --format dsh" in refused.output
    again = runner.invoke(app, ["export", str(db), "s-cli", "--format", "dsh",
                                "-o", str(out)])
    assert again.exit_code == 2  # the output rules: an existing file needs --force


# -- 5. a DSH sessions root -------------------------------------------------------------------


def _write_session(root: Path, cwd_dir: str, session_id: str, content: bytes,
                   name: str = "session.jsonl.zstd") -> Path:
    path = root / cwd_dir / session_id / name
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return path


def test_import_walks_a_sessions_root_resumably(tmp_path: Path, runner: CliRunner) -> None:
    from support.sessiongen import build_session
    root = tmp_path / "sessions"
    one, two = build_session("s-1", 2), build_session("s-2", 1)
    head = SessionHeader(version=0, id="s-1", created_at=1, cwd="/w", delegation_depth=0,
                         agent_preset="coder")
    _write_session(root, "--w--", "s-1", encode_dsh(head, one.log, zstd=True))
    _write_session(root, "_no-cwd", "s-2", encode_dsh(
        SessionHeader(version=0, id="s-2", created_at=1, delegation_depth=0), two.log,
        zstd=True))
    bad = bytearray(encode_dsh(SessionHeader(version=0, id="s-3", created_at=1, cwd="/w",
                                             delegation_depth=0), one.log, zstd=False))
    bad_path = _write_session(root, "--w--", "s-3", b"")
    import zstandard
    text = bytes(bad).replace(b'"dt":[', b'"dt":[1,', 1)  # one gap too many
    bad_path.write_bytes(b"".join(zstandard.ZstdCompressor().compress(line + b"\n")
                                  for line in text.splitlines()))
    (root / "notes.txt").write_text("not a session")
    db = tmp_path / "s.db"
    first = runner.invoke(app, ["import", str(db), str(root)])
    assert first.exit_code == 1, first.output
    lines = first.output.strip().splitlines()
    assert any(line.startswith(f"{root}/--w--/s-1/session.jsonl.zstd: imported as "
                               f"session s-1") for line in lines)
    assert any("s-2/session.jsonl.zstd: imported as session s-2" in line for line in lines)
    assert any("s-3/session.jsonl.zstd: refused (packed-row): " in line for line in lines)
    again = runner.invoke(app, ["import", str(db), str(root)])
    assert again.exit_code == 1
    assert "already stored as session s-1" in again.output
    assert "already stored as session s-2" in again.output
    assert "imported as" not in again.output
    out = runner.invoke(app, ["export", str(db), "s-1"])
    assert decode_log(out.stdout_bytes).header == head
    assert json.loads(runner.invoke(app, ["digest", str(db), "--json"]).stdout).keys() \
        == {"s-1", "s-2"}


def test_a_root_with_both_encodings_is_refused(tmp_path: Path, runner: CliRunner) -> None:
    root = tmp_path / "sessions"
    head = SessionHeader(version=0, id="a", created_at=1, delegation_depth=0)
    _write_session(root, "_no-cwd", "a", encode_dsh(head, [], zstd=True))
    _write_session(root, "_no-cwd", "b", encode_dsh(head, []), name="session.jsonl")
    result = runner.invoke(app, ["import", str(tmp_path / "s.db"), str(root)])
    assert result.exit_code == 2
    assert "holds both session.jsonl and session.jsonl.zstd" in result.output


# -- 6. a DSH SQLite database ------------------------------------------------------------------

def test_varints_decode_as_dsh_encodes_them() -> None:
    from surfacelog.store.dsh_sources import decode_varints
    for values in ([], [0], [5, 6, 7], [300, 2, 9_000_000_000, 0], [2**53 - 1, 0]):
        assert decode_varints(encode_varints(values)) == values
    assert decode_varints(b"") == []
    for bad in (b"\x80", b"\x85\x00", b"\xff" * 10, encode_varints([0, 0])[:1] + b"\x01"):
        with pytest.raises(ValueError):
            decode_varints(bad)


def test_import_reads_a_dsh_sqlite_database(tmp_path: Path, runner: CliRunner) -> None:
    from support.sessiongen import add_turn, build_session
    session = build_session("d-1", 3)
    add_turn(session, 4, chunks=6)
    big = "w" * 5000  # a data over 4 KiB: a zstd BLOB
    session.append("todo/write", {"todos": [{"content": big, "status": "pending"}]})
    head = SessionHeader(version=0, id="d-1", created_at=7, cwd="/w",
                         origin={"kind": "cli"}, delegation_depth=1)
    dsh = tmp_path / "dsh.sqlite"
    dsh_database(dsh, {"d-1": (head, list(session.log))})
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["import", str(db), str(dsh)])
    assert result.exit_code == 0, result.output
    assert f"{dsh} session d-1: imported as session d-1" in result.output
    out = runner.invoke(app, ["export", str(db), "d-1"])
    log = decode_log(out.stdout_bytes)
    assert log.events == list(session.log)
    assert log.header == head
    again = runner.invoke(app, ["import", str(db), str(dsh)])
    assert again.exit_code == 0 and "already stored as session d-1" in again.output


@pytest.mark.parametrize("version", [16, 18])
def test_a_dsh_database_of_another_schema_version_is_refused(
        version: int, tmp_path: Path, runner: CliRunner) -> None:
    dsh = tmp_path / "dsh.sqlite"
    dsh_database(dsh, {"d-1": (SessionHeader(version=0, id="d-1", created_at=1,
                                              delegation_depth=0),
                                [])}, version=version)
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["import", str(db), str(dsh)])
    assert result.exit_code == 2
    assert f"has schema version {version}, incompatible with this build (17)" \
        in result.output
    assert json.loads(runner.invoke(app, ["digest", str(db), "--json"]).stdout) == {}


def test_a_bad_row_refuses_only_its_session(tmp_path: Path, runner: CliRunner) -> None:
    import sqlite3
    good = (SessionHeader(version=0, id="g", created_at=1, delegation_depth=0),
            _chunks(4))
    bad = (SessionHeader(version=0, id="h", created_at=1, delegation_depth=0), _chunks(4))
    dsh = tmp_path / "dsh.sqlite"
    dsh_database(dsh, {"g": good, "h": bad})
    conn = sqlite3.connect(dsh)
    conn.execute("UPDATE events SET data = '{\"turn\":1,\"step\":1,\"index\":0,"
                 "\"dt\":[1],\"texts\":[\"a\",\"b\"]}' WHERE session_id = 'h'")
    conn.commit()
    conn.close()
    db = tmp_path / "s.db"
    result = runner.invoke(app, ["import", str(db), str(dsh)])
    assert result.exit_code == 1
    assert f"{dsh} session g: imported as session g (4 events)" in result.output
    assert (f"{dsh} session h: refused (row): invalid committed physical row at seq 0: "
            f"packed row of 2 members (3..1024)") in result.output
    assert list(json.loads(runner.invoke(app, ["digest", str(db), "--json"]).stdout)) \
        == ["g"]


# -- 8. an EventStore over a DSH sessions root ----------------------------------------------


def _crashed_root(tmp_path: Path, zstd: bool) -> tuple[Path, Path, list[Event]]:
    """A DSH root with one session whose last turn is open and whose file has a torn
    tail (a half-written final frame, or a partial last line)."""
    from support.sessiongen import build_session, open_turn
    session = build_session("crash", 2)
    open_turn(session, 3)
    events = list(session.log)
    root = tmp_path / "root"
    head = SessionHeader(version=0, id="crash", created_at=1, cwd="/w",
                         delegation_depth=0, agent_preset="coder")
    content = encode_dsh(head, events, zstd=zstd, batch=10)
    if zstd:
        last = _frame_starts(content)[-1]
        content = content[:last + (len(content) - last) // 2]
    else:
        content = content[:-20]
    path = _write_session(root, "--w--", "crash", content,
                          "session.jsonl.zstd" if zstd else "session.jsonl")
    return root, path, events


@pytest.mark.parametrize("zstd", [True, False])
async def test_a_dsh_root_store_repairs_a_torn_session_as_dsh_does(
        tmp_path: Path, zstd: bool) -> None:
    from surfacelog.session import END_SEED
    from surfacelog.store.dsh_root import DshRootEventStore
    root, path, events = _crashed_root(tmp_path, zstd)
    kept = read_log(path)
    assert kept.torn is not None and 0 < len(kept.events) < len(events)
    store = await DshRootEventStore.open(root)
    try:
        assert await store.read_since("crash") == kept.events
        opened = await store.open_session("crash")
        types = [e.type for e in opened.repaired]
        assert types[0] == END_SEED and types[-1] == "turn/end"
    finally:
        await store.close()
    after = read_log(path)  # what DSH's reader finds: a whole file, no torn tail
    assert after.torn is None
    assert after.events == list(opened.session.log)
    assert after.events[:len(kept.events)] == kept.events
    assert after.header is not None and after.header.agent_preset == "coder"
    assert path.read_bytes().startswith(ZSTD_MAGIC) is zstd
    replay(after.events, after.header)
    again = await DshRootEventStore.open(root)  # a fresh store reads the same log
    try:
        assert await again.read_since("crash") == after.events
    finally:
        await again.close()


async def test_a_dsh_root_store_reads_packed_rows_and_writes_new_sessions_dsh_reads(
        tmp_path: Path) -> None:
    from surfacelog.store.dsh_root import DshRootEventStore

    from support.sessiongen import build_session
    root = tmp_path / "root"
    session = build_session("packed", 3)
    head = SessionHeader(version=0, id="packed", created_at=1, delegation_depth=0)
    _write_session(root, "_no-cwd", "packed", encode_dsh(head, session.log, zstd=True))
    store = await DshRootEventStore.open(root)
    try:
        assert (await store.load("packed")).log == session.log
        await store.create(SessionHeader(version=0, id="new/../x", created_at=2,
                                         cwd="/a b/c"), list(build_session("n", 1).log))
    finally:
        await store.close()
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("session.jsonl*"))
    assert files == ["--a-b-c--/new%2F..%2Fx/session.jsonl.zstd",
                     "_no-cwd/packed/session.jsonl.zstd"]
    log = read_log(root / files[0])
    assert log.header is not None and log.header.delegation_depth == 0
    assert len(log.events) == len(build_session("n", 1).log)


@pytest.mark.usefixtures("ray_local")
async def test_connect_serves_a_dsh_root_where_it_is(tmp_path: Path) -> None:
    from surfacelog.actors.client import connect
    root, path, _ = _crashed_root(tmp_path, True)
    client = connect(db=str(root))
    try:
        handle = client.session("crash")
        before = await handle.surface()
        await handle.append("turn/start", {"turn": 9})
        await handle.flush()
    finally:
        client.shutdown()
    log = read_log(path)
    assert log.torn is None and log.events[-1].type == "turn/start"
    assert log.events[-2].type == "turn/end"  # the crash-repair closer, durable
    assert len(log.events) == before.length + 1
