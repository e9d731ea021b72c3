"""Every example log through ``surfacelog fold --json`` / ``repair --json`` (the CLI
contract of DESIGN.md), compared with the ``*.expected.json`` of /work/shared/examples."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.schema import encode_log, read_log
from surfacelog.session import replay

from support.shared_examples import EXAMPLES, blank_texts

LOGS = sorted(EXAMPLES.glob("*.jsonl"))
VALID = [p for p in LOGS if json.loads(p.with_suffix(".expected.json").read_text())["ok"]]
INVALID = [p for p in LOGS if p not in VALID]

# The rule fragments of SPEC section 6 (and the message-shape and envelope rules).
SPEC_FRAGMENTS = [
    "is not contiguous",
    "is not surface-eligible and cannot carry surfaceOp",
    "cannot carry sourceEventSeqs",
    "is surface-eligible and requires a surfaceOp marker",
    "invalid replace surfaceOp",
    "invalid surfaceOp",
    "not found in surface",
    "is after end seq",
    "must be an array",
    "must not be empty except on assistant/message",
    "must densely contain non-negative safe integers",
    "must not contain duplicates",
    "must reference earlier events",
    "must include every shadowed surface node",
    "must rewrite exactly one current node",
    "must target a current tool/result",
    "may change only content",
]

runner = CliRunner()


def fold(*args: str | Path) -> tuple[int, list[dict[str, Any]]]:
    result = runner.invoke(app, ["fold", "--json", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return result.exit_code, lines


def expected_of(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.with_suffix(".expected.json").read_text())
    return value


def numbers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"(?<![\w.-])\d+(?![\w.])", text)}


def test_the_examples_are_all_there() -> None:
    assert len(LOGS) == 8
    assert len(INVALID) == 2


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_fold_matches_expected(path: Path) -> None:
    code, out = fold(path)
    assert code == 0
    assert len(out) == 1
    got = out[0]
    assert got.pop("file") == str(path)
    expected = expected_of(path)
    assert got["ok"] is True
    assert got["nodes"] == expected["nodes"]
    assert got["replacements"] == expected["replacements"]
    assert got["messages"] == expected["messages"]
    assert set(got) == set(expected)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_fold_of_invalid_log_names_the_same_rule_and_seqs(path: Path) -> None:
    code, out = fold(path)
    assert code == 0
    got = out[0]
    expected = expected_of(path)
    assert got["ok"] is False and expected["ok"] is False
    assert got["file"] == str(path)
    theirs = [f for f in SPEC_FRAGMENTS if f in expected["error"]]
    assert theirs, expected["error"]
    for fragment in theirs:
        assert fragment in got["error"]
    assert numbers(expected["error"]) <= numbers(got["error"])
    assert got["error"].startswith("invalid seed event at index ")


def test_fold_many_files_one_line_each_in_argument_order() -> None:
    code, out = fold(*LOGS, *reversed(LOGS))
    assert code == 0
    assert [o["file"] for o in out] == [str(p) for p in [*LOGS, *reversed(LOGS)]]
    for o in out:
        expected = expected_of(Path(o["file"]))
        assert o["ok"] == expected["ok"]
        if o["ok"]:
            assert o["nodes"] == expected["nodes"]
            assert o["messages"] == expected["messages"]


def test_fold_missing_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    code, out = fold(missing)
    assert code == 2
    assert out[0]["ok"] is False and out[0]["file"] == str(missing)
    code, out = fold(LOGS[0], missing, LOGS[1])
    assert code == 2
    assert [o["ok"] for o in out] == [True, False, True]


@pytest.mark.parametrize("content", [b"this is not json\n", b'{"type":"turn/start",\n',
                                     b'{"type":"turn/start","seq":0,"time":1\n'
                                     b'"data":{"turn":1}}\n'])
def test_fold_non_json_file_exits_2(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    code, out = fold(bad)
    assert code == 2
    assert out[0]["ok"] is False


def test_fold_invalid_but_readable_log_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "unknown.jsonl"
    path.write_text('{"type":"acme/unknown","seq":0,"time":1,"data":{}}\n')
    code, out = fold(path)
    assert code == 0
    assert out[0]["ok"] is False
    assert "acme/unknown" in out[0]["error"]


def test_fold_reads_a_dsh_header_line(tmp_path: Path) -> None:
    source = EXAMPLES / "compaction.jsonl"
    path = tmp_path / "with-header.jsonl"
    head = '{"type":"session","version":0,"id":"s-1","createdAt":1,"delegationDepth":0}\n'
    path.write_bytes(head.encode() + source.read_bytes())
    code, out = fold(path)
    assert code == 0
    expected = expected_of(source)
    assert out[0]["nodes"] == expected["nodes"]
    assert out[0]["messages"] == expected["messages"]
    bumped = tmp_path / "bumped.jsonl"
    bumped.write_bytes(head.replace('"version":0', '"version":1').encode()
                       + source.read_bytes())
    code, out = fold(bumped)
    assert out[0]["ok"] is False


def test_fold_legacy_flag(tmp_path: Path) -> None:
    source = EXAMPLES / "tool-calls.jsonl"
    legacy = tmp_path / "legacy.jsonl"
    lines = []
    for line in source.read_text().splitlines():
        value = json.loads(line)
        value.pop("surfaceOp", None)
        lines.append(json.dumps(value))
    legacy.write_text("\n".join(lines) + "\n")
    code, out = fold(legacy)
    assert code == 0 and out[0]["ok"] is False
    assert "requires a surfaceOp marker" in out[0]["error"]
    result = runner.invoke(app, ["fold", "--json", "--legacy", str(legacy)])
    assert result.exit_code == 0
    got = json.loads(result.stdout)
    expected = expected_of(source)
    assert (got["nodes"], got["messages"]) == (expected["nodes"], expected["messages"])


def test_fold_human_output_smoke() -> None:
    result = runner.invoke(app, ["fold", str(EXAMPLES / "nested-replaces.jsonl"),
                                 str(EXAMPLES / "invalid-incomplete-coverage.jsonl")])
    assert result.exit_code == 0
    assert "nested-replaces.jsonl" in result.stdout
    assert "invalid" in result.stdout
    assert "52" in result.stdout



def test_repair_json_on_crash_tail() -> None:
    path = EXAMPLES / "crash-tail.jsonl"
    result = runner.invoke(app, ["repair", "--json", str(path)])
    assert result.exit_code == 0
    got = json.loads(result.stdout)
    expected = json.loads((EXAMPLES / "crash-tail.repair.expected.json").read_text())
    assert blank_texts(got) == blank_texts(expected)
    assert all(e["data"]["message"]["content"][0]["content"][0]["text"]
               for e in got if e["type"] == "tool/result")
    # the printed closers decode and make a valid, closed log
    from surfacelog.schema import decode_event

    events = [*read_log(path).events, *(decode_event(json.dumps(e)) for e in got)]
    session = replay(events)
    assert len(session.log) == len(events)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_repair_json_after_repair_is_empty(tmp_path: Path, path: Path) -> None:
    result = runner.invoke(app, ["repair", "--json", str(path)])
    assert result.exit_code == 0
    closers = json.loads(result.stdout)
    from surfacelog.schema import decode_event

    repaired = tmp_path / "repaired.jsonl"
    repaired.write_bytes(encode_log(None, [*read_log(path).events,
                                           *(decode_event(json.dumps(c)) for c in closers)]))
    again = runner.invoke(app, ["repair", "--json", str(repaired)])
    assert again.exit_code == 0
    assert json.loads(again.stdout) == []
    code, out = fold(repaired)
    assert code == 0 and out[0]["ok"] is True
    assert out[0]["nodes"][: len(expected_of(path)["nodes"])] == expected_of(path)["nodes"]


def test_repair_exit_codes(tmp_path: Path) -> None:
    assert runner.invoke(app, ["repair", "--json", str(tmp_path / "nope")]).exit_code == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    assert runner.invoke(app, ["repair", "--json", str(bad)]).exit_code == 2
    invalid = runner.invoke(app, ["repair", "--json", str(INVALID[0])])
    assert invalid.exit_code == 1
