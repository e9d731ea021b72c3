"""``cli.nodewatch``: nodes lost without the run's chaos removing them, found in readings
of Ray's node table (the table's entries as ``ray.nodes()`` gives them; no Ray here:
the run on a real cluster is tests/cluster/test_load_run_multinode.py)."""

from __future__ import annotations

from typing import Any

from surfacelog.cli.nodewatch import NodeLoss, NodeWatch
from surfacelog.store.shardmap import Shard, ShardMap

SHARDS = ShardMap((Shard("s0", "/d/s0.db", resource="shard_s0"),
                   Shard("s1", "/d/s1.db", resource="shard_s1")))


def node(node_id: str, alive: bool, *resources: str) -> dict[str, Any]:
    return {"NodeID": node_id, "Alive": alive,
            "Resources": {"CPU": 1.0, **{r: 1.0 for r in resources}} if alive else {}}


def test_a_node_lost_outside_the_chaos_is_found_with_its_shards_and_their_return() -> None:
    removed: set[str] = set()
    watch = NodeWatch(SHARDS, lambda: removed)
    head, a, b = node("head", True), node("a", True, "shard_s0"), node("b", True, "shard_s1")
    watch.observe([head, a, b], 10.0)
    assert watch.losses == []
    watch.observe([head, node("a", False), b], 11.0)  # a raylet killed from outside
    assert watch.losses == [NodeLoss("a", 11.0, ["s0"])]
    assert watch.losses[0].unrecovered() == ["s0"]
    watch.observe([head, node("a", False), b], 12.0)  # still dead: one loss, not two
    watch.observe([head, node("a", False), b, node("a2", True, "shard_s0")], 14.5)
    assert watch.losses == [NodeLoss("a", 11.0, ["s0"], {"s0": 14.5})]
    assert watch.losses[0].describe(started_at=1.0) == (
        "node a lost at 10.0 s, not by the run's chaos: s0 offered again after 3.5 s")


def test_the_runs_own_removals_and_nodes_never_seen_alive_are_not_losses() -> None:
    removed: set[str] = set()
    watch = NodeWatch(SHARDS, lambda: removed)
    watch.observe([node("head", True), node("b", True, "shard_s1"), node("old", False)], 1.0)
    removed.add("b")  # the chaos records its kill before the node dies
    watch.observe([node("head", True), node("b", False), node("old", False)], 2.0)
    assert watch.losses == []
    watch.observe([node("head", False), node("b", False)], 3.0)  # holds no shard
    assert watch.losses == [NodeLoss("head", 3.0, [])]
    assert watch.losses[0].describe(0.0) == (
        "node head lost at 3.0 s, not by the run's chaos: no shard of the run")
