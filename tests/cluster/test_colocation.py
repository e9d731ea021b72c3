"""``HostingConfig.colocate``: session actors on their shard's node, or on the nodes that
offer ``SESSION_RESOURCE``, checked by node id on a real multi-node cluster
(``tests/support/colocate_scenario.py``, in a child process: this one may hold the suite's local
Ray)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from surfacelog.actors.config import SESSION_RESOURCE, HostingConfig
from surfacelog.store.shards import Shard, ShardMap

from support import paths

SCENARIO = paths.SUPPORT / "colocate_scenario.py"


def test_colocate_places_session_actors_where_it_says() -> None:
    proc = subprocess.run([sys.executable, str(SCENARIO)], cwd=paths.REPO,
                          capture_output=True, text=True, timeout=300, check=False)

    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report = json.loads(lines[-1])
    assert report["checks"] and all(report["checks"].values()), report
    assert report["shard_node"] != report["sessions_node"] != report["head_node"]
    assert proc.returncode == 0


def test_session_resources() -> None:
    shards = ShardMap((Shard("s0", "/tmp/x.db", "surfacelog_shard_s0"),))
    assert HostingConfig(shards).session_resources(shards.shards[0]) == \
        {"surfacelog_shard_s0": 0.001}
    assert HostingConfig(shards, colocate=False).session_resources(shards.shards[0]) == \
        {SESSION_RESOURCE: 0.001}


def test_owner_writer_cannot_be_separated() -> None:
    shards = ShardMap.single("/tmp/x.db")
    with pytest.raises(ValueError, match="colocate"):
        HostingConfig(shards, placement="packed", writer="owner", colocate=False)
