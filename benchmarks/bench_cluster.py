"""Cluster benchmark: surfacelog on a real multi-node Ray cluster on this machine, each
figure beside a baseline measured in the same run, printed as a ratio.

    python benchmarks/bench_cluster.py [--quick] [--only a,b,c] [--max-sessions 100000]

Ray's own multi-node harness (``ray.cluster_utils.Cluster``, as in
``tests/support/cluster_scenario.py``) starts, in this process, a head node, one worker node per
shard offering the custom resource ``surfacelog_shard_sK`` (the shard's writer and, by
default, its session actors run there; ``--quick``: two such nodes, each offering two
shards' resources) and one node offering ``surfacelog_sessions``
(for session actors placed off their shard's node: ``HostingConfig(colocate=False)``).
Every node is a separate raylet on loopback, with Ray's token authentication on. Every
database lives in a temporary folder. Measures:

a. scale-out: the same durable packed workload per shard (``--sessions`` sessions per
   shard appending realistic turns one event at a time, with ``expected_seq``: turn/start,
   user/message, step/start, assistant chunks, step/end, turn/end) on 1, 2 and 4 shards,
   for ``writer="journal"`` and ``writer="owner"``: events/s, append p50/p99, and CPU
   seconds per 1,000 events of the shard writers (journal actors, or the owning session
   actors), of the session actors, and of every process of the cluster (psutil, by pid).
   Ratios against the 1-shard figures of the same run. On 2 cores the total throughput
   cannot grow with shards; the per-event CPU staying flat is what shows that shards do
   not coordinate on the write path;
b. co-location: one durable append with the session actor on its shard's node vs on
   another node (``colocate=False``), the journal pinned to the shard's node either way:
   latency p50 and CPU per append of the processes on the path (driver, session actor,
   journal), in alternating blocks; off-node as a ratio of on-node. Each actor's node is
   checked and printed. On one machine "another node" is still loopback;
c. sessions held by one shard node: new packed sessions, each given one short turn, in
   waves up to ``--max-sessions``; RSS and USS of the node's session actors at several
   counts, per session, against the empty actors' USS;
d. activation of new sessions in those waves (``--wave`` concurrent creations, each a
   session's first request: its first turn): sessions/s over the first waves, against
   the rate of one durable append of a session already active (same run).

The last line is ``BENCH_CLUSTER_JSON`` and one JSON object: every figure by key (what
``tests/benchmarks/test_bench_cluster.py`` checks).
"""

from __future__ import annotations

import os

# Ray reads its authentication mode when it is imported: a Cluster started by hand (not
# by ray.init) would otherwise run without token authentication. Keep it on.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil
import ray

from surfacelog.actors.client import Client, connect, local_ray_on_loopback
from surfacelog.actors.config import (
    NAMESPACE,
    SESSION_RESOURCE,
    HostingConfig,
)
from surfacelog.actors.errors import RayCompatError
from surfacelog.actors.raycompat import auth_mode, ensure_auth_token, require_token_auth
from surfacelog.cli.loadrun import cpu_by_process, cpu_spent
from surfacelog.cli.localcluster import UNWATCHED_HEAD
from surfacelog.schema.codec import encode_json
from surfacelog.session import AppendSpec
from surfacelog.store.shardmap import Shard, ShardMap, default_resource

MB = 1024 * 1024
SHARD_NODES = 4
QUICK_SHARD_NODES = 2
"""``--quick``'s shard nodes: node ``k`` offers the resources of shards ``k`` and
``k + 2``, so the 4-shard runs have two shards per node. A smoke run of every figure,
not a measurement: two raylets fewer to start (about 2 s each on this machine)."""


# -- the report ----------------------------------------------------------------------------


