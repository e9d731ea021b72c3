"""A Ray cluster started the way an operator starts one: ``ray start --head`` and one
``ray start --address ...`` per shard, each a process of its own, on loopback.

Every node is started with ``--block`` (as KubeRay's containers start Ray), so each
node is one process of this module's: the ``ray start`` that stays in the foreground
and owns the node's Ray processes (raylet, agents, workers). Token authentication is
on, with a token of the test's own (``RAY_AUTH_TOKEN_PATH``, never ``~/.ray``); the head
offers no CPU and no shard, as deploy/ray-cluster.yaml starts it, and worker ``k``
offers shard ``sk``'s resource, with its own data folder as its working directory (its
disk). ``ray stop`` is never used: it stops every Ray of the machine, other users'
included; each node is stopped through its own ``ray start`` process, and whatever of
it is left is killed by pid.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from support.paths import ray_temp_root

RAY = str(Path(sys.executable).with_name("ray"))
"""The ``ray`` command of this environment."""
START_TIMEOUT_S = 120.0
"""How long a node may take to start (a loaded machine takes tens of seconds)."""
HEALTH_CHECKS = {"RAY_health_check_period_ms": "500",
                 "RAY_health_check_failure_threshold": "4"}
"""The head's checks of its nodes: a killed raylet is found dead in about 2 s (Ray's
defaults take about 15 s), so that its shard's actors restart on the node that returns
without waiting out the detection."""


_WAIT_FOR_NODES = """
import sys, time, ray
address, count, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout
ray.init(address=address, log_to_driver=False)
while sum(1 for n in ray.nodes() if n["Alive"]) < count:
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.1)
"""
"""The body of ``OperatorCluster.wait_for_nodes``'s child: exit 0 once the cluster at
ARGV[1] has ARGV[2] nodes alive, 1 after ARGV[3] seconds."""


def _kernels_first_port() -> int:
    """The lowest port the kernel hands out for a bind to port 0 (Linux: 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


QUIET_FIRST_PORT = 20_000
"""Above the ports Ray gives its workers (10002-19999 by default)."""


def quiet_port(taken: set[int]) -> int:
    """A port for one of the cluster's servers, free now and not in ``taken`` (added to
    it), from between Ray's worker ports and the kernel's range for a bind to port 0.
    A port the kernel picked (as this used to take) could be picked again for any
    process of the suite that binds port 0, Ray's gRPC servers of the other workers'
    clusters among them, between this probe and the node's own bind. Once in a CI run
    the head's runtime-env agent exited as it started (a port conflict is the cause Ray
    names first; its log went with the cluster's folder) and its raylet, then the head,
    went down with it. Raises ``RuntimeError`` when no such port is free."""
    picker = random.SystemRandom()
    last = _kernels_first_port()
    for _ in range(1000):
        port = picker.randrange(QUIET_FIRST_PORT, max(last, QUIET_FIRST_PORT + 1))
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError(f"no free port in {QUIET_FIRST_PORT}-{last - 1}")


class OperatorCluster:
    """A head and one worker per shard, started by ``ray start`` processes; ``stop``
    always. ``shards``: shard name -> the worker's data folder."""

    def __init__(self, root: Path, shards: dict[str, Path]) -> None:
        self.root = root
        self.shards = shards
        self.ports: set[int] = set()
        """The ports handed to this cluster's nodes (``quiet_port``)."""
        self.port = quiet_port(self.ports)
        self.token = root / "auth_token"
        self.token.write_text(secrets.token_hex(32))
        self.token.chmod(0o600)
        # Ray's session files, sockets and "current cluster" file in a folder of this
        # cluster's own: under the default /tmp/ray, `ray start --head` would make it
        # the cluster that any `ray.init()` on this machine joins (other users' too).
        # Short, beside Ray's own folder rather than under the test's temp dir: Unix
        # socket paths are limited to 107 bytes.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="sl-ray-",
                                              dir=ray_temp_root().parent))
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.seen: dict[int, psutil.Process] = {}
        """Every process of the cluster seen so far, by pid (see ``_note``)."""
        self.restarts = 0
        self.start_failures: list[str] = []
        """The worker starts that failed and were made again (``start``)."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment of every Ray process of the cluster and of its drivers: token
        authentication with the test's token. (``ray start`` refuses to form a cluster
        under ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which this process may have set
        for its own local Ray; the nodes are put on loopback by ``--node-ip-address``.)"""
        env = {k: v for k, v in os.environ.items()
               if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS",
                            "RAY_AUTH_TOKEN")}
        return {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token)}

    def _start(self, name: str, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        ports = ["--dashboard-agent-listen-port", "--metrics-export-port",
                 "--runtime-env-agent-port", "--dashboard-agent-grpc-port"]
        argv = [RAY, "start", "--block", "--node-ip-address=127.0.0.1",
                "--disable-usage-stats", f"--temp-dir={self.temp_dir}", *args,
                *(f"{option}={quiet_port(self.ports)}" for option in ports)]
        log = (self.root / f"{name}.log").open("ab")
        self.nodes[name] = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log,
                                            stderr=subprocess.STDOUT)
        log.close()

    def start(self) -> None:
        """Start the head, then every worker; returns once each node is registered.
        Raises ``TimeoutError`` (the nodes started so far keep running: ``stop``)."""
        self._start("head", ["--head", f"--port={self.port}", "--num-cpus=0",
                             "--include-dashboard=false"], self.root,
                    {**self.env(), **HEALTH_CHECKS})
        # One node at a time: a raylet that has not registered within 30 s fails its
        # `ray start` (Ray's own bound), which raylets starting together on a loaded
        # two-core machine can miss. Even alone it missed it once in a CI run, its
        # check of the GCS answering "Deadline Exceeded" while the suite loaded both
        # cores: that node is started once more, as an operator's container would be
        # (noted in ``start_failures``). Its failed `ray start` stopped what it began.
        for k, shard in enumerate(self.shards):
            for attempt in (1, 2):
                self.start_worker(shard)
                try:
                    self.wait_for_nodes(2 + k)
                    break
                except RuntimeError as exc:  # a `ray start` exited: this node's
                    if attempt == 2 or self.nodes["head"].poll() is not None:
                        raise
                    self.start_failures.append(str(exc))

    def start_worker(self, shard: str) -> None:
        """Start (or start again) shard ``shard``'s worker, in its data folder."""
        self._start(f"worker-{shard}", [
            f"--address={self.address}", "--num-cpus=1",
            "--resources=" + json.dumps({f"surfacelog_shard_{shard}": 1})],
            self.shards[shard], self.env())

    def wait_for_nodes(self, count: int) -> None:
        """Return once ``count`` nodes are alive, as a driver of the cluster sees them
        (one child process that joins, polls Ray's node table and leaves). Raises
        ``TimeoutError`` after ``START_TIMEOUT_S``, or ``RuntimeError`` when a node's
        ``ray start`` exited."""
        waiter = subprocess.Popen(
            [sys.executable, "-c", _WAIT_FOR_NODES, self.address, str(count),
             str(START_TIMEOUT_S)],
            env={**self.env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while waiter.poll() is None:
                for name, proc in self.nodes.items():
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name}: ray start exited {proc.returncode} "
                                           f"(see {self.root / name}.log)")
                time.sleep(0.1)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        if waiter.returncode != 0:
            raise TimeoutError(f"fewer than {count} nodes alive after {START_TIMEOUT_S} s")
        self._note()

    def _note(self) -> None:
        """Remember every process now under the nodes' ``ray start`` processes."""
        for proc in self.nodes.values():
            try:
                family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(
                    recursive=True)]
            except psutil.NoSuchProcess:
                continue
            self.seen.update({p.pid: p for p in family})

    def kill_raylet(self, shard: str) -> None:
        """Kill shard ``shard``'s worker raylet (SIGKILL: as a machine that loses
        power); its ``ray start --block`` sees it die, stops the rest of the node and
        exits. Returns once it has."""
        self._note()
        node = self.nodes[shard if shard == "head" else f"worker-{shard}"]
        (raylet,) = [p for p in psutil.Process(node.pid).children(recursive=True)
                     if p.name() == "raylet"]
        raylet.kill()
        node.wait(timeout=START_TIMEOUT_S)

    def restart_worker(self, shard: str) -> None:
        """Start shard ``shard``'s worker again (same resource, same folder); returns
        once it is registered (the dead node no longer counted alive)."""
        self.start_worker(shard)
        self.wait_for_nodes(1 + len(self.shards))
        self.restarts += 1

    def stop(self) -> list[str]:
        """Stop every node: SIGTERM to each ``ray start`` (which stops its node), then
        SIGKILL, by pid, to every process of the cluster still running. Returns the
        processes that had to be killed so (``name pid``)."""
        self._note()
        for proc in self.nodes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.nodes.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _, alive = psutil.wait_procs(list(self.seen.values()), timeout=30)
        left: list[str] = []
        for proc in alive:
            try:
                left.append(f"{proc.name()} {proc.pid}")
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return left

    def still_running(self) -> list[Any]:
        """The processes of the cluster seen so far that still run."""
        return [p for p in self.seen.values()
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
