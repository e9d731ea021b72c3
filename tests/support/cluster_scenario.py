"""A multi-node surfacelog deployment on one machine, with a shard's node lost and back.

Ray's own multi-node harness (``ray.cluster_utils.Cluster``) starts a head node and one
worker node per shard on this machine, each a separate raylet; node ``sK`` alone offers
the custom resource ``surfacelog_shard_sK``, so shard ``sK``'s journal and session actors
run there. All shard files sit in one temporary folder, so a node that returns with the
shard's resource finds the shard's file, as a node returning with its disk would.

Drivers append durably (``expected_seq``: retry-safe) to D sessions per shard
concurrently, recording every acknowledged event. Mid-run a shard's node is removed
(``Cluster.remove_node``); the drivers keep going: the other shards' sessions must see no
error at all, the lost shard's sessions a typed ``ShardUnavailable`` within the retry
window. The node is then added back (``Cluster.add_node`` with the same resource) and
the lost shard's sessions must serve again, each reactivated once (its seed marker) with
the closers of the turn the loss interrupted. At the end every acknowledged event must
be in its session's log (read through the client, and from the shard files once every
process is stopped) and no id may be stored on two shards.

Runs in its own process (the test suite's processes already hold a local Ray) and
prints ONE JSON object on stdout: the checks, the failed ones, counts and timings. Exits
0 when every check holds, 1 otherwise. It stops by itself: every wait has a deadline, a
watchdog ends the run when the whole scenario overruns, and the cluster is always shut
down. ``--short`` is CI's run (3 shards, 4 sessions each, one graceful removal of
s1's node, a 3 s retry window); ``--soak`` removes and re-adds every shard's node twice,
alternately graceful and abrupt (``allow_graceful=False``: the node's Ray processes
are killed; its worker processes may serve for a moment as orphans, which the report
counts as ``acked_while_down``), with a 12 s window. ``--abrupt``, ``--retry-for-s``,
``--writer owner``, ``--placement``... vary the short run; ``--colocate`` first runs
``colocate_scenario.py``'s check on the same cluster (the suite's test of it reads
the short run's report).

No phase lasts a fixed time: the load runs until every session completed a turn under
the short retry window (``Plan.warmup_turns``), one session of the shard to be lost is
parked inside a turn (so the loss always leaves a turn to repair), a node is down until
every session of its shard was refused, back until every one served again, and the run
ends once every session completed a turn after that (``Plan.settle_turns``).

Besides the checks the report gives, per outage, the time from the removal to the lost
shard's first and last session serving again (``recovery_*_s``), how long after the
node was back that took, and the latency of every ``ShardUnavailable``.

    .venv/bin/python tests/support/cluster_scenario.py --short
    .venv/bin/python tests/support/cluster_scenario.py --soak
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Ray reads its authentication mode when it is imported: a Cluster started by hand (not
# by ray.init) would otherwise run without token authentication. Keep it on.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Each node offers 1 CPU, and a raylet starts at most that many worker processes at once
# by default: a shard's journal and session packs, at the start and again when its node
# returns, would start one after another (about a second each here), not together.
os.environ.setdefault("RAY_worker_maximum_startup_concurrency", "4")

from msgspec import UNSET, to_builtins

from surfacelog.actors.client import Client, connect, local_ray_on_loopback
from surfacelog.actors.config import NAMESPACE, SESSION_RESOURCE, HostingConfig
from surfacelog.actors.errors import RayCompatError, ShardUnavailable
from surfacelog.actors.protocol import Conflict
from surfacelog.actors.raycompat import auth_mode, ensure_auth_token, require_token_auth
from surfacelog.cli.localcluster import UNWATCHED_HEAD
from surfacelog.schema.events import Event
from surfacelog.session import END_SEED, interrupted_turn_closers
from surfacelog.session.turns import last_turn_boundary, open_turn
from surfacelog.store.shardmap import Shard, ShardMap, default_resource
from surfacelog.store.sqlite import SqliteEventStore

T0 = time.monotonic()
CHUNKS = 3
"""Chunks per model step of a driven turn."""
TURN_EVENTS = 5 + CHUNKS
"""Events of a driven turn (see ``Driver``)."""
PHASE_DEADLINE_S = 60.0
"""How long a phase of the run (warm-up, between outages, settling) may take to see
its turns through: every session drives a turn in well under a second."""


def log(message: str) -> None:
    print(f"[{time.monotonic() - T0:7.2f}s] {message}", file=sys.stderr, flush=True)


def since_start(t: float) -> float:
    return round(t - T0, 3)


class StrayErrors(logging.Handler):
    """What asyncio reports on its own (an awaited call's exception nobody retrieved,
    a callback that raised): a traceback on the client's stderr that no caller saw."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        first = record.getMessage().splitlines()[0][:200]
        exc = record.exc_info[1] if record.exc_info else None
        self.found.append(first if exc is None else
                          f"{first} ({type(exc).__qualname__}: {str(exc)[:160]})")