@dataclass
class Figure:
    """One figure beside its baseline (``ratio`` = value / baseline)."""

    key: str
    section: str
    name: str
    value: float
    unit: str
    baseline_name: str = ""
    baseline: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, figure: Figure) -> None:
        self.figures.append(figure)
        ratio = "" if figure.ratio is None else \
            f"  | {figure.baseline_name}: {fmt(figure.baseline)} -> {figure.ratio:.2f}x"
        print(f"  {figure.name}: {fmt(figure.value)} {figure.unit}{ratio}"
              + (f"  ({figure.note})" if figure.note else ""), flush=True)

    def markdown(self) -> str:
        lines = ["| # | figure | value | baseline (same run) | ratio | notes |",
                 "|---|---|---:|---|---:|---|"]
        for f in self.figures:
            base = "" if f.baseline is None else f"{f.baseline_name}: {fmt(f.baseline)}"
            ratio = "" if f.ratio is None else f"{f.ratio:.2f}x"
            lines.append(f"| {f.section} | {f.name} | {fmt(f.value)} {f.unit} | {base} | "
                         f"{ratio} | {f.note} |")
        return "\n".join(lines)

    def json(self) -> dict[str, Any]:
        return {"figures": {f.key: {"value": f.value, "unit": f.unit,
                                    "baseline": f.baseline, "ratio": f.ratio}
                            for f in self.figures},
                "facts": self.facts}


def fmt(x: float | None) -> str:
    if x is None:
        return ""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def pct(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the cluster ---------------------------------------------------------------------------


class Nodes:
    """A head node, ``shard_nodes`` shard nodes (node ``k`` offering shard ``sK``'s
    resource, and with fewer than ``SHARD_NODES`` nodes those of shards ``k + shard_nodes``,
    ``k + 2 * shard_nodes``... below ``SHARD_NODES``) and one sessions node, each a
    raylet of this machine; this process is the driver."""

    def __init__(self, shard_nodes: int = SHARD_NODES) -> None:
        from ray.cluster_utils import Cluster

        local_ray_on_loopback()
        try:
            require_token_auth()
            ensure_auth_token()
            self.auth = auth_mode()
        except RayCompatError as exc:  # an older Ray without token authentication
            self.auth = f"unavailable ({exc})"
        t0 = time.perf_counter()
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, **UNWATCHED_HEAD})
        self.shard_nodes = shard_nodes
        for k in range(shard_nodes):
            self.cluster.add_node(num_cpus=1, include_dashboard=False,
                                  resources={default_resource(f"s{j}"): 1
                                             for j in range(k, SHARD_NODES, shard_nodes)})
        self.cluster.add_node(num_cpus=1, include_dashboard=False,
                              resources={SESSION_RESOURCE: 1})
        self.cluster.wait_for_nodes(timeout=120)
        ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False,
                 configure_logging=False)
        self.start_s = time.perf_counter() - t0
        self.by_resource: dict[str, str] = {}
        for node in ray.nodes():
            if node.get("Alive"):
                for resource in node.get("Resources", {}):
                    self.by_resource[resource] = node["NodeID"]
        self.head = ray.get_runtime_context().get_node_id()

    def node_of(self, resource: str) -> str:
        return self.by_resource[resource]

    def shutdown(self) -> None:
        try:
            ray.shutdown()
        finally:
            self.cluster.shutdown()


def shard_map(folder: str, tag: str, count: int) -> ShardMap:
    """``count`` shards on the shard nodes ``s0``..., each its own new file."""
    return ShardMap(tuple(Shard(f"s{k}", os.path.join(folder, f"{tag}-s{k}.db"),
                                default_resource(f"s{k}")) for k in range(count)))


def sessions_on(shards: ShardMap, shard: str, count: int, prefix: str) -> list[str]:
    """``count`` session ids whose home is ``shard``."""
    out: list[str] = []
    n = 0
    while len(out) < count:
        sid = f"{prefix}{n}"
        n += 1
        if shards.home(sid).name == shard:
            out.append(sid)
    return out


def close(client: Client) -> None:
    """Flush and stop every actor of the deployment; a write failure is a bug."""
    failures = client.shutdown()
    if failures:
        raise RuntimeError(f"write failures at shutdown: {failures[:3]}")


def drop(client: Client) -> None:
    """Stop the deployment's actors without passivating its sessions: every write here
    is durable and was acknowledged, so nothing is left to flush. (``shutdown``
    passivates sessions one at a time, each with a journal flush: for 100,000 sessions
    that outlasts the client's retry window.)"""
    for actor in (*client._actors.values(), *client.writers.values()):
        ray.kill(actor, no_restart=True)
    client._actors.clear()


