"""``surfacelog run --local-nodes N``: a multi-node Ray cluster on this machine, its
shards, and the loss and return of its worker nodes.

The cluster is Ray's own multi-node harness (``ray.cluster_utils.Cluster``): a head node
that offers no shard (it holds the GCS and the run's own actors, and is never removed)
and N worker nodes, each a separate raylet. Shard ``sK``'s custom resource
(``surfacelog_shard_sK``) is offered by worker node ``K mod N``, so the shard's writer and
session actors run there. Every shard file sits next to the run's ``--db`` on this
machine's disk, so a node that comes back with the shard's resource finds the shard's
file, as a node returning with its disk would.

Names, for ``--db surfacelog.db`` and 2 shards: shard files ``surfacelog.s0.db`` and
``surfacelog.s1.db``, shard map ``surfacelog.shards.json`` (relative paths, so
``surfacelog verify --shard-map surfacelog.shards.json`` works from any folder).

Every server listens on loopback only and Ray's token authentication stays on (a
``Cluster`` started by hand does not turn it on the way ``ray.init`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec
import ray
from ray.exceptions import RayError

from surfacelog.actors.client import local_ray_on_loopback
from surfacelog.actors.errors import RayCompatError
from surfacelog.actors.raycompat import (
    auth_mode,
    ensure_auth_token,
    reload_ray_config,
    require_token_auth,
)
from surfacelog.cli.runmodel import NodeKill
from surfacelog.store.shardmap import Shard, ShardMap, default_resource

NODE_START_TIMEOUT_S = 60.0
"""How long starting the cluster waits for every node to register."""
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}
"""The GCS's checks of its nodes: a node killed abruptly is found dead after about 5 s
(Ray's defaults, 3 s x 5, take about 15 s), and only then does Ray restart its actors
on the node that returns. A slower check would lengthen every abrupt outage; a faster
one risks declaring a busy node of this small machine dead. Ray's own environment
variables ``RAY_health_check_period_ms`` and ``RAY_health_check_failure_threshold``,
when set, take the place of these values (``health_checks``, read when a cluster
starts): for tests that kill nodes on purpose and would otherwise wait out the
detection; not meant to be tuned in production."""
UNWATCHED_HEAD: Final = {"include_log_monitor": False, "no_monitor": True}
"""Head-node arguments of a local cluster (``ray.cluster_utils.Cluster``) whose drivers
read no worker's output (``ray.init(log_to_driver=False)``: this command's) and which
never scales: no log monitor (it tails every worker's log files to forward them to
drivers) and no autoscaler monitor. On an idle head and two nodes with 20 actors started
and killed, the two spent 1.1-1.2 s of the 6.6-7.4 s of CPU all the cluster's processes
spent in about 40 s (``benchmarks/bench_cluster_head.py``, benchmarks/README.md, "A
local cluster's head")."""
RECOVER_DEADLINE_S = 90.0
"""How long the node chaos waits for a returned node's shards to serve again."""


def health_checks(environ: Mapping[str, str] = os.environ) -> dict[str, int]:
    """``HEALTH_CHECKS``, each value replaced by Ray's environment variable of the same
    name (``RAY_health_check_period_ms``, ``RAY_health_check_failure_threshold``) when
    that is set. Ray would ignore those variables here: the values a cluster is started
    with (its ``_system_config``) take precedence over the environment. Raises
    ``ValueError`` when one is not a positive integer."""
    checks = dict(HEALTH_CHECKS)
    for name in checks:
        raw = environ.get(f"RAY_{name}", "").strip()
        if not raw:
            continue
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"RAY_{name} must be a positive integer, not {raw!r}")
        checks[name] = value
    return checks


def shard_files(db: Path, count: int) -> tuple[list[Path], Path]:
    """The shard files and the shard map file of a ``count``-shard run whose ``--db`` is
    ``db``: ``X.db`` -> ``X.s0.db`` ... ``X.s{count-1}.db`` and ``X.shards.json``, all in
    ``db``'s folder."""
    stem = db.name[: -len(db.suffix)] if db.suffix else db.name
    suffix = db.suffix or ".db"
    files = [db.with_name(f"{stem}.s{k}{suffix}") for k in range(count)]
    return files, db.with_name(f"{stem}.shards.json")


