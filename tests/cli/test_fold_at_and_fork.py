"""``fold --at`` and ``fork`` from the command line: time travel equals folding the
truncated file, and each fork error code is its own exit status with one line."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.cli.forking import FORK_EXIT

from support.shared_examples import EXAMPLES

runner = CliRunner()
NAMES = ["compaction", "nested-replaces", "tool-result-prune", "tool-calls"]


def fold_json(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = runner.invoke(app, ["fold", "--json", *args])
    return result.exit_code, json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", NAMES)
def test_fold_at_equals_folding_the_truncated_file(tmp_path: Path, name: str) -> None:
    src = EXAMPLES / f"{name}.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    for at in sorted({0, 1, len(lines) // 3, len(lines) // 2, len(lines) - 2,
                      len(lines) - 1}):
        cut = tmp_path / f"{name}-{at}.jsonl"
        cut.write_text("".join(lines[: at + 1]), encoding="utf-8")
        status, travelled = fold_json("--at", str(at), str(src))
        assert status == 0
        _, reference = fold_json(str(cut))
        assert travelled.pop("at") == at
        for key in ("nodes", "replacements", "messages"):
            assert travelled[key] == reference[key], (name, at, key)


def test_fold_at_past_the_end_is_one_line_and_exit_1(tmp_path: Path) -> None:
    src = EXAMPLES / "basic-turns.jsonl"
    status, out = fold_json("--at", "21", str(src))
    assert status == 1 and out["rule"] == "at" and "0..20" in out["error"]
    human = runner.invoke(app, ["fold", "--at", "3", str(src)], terminal_width=200)
    assert human.exit_code == 0 and "as of seq 3: 4 events" in human.output


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "fork.db"
    result = runner.invoke(app, ["import", str(path), str(EXAMPLES / "compaction.jsonl")])
    assert result.exit_code == 0, result.output
    return path


def source_id(db: Path) -> str:
    digests = json.loads(runner.invoke(app, ["digest", str(db), "--json"]).stdout)
    (sid,) = digests
    return str(sid)


def test_fork_at_a_turn_boundary_stores_the_prefix(db: Path) -> None:
    sid = source_id(db)
    result = runner.invoke(app, ["fork", str(db), sid, "--at", "109", "--id", "child",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"ok": True, "id": "child", "source": sid,
                                         "at": 109}
    parent = runner.invoke(app, ["export", str(db), sid]).stdout.splitlines()
    child = runner.invoke(app, ["export", str(db), "child"]).stdout.splitlines()
    strip = [json.loads(line) for line in parent[1:111]]
    seeded = [json.loads(line) for line in child[1:]]
    assert seeded[:110] == strip
    assert [e["type"] for e in seeded[110:]] == ["session/end-seed"]
    header = json.loads(child[0])
    assert header["parentSession"] == sid and header["seedLength"] == 110
    # The child's fold as of its last seed event is the parent's as of 109.
    _, travelled = fold_json("--at", "109", str(EXAMPLES / "compaction.jsonl"))
    verify = runner.invoke(app, ["verify", str(db)])
    assert verify.exit_code == 0, verify.output
    assert travelled["nodes"]


@pytest.mark.parametrize(("args", "code"), [
    (["--id", "SOURCE"], "SESSION_ALREADY_EXISTS"),
    (["--at", "9999"], "INVALID_BOUNDARY"),
    (["--at", "60"], "OPEN_TURN"),
])
def test_each_fork_refusal_has_its_exit_status(db: Path, args: list[str], code: str) -> None:
    sid = source_id(db)
    args = [sid if a == "SOURCE" else a for a in args]
    result = runner.invoke(app, ["fork", str(db), sid, *args])
    assert result.exit_code == FORK_EXIT[code]
    assert code in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_fork_of_a_missing_session_or_database(db: Path, tmp_path: Path) -> None:
    missing = runner.invoke(app, ["fork", str(db), "nope"])
    assert missing.exit_code == FORK_EXIT["SESSION_NOT_FOUND"]
    no_db = runner.invoke(app, ["fork", str(tmp_path / "absent.db"), "x"])
    assert no_db.exit_code == 2 and "no database" in no_db.output
    assert not (tmp_path / "absent.db").exists()
    assert len(set(FORK_EXIT.values())) == len(FORK_EXIT)


def test_fold_holds_the_collector_off_for_each_file_and_restores_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fold builds a log's worth of long-lived acyclic containers: the collector stays
    # off while each file is folded and printed (its session dropped), on again after,
    # also when a file fails.
    from surfacelog.cli.commands import logs

    seen: list[bool] = []
    real = logs._fold_one

    def spy(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(logs, "_fold_one", spy)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    good = str(EXAMPLES / "compaction.jsonl")
    assert gc.isenabled()
    result = runner.invoke(app, ["fold", "--json", good, str(bad), good])
    assert result.exit_code == 2
    assert [json.loads(line)["ok"] for line in result.stdout.splitlines()] == \
        [True, False, True]
    assert seen == [False, False, False]
    assert gc.isenabled()
