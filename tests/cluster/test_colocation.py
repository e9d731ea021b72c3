"""``HostingConfig.colocate``: session actors on their shard's node, or on the nodes that
offer ``SESSION_RESOURCE``, checked by node id on a real multi-node cluster
(``tests/support/colocate_scenario.py``'s check, in a child process: this one may hold
the suite's local Ray). The check runs on the cluster of the short node-loss run
(``cluster_scenario.py --short --colocate``, shared with
``tests/cluster/test_node_removed_and_added.py``), before that run, on its shard ``s0``'s
node and a node of its own offering ``SESSION_RESOURCE``."""

from __future__ import annotations

import pytest

from surfacelog.actors.config import SESSION_RESOURCE, HostingConfig
from surfacelog.store.shardmap import Shard, ShardMap

from support.cli_runs import short_cluster_run


def test_colocate_places_session_actors_where_it_says() -> None:
    run = short_cluster_run()
    report = run.get("colocate")
    assert report is not None, (f"no colocation report (exit {run['_returncode']}, "
                                f"crashed: {run.get('crashed')}):\n{run['_stderr_tail']}")
    # It ran to its end (as the standalone script's exit status 0 says), every check held.
    assert report["crashed"] is None, (report, run["_stderr_tail"])
    assert report["checks"] and all(report["checks"].values()), report
    assert report["shard_node"] != report["sessions_node"] != report["head_node"]


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