def cpu_of(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) of ``pids`` so far."""
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


# -- realistic turns -------------------------------------------------------------------------


def turn(sid: str, number: int, chunks: int) -> list[AppendSpec]:
    """The events of one short agent turn: turn/start, user/message (on the surface),
    step/start, ``chunks`` assistant chunks, step/end, turn/end."""
    text = {"type": "text-delta", "index": 0, "text": "streamed model output, a few words "}
    return [
        AppendSpec("turn/start", {"turn": number}),
        AppendSpec("user/message", {
            "id": f"u-{sid}-{number}", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "text", "text": f"turn {number} of {sid}: fix the build"}]},
            "append"),
        AppendSpec("step/start", {"turn": number, "step": 1}),
        *(AppendSpec("assistant/chunk", {"turn": number, "step": 1, "chunk": text})
          for _ in range(chunks)),
        AppendSpec("step/end", {"turn": number, "step": 1}),
        AppendSpec("turn/end", {"turn": number, "reason": {"kind": "completed"}}),
    ]


async def drive(client: Client, sid: str, turns: int, chunks: int, first_turn: int,
                start_seq: int, latencies: list[float]) -> int:
    """Append ``turns`` turns to ``sid``, one event per durable ``append`` with
    ``expected_seq``; each call's latency into ``latencies``. Returns the events."""
    handle = client.session(sid)
    seq = start_seq
    for number in range(first_turn, first_turn + turns):
        for spec in turn(sid, number, chunks):
            t0 = time.perf_counter()
            await handle.append(spec.type, spec.data, surface_op=spec.surface_op,
                                expected_seq=seq)
            latencies.append(time.perf_counter() - t0)
            seq += 1
    return seq - start_seq


# -- a. scale-out ------------------------------------------------------------------------------


@dataclass
class ScaleRun:
    shards: int
    writer: str
    events: int
    elapsed: float
    p50: float
    p99: float
    writer_cpu: float
    session_cpu: float
    all_cpu: float
    commits: int
    idle: tuple[float, float, float]
    """CPU seconds per second of the writers, the session actors and every process
    while nothing is appended (Ray's own threads: heartbeats, metrics, polling)."""


async def scale_run(folder: str, count: int, writer: str, sessions: int, turns: int,
                    chunks: int, idle_s: float, journal_packs: int = 2) -> ScaleRun:
    """One deployment of ``count`` shards: ``sessions`` per shard, each warmed up with a
    turn (activation), then ``turns`` measured turns, all sessions at once; with the
    journal writer, ``journal_packs`` session actors per shard."""
    shards = shard_map(folder, f"scale-{writer}-{count}", count)
    config = HostingConfig(shards, placement="packed",
                           packs=1 if writer == "owner" else journal_packs,
                           durability="durable", idle_timeout_s=None,
                           writer=writer)  # type: ignore[arg-type]
    client = connect(config=config, ready_timeout_s=120.0)
    try:
        ids = [sid for name in shards.names
               for sid in sessions_on(shards, name, sessions, f"{writer}{count}-")]
        warm: list[float] = []
        starts = await asyncio.gather(*(drive(client, sid, 1, chunks, 1, 0, warm)
                                        for sid in ids))
        writers = [await w.pid.remote() for w in client.writers.values()]
        actors = [s.pid for s in await client.actor_stats()]
        session_pids = [pid for pid in actors if pid not in writers]
        # The idle rate: what these processes spend per second with no request at all.
        i0, iw, isess, it = cpu_by_process(), cpu_of(writers), cpu_of(session_pids), \
            time.perf_counter()
        await asyncio.sleep(idle_s)
        span = time.perf_counter() - it
        idle = ((cpu_of(writers) - iw) / span, (cpu_of(session_pids) - isess) / span,
                cpu_spent(i0, cpu_by_process()) / span)
        commits0 = (await client.writer_stats())["commits"]
        before = cpu_by_process()
        w0, s0 = cpu_of(writers), cpu_of(session_pids)
        latencies: list[float] = []
        t0 = time.perf_counter()
        done = await asyncio.gather(*(drive(client, sid, turns, chunks, 2, n, latencies)
                                      for sid, n in zip(ids, starts, strict=True)))
        elapsed = time.perf_counter() - t0
        w1, s1 = cpu_of(writers), cpu_of(session_pids)
        all_cpu = cpu_spent(before, cpu_by_process())
        events = sum(done)
        commits = (await client.writer_stats())["commits"] - commits0
        return ScaleRun(count, writer, events, elapsed, pct(latencies, 0.5),
                        pct(latencies, 0.99), w1 - w0, s1 - s0, all_cpu, commits, idle)
    finally:
        close(client)


