"""What a load run is given and what it gives back: ``RunConfig``, ``Sample``,
``RunResult`` and its report dict.

The workload (``loadrun``), the live view (``live``) and the HTML report
(``report_html``) all read these; none of them imports another for its types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from surfacelog.actors.compactor import CompactorStats
    from surfacelog.actors.driver import DriverProgress
    from surfacelog.actors.protocol import Durability, Placement
    from surfacelog.session.digest import SessionDigest


@dataclass(frozen=True)
class RunConfig:
    """Everything ``surfacelog run`` takes from its command line."""

    db: str = "surfacelog.db"
    address: str | None = None
    sessions: int = 50
    turns: int = 5
    placement: Placement = "packed"
    packs: int = 4
    drivers: int = 2
    durability: Durability = "durable"
    compact_at: int = 3000
    prune_over: int = 4000
    mode: str = "batch"
    seed: int = 0
    kill_every_s: float = 0.0
    """Chaos: kill the actor of a random session this often (Ray restarts it); 0: off."""
    kill_journal: bool = False
    """Chaos: every third kill is of the journal actor instead."""


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

    def report(self) -> dict[str, Any]:
        """The report as one JSON-ready object."""
        lat = sorted(self.progress.latencies_ms)
        p = self.progress
        return {
            "sessions": self.config.sessions,
            "turns": self.config.turns,
            "placement": self.config.placement,
            "durability": self.config.durability,
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
            "verification": {"passed": self.verified, "sessions": len(self.live),
                             "mismatches": self.mismatches[:20]},
        }


def _pct(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return round(sorted_values[k], 3)
