"""What a load run is given and what it gives back: ``RunConfig``, ``Sample``,
``RunResult`` and its report dict.

The workload (``loadrun``), the live view (``live``) and the HTML report
(``report_html``) all read these; none of them imports another for its types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from typer import BadParameter, Option

if TYPE_CHECKING:
    from surfacelog.actors.compactor import CompactorStats
    from surfacelog.actors.driver import DriverProgress
    from surfacelog.session.digest import SessionDigest


# The actors' own Placement and Durability, spelled here as values because typer needs
# the choices at run time and importing surfacelog.actors starts by importing Ray, which
# the offline commands must not pay for. mypy checks that these fit where the actors take
# theirs, and tests/test_run.py that the two spellings hold the same choices.
Placement = Literal["packed", "dedicated"]
Durability = Literal["durable", "buffered"]
Writer = Literal["journal", "owner"]
WriterChoice = Literal["auto", "journal", "owner"]

AppendMode = Literal["batch", "chunk"]
"""How a driver appends a model step's chunks: in one ``append_batch``, or one
``append`` each."""


@dataclass(frozen=True)
class RunConfig:
    """Every option of ``surfacelog run``, each with its default and its help text.

    The ``run`` command's parameters are made from these fields (``cli.commands``), so
    an option is added, renamed or given a new default here and nowhere else. Choices
    are ``Literal`` types, which typer turns into validated choices.
    """

    sessions: Annotated[int, Option(help="sessions to host", min=0)] = 50
    turns: Annotated[int, Option(help="turns per session", min=0)] = 5
    placement: Annotated[Placement, Option(
        help="packed: many sessions per actor; dedicated: one actor per session")] = "packed"
    packs: Annotated[int, Option(help="session actors in packed placement", min=1)] = 4
    drivers: Annotated[int, Option(help="agent-loop driver actors", min=1)] = 2
    compact_at: Annotated[int, Option(
        help="compact a surface above this many estimated tokens")] = 3000
    prune_over: Annotated[int, Option(
        help="prune tool results over this many characters")] = 4000
    durability: Annotated[Durability, Option(
        help="durable: an append is acknowledged once committed; buffered: once queued "
             "for the journal")] = "durable"
    writer: Annotated[WriterChoice, Option(
        help="who commits a shard's file. owner: one packed actor per shard hosts its "
             "sessions and owns the file (one Ray call per durable append; needs "
             "--placement packed); journal: a journal actor commits the batches the "
             "session actors send it (two calls); auto: owner when packed, else "
             "journal")] = "auto"
    mode: Annotated[AppendMode, Option(
        help="batch: a step's chunks in one append_batch; chunk: one append each")] = "batch"
    db: Annotated[Path, Option(help="SQLite database file")] = Path("surfacelog.db")
    address: Annotated[str | None, Option(
        help="join this Ray cluster instead of starting a local one")] = None
    report: Annotated[Path | None, Option(help="write an HTML report here")] = None
    seed: Annotated[int, Option(help="seed of the scripted agents")] = 0
    kill_every_s: Annotated[float, Option(
        "--kill-every", min=0.0,
        help="chaos: kill the actor of a random session this many seconds after the "
             "previous victim serves again (Ray "
             "restarts it); 0 = off")] = 0.0
    kill_journal: Annotated[bool, Option(
        help="chaos: every second kill is of the shard's writer (the journal or the "
             "owner)")] = False
    as_json: Annotated[bool, Option("--json", help="machine-readable output")] = False

    def __post_init__(self) -> None:
        if self.writer == "owner" and self.placement != "packed":
            raise BadParameter("--writer owner hosts a shard's sessions in one actor: it "
                               "needs --placement packed", param_hint="'--writer'")

    @property
    def hosting_writer(self) -> Writer:
        """The writer the run hosts its shards with: ``auto`` is ``owner`` for packed
        placement (measured faster: one Ray call per durable append instead of two)
        and ``journal`` for dedicated, which ``owner`` cannot host."""
        if self.writer == "auto":
            return "owner" if self.placement == "packed" else "journal"
        return self.writer


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

    def report(self) -> dict[str, Any]:
        """The report as one JSON-ready object."""
        lat = sorted(self.progress.latencies_ms)
        p = self.progress
        return {
            "sessions": self.config.sessions,
            "turns": self.config.turns,
            "placement": self.config.placement,
            "durability": self.config.durability,
            "writer": self.config.hosting_writer,
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
            "verification": {"passed": self.verified, "sessions": len(self.live),
                             "mismatches": self.mismatches[:20]},
        }


def _pct(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return round(sorted_values[k], 3)
