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


class _Nodes:
    """The part of ``LocalCluster`` the node chaos uses, over worker nodes 0 and 1 that
    each hold one shard; ``dead`` are lost already (killed from outside)."""

    nodes = 2

    def __init__(self, dead: set[int]) -> None:
        self.dead = dead
        self.removed: list[tuple[int, bool]] = []

    def shards_on(self, node: int) -> list[str]:
        return [f"s{node}"]

    def node_id_of(self, node: int) -> str:
        return f"id-{node}"

    def is_alive(self, node: int) -> bool:
        return node not in self.dead

    def remove_node(self, node: int, graceful: bool) -> None:
        self.removed.append((node, graceful))

    def add_node(self, node: int) -> None:
        self.dead.discard(node)


async def test_the_chaos_removes_a_node_found_dead_as_found_dead_never_gracefully() -> None:
    """The first removal is a graceful one, but its node (whichever the seed picks) is
    dead already: it is recorded ``found_dead`` and removed without grace; the next (the
    seed picks the same node, back by then) is abrupt by turn. Each kill names its
    node's Ray id, which the node watch takes for the run's own removal."""
    import asyncio

    from surfacelog.cli.localcluster import node_chaos
    from surfacelog.cli.runmodel import NodeKill

    cluster = _Nodes(dead={0, 1})
    kills: list[NodeKill] = []
    done = asyncio.Event()

    async def probe(shard: str) -> None:
        if len(kills) == 2:
            done.set()

    await asyncio.wait_for(node_chaos(cluster, 0.01, 0.0, 1, probe, done, kills),
                           timeout=30)
    assert [(k.graceful, k.found_dead) for k in kills] == [(False, True), (False, False)]
    assert [k.node_id for k in kills] == [f"id-{k.node}" for k in kills]
    assert cluster.removed == [(k.node, False) for k in kills]