async def bench_scale(folder: str, report: Report, counts: Sequence[int], sessions: int,
                      turns: int, chunks: int, writers: Sequence[str],
                      idle_s: float = 2.0, journal_packs: int = 2) -> None:
    for writer in writers:
        runs = {}
        for count in counts:
            runs[count] = run = await scale_run(folder, count, writer, sessions, turns,
                                                chunks, idle_s, journal_packs)
            print(f"    {writer}, {count} shard(s): {run.events:,} events in "
                  f"{run.elapsed:.2f} s", flush=True)
        one = runs[counts[0]]
        for count, run in runs.items():
            k = f"a.{writer}.{count}"
            per = 1000 / run.events
            note = (f"{sessions} sessions per shard, {run.events:,} events "
                    f"({run.events // count:,} per shard), one durable append each")
            report.add(Figure(f"{k}.events_per_s", "a",
                              f"{writer}, {count} shard(s): events/s in all",
                              run.events / run.elapsed, "events/s", "1 shard",
                              one.events / one.elapsed, note))
            report.add(Figure(f"{k}.p50_ms", "a", f"{writer}, {count} shard(s): append p50",
                              run.p50 * 1000, "ms", "1 shard", one.p50 * 1000))
            report.add(Figure(f"{k}.p99_ms", "a", f"{writer}, {count} shard(s): append p99",
                              run.p99 * 1000, "ms", "1 shard", one.p99 * 1000))
            report.add(Figure(f"{k}.writer_cpu_per_1k", "a",
                              f"{writer}, {count} shard(s): writer CPU per 1,000 events",
                              run.writer_cpu * per, "CPU s", "1 shard",
                              one.writer_cpu * 1000 / one.events,
                              "journal actors" if writer == "journal" else
                              "owning session actors (hosting the sessions too)"))
            # Net of the idle rate over the run's length: the work the events cost. More
            # processes on two cores make each run longer, and every Ray process spends
            # CPU on its own threads by the second.
            net = (run.writer_cpu - run.idle[0] * run.elapsed) * per
            one_net = (one.writer_cpu - one.idle[0] * one.elapsed) * 1000 / one.events
            report.add(Figure(f"{k}.writer_net_cpu_per_1k", "a",
                              f"{writer}, {count} shard(s): writer CPU per 1,000 events, "
                              "net of idle", net, "CPU s", "1 shard", one_net,
                              f"idle: {run.idle[0] * 1000 / count:.0f} ms/s per writer"))
            if writer == "journal":
                report.add(Figure(f"{k}.session_cpu_per_1k", "a",
                                  f"{writer}, {count} shard(s): session actors' CPU per "
                                  "1,000 events", run.session_cpu * per, "CPU s", "1 shard",
                                  one.session_cpu * 1000 / one.events))
            report.add(Figure(f"{k}.all_cpu_per_1k", "a",
                              f"{writer}, {count} shard(s): CPU of every process per "
                              "1,000 events", run.all_cpu * per, "CPU s", "1 shard",
                              one.all_cpu * 1000 / one.events,
                              "driver, GCS, raylets, every actor"))
            report.add(Figure(f"{k}.all_net_cpu_per_1k", "a",
                              f"{writer}, {count} shard(s): CPU of every process per 1,000 "
                              "events, net of idle",
                              (run.all_cpu - run.idle[2] * run.elapsed) * per, "CPU s",
                              "1 shard", (one.all_cpu - one.idle[2] * one.elapsed) * 1000
                              / one.events,
                              f"idle: {run.idle[2] * 1000:.0f} ms/s in all"))
            report.add(Figure(f"{k}.events_per_commit", "a",
                              f"{writer}, {count} shard(s): events per commit, per shard",
                              run.events / max(run.commits, 1), "events", "1 shard",
                              one.events / max(one.commits, 1),
                              "group commit: fewer events per commit means more commits "
                              "(and fsyncs) per event"))


