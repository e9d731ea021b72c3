"""The main job end to end (``surfacelog run``), ``inspect`` and the HTML report."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from surfacelog.cli import app, run_display
from surfacelog.cli.loadrun import (
    RAY_PROCESSES,
    THIS_COMMAND,
    cpu_by_kind,
    cpu_spent,
    process_kind,
)
from surfacelog.cli.report_html import config_rows, cpu_shares, summary_rows
from surfacelog.cli.runmodel import RunConfig, driver_cpus
from surfacelog.store.shardmap import Shard, load_shard_map

from support.shared_examples import EXAMPLES

runner = CliRunner()


def test_run_options_are_run_config_fields() -> None:
    """Each option of ``run`` is a RunConfig field with the field's default: one place
    to spell them."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    params = {p.name: p for p in group.commands["run"].params if p.name != "help"}
    fields = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert {name: p.default for name, p in params.items()} == fields
    flags = {opt for p in params.values() for opt in p.opts}
    assert {"--sessions", "--turns", "--placement", "--packs", "--drivers", "--compact-at",
            "--prune-over", "--durability", "--mode", "--db", "--address", "--report",
            "--seed", "--kill-every", "--kill-journal", "--json", "--writer",
            "--local-nodes", "--shards", "--kill-node-every", "--node-down",
            "--summariser", "--via", "--force", "--replica", "--kill-disk-every",
            "--outage-budget", "--strict", "--shard-map", "--chunk-every",
            "--max-kills"} == flags


def test_run_builds_one_run_config_from_its_options(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    seen: list[RunConfig] = []

    def run_live(cfg: RunConfig) -> int:
        seen.append(cfg)
        return 0

    monkeypatch.setattr(run_display, "run_live", run_live)
    assert runner.invoke(app, ["run"]).exit_code == 0
    args = ["run", "--sessions", "3", "--turns", "2", "--placement", "dedicated",
            "--durability", "buffered", "--mode", "chunk", "--chunk-every", "25",
            "--db", str(tmp_path / "r.db"),
            "--report", str(tmp_path / "r.html"), "--kill-every", "0.5", "--kill-journal",
            "--json"]
    assert runner.invoke(app, args).exit_code == 0
    assert seen == [RunConfig(), RunConfig(
        sessions=3, turns=2, placement="dedicated", durability="buffered", mode="chunk",
        chunk_every_ms=25, db=tmp_path / "r.db", report=tmp_path / "r.html", kill_every_s=0.5,
        kill_journal=True, as_json=True)]


@pytest.mark.parametrize(("option", "value"), [
    ("--placement", "spread"), ("--durability", "sometimes"), ("--mode", "trickle"),
    ("--packs", "0"), ("--kill-every", "-1")])
def test_run_refuses_a_bad_option_with_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                                     option: str, value: str) -> None:
    monkeypatch.setattr(run_display, "run_live", lambda cfg: pytest.fail("ran"))
    result = runner.invoke(app, ["run", option, value])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert f"Invalid value for '{option}'" in result.output
    assert "Usage:" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "needs"), [
    (["--kill-journal"], "needs --kill-every"),
    (["--node-down", "5"], "needs --kill-node-every or --kill-disk-every"),
    (["--local-nodes", "2", "--node-down", "5"], "needs --kill-node-every"),
    (["--max-kills", "3"], "needs --kill-every, --kill-node-every or --kill-disk-every"),
])
def test_a_flag_without_its_parent_flag_is_a_usage_error(
        monkeypatch: pytest.MonkeyPatch, args: list[str], needs: str) -> None:
    """Accepted and ignored before: the run did not do what it was asked."""
    monkeypatch.setattr(run_display, "run_live", lambda cfg: pytest.fail("ran"))
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2, result.output
    assert needs in result.output and "Traceback" not in result.output


def _one_usage_line(output: str, needle: str) -> None:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("usage error: surfacelog run: "), output
    assert needle in lines[0] and "Traceback" not in output


@pytest.mark.parametrize(("args", "needle"), [
    (["--shard-map", "{map}"], "--shard-map needs --address"),
    (["--shard-map", "{map}", "--local-nodes", "2"], "give one or the other"),
    (["--shard-map", "{map}", "--local-nodes", "2", "--address", "auto"],
     "give one or the other"),
    (["--shard-map", "{map}", "--address", "auto", "--db", "x.db"],
     "--db is a database on this machine"),
    (["--shard-map", "{missing}", "--address", "auto"],
     "cannot read --shard-map {missing}: No such file or directory"),
    (["--shard-map", "{bad}", "--address", "auto"],
     "--shard-map: {bad}: $.shards[0].name = 'A': must be 1-32 of a-z"),
    (["--shard-map", "{notjson}", "--address", "auto"], "--shard-map: {notjson}: not JSON"),
], ids=["no-address", "local-nodes", "local-nodes-and-address", "db", "missing", "bad",
        "not-json"])