def make_shard_map(db: Path, count: int, replica: Path | None = None
                   ) -> tuple[ShardMap, Path]:
    """The shard map of a ``count``-shard run on ``db`` (absolute paths) and where it is
    written (see ``write_shard_map``). ``replica``: each shard ``sK`` is replicated by
    Litestream to the directory ``replica/sK``."""
    files, map_path = shard_files(db.absolute(), count)
    shards = tuple(Shard(f"s{k}", str(path), default_resource(f"s{k}"),
                         replica=None if replica is None else str(replica.absolute() / f"s{k}"))
                   for k, path in enumerate(files))
    return ShardMap(shards), map_path


def write_shard_map(shards: ShardMap, path: Path) -> None:
    """Write ``shards`` as a shard configuration at ``path`` (``load_shard_map``'s
    format), each file named relative to ``path``'s folder when it is in it. Raises
    ``OSError`` when it cannot be written."""
    entries = []
    for shard in shards.shards:
        file = Path(shard.path)
        rel = file.name if file.parent == path.absolute().parent else str(file)
        entry: dict[str, Any] = {"name": shard.name, "path": rel, "resource": shard.resource}
        if shard.replica is not None:
            entry["replica"] = shard.replica
        entries.append(entry)
    path.write_bytes(msgspec.json.format(msgspec.json.encode({"shards": entries})) + b"\n")


def _token_auth_on() -> str:
    """Turn Ray's token authentication on for this process and the nodes it starts
    (unless ``RAY_AUTH_MODE`` says otherwise), creating the token when missing; returns
    the mode in force (``token`` expected). Ray reads the mode when it is imported, and
    only ``ray.init`` turns it on by default: a ``Cluster`` started by hand would run
    without it."""
    try:
        require_token_auth()
    except RayCompatError as exc:  # an older Ray without token auth
        return f"unavailable ({exc})"
    if "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        reload_ray_config()  # re-read the mode in this already running process
    ensure_auth_token()
    return auth_mode()


class LocalCluster:
    """A head node and ``nodes`` worker nodes on this machine; worker node ``k`` (0-based)
    offers the resources of the shards ``k, k + nodes, k + 2 * nodes, ...`` of
    ``shards``. Build it with ``start``; always ``shutdown``.

    ``remove_node`` and ``add_node`` must be called from the main thread: Ray's ``Node``
    installs a SIGTERM handler when it starts."""

    def __init__(self, shards: ShardMap, nodes: int, cluster: Any, auth_mode: str) -> None:
        self.shards = shards
        self.nodes = nodes
        self._cluster = cluster
        self._workers: dict[int, Any] = {}
        self.auth_mode = auth_mode
        """Ray's authentication mode in force (``token`` unless overridden)."""

    @classmethod
    def start(cls, shards: ShardMap, nodes: int) -> LocalCluster:
        """Start the head node and ``nodes`` worker nodes, and wait until all are
        registered. Raises ``ValueError`` when ``nodes`` < 1, and Ray's errors
        (``TimeoutError``, ``RuntimeError``...) when a node does not start; the nodes
        started so far are stopped then."""
        if nodes < 1:
            raise ValueError(f"a local cluster needs at least one worker node, not {nodes}")
        local_ray_on_loopback()
        auth_mode = _token_auth_on()
        from ray.cluster_utils import Cluster

        # The head offers no shard resource: nothing of a shard runs there, so removing
        # a worker never takes the GCS or the run's own actors with it.
        head = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "_system_config": health_checks(),
            **UNWATCHED_HEAD})
        self = cls(shards, nodes, head, auth_mode)
        try:
            for k in range(nodes):
                self._workers[k] = self._start_worker(k)
            head.wait_for_nodes(timeout=NODE_START_TIMEOUT_S)
        except BaseException:
            self.shutdown()
            raise
        return self

    @property
    def address(self) -> str:
        """The GCS address to ``ray.init`` with."""
        address: str = self._cluster.address
        return address

    @property
    def head_node_id(self) -> str:
        """The head node's id (hex), for ``NodeAffinitySchedulingStrategy``."""
        node_id: str = self._cluster.head_node.node_id
        return node_id

    def node_of(self, shard: str) -> int:
        """The worker node (0-based) that offers ``shard``'s resource."""
        return self.shards.names.index(shard) % self.nodes

    def shards_on(self, node: int) -> list[str]:
        """The shards whose resource worker node ``node`` offers."""
        return [name for k, name in enumerate(self.shards.names) if k % self.nodes == node]

    def _start_worker(self, node: int) -> Any:
        resources = {shard.resource: 1.0 for k, shard in enumerate(self.shards.shards)
                     if k % self.nodes == node and shard.resource is not None}
        return self._cluster.add_node(num_cpus=1, resources=resources,
                                      include_dashboard=False)

    def node_id_of(self, node: int) -> str:
        """Ray's id (hex) of worker node ``node``. Raises ``KeyError`` when it is not up."""
        node_id: str = self._workers[node].node_id
        return node_id

    def is_alive(self, node: int) -> bool:
        """Whether Ray's node table says worker node ``node`` is alive (it may have been
        lost without the run removing it: a raylet killed from outside)."""
        node_id = self.node_id_of(node)
        return any(entry["NodeID"] == node_id and entry["Alive"]
                   for entry in ray.nodes())  # type: ignore[no-untyped-call]

    def remove_node(self, node: int, graceful: bool) -> None:
        """Stop worker node ``node``'s processes: with ``graceful``, a stop then a kill;
        without, at once (as a machine that loses power). Raises ``KeyError`` when it is
        not up."""
        self._cluster.remove_node(self._workers.pop(node), allow_graceful=graceful)

    def add_node(self, node: int) -> None:
        """Start worker node ``node`` again with the same resources; returns once it is
        registered. Raises ``ValueError`` when it is up, Ray's errors when it does not
        start."""
        if node in self._workers:
            raise ValueError(f"worker node {node} is up")
        self._workers[node] = self._start_worker(node)

    def shutdown(self) -> list[str]:
        """Stop every node; the problems met (each node is stopped regardless, by a kill
        when its stop fails)."""
        problems: list[str] = []
        try:
            self._cluster.shutdown()
        except Exception as exc:
            problems.append(f"cluster shutdown: {type(exc).__name__}: {exc}")
            for node in list(self._cluster.list_all_nodes()):
                try:
                    node.kill_all_processes(check_alive=False, allow_graceful=False,
                                            wait=True)
                except Exception as kill_exc:
                    problems.append(f"node kill: {type(kill_exc).__name__}: {kill_exc}")
        self._workers.clear()
        return problems


