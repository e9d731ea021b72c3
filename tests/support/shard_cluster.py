"""A multi-node Ray cluster holding the shards of a shard map, kept up for a test.

    python tests/support/shard_cluster.py MAP

Ray's multi-node harness (``ray.cluster_utils.Cluster``) starts one node per shard of
MAP, each its own raylet on loopback with token authentication on: the head node offers
the first shard's resource, one worker node each of the others'. (The load run's own
``--local-nodes`` keeps the head free of shards so that it can remove worker nodes; no
node is removed here, and a raylet fewer keeps the test short.) Once every node is
registered it prints one JSON line ``{"address", "auth_mode"}`` on stdout and keeps the
cluster up until its stdin is closed (or it is sent SIGTERM); then it stops every node
and exits 0. It runs in a process of its own because the test process may hold the
suite's local Ray, and because the driver under test must join a cluster it did not
start, as an operator's driver does.
"""

from __future__ import annotations

import os

# Ray reads its authentication mode when it is imported: a Cluster started by hand (not
# by ray.init) would otherwise run without token authentication. Keep it on.
os.environ.setdefault("RAY_AUTH_MODE", "token")

import json
import signal
import sys
import threading

from ray.cluster_utils import Cluster

from surfacelog.actors.client import local_ray_on_loopback
from surfacelog.actors.raycompat import auth_mode, ensure_auth_token
from surfacelog.cli.localcluster import NODE_START_TIMEOUT_S, UNWATCHED_HEAD, health_checks
from surfacelog.store.shardmap import load_shard_map


def main() -> int:
    shards = load_shard_map(sys.argv[1]).shards
    out_fd = os.dup(1)
    os.dup2(2, 1)  # Ray's processes may write to fd 1: only the JSON line goes there
    local_ray_on_loopback()
    ensure_auth_token()
    resources = [{} if s.resource is None else {s.resource: 1.0} for s in shards]
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": resources[0], "include_dashboard": False,
        "_system_config": health_checks(), **UNWATCHED_HEAD})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        for offered in resources[1:]:
            cluster.add_node(num_cpus=1, resources=offered, include_dashboard=False)
        cluster.wait_for_nodes(timeout=NODE_START_TIMEOUT_S)
        os.write(out_fd, (json.dumps({"address": cluster.address,
                                      "auth_mode": auth_mode()}) + "\n").encode())
        # stdin closing is the test's "done" (its end, or its process's death).
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        stop.wait()
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
