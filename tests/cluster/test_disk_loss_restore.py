"""A shard's disk lost under durable load and the shard restored from its Litestream
replica on another node of a local multi-node cluster (``tests/support/disk_loss_scenario.py``,
run in a child process: a driver joins one Ray cluster only, and this test process may
hold the suite's local Ray).

Replication is asynchronous, so the acknowledged events not yet shipped are lost; the
report counts them, and everything else must match: every acknowledged event that is
in the restored file is there identical at its seq, only a suffix of each session is
missing, the restored file verifies, the sessions are served again (on a node with a
new id), and no ``litestream`` process is left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import paths
from support.cli_runs import NODE_LOSS_ENV, run_report

SCENARIO = paths.SUPPORT / "disk_loss_scenario.py"
ROOT = paths.REPO


def run_scenario(*args: str, timeout_s: float) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(SCENARIO), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"no report (exit {proc.returncode}); stderr:\n{proc.stderr[-6000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert not report["crashed"], report["crashed"]
    assert not report["failed"], (report, proc.stderr[-4000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return report


def _check_losses(report: dict[str, Any], count: int) -> None:
    assert len(report["losses"]) == count
    for loss in report["losses"]:
        assert loss["other_node"] and loss["differs"] == 0 and loss["gaps"] == 0
        # Something was acknowledged, and not everything was lost: the replica held the
        # sessions up to its last sync.
        assert loss["acked"] > 0 and loss["lost"] < loss["acked"]
        assert all(s["restored"] > 0 for s in loss["per_session"].values())
    assert report["lost"] == sum(loss["lost"] for loss in report["losses"])


def test_disk_loss_restored_on_another_node() -> None:
    """One shard, 4 sessions, durable load until each session's events reached the
    replica, one disk loss."""
    _check_losses(run_scenario("--sessions", "4", timeout_s=240), 1)


@pytest.mark.slow
def test_disk_loss_soak() -> None:
    """8 sessions, three disk losses in a row, 8 s of load before each."""
    _check_losses(run_scenario("--sessions", "8", "--warmup-s", "8", "--losses", "3",
                               timeout_s=900), 3)


# -- surfacelog run --replica DIR --kill-disk-every SEC ------------------------------------


def test_run_loses_disks_and_restores_them(tmp_path: Path) -> None:
    """The load run on a local cluster of two worker nodes with a replica per shard, a worker
    node losing its disk every 1.5 s (twice at most) and back 0.5 s later (found dead in
    about a second: ``NODE_LOSS_ENV``): it verifies, every acknowledged event found
    missing is on a shard that lost its disk (counted, not a failure), the shard map
    names the replicas, and no litestream process is left."""
    from surfacelog.actors.replication import litestream_processes
    from surfacelog.store.replica import ReplicaPlan
    from surfacelog.store.shardmap import load_shard_map

    db = tmp_path / "run.db"
    report = run_report(db, "--local-nodes", "2", "--shards", "2", "--sessions", "4",
                        "--turns", "12", "--replica", str(tmp_path / "replicas"),
                        "--kill-disk-every", "1.5", "--node-down", "0.5", "--max-kills", "2",
                        timeout_s=300, env=NODE_LOSS_ENV)

    assert report["verification"]["passed"] and not report["incomplete"]
    assert 1 <= report["disk_losses"] <= 2 and report["errors"] == 0
    assert len(report["node_kill_log"]) == report["disk_losses"]
    assert report["lost_to_disk_loss"] == report["lost_acknowledged"]
    assert not report["recovery_s"]["unrecovered"]
    assert all(k["disk_lost"] for k in report["node_kill_log"])
    shards = load_shard_map(tmp_path / "run.shards.json")
    for shard in shards.shards:
        assert shard.replica == str(tmp_path / "replicas" / shard.name)
        plan = ReplicaPlan.of(shard)
        assert plan is not None and not litestream_processes(str(plan.config_path))


@pytest.mark.parametrize(("args", "problem"), [
    (["--replica", "r"], "--replica needs --local-nodes"),
    (["--local-nodes", "2", "--kill-disk-every", "3"], "--kill-disk-every needs --replica"),
    (["--local-nodes", "2", "--replica", "r", "--kill-disk-every", "3",
      "--kill-node-every", "3"], "not both"),
])
def test_disk_options_are_checked(monkeypatch: pytest.MonkeyPatch, args: list[str],
                                  problem: str) -> None:
    from typer.testing import CliRunner

    from surfacelog.cli import app, run_display

    monkeypatch.setattr(run_display, "run_live", lambda cfg: pytest.fail("ran"))
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and problem in lines[0], result.output