STRAY = StrayErrors()


# -- the driven sessions ---------------------------------------------------------------


@dataclass
class Failure:
    """One request of a driver that raised."""

    kind: str
    message: str
    started: float
    ended: float


@dataclass
class Driver:
    """One session, driven through turns: ``turn/start``, ``user/message``,
    ``step/start``, ``CHUNKS`` ``assistant/chunk``, ``step/end``, ``turn/end``."""

    sid: str
    shard: str
    acked: dict[int, tuple[str, Any]] = field(default_factory=dict)
    """Every acknowledged event: seq -> (type, data as builtins)."""
    ack_times: list[tuple[float, int]] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)
    """When each request that succeeded ended (appends and reads)."""
    failures: list[Failure] = field(default_factory=list)
    spans: list[tuple[float, float, str]] = field(default_factory=list)
    """Every request: (started, ended, outcome: ok or the error's type)."""
    next_seq: int = 0
    turn: int = 1
    stage: int = 0
    chunks: int = 0
    syncs: int = 0
    open_turn_found: int = 0
    hold: bool = False
    """Set by the scenario (another thread): park after the turn's ``user/message``,
    its turn open, until cleared."""
    parked: bool = False
    """The driver is parked (see ``hold``)."""

    def spec(self) -> tuple[str, Any, Any]:
        t, step = self.turn, 1
        if self.stage == 0:
            return "turn/start", {"turn": t}, UNSET
        if self.stage == 1:
            return "user/message", {
                "id": f"u-{self.sid}-{t}", "role": "user", "source": {"kind": "user"},
                "content": [{"type": "text", "text": f"turn {t} of {self.sid}"}]}, "append"
        if self.stage == 2:
            return "step/start", {"turn": t, "step": step}, UNSET
        if self.stage == 3:
            return "assistant/chunk", {"turn": t, "step": step, "chunk": {
                "type": "text-delta", "index": 0, "text": f"c{self.chunks}"}}, UNSET
        if self.stage == 4:
            return "step/end", {"turn": t, "step": step}, UNSET
        return "turn/end", {"turn": t, "reason": {"kind": "completed"}}, UNSET

    def advance(self) -> None:
        if self.stage == 3:
            self.chunks += 1
            if self.chunks < CHUNKS:
                return
            self.chunks = 0
        if self.stage == 5:
            self.turn += 1
            self.stage = 0
            return
        self.stage += 1

    def ack(self, event: Event, at: float) -> None:
        self.acked[event.seq] = (event.type, to_builtins(event.data))
        self.ack_times.append((at, event.seq))
        self.next_seq = event.seq + 1
        self.advance()

    def sync(self, events: list[Event]) -> None:
        """Continue after the log as it is (after a failed request: the request may
        have been stored or not, and a reactivation adds its marker and closers)."""
        self.syncs += 1
        self.next_seq = len(events)
        boundary = last_turn_boundary(events)
        last = 0 if boundary is None else int(boundary.data["turn"])
        if open_turn(events) is None:
            self.turn, self.stage, self.chunks = last + 1, 0, 0
            return
        # Inside a turn (no reactivation happened): carry on where it stands.
        self.open_turn_found += 1
        assert boundary is not None
        self.turn, self.chunks = last, 0
        user = step_open = step_done = False
        for event in events[boundary.seq + 1:]:
            if event.type == "user/message":
                user = True
            elif event.type == "step/start":
                step_open, self.chunks = True, 0
            elif event.type == "assistant/chunk":
                self.chunks += 1
            elif event.type == "step/end":
                step_open, step_done = False, True
        if not user:
            self.stage = 1
        elif step_open:
            self.stage = 3 if self.chunks < CHUNKS else 4
            self.chunks = min(self.chunks, CHUNKS)
        else:
            self.stage = 5 if step_done else 2

    def last_ack_before(self, t: float) -> int:
        return max((seq for at, seq in self.ack_times if at <= t), default=-1)

    def first_success_after(self, t: float) -> float | None:
        return next((s for s in self.successes if s > t), None)


@dataclass
class Outage:
    shard: str
    graceful: bool
    removed_at: float = 0.0
    """When the removal started (the node's processes are being killed)."""
    removed_s: float = 0.0
    add_started: float = 0.0
    added_at: float = 0.0
    recovered_first: float | None = None
    recovered_all: float | None = None
    unavailable_before_add: dict[str, int] = field(default_factory=dict)