Probe = Callable[[str], Awaitable[None]]
"""Reads from shard ``name``; raises while the shard does not serve."""


async def node_chaos(cluster: LocalCluster, every_s: float, down_s: float, seed: int,
                     probe: Probe, done: asyncio.Event, kills: list[NodeKill], *,
                     max_kills: int = 0) -> None:
    """Until ``done`` (or ``max_kills`` kills, if not 0): every ``every_s`` seconds remove a
    random worker node that offers a shard (seeded by ``seed``; the head is never
    removed), alternately gracefully and abruptly, keep it down ``down_s`` seconds, add
    it back with the same resources, and wait until each of its shards answers ``probe``
    (up to ``RECOVER_DEADLINE_S``) before the next one. Appends each kill to ``kills``
    as it happens. A removed node is always added back, even when cancelled. Raises what
    ``LocalCluster.add_node`` raises."""

    async def take_down(node: int) -> NodeKill:
        # A node found already dead (lost outside the chaos, which the node watch
        # reports) is removed as what it is, not "gracefully".
        found_dead = not cluster.is_alive(node)
        kill = NodeKill(node=node, shards=cluster.shards_on(node),
                        graceful=len(kills) % 2 == 0 and not found_dead,
                        lost_at=time.time(), node_id=cluster.node_id_of(node),
                        found_dead=found_dead)
        kills.append(kill)
        # Blocking calls on the event loop's (main) thread, as Ray's Node wants; the
        # drivers are actors of their own and go on meanwhile.
        cluster.remove_node(node, kill.graceful)
        return kill

    await _outages(cluster, every_s, down_s, seed, probe, done, take_down, max_kills)


