"""The operator's path end to end, on this machine: a Ray cluster started with ``ray
start --head`` and one ``ray start --address ...`` per shard (``tests/support/
operator_cluster.py``: separate processes on loopback, token authentication on, each
worker offering its shard's resource from its own data folder, as
deploy/shards.bare-metal.json describes), then ``surfacelog run --address ...
--shard-map ...`` from a folder holding no shard file, with a worker's raylet killed
and its node started again mid-run.

The run must end verified (by the shards' writers, on their nodes), with nothing
acknowledged lost, and every process of the cluster stopped at the end. The default
test is the short version (one kill); ``-m slow`` kills each worker in turn under more
load.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from surfacelog.cli.localcluster import write_shard_map
from surfacelog.store.shardmap import Shard, ShardMap, default_resource

from support import paths
from support.operator_cluster import OperatorCluster

RUN_TIMEOUT_S = 600.0


MID_RUN_EVENTS = 100
"""Events a shard holds when its node is killed: the drivers are appending to it."""


def events_stored(db: Path) -> int:
    """The events committed to the shard file ``db`` (read here by the test, on the
    node's folder; 0 while it cannot be read yet)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
    except sqlite3.Error:
        return 0
    return int(count)


def operator_run(root: Path, shards: int, sessions: int, turns: int,
                 kills: list[str]) -> tuple[dict[str, Any], OperatorCluster, list[str]]:
    """Start the cluster, run the load against it from an empty folder, and for each
    shard of ``kills`` in turn, once its file is being written, kill its worker's
    raylet and start the node again. Returns the run's report, the cluster (stopped)
    and the processes that ``stop`` had to kill."""
    names = [f"s{k}" for k in range(shards)]
    folders = {name: root / f"node-{name}" for name in names}
    for folder in folders.values():
        folder.mkdir()
    shard_map = ShardMap(tuple(Shard(name, str(folders[name] / "surfacelog.db"),
                                     default_resource(name)) for name in names))
    (root / "etc").mkdir()
    map_path = root / "etc" / "shards.json"
    write_shard_map(shard_map, map_path)
    driver_dir = root / "driver"
    driver_dir.mkdir()
    cluster = OperatorCluster(root, folders)
    left: list[str] = []
    try:
        cluster.start()
        env = {**cluster.env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        with (root / "run.stderr").open("wb") as err:
            run = subprocess.Popen(
                [sys.executable, "-m", "surfacelog.cli", "run", "--address",
                 cluster.address, "--shard-map", str(map_path), "--json", "--sessions",
                 str(sessions), "--turns", str(turns)],
                cwd=driver_dir, env=env, stdout=subprocess.PIPE, stderr=err)
            try:
                for shard in kills:
                    db = Path(shard_map.get(shard).path)
                    # Mid-run: once the drivers have appended to the shard for a while
                    # (a kill before they start would test only the start-up).
                    floor = events_stored(db) + MID_RUN_EVENTS
                    deadline = time.monotonic() + RUN_TIMEOUT_S
                    while events_stored(db) < floor and run.poll() is None:
                        assert time.monotonic() < deadline, "the shard was never written"
                        time.sleep(0.05)
                    assert run.poll() is None, "the run ended before the kill"
                    cluster.kill_raylet(shard)
                    cluster.restart_worker(shard)
                out, _ = run.communicate(timeout=RUN_TIMEOUT_S)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.wait()
        stderr = (root / "run.stderr").read_text(errors="replace")
        context = f"exit {run.returncode}\nstderr:\n{stderr[-4000:]}"
        assert run.returncode == 0, context
        assert "Traceback" not in stderr, context
        (line,) = [s for s in out.decode().splitlines() if s.strip()]
        report: dict[str, Any] = json.loads(line)
        assert list(driver_dir.iterdir()) == []  # nothing written where the driver runs
    finally:
        left = cluster.stop()
    return report, cluster, left


def check(report: dict[str, Any], cluster: OperatorCluster, left: list[str],
          sessions: int, turns: int, kills: int) -> None:
    assert report["verification"] == {"passed": True, "sessions": sessions,
                                      "mismatches": []}
    assert report["incomplete"] == [] and report["errors"] == 0, report["last_error"]
    assert report["lost_acknowledged"] == 0 and report["write_failures"] == []
    assert report["turns_done"] + report["turns_interrupted"] == sessions * turns
    assert sorted(report["shards"]) == sorted(cluster.shards)
    assert cluster.restarts == kills
    # The killed shard's requests were refused while its node was down, and sent again.
    assert report["unavailable"] + report["outage_retries_other"] + report["resent"] > 0
    # Every process of the cluster stopped at the end, none of them by force, and it
    # never became the machine's "current" Ray (what a bare `ray.init()` joins).
    assert left == [] and cluster.still_running() == []
    current = paths.ray_temp_root() / "ray_current_cluster"
    assert not current.exists() or cluster.address not in current.read_text()
    for folder in cluster.shards.values():
        assert (folder / "surfacelog.db").is_file()


def test_operator_cluster_run_survives_a_raylet_killed_and_restarted(
        tmp_path: Path) -> None:
    """CI's short run: two shard workers, shard s1's raylet killed once."""
    report, cluster, left = operator_run(tmp_path, shards=2, sessions=4, turns=15,
                                         kills=["s1"])
    check(report, cluster, left, sessions=4, turns=15, kills=1)


@pytest.mark.slow
def test_operator_cluster_soak_each_worker_killed_in_turn(tmp_path: Path) -> None:
    """Three shard workers, each one's raylet killed and restarted in turn, under 12
    sessions of 20 turns."""
    report, cluster, left = operator_run(tmp_path, shards=3, sessions=12, turns=20,
                                         kills=["s0", "s1", "s2"])
    check(report, cluster, left, sessions=12, turns=20, kills=3)

