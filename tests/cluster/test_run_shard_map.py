"""``surfacelog run --address ADDR --shard-map FILE``: the load run against a cluster it
did not start, whose worker nodes hold the shards of the map.

The cluster (``tests/support/shard_cluster.py``: Ray's ``ray.cluster_utils.Cluster``,
two nodes, each its own raylet offering one shard's resource) runs in a process of its
own, as an operator's cluster would; each shard's file sits in its node's own folder
(``node0/``, ``node1/``: the node's disk). The run
is another process (``tests/support/audited_cli.py``, the CLI under a Python audit hook),
started in an empty folder: it must drive the shards through their writers and be
verified by them on their nodes, never opening, listing or spawning a reader of a shard
file itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from surfacelog.cli.localcluster import write_shard_map
from surfacelog.store.digests import shard_digests
from surfacelog.store.shardmap import Shard, ShardMap, default_resource, load_shard_map

from support.cli_runs import CLUSTER_ENV
from support.paths import REPO, SUPPORT

NODES = 2


@dataclass(frozen=True)
class ShardCluster:
    address: str
    auth_mode: str
    shard_map: Path
    node_dirs: list[Path]


@pytest.fixture(scope="module")
def shard_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShardCluster]:
    """Two nodes, shard ``sK`` on node ``K`` in the node's own folder; the map
    (absolute paths) in a folder of its own. Stopped at the end of the module."""
    root = tmp_path_factory.mktemp("shard-cluster")
    node_dirs = [root / f"node{k}" for k in range(NODES)]
    for folder in node_dirs:
        folder.mkdir()
    shards = ShardMap(tuple(Shard(f"s{k}", str(node_dirs[k] / f"s{k}.db"),
                                  default_resource(f"s{k}")) for k in range(NODES)))
    (root / "config").mkdir()
    map_path = root / "config" / "shards.json"
    write_shard_map(shards, map_path)
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "shard_cluster.py"),
                             str(map_path)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, **CLUSTER_ENV})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # once every node is registered (or it failed)
        assert line, f"the cluster did not start (exit {proc.wait(timeout=60)})"
        started = json.loads(line)
        yield ShardCluster(started["address"], started["auth_mode"], map_path, node_dirs)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the helper's "stop": it shuts every node down
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def audited_run(cluster: ShardCluster, cwd: Path, *args: str
                ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``surfacelog run --address ... --shard-map ... ARGS --json`` in ``cwd``, under the
    audit hook watching the nodes' folders; its result and the audit."""
    audit = cwd.parent / f"{cwd.name}.audit.json"
    env = {**os.environ, "RAY_AUTH_MODE": cluster.auth_mode,
           # The cluster listens on loopback only: the driver must take loopback as its
           # node's address too (Ray would take the machine's outward one), as
           # ``local_ray_on_loopback`` does for the cluster's own processes.
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "SURFACELOG_AUDIT_LOG": str(audit),
           "SURFACELOG_AUDIT_WATCH": json.dumps([str(d) for d in cluster.node_dirs])}
    proc = subprocess.run(
        [sys.executable, str(SUPPORT / "audited_cli.py"), "run", "--address",
         cluster.address, "--shard-map", str(cluster.shard_map), "--json", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)
    found: dict[str, Any] = json.loads(audit.read_text())
    return proc, found


def test_run_drives_and_verifies_a_clusters_shards_through_their_writers(
        shard_cluster: ShardCluster, tmp_path: Path) -> None:
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    proc, audit = audited_run(shard_cluster, driver_dir, "--sessions", "6", "--turns", "2")
    context = f"exit {proc.returncode}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, context
    assert "Traceback" not in proc.stderr, context
    (line,) = [s for s in proc.stdout.splitlines() if s.strip()]
    report = json.loads(line)

    assert report["verification"] == {"passed": True, "sessions": 6, "mismatches": []}
    assert report["errors"] == 0 and report["incomplete"] == [], report["last_error"]
    assert report["turns_done"] == 12 and report["lost_acknowledged"] == 0
    assert report["shard_map"] == str(shard_cluster.shard_map)
    assert sorted(report["shards"]) == ["s0", "s1"]
    assert report["cpu_s"] is None  # a joined cluster's processes are not this machine's
    # The writers measured their shards on their nodes' disks (this machine's disk
    # has no shard file where the driver looks).
    assert report["store_bytes"] > 0

    # The driver opened no shard file, listed no node's folder, started no process
    # (the old verification ran ``surfacelog digest`` over the files), and left
    # nothing in its working directory.
    assert audit["opened"] == [] and audit["sqlite"] == [], audit
    assert audit["spawned"] == [], audit
    assert list(driver_dir.iterdir()) == []

    # Each node's folder holds its shard, whose sessions are exactly the run's, each
    # on its home shard (read here, by the test, not by the run).
    shards = load_shard_map(shard_cluster.shard_map)
    for k, folder in enumerate(shard_cluster.node_dirs):
        assert (folder / f"s{k}.db").is_file()
    stored = asyncio.run(shard_digests(shards))
    assert sorted(e.session for e in stored) == [f"run-{k:04d}" for k in range(6)]
    assert all(e.shard == shards.home(e.session).name for e in stored)
    assert {e.shard for e in stored} == {"s0", "s1"}