# -- b. co-location --------------------------------------------------------------------------


async def bench_colocation(folder: str, nodes: Nodes, report: Report, n: int,
                           block: int) -> None:
    """Sequential durable one-event appends to a session whose actor is on the shard's
    node and to one whose actor is on the sessions node, in alternating blocks."""
    clients: dict[str, Client] = {}
    try:
        for side, colocate in (("on", True), ("off", False)):
            shards = ShardMap((Shard("s0", os.path.join(folder, f"coloc-{side}.db"),
                                     default_resource("s0")),))
            config = HostingConfig(shards, placement="packed", packs=1, durability="durable",
                                   idle_timeout_s=None, colocate=colocate)
            clients[side] = connect(config=config, ready_timeout_s=120.0)
        seqs = {side: 0 for side in clients}
        pids: dict[str, list[int]] = {}
        placed: dict[str, dict[str, str]] = {}
        for side, client in clients.items():
            sid = f"coloc-{side}"
            handle = client.session(sid)
            await handle.append("turn/start", {"turn": 1}, expected_seq=0)
            seqs[side] = 1
            actor = await client.actor(sid)
            journal = client.writer
            pids[side] = [os.getpid(), await actor.pid.remote(), await journal.pid.remote()]
            placed[side] = {"session_actor": await actor.node_id.remote(),
                            "journal": await journal.node_id.remote()}
        shard_node, sessions_node = nodes.node_of(default_resource("s0")), \
            nodes.node_of(SESSION_RESOURCE)
        checks = {
            "on_session_on_shard_node": placed["on"]["session_actor"] == shard_node,
            "off_session_on_sessions_node": placed["off"]["session_actor"] == sessions_node,
            "journals_on_shard_node": all(p["journal"] == shard_node
                                          for p in placed.values()),
        }
        report.facts["b.placement"] = checks
        print(f"    placement: {checks}", flush=True)
        if not all(checks.values()):
            raise RuntimeError(f"actors not where colocate says: {placed}")
        chunk = {"type": "text-delta", "index": 0, "text": "streamed model output "}
        lat: dict[str, list[float]] = {side: [] for side in clients}
        cpu: dict[str, float] = {side: 0.0 for side in clients}

        async def run_block(side: str, count: int, record: bool) -> None:
            handle = clients[side].session(f"coloc-{side}")
            c0 = cpu_of(pids[side])
            for _ in range(count):
                t0 = time.perf_counter()
                await handle.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk},
                                    expected_seq=seqs[side])
                if record:
                    lat[side].append(time.perf_counter() - t0)
                seqs[side] += 1
            if record:
                cpu[side] += cpu_of(pids[side]) - c0

        for side in clients:  # warm up
            await run_block(side, min(block, 50), False)
        while len(lat["on"]) < n:
            for side in ("on", "off") if len(lat["on"]) % (2 * block) == 0 else ("off", "on"):
                await run_block(side, block, True)
        on_p50, off_p50 = (statistics.median(lat[s]) * 1000 for s in ("on", "off"))
        on_cpu, off_cpu = (cpu[s] / len(lat[s]) * 1000 for s in ("on", "off"))
        note = f"median of {len(lat['on'])} each, alternating blocks of {block}; loopback"
        report.add(Figure("b.latency_p50_ms", "b",
                          "durable append, session actor off the shard's node: p50",
                          off_p50, "ms", "session actor on the shard's node", on_p50, note))
        report.add(Figure("b.latency_p99_ms", "b",
                          "durable append, session actor off the shard's node: p99",
                          pct(lat["off"], 0.99) * 1000, "ms",
                          "session actor on the shard's node", pct(lat["on"], 0.99) * 1000))
        report.add(Figure("b.cpu_ms_per_append", "b",
                          "durable append, session actor off the shard's node: CPU",
                          off_cpu, "CPU ms", "session actor on the shard's node", on_cpu,
                          "driver + session actor + journal, psutil by pid per block"))
    finally:
        for client in clients.values():
            close(client)


# -- c, d. sessions per node, activation ---------------------------------------------------