async def drive(d: Driver, client: Client, stop: asyncio.Event, pace_s: float) -> None:
    handle = client.session(d.sid)
    resync = False
    while not stop.is_set():
        if d.hold and d.stage == 2 and not resync:
            # Nothing in flight and the turn open: the node is removed under it.
            d.parked = True
            while d.hold and not stop.is_set():
                await asyncio.sleep(0.005)
            d.parked = False
        started = time.monotonic()
        try:
            if resync:
                d.sync(await handle.events())
                resync = False
            else:
                etype, data, op = d.spec()
                event = await handle.append(etype, data, surface_op=op,
                                            expected_seq=d.next_seq)
                d.ack(event, time.monotonic())
            ended = time.monotonic()
            d.successes.append(ended)
            d.spans.append((started, ended, "ok"))
        except ShardUnavailable as exc:
            d.failures.append(Failure("ShardUnavailable", str(exc), started, time.monotonic()))
            resync = True
        except Conflict as exc:
            d.failures.append(Failure("Conflict", str(exc), started, time.monotonic()))
            resync = True
        except Exception as exc:  # anything else is a failed check, reported by type
            d.failures.append(Failure(type(exc).__qualname__, str(exc)[:300], started,
                                      time.monotonic()))
            resync = True
            await asyncio.sleep(0.2)
        if d.failures and d.failures[-1].started == started:
            d.spans.append((started, d.failures[-1].ended, d.failures[-1].kind))
        await asyncio.sleep(pace_s)


# -- the scenario --------------------------------------------------------------------------


@dataclass
class Plan:
    mode: str
    shards: int
    sessions_per_shard: int
    outages: list[tuple[str, bool]]
    """(shard, graceful) per removal, in order."""
    warmup_turns: int
    """Turns every session completes with the short retry window before the first
    removal, ..."""
    between_turns: int
    """... after one outage's recovery before the next removal, ..."""
    settle_turns: int
    """... and after the last recovery before the drivers stop (each phase within
    ``PHASE_DEADLINE_S``)."""
    retry_for_s: float
    pace_s: float
    placement: str
    packs: int
    recover_deadline_s: float
    watchdog_s: float
    writer: str = "journal"
    colocate: bool = False
    """First check ``HostingConfig.colocate``'s placement (``colocate_scenario.check``)
    on this cluster, with a node offering ``SESSION_RESOURCE`` added for it."""


def plan_of(args: argparse.Namespace) -> Plan:
    if args.soak:
        names = [f"s{k}" for k in range(args.shards or 3)]
        order = [names[(1 + k) % len(names)] for k in range(args.removals or 6)]
        outages = [(name, k % 2 == 0) for k, name in enumerate(order)]
        return Plan("soak", len(names), args.sessions or 6, outages, 15, 18, 9,
                    args.retry_for_s or 12.0, args.pace_s, args.placement, args.packs, 90.0,
                    args.watchdog_s or 1100.0)
    shards = args.shards or 3
    removals = args.removals or 1
    graceful = not args.abrupt
    outages = [("s1", graceful)] * removals
    return Plan("short", shards, args.sessions or 4, outages, 1, 1, 1,
                args.retry_for_s or 3.0, args.pace_s, args.placement, args.packs, 60.0,
                args.watchdog_s or 240.0)


