"""``surfacelog run --local-nodes N``: the load run on a multi-node Ray cluster started
on this machine, its worker nodes removed and added back (``--kill-node-every``).

Each run is a child process (``python -m surfacelog.cli run ... --json``): the test
process may already hold the suite's local Ray, and a process joins one Ray cluster
only. The assertions read the run's JSON report and the shard files it leaves.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner

from surfacelog.cli import app, run_display
from surfacelog.cli.localcluster import HEALTH_CHECKS, health_checks, make_shard_map, shard_files
from surfacelog.store.shardmap import default_resource, load_shard_map

from support import paths
from support.cli_runs import CLUSTER_ENV, NODE_LOSS_ENV, cli, clis, run_report


def assert_shard_figures(report: dict[str, Any], names: list[str]) -> None:
    shards = report["shards"]
    assert sorted(shards) == names
    assert sum(s["events"] for s in shards.values()) == report["events"]
    assert sum(s["appends"] for s in shards.values()) == report["appends"]
    for name, shard in shards.items():
        assert shard["events"] > 0, name
        assert shard["events_per_s"] == pytest.approx(shard["events"] / report["wall_s"],
                                                      rel=0.05), name
        lat = shard["append_latency_ms"]
        assert 0 < lat["p50"] <= lat["p99"], name


def stored_sessions(digest: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Session -> shard, from ``digest --shard-map MAP --json`` (the shard files replayed
    in a fresh process)."""
    assert digest.returncode == 0, digest.stderr
    return {e["session"]: e["shard"] for e in json.loads(digest.stdout)}


def test_cluster_run_survives_node_kills(tmp_path: Path) -> None:
    """Two worker nodes, two shards, a node removed every 3 s, twice at most (the first
    gracefully, the next abruptly) and added back 0.5 s later (an abruptly killed one found dead
    in about a second: ``NODE_LOSS_ENV``): the run ends verified with nothing
    acknowledged lost, no error, and each kill's shards serving again."""
    db = tmp_path / "kills.db"
    html = tmp_path / "kills.html"
    report = run_report(db, "--local-nodes", "2", "--shards", "2", "--sessions", "6",
                        "--turns", "25", "--kill-node-every", "3", "--node-down", "0.5",
                        "--max-kills", "2", "--report", str(html), env=NODE_LOSS_ENV)

    assert report["verification"] == {"passed": True, "sessions": 6, "mismatches": []}
    assert report["errors"] == 0, report["last_error"]
    assert report["lost_acknowledged"] == 0 and report["write_failures"] == []
    assert report["turns_done"] + report["turns_interrupted"] == 6 * 25
    assert report["auth_mode"] == "token"
    # Two kills at most: one graceful, one abrupt. Unbounded, the kills go on as long as
    # the run (17.9 s alone on the machine, 155 s beside a test run, 4 December), each
    # a node's processes started again.
    assert 1 <= report["node_kills"] <= 2
    recovery = report["recovery_s"]
    # Each kill takes the one shard of its node; each came back.
    assert recovery["unrecovered"] == [] and recovery["count"] == report["node_kills"]
    assert 0 < recovery["p50"] <= recovery["max"]
    kills = report["node_kill_log"]
    assert len(kills) == report["node_kills"]
    assert [k["graceful"] for k in kills] == [n % 2 == 0 for n in range(len(kills))]
    for kill in kills:
        # Node k hosts shard s{k}: it is the one lost, and it came back.
        assert kill["shards"] == [f"s{kill['node']}"], kill
        assert all(r is not None and r > 0 for r in kill["recovery_s"].values()), kill
    assert_shard_figures(report, ["s0", "s1"])
    assert [report["shards"][s]["node"] for s in ("s0", "s1")] == [0, 1]
    assert sum(s["node_kills"] for s in report["shards"].values()) == report["node_kills"]
    for shard in report["shards"].values():
        assert shard["recovery_s"]["count"] == shard["node_kills"]

    # The shard map next to the database names the shard files, which replay to
    # every session, each on its home shard (as the run's own verification found).
    shard_map = Path(report["shard_map"])
    assert shard_map == tmp_path / "kills.shards.json"
    assert [Path(s.path).name for s in load_shard_map(shard_map).shards] == \
        ["kills.s0.db", "kills.s1.db"]
    digest, verify = clis(("digest", "--shard-map", str(shard_map), "--json"),
                          ("verify", "--shard-map", str(shard_map)), timeout_s=120)
    stored = stored_sessions(digest)
    assert len(stored) == 6
    assert verify.returncode == 0, verify.stdout + verify.stderr

    text = html.read_text(encoding="utf-8")
    assert 'id="shards"' in text and "recovery" in text


def test_cluster_run_without_kills_reports_each_shard(tmp_path: Path) -> None:
    """One worker node hosting two shards, no kills: per-shard figures, no outage."""
    report = run_report(tmp_path / "calm.db", "--local-nodes", "1", "--shards", "2",
                        "--sessions", "4", "--turns", "2", env=CLUSTER_ENV)
    assert report["verification"]["passed"] and report["errors"] == 0
    assert report["node_kills"] == 0 and report["recovery_s"]["count"] == 0
    assert_shard_figures(report, ["s0", "s1"])
    assert {s["node"] for s in report["shards"].values()} == {0}
    assert all(s["node_kills"] == 0 for s in report["shards"].values())