async def bench_held(folder: str, report: Report, maximum: int, wave: int,
                     checkpoints: Sequence[int], rate_waves: int, packs: int,
                     chunks: int, reserve_bytes: int = 4 << 30,
                     budget_s: float = 600.0) -> None:
    """New sessions on shard ``s0``'s node, ``wave`` at once, each created by its first
    request (one short turn as one ``append_batch``); memory of the node's pack actors
    at ``checkpoints``; activation rate over the first ``rate_waves`` waves."""
    shards = ShardMap((Shard("s0", os.path.join(folder, "held.db"),
                             default_resource("s0")),))
    config = HostingConfig(shards, placement="packed", packs=packs, durability="durable",
                           idle_timeout_s=None)
    client = connect(config=config, ready_timeout_s=120.0)
    try:
        # The pack actors first, empty: their memory is the baseline.
        k = 0
        while len(client._actors) < packs:
            await client.actor(f"probe-{k}")
            k += 1
        empty = await client.actor_stats()
        empty_uss = float(sum(s.uss_bytes for s in empty))  # type: ignore[misc]
        empty_rss = float(sum(s.rss_bytes for s in empty))
        # Baseline of the rate: one durable append of an active session, one at a time.
        probe = client.session("probe-rate")
        await probe.append("turn/start", {"turn": 1})
        one = []
        for _ in range(100):
            t0 = time.perf_counter()
            await probe.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {
                "type": "text-delta", "index": 0, "text": "x"}})
            one.append(time.perf_counter() - t0)
        append_rate = 1 / statistics.median(one)
        held = 0
        marks = sorted(set(checkpoints) | {maximum})
        points: list[tuple[int, float, float]] = [(0, empty_uss, empty_rss)]
        waves: list[float] = []
        stopped = f"--max-sessions {maximum:,}"
        started = time.perf_counter()
        events_each = len(turn("x", 1, chunks))
        while held < maximum:
            count = min(wave, maximum - held)
            t0 = time.perf_counter()
            await asyncio.gather(*(client.session(f"h{held + j}").append_batch(
                turn(f"h{held + j}", 1, chunks)) for j in range(count)))
            waves.append(count / (time.perf_counter() - t0))
            held += count
            if marks and held >= marks[0]:
                while marks and held >= marks[0]:
                    marks.pop(0)
                stats = await client.actor_stats()
                active = sum(s.active_sessions for s in stats) - 1  # the rate probe
                uss = float(sum(s.uss_bytes for s in stats))  # type: ignore[misc]
                rss = float(sum(s.rss_bytes for s in stats))
                points.append((active, uss, rss))
                print(f"    {active:,} sessions: USS {uss / MB:,.0f} MB, RSS {rss / MB:,.0f} MB"
                      f", {held / (time.perf_counter() - started):,.0f} sessions/s so far",
                      flush=True)
            if psutil.virtual_memory().available < reserve_bytes:
                stopped = "the memory reserve"
                break
            if time.perf_counter() - started > budget_s:
                stopped = "the time budget"
                break
        first = waves[:rate_waves]
        rate = statistics.median(first)
        report.add(Figure("d.sessions_per_s", "d",
                          f"activation of new sessions, waves of {wave}", rate,
                          "sessions/s", "one durable append of an active session, 1/latency",
                          append_rate,
                          f"median of the first {len(first)} waves (all waves: "
                          f"{min(waves):,.0f}-{max(waves):,.0f}); each session's first "
                          f"request appends its first turn ({events_each} events), durable"))
        report.facts["d.wave_rates"] = [round(w) for w in waves]
        # Memory is set against the data a session holds (its events as JSON): how many
        # times its own data a live session costs.
        data_kb = len(encode_json([s.data for s in turn("h0", 1, chunks)])) / 1024
        for (n0, u0, _), (n1, u1, r1) in itertools.pairwise(points):
            report.add(Figure(f"c.uss_kb_per_added_session.{n1}", "c",
                              f"USS per added session, {n0:,} -> {n1:,}",
                              (u1 - u0) / max(n1 - n0, 1) / 1024, "KB",
                              "the session's events as JSON (KB)", data_kb,
                              f"{packs} pack actors, {u1 / MB:,.0f} MB USS in all"))
            report.add(Figure(f"c.rss_kb_per_session.{n1}", "c",
                              f"pack actors' RSS / sessions, at {n1:,}",
                              r1 / max(n1, 1) / 1024, "KB",
                              "the session's events as JSON (KB)", data_kb,
                              f"{r1 / MB:,.0f} MB RSS in all, empty actors "
                              f"{empty_rss / MB:,.0f} MB"))
        active, uss, _ = points[-1]
        report.add(Figure("c.sessions_held", "c", "live sessions held by one shard node",
                          active, "sessions", note=f"{packs} pack actors; stopped at "
                          f"{stopped}; each holds one turn of {events_each} events; "
                          f"{(uss - empty_uss) / max(active, 1) / 1024:.1f} KB USS each "
                          "on average"))
    finally:
        drop(client)