def session_ids(shards: ShardMap, per_shard: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {name: [] for name in shards.names}
    n = 0
    while any(len(ids) < per_shard for ids in out.values()):
        sid = f"c{n}"
        n += 1
        home = shards.home(sid).name
        if len(out[home]) < per_shard:
            out[home].append(sid)
    return out


class Scenario:
    def __init__(self, plan: Plan, folder: Path) -> None:
        self.plan = plan
        self.folder = folder
        names = [f"s{k}" for k in range(plan.shards)]
        self.shards = ShardMap(tuple(Shard(n, str(folder / f"{n}.db"), default_resource(n))
                                     for n in names))
        self.cluster: Any = None
        self.nodes: dict[str, Any] = {}
        self.client: Client | None = None
        self.drivers: list[Driver] = []
        self.outages: list[Outage] = []
        self.timings: dict[str, float] = {}
        self.phase = "start"
        self.notes: list[str] = []
        self.served_events: dict[str, list[Event]] = {}
        self.read_failures: list[str] = []
        self.shutdown_failures: list[str] = []
        self.stored: dict[str, dict[str, list[Event]]] = {}
        self.auth_mode = "unknown"
        self.resent = 0
        self.switched_at = float("inf")
        """When the client's retry window was set to the plan's."""
        self.colocate: dict[str, Any] | None = None
        """``colocate_scenario.check``'s report (``Plan.colocate``), with ``crashed``."""

    # -- the cluster ---------------------------------------------------------------------

    def add_shard_node(self, name: str) -> Any:
        return self.cluster.add_node(num_cpus=1, resources={default_resource(name): 1},
                                     include_dashboard=False)

    def start_cluster(self) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.phase = "cluster start"
        local_ray_on_loopback()
        try:
            require_token_auth()
            ensure_auth_token()
            self.auth_mode = auth_mode()
        except RayCompatError as exc:  # an older Ray without token authentication
            self.auth_mode = f"unavailable ({exc})"
        started = time.monotonic()
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, **UNWATCHED_HEAD})
        for name in self.shards.names:
            self.nodes[name] = self.add_shard_node(name)
        if self.plan.colocate:
            self.cluster.add_node(num_cpus=1, resources={SESSION_RESOURCE: 1},
                                  include_dashboard=False)
        self.cluster.wait_for_nodes(timeout=60)
        self.timings["cluster_start_s"] = round(time.monotonic() - started, 3)
        log(f"cluster up: head + {len(self.nodes)} shard nodes at {self.cluster.address}")
        self.phase = "connect"
        started = time.monotonic()
        ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False,
                 configure_logging=False)
        if self.plan.colocate:
            self.check_colocation()
            self.phase = "connect"
            started = time.monotonic()
        config = HostingConfig(self.shards, placement=self.plan.placement,  # type: ignore[arg-type]
                               packs=self.plan.packs, durability="durable",
                               idle_timeout_s=None,
                               writer=self.plan.writer)  # type: ignore[arg-type]
        self.client = connect(config=config, address=self.cluster.address,
                              ready_timeout_s=60.0)
        self.timings["connect_s"] = round(time.monotonic() - started, 3)
        log("connected")

    def check_colocation(self) -> None:
        """``colocate_scenario.check`` on this cluster, before the run (its deployments'
        files in a folder of their own, their actors stopped when it returns); what it
        raises is reported in ``colocate["crashed"]``, and the run goes on."""
        from colocate_scenario import check

        self.phase = "colocate"
        started = time.monotonic()
        folder = self.folder / "colocate"
        folder.mkdir()
        try:
            self.colocate = {**check(str(folder)), "crashed": None}
        except Exception as exc:
            traceback.print_exc()
            self.colocate = {"checks": {}, "crashed": f"{type(exc).__name__}: {exc}"}
        self.timings["colocate_s"] = round(time.monotonic() - started, 3)
        log(f"colocation checked: {self.colocate['checks']}")

    def stop_cluster(self) -> None:
        import ray

        if self.client is not None:
            self.phase = "client shutdown"
            started = time.monotonic()
            self.resent = self.client.resent
            try:
                self.shutdown_failures = self.client.shutdown()
            except Exception as exc:
                self.shutdown_failures = [f"shutdown raised {type(exc).__name__}: {exc}"]
            self.timings["client_shutdown_s"] = round(time.monotonic() - started, 3)
            self.client = None
        self.phase = "ray shutdown"
        with contextlib.suppress(Exception):
            ray.shutdown()
        if self.cluster is not None:
            self.phase = "cluster shutdown"
            try:
                self.cluster.shutdown()
            except Exception as exc:
                self.notes.append(f"cluster.shutdown raised {type(exc).__name__}: {exc}")
                kill_nodes(self.cluster)
            self.cluster = None

    # -- the run -------------------------------------------------------------------------

    def run(self) -> None:
        """Drive the sessions on an event loop in a thread while this (main) thread
        removes and adds nodes: Ray's ``Node`` installs signal handlers, which only
        the main thread may do."""
        assert self.client is not None
        client = self.client
        ids = session_ids(self.shards, self.plan.sessions_per_shard)
        self.drivers = [Driver(sid, shard) for shard, sids in ids.items() for sid in sids]
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="drivers", daemon=True)
        thread.start()
        stop = asyncio.Event()

        async def drive_all() -> list[BaseException | None]:
            return await asyncio.gather(*(drive(d, client, stop, self.plan.pace_s)
                                          for d in self.drivers), return_exceptions=True)

        driving = asyncio.run_coroutine_threadsafe(drive_all(), loop)
        try:
            # Until every session completed a turn, the default retry window: starting
            # the actors' processes on this small machine may take longer than the
            # short window the outage is measured with.
            self.phase = "warmup"
            started = time.monotonic()
            if not self.wait_until(lambda: all(len(d.acked) >= 8 for d in self.drivers),
                                   started + 90, 0.1):
                self.notes.append("warmup: a session did not complete a turn in 90 s")
            self.timings["first_turns_s"] = round(time.monotonic() - started, 3)
            client.retry_for_s = self.plan.retry_for_s
            self.switched_at = time.monotonic()
            self.drive_turns("warmup", self.plan.warmup_turns)
            for k, (shard, graceful) in enumerate(self.plan.outages):
                if k:
                    self.drive_turns(f"between outages {k}", self.plan.between_turns)
                self.outage(Outage(shard, graceful))
            self.drive_turns("settle", self.plan.settle_turns)
        finally:
            self.phase = "stopping drivers"
            loop.call_soon_threadsafe(stop.set)
            try:
                results = driving.result(timeout=self.plan.retry_for_s + 10)
                self.notes.extend(f"driver crashed: {r!r}" for r in results
                                  if r is not None)
            except concurrent.futures.TimeoutError:
                driving.cancel()
                self.notes.append("the drivers did not stop within the retry window")
        try:
            self.phase = "reading logs back"
            asyncio.run_coroutine_threadsafe(self.read_back(client), loop).result(
                timeout=4 * self.plan.retry_for_s + 40)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)

    def drive_turns(self, phase: str, turns: int) -> None:
        """Phase ``phase``: until every session has acknowledged ``turns`` more turns'
        worth of events (a note, which fails the run, when that takes longer than
        ``PHASE_DEADLINE_S``)."""
        self.phase = phase
        started = time.monotonic()
        marks = {d.sid: len(d.ack_times) for d in self.drivers}
        need = turns * TURN_EVENTS
        if not self.wait_until(lambda: all(len(d.ack_times) - marks[d.sid] >= need
                                           for d in self.drivers),
                               started + PHASE_DEADLINE_S):
            self.notes.append(f"{phase}: a session did not drive {turns} turn(s) in "
                              f"{PHASE_DEADLINE_S:g} s")
        self.timings[f"{phase.replace(' ', '_')}_s"] = round(time.monotonic() - started, 3)

    def wait_until(self, done: Any, deadline: float, period_s: float = 0.05) -> bool:
        while time.monotonic() < deadline:
            if done():
                return True
            time.sleep(period_s)
        return bool(done())

    def outage(self, out: Outage) -> None:
        self.outages.append(out)
        mine = [d for d in self.drivers if d.shard == out.shard]
        # One session of the shard is parked inside a turn, so that the loss leaves an
        # open turn for the repair to close whatever the timing. Without it, the outage
        # (which starts once the slowest session has driven whole turns) came when
        # every session of a slow shard, driven in step, had just closed a turn.
        held = mine[0]
        held.hold = True
        self.phase = f"parking {held.sid} inside a turn"
        if not self.wait_until(lambda: held.parked, time.monotonic() + PHASE_DEADLINE_S,
                               0.005):
            self.notes.append(f"{held.sid} did not reach an open turn to be parked in")
        self.phase = f"removing {out.shard}"
        log(f"removing the node of {out.shard} ({'graceful' if out.graceful else 'abrupt'})")
        out.removed_at = time.monotonic()
        node = self.nodes.pop(out.shard)
        try:
            self.cluster.remove_node(node, allow_graceful=out.graceful)
        finally:
            held.hold = False
        out.removed_s = round(time.monotonic() - out.removed_at, 3)
        log(f"removed in {out.removed_s} s")

        def refused(d: Driver) -> int:
            return sum(1 for f in list(d.failures)
                       if f.ended > out.removed_at and f.kind == "ShardUnavailable")

        # Down until every session of the shard was refused at least once (each refusal
        # takes the retry window), within a deadline.
        self.phase = f"{out.shard} down"
        self.wait_until(lambda: all(refused(d) for d in mine),
                        out.removed_at + 3 * self.plan.retry_for_s + 10, 0.1)
        out.unavailable_before_add = {d.sid: refused(d) for d in mine}
        self.phase = f"adding {out.shard} back"
        out.add_started = time.monotonic()
        self.nodes[out.shard] = self.add_shard_node(out.shard)
        out.added_at = time.monotonic()
        log(f"node of {out.shard} back after {out.added_at - out.removed_at:.2f} s")
        self.phase = f"{out.shard} recovering"
        self.wait_until(lambda: all(d.first_success_after(out.add_started) is not None
                                    for d in mine),
                        out.added_at + self.plan.recover_deadline_s)
        # A session recovered with its first success once the node was coming back
        # (each was refused before that, or the deadline passed: then the check fails
        # on its own).
        back = [f for f in (d.first_success_after(out.add_started) for d in mine)
                if f is not None]
        out.recovered_first = min(back, default=None)
        if len(back) == len(mine):
            out.recovered_all = max(back)
        log(f"{out.shard} recovered: first {fmt(out.recovered_first, out.removed_at)} s, "
            f"all {fmt(out.recovered_all, out.removed_at)} s after the removal")

    async def read_back(self, client: Client) -> None:
        async def read(d: Driver) -> None:
            for attempt in range(3):
                try:
                    self.served_events[d.sid] = await client.session(d.sid).events()
                    return
                except Exception as exc:
                    if attempt == 2:
                        self.read_failures.append(f"{d.sid}: {type(exc).__name__}: {exc}")
        await asyncio.wait_for(asyncio.gather(*(read(d) for d in self.drivers)),
                               timeout=4 * self.plan.retry_for_s + 30)

    async def read_files(self) -> None:
        """Every shard file, opened after every process is stopped: its ids and logs."""
        for shard in self.shards.shards:
            store = await SqliteEventStore.open(shard.path, create=False)
            try:
                held: dict[str, list[Event]] = {}
                for info in await store.list_sessions():
                    held[info.id] = await store.read_since(info.id)
                self.stored[shard.name] = held
            finally:
                await store.close()

    # -- the checks ----------------------------------------------------------------------

    def report(self, total_s: float, crashed: str | None) -> dict[str, Any]:
        plan = self.plan
        checks: dict[str, bool] = {}
        details: dict[str, Any] = {}
        margin = max(2.5, 0.5 * plan.retry_for_s)

        def window_of(d: Driver, t: float) -> Outage | None:
            """The outage of ``d``'s shard during which its request ended at ``t``: from
            the removal to the session's first success after the node was back."""
            for out in self.outages:
                if out.shard != d.shard or t < out.removed_at:
                    continue
                back = d.first_success_after(out.add_started)
                if back is None or t <= back:
                    return out
            return None

        unexpected: list[str] = []
        untyped: list[str] = []
        during: dict[str, int] = {}
        latencies: list[float] = []
        for d in self.drivers:
            for f in d.failures:
                out = window_of(d, f.ended)
                if out is None:
                    unexpected.append(f"{d.sid}@{d.shard} {f.kind} at "
                                      f"{since_start(f.ended)} s: {f.message}")
                    continue
                during[f.kind] = during.get(f.kind, 0) + 1
                if f.kind == "ShardUnavailable":
                    latencies.append(f.ended - f.started)
                elif f.kind != "Conflict":
                    untyped.append(f"{d.sid} {f.kind} after {f.ended - f.started:.2f} s "
                                   f"at {since_start(f.ended)} s: {f.message[:160]}")
        lost = {out.shard for out in self.outages}
        other = [d for d in self.drivers if d.shard not in lost]
        checks["other_shards_no_errors"] = all(not d.failures for d in other)
        checks["no_unexpected_errors"] = not unexpected
        typed = {"ShardUnavailable", "Conflict"}
        checks["lost_shard_errors_typed"] = set(during) <= typed
        checks["lost_shard_saw_unavailable"] = bool(self.outages) and all(
            out.unavailable_before_add and all(out.unavailable_before_add.values())
            for out in self.outages)
        bound = plan.retry_for_s + margin
        # The requests of a lost shard's session that was never refused, for diagnosis.
        details["unrefused_sessions"] = [
            {"outage": k, "session": d.sid, "requests": [
                (since_start(a), since_start(b), kind) for a, b, kind in d.spans
                if b >= out.removed_at - 0.2 and a <= out.added_at][:12]}
            for k, out in enumerate(self.outages)
            for d in self.drivers if d.shard == out.shard
            and not out.unavailable_before_add.get(d.sid)]
        checks["unavailable_within_retry_window"] = bool(latencies) and \
            max(latencies) <= bound
        checks["lost_shard_recovered"] = all(out.recovered_all is not None
                                             for out in self.outages)

        # No request outlasted the retry window (once it was the plan's).
        slow = sorted(((end - start, d.sid, kind, start) for d in self.drivers
                       for start, end, kind in d.spans
                       if start >= self.switched_at and end - start > bound), reverse=True)
        checks["no_request_outlasted_the_window"] = not slow
        details["requests_over_window"] = [
            f"{sid} {kind} took {took:.2f} s from {since_start(start)} s"
            for took, sid, kind, start in slow[:10]]
        longest = max((end - start for d in self.drivers for start, end, _ in d.spans
                       if start >= self.switched_at), default=None)
        # How close the other shards' requests came to the window (they must stay within).
        longest_other = max((end - start for d in other for start, end, _ in d.spans
                             if start >= self.switched_at), default=None)

        # Every acknowledged event, served and stored.
        missing_served: list[str] = []
        missing_stored: list[str] = []
        for d in self.drivers:
            served = self.served_events.get(d.sid)
            stored = self.stored.get(d.shard, {}).get(d.sid)
            for seq, (etype, data) in sorted(d.acked.items()):
                for log_, missing in ((served, missing_served), (stored, missing_stored)):
                    if log_ is None or seq >= len(log_) or log_[seq].type != etype or \
                            to_builtins(log_[seq].data) != data:
                        missing.append(f"{d.sid}#{seq} {etype}")
        checks["acked_events_served"] = not missing_served and not self.read_failures
        checks["acked_events_stored"] = not missing_stored and bool(self.stored)

        # Reactivation and repair: one seed marker per outage of the session's shard
        # (none for the others), after the last event acknowledged before the removal,
        # followed by exactly the closers of the turn the removal interrupted.
        repair_bad: list[str] = []
        open_at_loss = closed_by_repair = 0
        marker_bad: list[str] = []
        for d in self.drivers:
            events = self.stored.get(d.shard, {}).get(d.sid) or \
                self.served_events.get(d.sid) or []
            markers = [e.seq for e in events if e.type == END_SEED]
            outs = [out for out in self.outages if out.shard == d.shard]
            if len(markers) != len(outs):
                marker_bad.append(f"{d.sid}@{d.shard}: {len(markers)} seed markers, "
                                  f"{len(outs)} outages")
            for out in outs:
                last = d.last_ack_before(out.removed_at)
                marker = next((m for m in markers if m > last), None)
                if marker is None:
                    repair_bad.append(f"{d.sid}: no reactivation after seq {last}")
                    continue
                before = events[:marker]
                if open_turn(before) is None:
                    continue
                open_at_loss += 1
                expected = interrupted_turn_closers(events[:marker + 1])
                got = events[marker + 1:marker + 1 + len(expected)]
                if [to_builtins(e) for e in got] != [to_builtins(e) for e in expected]:
                    repair_bad.append(
                        f"{d.sid}: after the marker at {marker}: "
                        f"{[e.type for e in got]}, expected {[e.type for e in expected]}")
                elif expected and expected[-1].type == "turn/end" and \
                        expected[-1].data["reason"]["kind"] == "interrupted":
                    closed_by_repair += 1
        checks["reactivated_once_per_outage"] = not marker_bad
        checks["repair_closers"] = not repair_bad and closed_by_repair == open_at_loss
        checks["an_open_turn_was_interrupted"] = open_at_loss > 0

        # Ids: each on exactly one shard, its home.
        where: dict[str, list[str]] = {}
        for shard, held in self.stored.items():
            for sid in held:
                where.setdefault(sid, []).append(shard)
        twice = sorted(sid for sid, on in where.items() if len(on) > 1)
        off_home = sorted(sid for sid, on in where.items()
                          if on != [self.shards.home(sid).name])
        not_stored = sorted(d.sid for d in self.drivers if d.sid not in where)
        checks["no_id_on_two_shards"] = bool(self.stored) and not twice
        checks["ids_on_their_home"] = bool(self.stored) and not off_home and not not_stored
        checks["shutdown_clean"] = not self.shutdown_failures
        checks["no_stray_async_errors"] = not STRAY.found
        checks["token_auth"] = self.auth_mode == "token"
        checks["completed"] = crashed is None and not self.notes

        acked_by_shard = {name: sum(len(d.acked) for d in self.drivers if d.shard == name)
                          for name in self.shards.names}
        failed = sorted(name for name, ok in checks.items() if not ok)
        details.update({
            "unexpected_errors": unexpected[:10],
            "untyped_errors": untyped[:10],
            "missing_served": missing_served[:10],
            "missing_stored": missing_stored[:10],
            "read_failures": self.read_failures[:10],
            "repair_problems": repair_bad[:10],
            "marker_problems": marker_bad[:10],
            "ids_on_two_shards": twice[:10],
            "ids_off_home": off_home[:10],
            "ids_not_stored": not_stored[:10],
            "shutdown_failures": self.shutdown_failures[:10],
            "notes": self.notes[:10],
            "stray_async_errors": STRAY.found[:10],
        })
        return {
            "mode": plan.mode,
            "ok": not failed,
            "failed": failed,
            "checks": checks,
            "crashed": crashed,
            "phase": self.phase,
            "shards": plan.shards,
            "sessions_per_shard": plan.sessions_per_shard,
            "placement": plan.placement,
            "writer": plan.writer,
            "packs": plan.packs,
            "retry_for_s": plan.retry_for_s,
            "auth_mode": self.auth_mode,
            "total_s": round(total_s, 3),
            "timings_s": self.timings,
            "outages": [outage_json(out, self.drivers) for out in self.outages],
            "longest_request_s": rnd(longest),
            "longest_request_other_shards_s": rnd(longest_other),
            "unavailable": {
                "count": len(latencies),
                "bound_s": round(bound, 3),
                "latency_min_s": rnd(min(latencies, default=None)),
                "latency_median_s": rnd(statistics.median(latencies) if latencies else None),
                "latency_max_s": rnd(max(latencies, default=None)),
            },
            "errors_during_outages": during,
            "errors_other_shards": sum(len(d.failures) for d in other),
            "acked": {"total": sum(acked_by_shard.values()), "by_shard": acked_by_shard},
            "resyncs": sum(d.syncs for d in self.drivers),
            "resent": self.resent,
            "stray_async_errors": len(STRAY.found),
            "repair": {"open_turns_at_loss": open_at_loss, "closed_by_repair": closed_by_repair},
            "stored_ids_by_shard": {s: len(held) for s, held in self.stored.items()},
            "details": details,
            "colocate": self.colocate,
        }