async def disk_chaos(cluster: LocalCluster, writers: dict[str, Any], every_s: float,
                     down_s: float, seed: int, probe: Probe, done: asyncio.Event,
                     kills: list[NodeKill], *, max_kills: int = 0) -> None:
    """``node_chaos`` where each removed node loses its disk: until ``done`` (or
    ``max_kills`` losses, if not 0), every
    ``every_s`` seconds a random shard worker node (seeded) has its shards' writers
    (``writers``: the writer actor of each shard) and their Litestream processes frozen
    (SIGSTOP: nothing more acknowledged, nothing more shipped), is removed abruptly, its
    shards' files deleted (the file, its WAL and shm, Litestream's local state) and the
    frozen processes killed; ``down_s`` seconds later the node is added back with an
    empty disk, and each of its shards must serve again (``probe``), which its writer
    does once it has restored the shard from its replica and verified it. The
    acknowledged events not yet replicated are lost; the drivers count them. Raises
    what ``LocalCluster.add_node`` raises."""

    async def take_down(node: int) -> NodeKill:
        names = cluster.shards_on(node)
        kill = NodeKill(node=node, shards=names, graceful=False, lost_at=time.time(),
                        disk=True, node_id=cluster.node_id_of(node))
        frozen = await _writer_processes([writers[name] for name in names])
        for pid in frozen:
            _signal(pid, signal.SIGSTOP)
        kill.lost_at = time.time()
        kills.append(kill)
        cluster.remove_node(node, False)
        for name in names:
            lose_files(Path(cluster.shards.get(name).path))
        for pid in frozen:
            _signal(pid, signal.SIGKILL)
        return kill

    await _outages(cluster, every_s, down_s, seed, probe, done, take_down, max_kills)


async def _outages(cluster: LocalCluster, every_s: float, down_s: float, seed: int,
                   probe: Probe, done: asyncio.Event,
                   take_down: Callable[[int], Awaitable[NodeKill]], max_kills: int
                   ) -> None:
    """The schedule both chaos loops share: until ``done`` (or ``max_kills`` outages,
    if not 0), every ``every_s`` seconds
    ``take_down`` a random shard worker node (seeded), keep it down ``down_s`` seconds,
    add it back (even when cancelled), and wait until each of its shards answers
    ``probe`` before the next outage."""
    if every_s <= 0:
        return
    rng = random.Random(seed)
    candidates = [k for k in range(cluster.nodes) if cluster.shards_on(k)]
    outages = 0
    while not max_kills or outages < max_kills:
        outages += 1
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=every_s)
        if done.is_set():
            return
        node = rng.choice(candidates)
        kill = await take_down(node)
        kill.removed_s = round(time.time() - kill.lost_at, 3)
        try:
            await asyncio.sleep(down_s)
        finally:
            started = time.time()
            cluster.add_node(node)
            kill.added_at = time.time()
            kill.add_s = round(kill.added_at - started, 3)
        await asyncio.gather(*(_await_serving(shard, probe, kill) for shard in kill.shards))


def lose_files(db: Path) -> None:
    """Delete what a lost disk takes of the shard file ``db``: the file, its ``-wal``,
    ``-shm`` and ``-journal``, Litestream's local state and configuration."""
    from surfacelog.store.replica import state_dir
    from surfacelog.store.sqlite.file_format import side_files

    for path in [db, *side_files(db), db.with_name(db.name + ".litestream.yml"),
                 db.with_name(db.name + ".litestream.log")]:
        path.unlink(missing_ok=True)
    shutil.rmtree(state_dir(db), ignore_errors=True)


async def _writer_processes(writers: list[Any]) -> list[int]:
    """The pids of ``writers`` (shard writer actors) and of their Litestream processes,
    each asked for up to 10 s; a writer that does not answer (restarting) is left out:
    the node's removal kills it anyway."""
    pids: list[int] = []
    for writer in writers:
        try:
            pid, status = await asyncio.wait_for(asyncio.gather(
                asyncio.wrap_future(writer.pid.remote().future()),
                asyncio.wrap_future(writer.replica_status.remote().future())), 10.0)
        except (RayError, asyncio.TimeoutError):  # restarting or gone: nothing to freeze
            continue
        pids.append(int(pid))
        if status is not None and status.pid is not None:
            pids.append(int(status.pid))
    return pids


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


async def _await_serving(shard: str, probe: Probe, kill: NodeKill) -> None:
    """Probe ``shard`` until it answers; record when in ``kill.probed_at``. Each failed
    probe is counted in ``kill.probe_failures`` (they are expected while the shard's
    actors restart)."""
    deadline = time.monotonic() + RECOVER_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            await probe(shard)
        except Exception as exc:  # the shard is still restarting: counted, probed again
            kill.probe_failures += 1
            kill.last_probe_error = f"{type(exc).__name__}: {exc}"[:200]
            await asyncio.sleep(0.1)
            continue
        kill.probed_at[shard] = time.time()
        return