# -- main --------------------------------------------------------------------------------------


def cpu_reference() -> float:
    """Seconds a pure-Python 10M-addition loop takes: how fast this machine is now."""
    t0 = time.perf_counter()
    x = 0
    for i in range(10_000_000):
        x += i
    return time.perf_counter() - t0


async def run_all(folder: str, nodes: Nodes, args: argparse.Namespace) -> Report:
    report = Report()
    only = set(args.only.split(",")) if args.only else {"a", "b", "c", "d"}
    quick = args.quick
    # --quick is the smoke run of every figure (tests/benchmarks/test_bench_cluster.py):
    # the smallest sizes that still produce each one, one session actor per journal
    # shard (fewer actor processes to start), a short idle window.
    if "a" in only:
        print("a. scale-out: 1, 2, 4 shards", flush=True)
        await bench_scale(folder, report, (1, 2, 4), sessions=args.sessions or
                          (3 if quick else 12), turns=1 if quick else 6, chunks=8,
                          writers=("journal", "owner"), idle_s=0.1 if quick else 2.0,
                          journal_packs=1 if quick else 2)
    if "b" in only:
        print("b. co-location", flush=True)
        await bench_colocation(folder, nodes, report, n=50 if quick else 1500,
                               block=25 if quick else 100)
    if "c" in only or "d" in only:
        print("c/d. sessions per node, activation in waves", flush=True)
        maximum = args.max_sessions or (500 if quick else 100_000)
        checks = (250, 500) if quick else (1_000, 10_000, 50_000, 100_000)
        await bench_held(folder, report, maximum, wave=args.wave or (250 if quick else 1000),
                         checkpoints=[c for c in checks if c <= maximum],
                         rate_waves=2 if quick else 10, packs=2, chunks=8)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"small sizes, {QUICK_SHARD_NODES} shard nodes (< 60 s)")
    parser.add_argument("--only", default=None, help="sections to run: a,b,c,d")
    parser.add_argument("--sessions", type=int, default=0, help="a: sessions per shard")
    parser.add_argument("--max-sessions", type=int, default=0,
                        help="c: stop creating sessions here (default 100,000)")
    parser.add_argument("--wave", type=int, default=0, help="d: creations at once")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    spin = cpu_reference()
    load = os.getloadavg()
    nodes = Nodes(QUICK_SHARD_NODES if args.quick else SHARD_NODES)
    try:
        print(f"cluster: head + {nodes.shard_nodes} shard nodes + 1 sessions node up in "
              f"{nodes.start_s:.1f} s (auth: {nodes.auth})", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as folder:
            report = asyncio.run(run_all(folder, nodes, args))
    finally:
        nodes.shutdown()
    report.facts.update({
        "auth": nodes.auth, "seconds": round(time.perf_counter() - t0, 1),
        "cpu_reference_s": [round(spin, 2), round(cpu_reference(), 2)],
        "load_average": [round(load[0], 1), round(os.getloadavg()[0], 1)],
        "cores": os.cpu_count(), "ray": ray.__version__, "quick": args.quick})
    print(f"\n{report.markdown()}\n\n({report.facts['seconds']:.0f} s; python "
          f"{sys.version.split()[0]}, ray {ray.__version__}, {os.cpu_count()} cores; CPU "
          f"reference: 10M-add loop {spin:.2f} s before, "
          f"{report.facts['cpu_reference_s'][1]:.2f} s after; load average {load[0]:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after)")
    print("BENCH_CLUSTER_JSON " + json.dumps(report.json(), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