def test_shard_map_usage_errors_are_one_line(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path, args: list[str],
                                             needle: str) -> None:
    """Nothing starts: no Ray, no run (``run_live`` is never reached)."""
    files = {"map": tmp_path / "shards.json", "missing": tmp_path / "absent.json",
             "bad": tmp_path / "bad.json", "notjson": tmp_path / "notjson.json"}
    files["map"].write_text('{"shards": [{"name": "s0", "path": "/nowhere/s0.db"}]}')
    files["bad"].write_text('{"shards": [{"name": "A", "path": "a.db"}]}')
    files["notjson"].write_text("shards:")
    monkeypatch.setattr(run_display, "run_live", lambda *a: pytest.fail("ran"))
    result = runner.invoke(app, ["run", *(a.format(**files) for a in args)])
    assert result.exit_code == 2, result.output
    _one_usage_line(result.output, needle.format(**files))


def test_shard_map_usage_error_in_a_real_process(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "surfacelog.cli", "run", "--shard-map",
                           str(tmp_path / "none.json")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    _one_usage_line(proc.stderr, "--shard-map needs --address")
    assert list(tmp_path.iterdir()) == []  # no database, no lock file


def test_shard_map_run_reaches_the_cluster_with_the_map(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """The map is read once, here, and handed to the run; nothing is checked or
    created on this machine's disk (the shard paths are the nodes')."""
    seen: list[tuple[RunConfig, object]] = []

    def run_live(cfg: RunConfig, shards: object = None) -> int:
        seen.append((cfg, shards))
        return 0

    config = tmp_path / "shards.json"
    config.write_text('{"shards": [{"name": "s0", "path": "/nowhere/s0.db", '
                      '"resource": "surfacelog_shard_s0"}]}')
    monkeypatch.setattr(run_display, "run_live", run_live)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--address", "auto", "--shard-map", str(config)])
    assert result.exit_code == 0, result.output
    ((cfg, shards),) = seen
    assert cfg.shard_map == config and cfg.db is None and cfg.stored_in == \
        f"the shards of {config}"
    assert shards == load_shard_map(config)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards.json"]
    assert ("Shard map", str(config)) in config_rows(cfg)
    assert "Database" not in dict(config_rows(cfg))


def test_the_kill_bound_is_shown_with_the_chaos_only() -> None:
    assert "Chaos: kills at most, each chaos" not in dict(config_rows(RunConfig()))
    rows = dict(config_rows(RunConfig(kill_every_s=1, max_kills=3)))
    assert rows["Chaos: kills at most, each chaos"] == "3"
    rows = dict(config_rows(RunConfig(local_nodes=2, kill_node_every_s=3)))
    assert rows["Chaos: kills at most, each chaos"] == "no bound"


def test_node_down_defaults_to_two_seconds_when_chaos_is_on() -> None:
    config = RunConfig(local_nodes=2, kill_node_every_s=3)
    assert config.node_down_s is None and config.node_down == 2.0
    assert ("Node chaos: a removed node stays down", "2 s") in config_rows(config)
    assert RunConfig(local_nodes=2, kill_node_every_s=3, node_down_s=0.5).node_down == 0.5


@pytest.mark.parametrize(("placement", "writer"), [("packed", "owner"),
                                                    ("dedicated", "journal")])
def test_auto_writer_is_owner_when_packed(placement: str, writer: str) -> None:
    config = RunConfig(placement=placement)  # type: ignore[arg-type]
    assert config.writer == "auto" and config.hosting_writer == writer
    assert RunConfig(placement=placement, writer="journal").hosting_writer == "journal"


@pytest.mark.parametrize(("sessions", "cpus", "writers", "drivers"), [
    (50, 2, 1, 1),      # two cores: the owner keeps one busy, one driver the other
    (1000, 2, 1, 1),
    (50, 16, 1, 2),     # one per 25 sessions when the CPUs allow
    (1000, 16, 2, 14),  # at most the CPUs the two writers leave
    (10, 16, 1, 1),
    (3, 1, 0, 1),       # a pinned node of one CPU and no writer
    (3, 1, 4, 1),       # at least one, however few CPUs
])
def test_auto_drivers_leave_a_cpu_to_each_writer_beside_them(
        sessions: int, cpus: float, writers: int, drivers: int) -> None:
    assert RunConfig().driver_count(sessions, cpus, writers) == drivers
    # A number given is taken as it is, but never more drivers than sessions.
    assert RunConfig(drivers="3").driver_count(sessions, cpus, writers) == min(3, sessions)


def _node(node_id: str, cpus: float, *resources: str, alive: bool = True) -> dict[str, Any]:
    """An entry of Ray's node table, as ``ray.nodes()`` gives it."""
    return {"NodeID": node_id, "Alive": alive,
            "Resources": {"CPU": cpus, **{name: 1.0 for name in resources}}}


def test_drivers_count_the_cpus_and_writers_of_the_node_they_run_on() -> None:
    pinned = (Shard("a", "/d/a.db", resource="shard-a"),
              Shard("b", "/d/b.db", resource="shard-b"))
    table = [_node("head", 4), _node("n1", 8, "shard-a"), _node("n2", 8, "shard-b"),
             _node("gone", 8, alive=False)]
    # Pinned to the head, which holds no shard: its own CPUs, no writer beside them.
    assert driver_cpus(table, "head", pinned) == (4.0, 0)
    assert driver_cpus(table, "n1", pinned) == (8.0, 1)
    # Anywhere: every live node's CPUs and every writer.
    assert driver_cpus(table, None, pinned) == (20.0, 2)
    # A writer pinned nowhere may land beside the drivers: it is counted.
    one = (Shard("main", "/d/main.db"),)
    assert driver_cpus([_node("only", 2)], None, one) == (2.0, 1)
    assert driver_cpus(table, "head", one) == (4.0, 1)
    # --local-nodes 3 --shards 3: the head's one CPU, the shards on the workers.
    local = tuple(Shard(f"s{i}", f"/d/s{i}.db", resource=f"node-{i}") for i in range(3))
    nodes = [_node("head", 1), *(_node(f"w{i}", 1, f"node-{i}") for i in range(3))]
    assert RunConfig().driver_count(50, *driver_cpus(nodes, "head", local)) == 1
    assert RunConfig().driver_count(100, *driver_cpus(table, "head", pinned)) == 4


def run_json(db: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, ["run", "--db", str(db), "--json", *extra])
    assert result.exit_code == 0, result.output
    line = [s for s in result.stdout.splitlines() if s.startswith("{")][-1]
    return json.loads(line)  # type: ignore[no-any-return]


@pytest.mark.usefixtures("ray_local")
def test_run_reports_consistent_figures_and_verifies(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    html = tmp_path / "report.html"
    report = run_json(db, "--sessions", "4", "--turns", "8", "--compact-at", "600",
                      "--report", str(html))
    assert report["verification"] == {"passed": True, "sessions": 4, "mismatches": []}
    assert report["errors"] == 0
    assert report["turns_done"] + report["turns_interrupted"] == 32
    assert report["events"] > 0 and report["appends"] > 0
    # Every appended event is in the logs; the rest are seed markers and compactions'
    # own batches, never fewer.
    assert report["log_events"] >= report["events"]
    assert report["journal"]["events"] >= report["events"]
    lat = report["append_latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
    assert report["events_per_s"] == pytest.approx(report["events"] / report["wall_s"],
                                                   rel=0.05)
    assert report["compactions"]["committed"] >= 1
    assert report["store_bytes"] > 0 and db.exists()

    # The HTML report: one plotly chart per metric, plotly.js inline (nothing to
    # fetch); tests/cli/test_html_report_browser.py checks that such a page draws in a browser.
    text = html.read_text(encoding="utf-8")
    for chart in ("throughput", "latency", "activity", "surface"):
        assert f'id="{chart}"' in text
    assert "<script src" not in text and "plotly.js v" in text
    tables = text.split("<body>")[1].split('<section class="chart">')[0]
    assert "None" not in tables and "{'" not in tables and "sessions" not in tables

    # A second run resumes the same sessions: their logs grow, nothing is lost.
    before = _digests(db)
    # ... with chaos asked that the run is too short to perform: it says so.
    again = run_json(db, "--sessions", "4", "--turns", "1", "--kill-every", "600")
    assert again["verification"]["passed"]
    assert report["chaos_not_performed"] == [] and again["actor_kills"] == 0
    (warning,) = again["chaos_not_performed"]
    assert warning.startswith("--kill-every 600: no actor was killed")
    assert ("WARNING: chaos asked, not performed", warning) in summary_rows(again)
    strict = runner.invoke(app, ["run", "--db", str(db), "--json", "--sessions", "4",
                                 "--turns", "1", "--kill-every", "600", "--strict"])
    assert strict.exit_code == 5, strict.output
    after = _digests(db)
    assert set(after) == set(before)
    for sid, d in before.items():
        assert after[sid]["length"] > d["length"]
    assert again["log_events"] > report["log_events"]
    # The embedded Ray's processes are all seen: CPU per append covers Ray's own.
    assert report["cpu_s"] > 0 and report["cpu_ms_per_append"] == pytest.approx(
        1000 * report["cpu_s"] / report["appends"], abs=0.01)
    # ... and split by process: the shard's owner (it hosts the sessions), the agents'
    # drivers, this command (each rounded to 10 ms).
    split = report["cpu_s_by_process"]
    # Only what the processes spent while the agents ran: no more than every core for
    # the run's wall time (the suite's Ray had run for minutes before it).
    assert report["cpu_s"] <= (os.cpu_count() or 1) * report["wall_s"] + 0.5
    assert sum(split.values()) == pytest.approx(report["cpu_s"], abs=0.01 * len(split))
    assert list(split.values()) == sorted(split.values(), reverse=True)
    assert report["writer"] == "owner"
    assert split["OwnerActor"] > 0 and split["DriverActor"] > 0 and split[THIS_COMMAND] > 0
    assert dict(summary_rows(report))["CPU by process"] == cpu_shares(split)


@pytest.mark.usefixtures("ray_local")
def test_the_runs_clock_starts_once_its_drivers_are_up(tmp_path: Path) -> None:
    """A driver's start (a Ray worker importing Ray and surfacelog: 0.4-0.5 s of CPU here,
    benchmarks/bench_worker_start.py) is not counted in the run's CPU: a run this short
    spends a fraction of that in its drivers."""
    report = run_json(tmp_path / "short.db", "--sessions", "2", "--turns", "1",
                      "--drivers", "2")
    assert report["verification"]["passed"] and report["turns_done"] == 2
    assert 0 < report["cpu_s_by_process"]["DriverActor"] < 2 * 0.25, report


@pytest.mark.usefixtures("ray_local")
def test_owner_writer_run_verifies(tmp_path: Path) -> None:
    report = run_json(tmp_path / "owner.db", "--sessions", "4", "--turns", "2",
                      "--writer", "owner")
    assert report["errors"] == 0
    assert report["verification"]["passed"] and report["turns_done"] == 8


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize(("durability", "writer", "kill_every", "turns"), [
    # Durable appends through the journal each wait for their commit, and every second
    # kill (the journal's) holds up every session's until the new journal answers, as
    # long as Ray takes to fail the calls on the dead one: the slowest run by far, so
    # half as many turns, under kills just as frequent (a kill every 2-4 s, four at
    # most: unbounded, 6-10 of them on a quiet machine).
    # The default run covers each writer and each durability once (the durable journal
    # is the default writer's worst case); the other two pairs run under -m slow.
    ("durable", "journal", "0.7", 6),
    pytest.param("buffered", "journal", "0.7", 12, marks=pytest.mark.slow),
    # With the owner writer every kill takes all of the shard's sessions down (one
    # actor hosts them), so kills come less often for turns to complete between them.
    # The second kill (the owner's) comes 1.5 s after the first victim serves again,
    # about 4.5 s in: coalesced calls drove 12 turns in 4.4 s on a quiet machine, which
    # ended the run before it; 24 turns outlast it.
    pytest.param("durable", "owner", "1.5", 24, marks=pytest.mark.slow),
    ("buffered", "owner", "1.5", 24)],
    ids=["durable-journal-0.7", "buffered-journal-0.7", "durable-owner-1.5",
         "buffered-owner-1.5"])
def test_run_under_chaos_stays_consistent(tmp_path: Path, durability: str, writer: str,
                                          kill_every: str, turns: int) -> None:
    """Session actors and the writer killed mid-run come back: sessions through crash
    repair or a reload from the store, the drivers resend exactly once, and the database
    replays to what the live actors report. Durable: no acknowledged event is missing.
    Buffered: what was lost is counted, and the live sessions agree with the store."""
    db = tmp_path / "chaos.db"
    report = run_json(db, "--sessions", "6", "--turns", str(turns), "--mode", "chunk",
                      "--kill-every", kill_every, "--kill-journal", "--durability",
                      durability, "--writer", writer, "--max-kills", "4")
    assert report["writer"] == writer
    # The second and the fourth are the writer's. Unbounded, the kills go on as long as
    # the run, each an actor's process started again.
    assert 2 <= report["actor_kills"] <= 4
    if durability == "durable":
        assert report["lost_acknowledged"] == 0 and report["write_failures"] == []
        assert report["log_events"] >= report["events"]
    assert report["errors"] == 0, report["last_error"]
    assert report["turns_done"] + report["turns_interrupted"] == 6 * turns
    assert report["verification"] == {"passed": True, "sessions": 6, "mismatches": []}


def _digests(db: Path) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, ["digest", str(db), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_inspect_a_known_database(tmp_path: Path) -> None:
    db = tmp_path / "known.db"
    src = EXAMPLES / "nested-replaces.jsonl"
    expected = json.loads((EXAMPLES / "nested-replaces.expected.json").read_text())
    imported = runner.invoke(app, ["import", str(db), str(src)])
    assert imported.exit_code == 0, imported.output
    listing = runner.invoke(app, ["inspect", str(db)], terminal_width=200)
    assert listing.exit_code == 0, listing.output
    rows = [line for line in listing.output.splitlines() if "│" in line and "session" not in line]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].split("│") if c.strip()]
    session_id, events, nodes, generation = cells[0], int(cells[1]), int(cells[2]), int(cells[3])
    assert events == len(src.read_text().splitlines())
    assert nodes == len(expected["nodes"])
    assert generation == len(expected["replacements"])

    tree = runner.invoke(app, ["inspect", str(db), session_id], terminal_width=200)
    assert tree.exit_code == 0, tree.output
    top = [int(m) for m in re.findall(r"^[├└]── (\d+) ", tree.output, re.M)]
    assert top == expected["nodes"]
    outer = expected["replacements"][-1]
    assert f"replaces {outer['start']}..{outer['end']}" in tree.output
    for inner in expected["replacements"]:
        for seq in inner["shadowedSeqs"]:
            assert re.search(rf"── {seq} ", tree.output), seq

    # As of a seq before the first replacement, the surface is the plain appends.
    first = expected["replacements"][0]["seq"]
    past = runner.invoke(app, ["inspect", str(db), session_id, "--at", str(first - 1)],
                         terminal_width=200)
    assert past.exit_code == 0, past.output
    assert not re.search(r"replaces \d+\.\.\d+", past.output)
    assert f"as of seq {first - 1}" in past.output

    missing = runner.invoke(app, ["inspect", str(db), "nope"])
    assert missing.exit_code == 1


def test_a_summariser_that_cannot_be_loaded_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["run", "--summariser", "no_such_module_q:f"])
    assert result.exit_code == 2
    assert "usage error: surfacelog run: summariser 'no_such_module_q:f'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("ray_local")
def test_run_with_a_summariser_by_import_path(tmp_path: Path) -> None:
    report = run_json(tmp_path / "sum.db", "--sessions", "3", "--turns", "8",
                      "--compact-at", "600", "--summariser",
                      "surfacelog.session.compaction_policy:extractive_summary")
    assert report["verification"]["passed"] and report["errors"] == 0
    assert report["compactions"]["committed"] >= 1


@pytest.mark.parametrize(("title", "pid", "kind"), [
    ("ray::OwnerActor", 7, "OwnerActor"),
    ("ray::OwnerActor.call_many", 7, "OwnerActor"),
    ("ray::DriverActor.run", 7, "DriverActor"),
    ("ray::IDLE", 7, RAY_PROCESSES),
    ("/venv/lib/ray/core/src/ray/raylet/raylet", 7, RAY_PROCESSES),
    ("/venv/bin/python3", 7, RAY_PROCESSES),
    ("", 7, RAY_PROCESSES),
    ("/venv/bin/python3", 1, THIS_COMMAND),
    # A title is data: only an identifier after ray:: names a kind (nothing of a
    # terminal escape reaches the run's table).
    ("ray::Bad\x1b[2J", 7, "Bad"),
    ("ray::\x1b[2J", 7, RAY_PROCESSES),
])
def test_each_process_is_counted_under_its_actor_class(title: str, pid: int,
                                                       kind: str) -> None:
    assert process_kind(title, pid, me=1) == kind


def test_cpu_by_kind_splits_what_was_spent_between_two_readings() -> None:
    """Each process's CPU since the first reading (all of it for one started since),
    summed by kind, the largest first; together what ``cpu_spent`` counts."""
    before = {1: 1.0, 10: 5.0, 11: 2.0, 13: 9.0}  # 13 ended before the second reading
    after = {1: 1.5, 10: 6.0, 11: 2.25, 12: 0.75, 14: 0.125}
    titles = {1: "/venv/bin/python3", 10: "ray::OwnerActor.call_many", 11: "ray::IDLE",
              12: "ray::DriverActor", 14: "/venv/lib/ray/raylet"}
    split = cpu_by_kind(before, after, titles, me=1)
    assert list(split.items()) == [("OwnerActor", 1.0), ("DriverActor", 0.75),
                                   (THIS_COMMAND, 0.5), (RAY_PROCESSES, 0.375)]
    assert sum(split.values()) == cpu_spent(before, after) == 2.625


def test_cpu_shares_name_the_largest_and_sum_the_rest() -> None:
    assert cpu_shares({"OwnerActor": 3.0, "DriverActor": 1.0}) == \
        "OwnerActor 75%, DriverActor 25%"
    six = {"a": 5.0, "b": 2.0, "c": 1.0, "d": 1.0, "e": 0.5, "f": 0.5}
    assert cpu_shares(six) == "a 50%, b 20%, c 10%, d 10%, the rest 10%"
    assert cpu_shares(six, shown=6) == "a 50%, b 20%, c 10%, d 10%, e 5%, f 5%"
    assert cpu_shares({}) == "-" and cpu_shares({"a": 0.0}) == "-"


def test_owner_writer_needs_packed_placement() -> None:
    result = CliRunner().invoke(app, ["run", "--writer", "owner", "--placement", "dedicated"])
    assert result.exit_code == 2
    assert "needs --placement packed" in result.output
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("ray_local")
def test_run_via_http_drives_the_sessions_through_the_gateway_and_verifies(
        tmp_path: Path) -> None:
    db = tmp_path / "http.db"
    report = run_json(db, "--via", "http", "--sessions", "3", "--turns", "2")
    assert report["via"] == "http"
    assert report["verification"] == {"passed": True, "sessions": 3, "mismatches": []}
    assert report["errors"] == 0 and report["turns_done"] == 6
    assert report["events"] > 0 and report["log_events"] >= report["events"]
    lat = report["append_latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
    # The same scripted turns as through Ray: the same turns done, and about as many
    # events (a workspace context is shown again when a compaction hid it, which depends
    # on timing).
    over_ray = run_json(tmp_path / "ray.db", "--sessions", "3", "--turns", "2")
    assert over_ray["turns_done"] == report["turns_done"]
    assert abs(over_ray["events"] - report["events"]) <= 0.05 * over_ray["events"]


@pytest.mark.usefixtures("ray_local")
def test_a_paced_run_streams_each_chunk_at_its_time_and_verifies(tmp_path: Path) -> None:
    """``--chunk-every``: a turn takes at least its appends' intervals (the drivers'
    pacing itself: tests/actors/test_paced_stream.py)."""
    report = run_json(tmp_path / "paced.db", "--sessions", "2", "--turns", "1",
                      "--chunk-every", "100")
    assert (report["mode"], report["chunk_every_ms"]) == ("chunk", 100.0)
    assert report["verification"]["passed"] and report["errors"] == 0
    assert report["turns_done"] == 2
    # A turn is 60 appends (ScriptConfig's defaults, the workspace context's one of
    # them): 59 intervals of 100 ms. Unpaced, it takes a fraction of that.
    assert report["appends"] >= 2 * 60
    assert report["wall_s"] >= 5.9
    assert ("A session's appends arrive every", "10 ms") in config_rows(
        RunConfig(chunk_every_ms=10))
    assert ("A session's appends arrive every", "as soon as the one before is "
            "acknowledged") in config_rows(RunConfig())


def test_chunk_pacing_needs_chunk_mode() -> None:
    result = CliRunner().invoke(app, ["run", "--mode", "batch", "--chunk-every", "10"])
    assert result.exit_code == 2
    assert "--chunk-every paces the appends of --mode chunk" in result.output
    assert "Traceback" not in result.output


def test_run_via_http_needs_durable_appends() -> None:
    result = CliRunner().invoke(app, ["run", "--via", "http", "--durability", "buffered"])
    assert result.exit_code == 2
    assert "--via http drives durable sessions" in result.output
