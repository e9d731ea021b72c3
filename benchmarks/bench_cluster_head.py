"""What a local cluster's head costs with and without its two watchers.

    .venv/bin/python benchmarks/bench_cluster_head.py [--rounds 2] [--idle 30]

Each round starts, one after the other, a head and two worker nodes on this machine
(``ray.cluster_utils.Cluster``, one CPU each) as Ray starts them by default and as
``surfacelog run --local-nodes`` does (``localcluster.UNWATCHED_HEAD``: no log monitor,
no autoscaler monitor), connects with ``log_to_driver=False``, starts and kills 20
actors, stays idle ``--idle`` seconds, and sums the CPU every process of the cluster
spent, by kind (read with psutil before shutting it down). The figure is the ratio of
the unwatched cluster's total to the default's in the same round; benchmarks/README.md
("A local cluster's head") records it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

KINDS = ("log_monitor", "monitor.py", "dashboard/agent", "dashboard.py",
         "runtime_env/agent", "raylet/raylet", "gcs_server")


def kind_of(cmdline: list[str]) -> str:
    """A cluster process's kind: a daemon by its program (the script a Python runs, or
    the executable), else a Ray worker or agent (retitled ``ray::...``)."""
    args = [a for a in cmdline[:3] if not a.startswith("-")]
    python = bool(args) and "python" in os.path.basename(args[0])
    program = args[1] if python and len(args) > 1 else (args[0] if args else "")
    return next((k for k in KINDS if k in program), "workers and agents")


def measure(unwatched: bool, idle_s: float) -> dict[str, float]:
    """CPU seconds by kind of one cluster's processes over its life (this process,
    the driver, not counted)."""
    import psutil
    import ray
    from ray.cluster_utils import Cluster

    from surfacelog.actors.client import local_ray_on_loopback
    from surfacelog.cli.localcluster import UNWATCHED_HEAD

    local_ray_on_loopback()
    head: dict[str, Any] = {"num_cpus": 1, "include_dashboard": False}
    if unwatched:
        head.update(UNWATCHED_HEAD)
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, include_dashboard=False)
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)

        @ray.remote
        class Echo:
            def ping(self) -> int:
                return 1

        for _ in range(20):
            actor = Echo.remote()  # type: ignore[attr-defined]
            ray.get(actor.ping.remote())
            ray.kill(actor)
        time.sleep(idle_s)  # the figure is what an idle cluster spends over this time
        spent: dict[str, float] = {}
        for proc in psutil.Process().children(recursive=True):
            try:
                cmdline, times = proc.cmdline(), proc.cpu_times()
            except psutil.Error:
                continue
            kind = kind_of(cmdline)
            spent[kind] = spent.get(kind, 0.0) + times.user + times.system
        return spent
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--one", choices=("default", "unwatched"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one cluster, its figures as one line
        spent = measure(args.one == "unwatched", args.idle)
        print("SPENT", json.dumps(spent))
        return 0
    ratios = []
    for n in range(1, args.rounds + 1):
        totals = {}
        for which in ("default", "unwatched"):
            # A fresh interpreter each: a Cluster leaves Ray state behind in its process.
            out = subprocess.run(
                [sys.executable, __file__, "--one", which, "--idle", str(args.idle)],
                capture_output=True, text=True, check=True)
            line = next(x for x in out.stdout.splitlines() if x.startswith("SPENT "))
            spent = json.loads(line[len("SPENT "):])
            totals[which] = sum(spent.values())
            parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items()))
            print(f"round {n} {which:9s} {totals[which]:6.2f} s CPU ({parts})")
        ratios.append(totals["unwatched"] / totals["default"])
        print(f"round {n} unwatched / default: {ratios[-1]:.2f}x")
    print(f"unwatched / default over {args.rounds} rounds: "
          f"{min(ratios):.2f}-{max(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