def _raylet_offering(root: psutil.Process, resource: str) -> psutil.Process | None:
    """The raylet among ``root``'s descendants whose node offers ``resource``."""
    for child in root.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            line = " ".join(child.cmdline())
            if "raylet" in child.name() and f"{resource}," in line:
                return child
    return None


def test_a_node_lost_outside_the_chaos_is_reported_and_its_shard_not_verified(
        tmp_path: Path) -> None:
    """No chaos asked; worker node 1's raylet is killed from outside once its shard
    stores appends. The run finds the loss in Ray's node table, names the node, when,
    and its shard (never back), gives that shard's sessions up after the outage budget,
    and ends incomplete (exit 4) saying the shard was not verified: it claims nothing
    about what that shard holds."""
    db = tmp_path / "lost.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "surfacelog.cli", "run", "--db", str(db), "--json",
         "--local-nodes", "2", "--shards", "2", "--sessions", "4", "--turns", "30",
         "--outage-budget", "2"],
        cwd=paths.REPO, env={**os.environ, **NODE_LOSS_ENV}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        wal = tmp_path / "lost.s1.db-wal"
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            # Past what creating the sessions writes: the agents are appending, and the
            # run's node watch has read the node table with the node alive.
            if wal.exists() and wal.stat().st_size > 64_000:
                raylet = _raylet_offering(psutil.Process(proc.pid), default_resource("s1"))
                if raylet is not None:
                    raylet.kill()
                    break
            time.sleep(0.05)
        else:
            pytest.fail(f"the run ended or never wrote shard s1: {proc.communicate()}")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 4, err[-3000:]
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["node_kills"] == 0
    [loss] = report["nodes_lost_outside_chaos"]
    assert loss["shards"] == ["s1"] and loss["back_after_s"] == {"s1": None}
    assert 0 < loss["lost_s"] < report["wall_s"]
    [why] = [line for line in report["incomplete"] if "not by the run's chaos" in line]
    assert why.startswith(f"node {loss['node_id'][:12]} lost at ")
    assert why.endswith("shard(s) s1 not verified")
    assert report["verification"]["passed"] is False


@pytest.mark.parametrize(("args", "problem"), [
    (["--kill-node-every", "4"], "--kill-node-every needs --local-nodes"),
    (["--shards", "2"], "--shards needs --local-nodes"),
    (["--local-nodes", "2", "--address", "ray://x:10001"], "cannot join --address"),
])
def test_cluster_options_need_a_local_cluster(monkeypatch: pytest.MonkeyPatch,
                                              args: list[str], problem: str) -> None:
    monkeypatch.setattr(run_display, "run_live", lambda cfg: pytest.fail("ran"))
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("usage error: surfacelog run: "), \
        result.output
    assert problem in lines[0] and "Traceback" not in result.output


def test_bad_option_in_a_child_process_is_one_line() -> None:
    proc = cli("run", "--kill-node-every", "4", timeout_s=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "needs --local-nodes" in proc.stderr


def test_health_checks_take_rays_own_variables() -> None:
    """A local cluster's node health checks: ``HEALTH_CHECKS``, or Ray's own variables
    when set (a cluster's system config would take precedence over them)."""
    assert health_checks({}) == HEALTH_CHECKS == {
        "health_check_period_ms": 1000, "health_check_failure_threshold": 5}
    assert health_checks({"RAY_health_check_period_ms": " 200 "}) == {
        "health_check_period_ms": 200, "health_check_failure_threshold": 5}
    assert health_checks({"RAY_health_check_failure_threshold": "3",
                          "RAY_health_check_timeout_ms": "10"}) == {
        "health_check_period_ms": 1000, "health_check_failure_threshold": 3}
    for bad in ("0", "-5", "1.5", "soon"):
        with pytest.raises(ValueError, match="RAY_health_check_period_ms"):
            health_checks({"RAY_health_check_period_ms": bad})


def test_shard_files_sit_next_to_the_database(tmp_path: Path) -> None:
    files, map_path = shard_files(tmp_path / "surfacelog.db", 3)
    assert [f.name for f in files] == ["surfacelog.s0.db", "surfacelog.s1.db",
                                       "surfacelog.s2.db"]
    assert map_path == tmp_path / "surfacelog.shards.json"
    shards, _ = make_shard_map(tmp_path / "x", 2)
    assert [(s.name, Path(s.path).name, s.resource) for s in shards.shards] == [
        ("s0", "x.s0.db", "surfacelog_shard_s0"), ("s1", "x.s1.db", "surfacelog_shard_s1")]


@pytest.mark.slow
def test_soak_cluster_run_many_node_kills(tmp_path: Path) -> None:
    """Three worker nodes, four shards (node 0 hosts two), a node removed every 5 s,
    alternately gracefully and abruptly, for about two minutes (24 sessions x 240 turns:
    since calls coalesce, 60 turns ended within three kills)."""
    report = run_report(tmp_path / "soak.db", "--local-nodes", "3", "--shards", "4",
                        "--sessions", "24", "--turns", "240", "--kill-node-every", "5",
                        timeout_s=1500)
    assert report["verification"]["passed"], report["verification"]
    assert report["errors"] == 0, report["last_error"]
    assert report["lost_acknowledged"] == 0 and report["write_failures"] == []
    assert report["node_kills"] >= 4 and report["node_kills_abrupt"] >= 2
    assert report["recovery_s"]["unrecovered"] == []
    assert_shard_figures(report, ["s0", "s1", "s2", "s3"])
