"""Where ``HostingConfig.colocate`` puts session actors, on a real multi-node cluster.

Ray's ``ray.cluster_utils.Cluster`` starts on this machine a head node, a node offering
shard ``s0``'s resource and a node offering ``SESSION_RESOURCE``. Two deployments of
shard ``s0`` (two files) are connected, one with ``colocate=True`` and one with
``colocate=False``; each appends to a session, then every actor is asked for its node
id. Runs in its own process (the test suite's processes hold a local Ray already) and
prints ONE JSON object on stdout: the node ids and the checks. Exits 0 when every
check holds.

The check itself (``check``) runs on any cluster with such nodes that this process is
the driver of: ``tests/support/cluster_scenario.py --colocate`` runs it on its own
cluster (with a node offering ``SESSION_RESOURCE`` added), before its run, so that the
suite starts one cluster for both.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from typing import Any

# Ray reads its authentication mode when it is imported: keep token authentication on.
os.environ.setdefault("RAY_AUTH_MODE", "token")

import ray
from ray.cluster_utils import Cluster

from surfacelog.actors.client import connect, local_ray_on_loopback
from surfacelog.actors.config import NAMESPACE, SESSION_RESOURCE, HostingConfig
from surfacelog.cli.localcluster import UNWATCHED_HEAD
from surfacelog.store.shardmap import Shard, ShardMap, default_resource


async def placed(folder: str, colocate: bool) -> dict[str, str]:
    """Node ids of the session actor and the journal of a one-shard deployment (its
    connect and shutdown, which wait on Ray, in a thread of their own)."""
    side = "on" if colocate else "off"
    shards = ShardMap((Shard("s0", os.path.join(folder, f"{side}.db"),
                             default_resource("s0")),))
    client = await asyncio.to_thread(
        connect, config=HostingConfig(shards, placement="packed", packs=1,
                                      idle_timeout_s=None, colocate=colocate),
        ready_timeout_s=60.0)
    try:
        handle = client.session(f"s-{side}")
        await handle.append("turn/start", {"turn": 1}, expected_seq=0)
        actor = await client.actor(handle.session_id)
        return {"session_actor": await actor.node_id.remote(),
                "journal": await client.writer.node_id.remote(),
                "length": str((await handle.surface()).length)}
    finally:
        await asyncio.to_thread(client.shutdown)


async def both_placed(folder: str) -> tuple[dict[str, str], dict[str, str]]:
    """``placed`` with and without ``colocate``, side by side: two deployments of their
    own (files, journals, session actors), so that their actors start together."""
    on, off = await asyncio.gather(placed(folder, True), placed(folder, False))
    return on, off


def check(folder: str) -> dict[str, Any]:
    """On the cluster this process is the driver of (``ray.init`` done), which has a
    node offering shard ``s0``'s resource and one offering ``SESSION_RESOURCE``: the
    node ids of both deployments' actors (their files in ``folder``) and the checks."""
    nodes: dict[str, str] = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for resource in node.get("Resources", {}):
                nodes[resource] = node["NodeID"]
    shard_node, sessions_node = nodes[default_resource("s0")], nodes[SESSION_RESOURCE]
    on, off = asyncio.run(both_placed(folder))
    report: dict[str, Any] = {
        "shard_node": shard_node, "sessions_node": sessions_node,
        "head_node": ray.get_runtime_context().get_node_id(), "on": on, "off": off}
    report["checks"] = {
        "colocated_session_on_shard_node": on["session_actor"] == shard_node,
        "separate_session_on_sessions_node": off["session_actor"] == sessions_node,
        "journals_on_shard_node": on["journal"] == off["journal"] == shard_node,
        "appended": on["length"] == off["length"] == "1",
    }
    return report


def main() -> int:
    out_fd = os.dup(1)
    os.dup2(2, 1)  # Ray's processes may write to fd 1: only the report goes there
    local_ray_on_loopback()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, **UNWATCHED_HEAD})
    report: dict[str, Any] = {}
    try:
        cluster.add_node(num_cpus=1, include_dashboard=False,
                         resources={default_resource("s0"): 1})
        cluster.add_node(num_cpus=1, include_dashboard=False,
                         resources={SESSION_RESOURCE: 1})
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False,
                 configure_logging=False)
        with tempfile.TemporaryDirectory(prefix="surfacelog-colocate-") as folder:
            report = check(folder)
    finally:
        ray.shutdown()
        cluster.shutdown()
    os.write(out_fd, (json.dumps(report, sort_keys=True) + "\n").encode())
    return 0 if report and all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
