"""What a load run is given and what it gives back: ``RunConfig``, ``Sample``,
``RunResult`` and its report dict.

The workload (``loadrun``), the live view (``run_display``) and the HTML report
(``report_html``) all read these; none of them imports another for its types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from typer import BadParameter, Option

from surfacelog.actors.choices import AppendMode, Durability, Placement, Writer

if TYPE_CHECKING:
    from surfacelog.actors.compactor import CompactorStats
    from surfacelog.actors.driver import DriverProgress
    from surfacelog.cli.nodewatch import NodeLoss
    from surfacelog.session.digest import SessionDigest
    from surfacelog.store.shardmap import Shard


SESSIONS_PER_DRIVER: Final = 25
"""``--drivers auto``: one driver per this many sessions (within the CPUs the shards' writers
leave them: ``RunConfig.driver_count``, ``driver_cpus``)."""

Via = Literal["ray", "http"]
WriterChoice = Literal["auto", Writer]


DEFAULT_DB: Final = Path("surfacelog.db")
"""``--db`` when not given."""

NODE_DOWN_S: Final = 2.0
"""How long node and disk chaos keep a removed node down unless --node-down says."""


def driver_cpus(nodes: Sequence[Mapping[str, Any]], node_id: str | None,
                shards: Sequence[Shard]) -> tuple[float, int]:
    """The CPUs a run's drivers get and how many shards' writers share them, from Ray's
    node table (``ray.nodes()``'s entries: ``NodeID``, ``Alive``, ``Resources``).
    Drivers pinned to ``node_id`` get that node's CPUs, shared with the writers its
    resources pin there (a writer pinned nowhere may land there: counted); drivers
    placed anywhere get every live node's CPUs, shared with every writer."""
    alive = [n for n in nodes if n.get("Alive", True)]
    if node_id is not None:
        alive = [n for n in alive if n.get("NodeID") == node_id]
    cpus = sum(float((n.get("Resources") or {}).get("CPU", 0.0)) for n in alive)
    offered = {name for n in alive for name in (n.get("Resources") or {})}
    writers = sum(1 for shard in shards if shard.resource is None or shard.resource in offered)
    return cpus, writers


@dataclass(frozen=True)
class RunConfig:
    """Every option of ``surfacelog run``, each with its default and its help text.

    The ``run`` command's parameters are made from these fields (``commands.run``), so
    an option is added, renamed or given a new default here and nowhere else. Choices
    are ``Literal`` types, which typer turns into validated choices.
    """

    sessions: Annotated[int, Option(help="sessions to host", min=0)] = 50
    turns: Annotated[int, Option(help="turns per session", min=0)] = 5
    placement: Annotated[Placement, Option(
        help="packed: many sessions per actor; dedicated: one actor per session")] = "packed"
    packs: Annotated[int, Option(help="session actors in packed placement", min=1)] = 4
    drivers: Annotated[str, Option(
        metavar="N|auto",
        help="agent-loop driver actors; auto: one per 25 sessions, at most one per CPU "
             "where they run that the shards' writers there leave, at least one (the "
             "drivers' requests to an actor share calls, so fewer drivers coalesce "
             "more)")] = "auto"
    compact_at: Annotated[int, Option(
        min=0, help="compact a surface above this many estimated tokens")] = 3000
    prune_over: Annotated[int, Option(
        min=0, help="prune tool results over this many characters")] = 4000
    durability: Annotated[Durability, Option(
        help="durable: an append is acknowledged once committed; buffered: once queued "
             "for the journal")] = "durable"
    writer: Annotated[WriterChoice, Option(
        help="who commits a shard's file. owner: one packed actor per shard hosts its "
             "sessions and owns the file (one Ray call per durable append; needs "
             "--placement packed); journal: a journal actor commits the batches the "
             "session actors send it (two calls); auto: owner when packed, else "
             "journal")] = "auto"
    summariser: Annotated[str, Option(
        metavar="PATH",
        help="the compactor's summariser: extractive (deterministic, no model), or "
             "module:function, a callable taking the shadowed events and returning the "
             "summary's blocks, sync or async (e.g. one that calls a model)")
    ] = "extractive"
    mode: Annotated[AppendMode, Option(
        help="chunk: each model stream chunk its own append, as a live agent streams, "
             "each awaited before the next (the default); stream: each chunk written as "
             "it arrives through an AppendStream, those that arrive while the session's "
             "append is in flight going together in its next; batch: a step's chunks in "
             "one append_batch")] = "chunk"
    chunk_every_ms: Annotated[float, Option(
        "--chunk-every", metavar="MS", min=0.0,
        help="chunk and stream modes: a session's appends arrive this many milliseconds apart (its "
             "workspace context, its model stream's chunks, its tool calls and results), "
             "each session from its own phase, and an append's latency counts from its "
             "arrival (a session that falls behind shows in p50/p99); 0 = each append "
             "as soon as the one before is acknowledged, the most load the sessions can "
             "make")] = 0.0
    db: Annotated[Path | None, Option(
        show_default=False,
        help="SQLite database file, on this machine [default: surfacelog.db]; not with "
             "--shard-map")] = None
    address: Annotated[str | None, Option(
        help="join this Ray cluster instead of starting a local one")] = None
    shard_map: Annotated[Path | None, Option(
        "--shard-map", metavar="FILE", show_default=False,
        help="with --address: the cluster's shard map (JSON, {\"shards\": [{\"name\", "
             "\"path\", \"resource\"}, ...]}): each shard's writer is placed by its "
             "resource on the node that holds its path, and the run is verified by those "
             "writers on their nodes; no shard file is read or written on this machine")
    ] = None
    report: Annotated[Path | None, Option(
        metavar="FILE.html",
        help="write an HTML report here (never over --db or its -wal/-shm files, nor any "
             "SQLite database; an existing file only with --force; written atomically)")
    ] = None
    force: Annotated[bool, Option(
        "--force", help="let --report replace an existing file (never a database)")
    ] = False
    seed: Annotated[int, Option(help="seed of the scripted agents")] = 0
    kill_every_s: Annotated[float, Option(
        "--kill-every", min=0.0,
        help="chaos: kill the actor of a random session this many seconds after the "
             "previous victim serves again (Ray "
             "restarts it); 0 = off")] = 0.0
    kill_journal: Annotated[bool, Option(
        help="chaos: every second kill is of the shard's writer (the journal or the "
             "owner)")] = False
    local_nodes: Annotated[int, Option(
        min=0,
        help="start a Ray cluster of a head node and this many worker nodes on this "
             "machine (loopback only, token authentication on): the head holds the GCS "
             "and the run's drivers, compactor and pruner and offers no shard; worker "
             "node k mod N hosts shard k. 0 = the embedded one-node Ray")] = 0
    shards: Annotated[int | None, Option(
        min=1, show_default=False,
        help="with --local-nodes: shards, each its own SQLite file next to --db "
             "(X.db -> X.s0.db, X.s1.db...), listed in the shard map X.shards.json for "
             "surfacelog verify/digest/inspect --shard-map [default: --local-nodes]")
    ] = None
    kill_node_every_s: Annotated[float, Option(
        "--kill-node-every", min=0.0,
        help="node chaos, with --local-nodes: every this many seconds remove a random "
             "shard worker node (seeded; alternately graceful and abrupt) and add it "
             "back after --node-down seconds; the head node is never killed (it holds "
             "the GCS); 0 = off")] = 0.0
    node_down_s: Annotated[float | None, Option(
        "--node-down", min=0.0, show_default=False,
        help="node or disk chaos (with --kill-node-every or --kill-disk-every): how long "
             "a removed node stays down [default: 2]")] = None
    replica: Annotated[Path | None, Option(
        metavar="DIR", show_default=False,
        help="with --local-nodes: replicate every shard with Litestream to DIR/<shard> "
             "(started and supervised beside the shard's writer; a shard whose file is "
             "missing is restored from it, verified, before it serves)")] = None
    kill_disk_every_s: Annotated[float, Option(
        "--kill-disk-every", min=0.0,
        help="disk chaos, with --replica: every this many seconds a random shard worker "
             "node loses its disk (its shards' files deleted while the writer and "
             "Litestream are frozen, the node killed), and comes back after --node-down "
             "seconds with an empty disk: its shards are restored from their replicas. "
             "The acknowledged events not yet replicated are lost and counted; 0 = off")
    ] = 0.0
    max_kills: Annotated[int, Option(
        min=0,
        help="chaos: each chaos asked for (--kill-every; --kill-node-every or "
             "--kill-disk-every) stops after this many kills and the run goes on without "
             "it, so that a slow machine, whose runs last longer, does not get more "
             "kills; 0 = no bound")] = 0
    outage_budget_s: Annotated[float, Option(
        "--outage-budget", min=0.0,
        help="how long an agent keeps resending a request whose shard is unavailable "
             "(its node lost, by the chaos or otherwise) before it gives up on that "
             "session (an error of the run, its refusal the last error)")] = 180.0
    via: Annotated[Via, Option(
        help="ray: the drivers call the session actors; http: the run starts the HTTP "
             "gateway (loopback, a token of its own) and the drivers append "
             "through it with expectedSeq (durable only)")] = "ray"
    as_json: Annotated[bool, Option("--json", help="machine-readable output")] = False
    strict: Annotated[bool, Option(
        "--strict", help="exit 5 when chaos was asked for and not performed (the run "
                         "ended before its first kill), instead of a warning only")] = False

    def __post_init__(self) -> None:
        if self.drivers != "auto" and not (self.drivers.isdigit() and int(self.drivers) >= 1):
            raise BadParameter(f"{self.drivers!r} is neither a count >= 1 nor 'auto'",
                               param_hint="'--drivers'")
        if self.chunk_every_ms > 0 and self.mode == "batch":
            raise BadParameter("--chunk-every paces the appends of --mode chunk or "
                               "stream; a batch append carries a step's chunks at once",
                               param_hint="'--chunk-every'")
        if self.writer == "owner" and self.placement != "packed":
            raise BadParameter("--writer owner hosts a shard's sessions in one actor: it "
                               "needs --placement packed", param_hint="'--writer'")
        if self.via == "http" and self.durability != "durable":
            raise BadParameter("--via http drives durable sessions: the gateway "
                               "acknowledges an append once committed and has no flush",
                               param_hint="'--via'")
        if self.kill_disk_every_s > 0 and self.replica is None:
            raise BadParameter("--kill-disk-every needs --replica DIR (a lost disk is "
                               "restored from the shard's replica)",
                               param_hint="'--kill-disk-every'")
        if self.kill_disk_every_s > 0 and self.kill_node_every_s > 0:
            raise BadParameter("give --kill-disk-every or --kill-node-every, not both",
                               param_hint="'--kill-disk-every'")
        if self.replica is not None and self.replica.exists() and not self.replica.is_dir():
            raise BadParameter(f"{self.replica} is not a directory", param_hint="'--replica'")
        if self.kill_journal and not self.kill_every_s:
            raise BadParameter("--kill-journal chooses whose actor --kill-every kills: it "
                               "needs --kill-every SEC", param_hint="'--kill-journal'")
        if self.max_kills and not self.chaos:
            raise BadParameter("--max-kills bounds the chaos: it needs --kill-every, "
                               "--kill-node-every or --kill-disk-every",
                               param_hint="'--max-kills'")
        if self.node_down_s is not None and not (self.kill_node_every_s
                                                 or self.kill_disk_every_s):
            raise BadParameter("--node-down is how long a removed node stays down: it "
                               "needs --kill-node-every or --kill-disk-every",
                               param_hint="'--node-down'")
        if self.shard_map is not None:
            if self.local_nodes:
                raise BadParameter("--shard-map names the shards of the cluster joined "
                                   "with --address; --local-nodes writes its own shard "
                                   "map: give one or the other",
                                   param_hint="'--shard-map'")
            if self.address is None:
                raise BadParameter("--shard-map needs --address (the Ray cluster whose "
                                   "nodes hold the shards)", param_hint="'--shard-map'")
            if self.db is not None:
                raise BadParameter("--db is a database on this machine; with --shard-map "
                                   "the shards are the map's: give one or the other",
                                   param_hint="'--db'")
        if not self.local_nodes:
            for given, flag in ((self.shards is not None, "--shards"),
                                (self.kill_node_every_s > 0, "--kill-node-every"),
                                (self.replica is not None, "--replica")):
                if given:
                    raise BadParameter(f"{flag} needs --local-nodes N (a local cluster "
                                       "whose worker nodes host the shards)",
                                       param_hint=f"'{flag}'")
        elif self.address is not None:
            raise BadParameter("--local-nodes starts its own cluster: it cannot join "
                               "--address", param_hint="'--local-nodes'")

    @property
    def chaos(self) -> bool:
        """Whether any chaos was asked for: actor kills, node or disk losses."""
        return bool(self.kill_every_s or self.kill_node_every_s or self.kill_disk_every_s)

    @property
    def db_path(self) -> Path:
        """The database of a run without ``--shard-map``: ``--db``, else
        ``surfacelog.db``."""
        return DEFAULT_DB if self.db is None else self.db

    @property
    def stored_in(self) -> str:
        """Where the run stores its sessions, for a person: ``--db``'s file, or the
        shards of ``--shard-map``."""
        if self.shard_map is not None:
            return f"the shards of {self.shard_map}"
        return str(self.db_path)

    @property
    def node_down(self) -> float:
        """How long node or disk chaos keeps a removed node down (seconds)."""
        return NODE_DOWN_S if self.node_down_s is None else self.node_down_s

    def driver_count(self, sessions: int, cpus: float, writers: int) -> int:
        """The drivers to start for ``sessions`` where they get ``cpus`` CPUs, shared
        with ``writers`` shards' writers (``driver_cpus``): the number given, or with
        ``auto`` one per ``SESSIONS_PER_DRIVER`` sessions, at most one per CPU the
        writers leave (``cpus - writers``), at least one; never more than the sessions."""
        if self.drivers == "auto":
            # Each shard's writer (its owner actor, or its journal and session actors)
            # keeps about a CPU busy under a closed loop: a driver more than the CPUs
            # left takes from the hosting it drives, and splits the requests to each
            # actor over more calls (benchmarks/README, "drivers auto").
            wanted = -(-sessions // SESSIONS_PER_DRIVER)
            count = min(wanted, max(1, int(cpus) - writers))
        else:
            count = int(self.drivers)
        return max(1, min(count, sessions))

    @property
    def shard_count(self) -> int:
        """The run's shards: ``--shards``, else one per worker node (1 without a local
        cluster)."""
        if self.shards is not None:
            return self.shards
        return max(1, self.local_nodes)

    @property
    def hosting_writer(self) -> Writer:
        """The writer the run hosts its shards with: ``auto`` is ``owner`` for packed
        placement (measured faster: one Ray call per durable append instead of two)
        and ``journal`` for dedicated, which ``owner`` cannot host."""
        if self.writer == "auto":
            return "owner" if self.placement == "packed" else "journal"
        return self.writer


@dataclass
class NodeKill:
    """One removal of a worker node by the node chaos, and its shards' return."""

    node: int
    """The worker node (0-based; the head is never removed)."""
    shards: list[str]
    graceful: bool
    lost_at: float
    """When the removal started (epoch seconds): the node's shards stop serving."""
    removed_s: float = 0.0
    added_at: float | None = None
    """When the node was registered again (epoch seconds)."""
    add_s: float = 0.0
    probed_at: dict[str, float] = field(default_factory=dict)
    """When each of its shards first answered the chaos's probe after the return."""
    probe_failures: int = 0
    last_probe_error: str | None = None
    disk: bool = False
    """The node lost its disk too (``--kill-disk-every``): its shards were restored from
    their replicas."""
    node_id: str | None = None
    """Ray's id of the node removed (the node watch knows the run's own removals by it)."""
    found_dead: bool = False
    """The node was dead already when the chaos came to remove it (lost outside the
    chaos: see ``RunResult.node_losses``)."""


@dataclass
class Sample:
    """One poll of the drivers: elapsed seconds and their summed counters."""

    t: float
    turns: int
    events: int
    errors: int
    conflicts: int
    compactions: int
    prunes: int
    p50_ms: float | None


@dataclass
class RunResult:
    """What the run measured and what verification found."""

    config: RunConfig
    wall_s: float
    progress: DriverProgress
    compactor: CompactorStats
    pruner: CompactorStats
    store_bytes: int
    live: dict[str, SessionDigest]
    verified: bool
    mismatches: list[str]
    samples: list[Sample] = field(default_factory=list)
    journal: dict[str, Any] = field(default_factory=dict)
    actor_kills: int = 0
    write_failures: list[str] = field(default_factory=list)
    """Writes found failed by the final flushes (``failure_line``); with durable
    durability each one fails verification."""
    cpu_s: float | None = None
    """CPU seconds of every process of the embedded Ray (and this one) while the agents
    ran; ``None`` when the run joined a cluster, whose processes it cannot see."""
    cpu_by_kind: dict[str, float] = field(default_factory=dict)
    """``cpu_s`` by process kind (``loadrun.process_kind``: the actor class a Ray worker
    hosts, this command, Ray's own processes), the largest first; empty when ``cpu_s``
    is ``None``."""
    shard_nodes: dict[str, int | None] = field(default_factory=dict)
    """Each shard's worker node (``None``: the embedded one-node Ray)."""
    shard_map: str | None = None
    """The shard map file of the run: written for a local cluster run, or given with
    ``--shard-map`` (``surfacelog verify/digest/inspect --shard-map FILE`` read it)."""
    node_kills: list[NodeKill] = field(default_factory=list)
    auth_mode: str | None = None
    """Ray's authentication mode of a local cluster (``token``)."""
    incomplete: list[str] = field(default_factory=list)
    """Why the run could not complete (a driver, the compactor or the pruner lost,
    verification cut short...): the report is partial and the run exits 4."""
    actor_kill_times: list[float] = field(default_factory=list)
    """Seconds since the start at which the actor chaos killed an actor."""
    started_at: float = 0.0
    """When the drivers started (epoch seconds): ``Sample.t`` counts from here."""
    node_losses: list[NodeLoss] = field(default_factory=list)
    """Nodes of the cluster lost without the run's chaos removing them (``nodewatch``)."""

    def recoveries(self) -> dict[str, list[float]]:
        """Per shard, for each node kill that took it: seconds from the node's loss to
        the shard serving again (its first acknowledged append, or its first answer to
        the chaos's probe, after the node was back). A kill after which the shard never
        served is left out (see ``unrecovered``)."""
        out: dict[str, list[float]] = {name: [] for name in self.shard_nodes}
        for kill in self.node_kills:
            for shard in kill.shards:
                back = self._served_again(kill, shard)
                if back is not None:
                    out.setdefault(shard, []).append(round(back - kill.lost_at, 3))
        return out

    def disk_lost_shards(self) -> set[str]:
        """The shards that lost their disk at least once (``--kill-disk-every``)."""
        return {shard for kill in self.node_kills if kill.disk for shard in kill.shards}

    def lost_to_disk_loss(self) -> int:
        """Acknowledged events found missing on shards that lost their disk: the tail
        their asynchronous replica had not received yet."""
        return sum(record.lost for name, record in self.progress.by_shard.items()
                   if name in self.disk_lost_shards())

    def chaos_not_performed(self) -> list[str]:
        """The chaos the run was asked for and did not perform (the agents finished
        before its first turn came, say): one line each, naming the option."""
        cfg, out = self.config, []
        took = f"the agents finished in {self.wall_s:.1f} s"
        if cfg.kill_every_s and not self.actor_kills:
            out.append(f"--kill-every {cfg.kill_every_s:g}: no actor was killed ({took})")
        if cfg.kill_node_every_s and not any(not k.disk for k in self.node_kills):
            out.append(f"--kill-node-every {cfg.kill_node_every_s:g}: no node was removed "
                       f"({took})")
        if cfg.kill_disk_every_s and not any(k.disk for k in self.node_kills):
            out.append(f"--kill-disk-every {cfg.kill_disk_every_s:g}: no disk was lost "
                       f"({took})")
        return out

    def unrecovered(self) -> list[str]:
        """``shard@node-kill-number`` of every kill after which a shard never served."""
        return [f"{shard}@{k}" for k, kill in enumerate(self.node_kills)
                for shard in kill.shards if self._served_again(kill, shard) is None]

    def _served_again(self, kill: NodeKill, shard: str) -> float | None:
        if kill.added_at is None:
            return None
        # The node's return starts the count of successes: before it, only an orphan of
        # an abruptly killed node could still answer, for a moment.
        back_from = kill.added_at - kill.add_s
        record = self.progress.by_shard.get(shard)
        first_ok = None if record is None else next(
            (t for t in sorted(record.ok_times) if t >= back_from), None)
        probed = kill.probed_at.get(shard)
        times = [t for t in (first_ok, probed) if t is not None]
        return min(times) if times else None

    def _kill_entry(self, kill: NodeKill) -> dict[str, Any]:
        """One node kill: its node and shards, how, how long the removal and the return
        took, each shard's recovery (``None``: never served again), and the probes
        that failed while its shards restarted (expected: they are retried)."""
        recovery = {}
        for shard in kill.shards:
            back = self._served_again(kill, shard)
            recovery[shard] = None if back is None else round(back - kill.lost_at, 3)
        return {"node": kill.node, "shards": kill.shards, "graceful": kill.graceful,
                "remove_node_s": kill.removed_s, "add_node_s": kill.add_s,
                "recovery_s": recovery, "probe_failures": kill.probe_failures,
                "last_probe_error": kill.last_probe_error, "disk_lost": kill.disk,
                "found_dead": kill.found_dead}

    def _loss_entry(self, loss: NodeLoss) -> dict[str, Any]:
        """One node lost outside the chaos: its id, when (seconds since the start), its
        shards, and after how long each was offered again (``None``: never)."""
        return {"node_id": loss.node_id, "lost_s": round(loss.lost_at - self.started_at, 3),
                "shards": loss.shards,
                "back_after_s": {shard: (None if shard not in loss.back_at else
                                         round(loss.back_at[shard] - loss.lost_at, 3))
                                 for shard in loss.shards}}

    def shard_report(self) -> dict[str, Any]:
        """Per shard: its node, events, events/s, append latency p50/p99 (ms), refusals
        during outages, node kills that took it, recovery p50/max (s)."""
        recoveries = self.recoveries()
        out: dict[str, Any] = {}
        for name, node in self.shard_nodes.items():
            record = self.progress.by_shard.get(name)
            lat = sorted(record.latencies_ms) if record is not None else []
            rec = sorted(recoveries.get(name, []))
            waits = sorted(record.outages_s) if record is not None else []
            events = record.events if record is not None else 0
            out[name] = {
                "node": node,
                "events": events,
                "appends": record.appends if record is not None else 0,
                "events_per_s": round(events / self.wall_s, 1) if self.wall_s else 0.0,
                "append_latency_ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99)},
                "unavailable": record.unavailable if record is not None else 0,
                "transient_errors": record.transient if record is not None else 0,
                # What the drivers waited, per request refused at least once: from its
                # first attempt to its success.
                "outage_waits_s": {"count": len(waits), "max": waits[-1] if waits else None},
                "node_kills": sum(1 for k in self.node_kills if name in k.shards),
                "recovery_s": {"count": len(rec), "p50": _pct(rec, 50),
                               "max": rec[-1] if rec else None},
            }
        return out

    def report(self) -> dict[str, Any]:
        """The report as one JSON-ready object."""
        lat = sorted(self.progress.latencies_ms)
        p = self.progress
        recovered = sorted(t for ts in self.recoveries().values() for t in ts)
        return {
            "sessions": self.config.sessions,
            "turns": self.config.turns,
            "placement": self.config.placement,
            "durability": self.config.durability,
            "writer": self.config.hosting_writer,
            "via": self.config.via,
            "mode": self.config.mode,
            "chunk_every_ms": self.config.chunk_every_ms,
            "turns_done": p.turns_done,
            "turns_interrupted": p.turns_interrupted,
            "events": p.events,
            "appends": p.appends,
            "events_per_s": round(p.events / self.wall_s, 1) if self.wall_s else 0.0,
            "append_latency_ms": {"p50": _pct(lat, 50), "p95": _pct(lat, 95),
                                  "p99": _pct(lat, 99)},
            "compactions": {"committed": self.compactor.committed,
                            "failed": self.compactor.failed,
                            "conflicts": self.compactor.conflicts,
                            "gave_up": self.compactor.gave_up},
            "prunes": {"committed": self.pruner.prunes, "conflicts": self.pruner.conflicts},
            "conflicts_retried": p.conflicts + self.compactor.conflicts
            + self.pruner.conflicts,
            "actor_kills": self.actor_kills,
            "resent": p.resent,
            "lost_acknowledged": p.lost,
            "lost_to_disk_loss": self.lost_to_disk_loss(),
            "disk_losses": sum(1 for k in self.node_kills if k.disk),
            "write_failures": self.write_failures[:20],
            "errors": p.errors + self.compactor.errors + self.pruner.errors,
            "last_error": p.last_error or self.compactor.last_error or self.pruner.last_error,
            "log_events": sum(d.length for d in self.live.values()),
            "store_bytes": self.store_bytes,
            "journal": self.journal,
            "wall_s": round(self.wall_s, 2),
            "cpu_s": None if self.cpu_s is None else round(self.cpu_s, 2),
            "cpu_ms_per_append": (None if self.cpu_s is None or not p.appends
                                  else round(1000 * self.cpu_s / p.appends, 3)),
            "cpu_ms_per_event": (None if self.cpu_s is None or not p.events
                                 else round(1000 * self.cpu_s / p.events, 4)),
            "cpu_s_by_process": {kind: round(seconds, 2)
                                 for kind, seconds in self.cpu_by_kind.items()},
            "ray_calls": p.ray_calls,
            "ray_calls_per_event": (round(p.ray_calls / p.events, 4)
                                    if p.events and p.ray_calls else None),
            "verification": {"passed": self.verified, "sessions": len(self.live),
                             "mismatches": self.mismatches[:20]},
            "incomplete": self.incomplete[:20],
            "chaos_not_performed": self.chaos_not_performed(),
            "local_nodes": self.config.local_nodes,
            "shard_map": self.shard_map,
            "auth_mode": self.auth_mode,
            "shards": self.shard_report(),
            "node_kills": len(self.node_kills),
            "node_kills_abrupt": sum(1 for k in self.node_kills if not k.graceful),
            "recovery_s": {"count": len(recovered), "p50": _pct(recovered, 50),
                           "max": recovered[-1] if recovered else None,
                           "unrecovered": self.unrecovered()},
            "node_kill_log": [self._kill_entry(k) for k in self.node_kills[:50]],
            "nodes_lost_outside_chaos": [self._loss_entry(loss)
                                         for loss in self.node_losses[:50]],
            "unavailable": sum(s.unavailable for s in p.by_shard.values()),
            "outage_retries_other": sum(s.transient for s in p.by_shard.values()),
            "compactor_outage_skips": self.compactor.unavailable + self.pruner.unavailable,
        }


def _pct(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return round(sorted_values[k], 3)