def outage_json(out: Outage, drivers: list[Driver]) -> dict[str, Any]:
    gone = out.removed_at + out.removed_s
    acked_while_down = {d.sid: n for d in drivers if d.shard == out.shard
                        and (n := sum(1 for at, _ in d.ack_times
                                      if gone < at < out.add_started))}
    return {
        "acked_while_down": acked_while_down,
        "shard": out.shard,
        "graceful": out.graceful,
        "remove_node_s": out.removed_s,
        "down_s": rnd(out.add_started - out.removed_at),
        "add_node_s": rnd(out.added_at - out.add_started),
        "recovery_first_s": rnd(None if out.recovered_first is None
                                else out.recovered_first - out.removed_at),
        "recovery_all_s": rnd(None if out.recovered_all is None
                              else out.recovered_all - out.removed_at),
        "back_after_node_up_s": rnd(None if out.recovered_first is None
                                    else out.recovered_first - out.added_at),
        "unavailable_before_add": out.unavailable_before_add,
    }


def rnd(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def fmt(t: float | None, origin: float) -> str:
    return "never" if t is None else f"{t - origin:.2f}"


def kill_nodes(cluster: Any) -> None:
    for node in list(cluster.list_all_nodes()):
        with contextlib.suppress(Exception):
            node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--short", action="store_true", help="CI's run: one removal")
    mode.add_argument("--soak", action="store_true", help="several removals, longer")
    parser.add_argument("--shards", type=int, default=0)
    parser.add_argument("--sessions", type=int, default=0, help="sessions per shard")
    parser.add_argument("--removals", type=int, default=0)
    parser.add_argument("--abrupt", action="store_true",
                        help="--short: kill the node's processes without a graceful stop")
    parser.add_argument("--retry-for-s", type=float, default=None,
                        help="the client's retry window once warm (short 3, soak 12)")
    parser.add_argument("--pace-s", type=float, default=0.02,
                        help="pause of each driver between requests")
    parser.add_argument("--placement", choices=("packed", "dedicated"), default="packed")
    parser.add_argument("--packs", type=int, default=2)
    parser.add_argument("--writer", choices=("journal", "owner"), default="journal",
                        help="who writes a shard's file (owner: needs --placement packed)")
    parser.add_argument("--watchdog-s", type=float, default=0.0)
    parser.add_argument("--colocate", action="store_true",
                        help="first check HostingConfig.colocate's placement on this "
                             "cluster (colocate_scenario.check; a node offering "
                             "SESSION_RESOURCE is added for it), reported under "
                             "'colocate' (its checks count in neither 'failed' nor the "
                             "exit status)")
    args = parser.parse_args(argv)
    if args.shards == 1:
        parser.error("--shards: at least 2 (a shard is lost while the others serve)")
    plan = plan_of(args)
    plan.writer = args.writer
    plan.colocate = args.colocate

    # Ray and its child processes may write to file descriptor 1: the JSON report goes
    # to the real stdout, everything else to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(STRAY)
    asyncio_log.addHandler(logging.StreamHandler(sys.stderr))

    folder = Path(tempfile.mkdtemp(prefix="surfacelog-cluster-"))
    scenario = Scenario(plan, folder)
    emitted = threading.Lock()

    def emit(report: dict[str, Any]) -> None:
        with emitted:
            os.write(out_fd, (json.dumps(report, sort_keys=True) + "\n").encode())

    def watchdog() -> None:
        if finished.wait(plan.watchdog_s):
            return
        report = {"mode": plan.mode, "ok": False, "failed": ["watchdog"], "checks": {},
                  "details": {},
                  "crashed": f"watchdog: still running after {plan.watchdog_s:g} s, "
                             f"in phase {scenario.phase!r}",
                  "phase": scenario.phase, "total_s": round(time.monotonic() - T0, 3)}
        log(report["crashed"])
        if scenario.cluster is not None:
            kill_nodes(scenario.cluster)
        emit(report)
        os._exit(1)

    finished = threading.Event()
    threading.Thread(target=watchdog, daemon=True).start()
    crashed: str | None = None
    try:
        try:
            scenario.start_cluster()
            scenario.run()
        finally:
            scenario.stop_cluster()
        scenario.phase = "reading files"
        asyncio.run(scenario.read_files())
        scenario.phase = "done"
    except Exception as exc:
        crashed = f"{type(exc).__name__}: {exc} (in phase {scenario.phase!r})"
        traceback.print_exc()
    try:
        report = scenario.report(time.monotonic() - T0, crashed)
    except Exception as exc:  # a bug of this script: still one JSON object, failed
        traceback.print_exc()
        report = {"mode": plan.mode, "ok": False, "failed": ["report"], "checks": {},
                  "details": {}, "crashed": f"report: {type(exc).__name__}: {exc}",
                  "phase": scenario.phase, "total_s": round(time.monotonic() - T0, 3)}
    finished.set()
    shutil.rmtree(folder, ignore_errors=True)
    emit(report)
    log(f"{'ok' if report['ok'] else 'FAILED: ' + ', '.join(report['failed'])}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
