"""DeepSeek Harness interop: headers, encodings, packed rows, import and export."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.schema import DecodeError
from surfacelog.schema.codec import decode_log, encode_log
from surfacelog.session import replay

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
