"""The actors' metrics (``ray.util.metrics``) and the layer's logger, defined once.

Every metric is tagged with the deployment's ``placement`` (dedicated, packed), its
``writer`` (journal, owner) and the ``shard`` name. Ray's metrics agent of each node
exports them in Prometheus format (prefixed ``ray_``, counters suffixed ``_total``) on
the node's metrics export port, and the dashboard's Grafana panels can chart them: no
setup beyond a Ray whose dashboard agent runs (``ray[default]``, which the embedded local
Ray starts even with ``include_dashboard=False``).

Recording is one call per request, never one per event: a counter takes the batch's
event count as its increment, a histogram observes one value per call or group commit.
The appended events' counter records less often still: once for the requests answered
in one step of the event loop (``Recorder.appended``).
The metric objects are made once per process, on first use (``Metrics.get``), inside the
actor that records them; a ``Recorder`` holds one actor's tags.
"""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar, Final

from ray.util.metrics import Counter, Gauge, Histogram

log: Final = logging.getLogger("surfacelog.actors")
"""The actors layer's logger: activations, passivations (debug), failures (warning).
Never a token, an event or a payload: session ids, counts and error types."""

TAG_KEYS: Final = ("placement", "writer", "shard")
FAILURE_TAG_KEYS: Final = (*TAG_KEYS, "kind")
LATENCY_MS_BOUNDARIES: Final = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0,
                                500.0, 1000.0, 5000.0]
BATCH_EVENTS_BOUNDARIES: Final = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0,
                                  1000.0, 2000.0, 4096.0]

NAMES: Final = {
    "append_events": "surfacelog_append_events",
    "append_latency": "surfacelog_append_latency_ms",
    "commit_events": "surfacelog_commit_batch_events",
    "committed_events": "surfacelog_committed_events",
    "commit_latency": "surfacelog_commit_latency_ms",
    "conflicts": "surfacelog_conflicts",
    "activations": "surfacelog_activations",
    "passivations": "surfacelog_passivations",
    "backlog": "surfacelog_buffered_batches",
    "failures": "surfacelog_write_failures",
}
"""Each metric's name as recorded (Prometheus shows ``ray_`` + it, + ``_total`` for a
counter)."""


class Metrics:
    """The metric objects of this process (one set, shared by its actors)."""

    _instance: ClassVar[Metrics | None] = None

    def __init__(self) -> None:
        self.append_events = Counter(
            NAMES["append_events"], "events appended by session actors", TAG_KEYS)
        self.append_latency = Histogram(
            NAMES["append_latency"], "append request time in the session actor (ms), "
            "the commit included when durable; its count is the append requests served "
            "(a retry found in the log included)", LATENCY_MS_BOUNDARIES, TAG_KEYS)
        self.commit_events = Histogram(
            NAMES["commit_events"], "events per group commit of a shard's writer",
            BATCH_EVENTS_BOUNDARIES, TAG_KEYS)
        self.committed_events = Counter(
            NAMES["committed_events"], "events written by group commits (exact: a "
            "histogram's exported sum is estimated from its buckets)", TAG_KEYS)
        self.commit_latency = Histogram(
            NAMES["commit_latency"], "time of one group commit (ms)",
            LATENCY_MS_BOUNDARIES, TAG_KEYS)
        self.conflicts = Counter(
            NAMES["conflicts"], "requests refused as conflicts (expectedSeq taken, "
            "stale replace)", TAG_KEYS)
        self.activations = Counter(NAMES["activations"], "sessions activated", TAG_KEYS)
        self.passivations = Counter(NAMES["passivations"], "sessions passivated", TAG_KEYS)
        self.backlog = Gauge(
            NAMES["backlog"], "batches queued and not yet committed: a writer's group "
            "commit queue, or a session actor's buffered batches", (*TAG_KEYS, "queue"))
        self.failures = Counter(
            NAMES["failures"], "failed writes: kind=commit (a group commit), write (a "
            "session's write of unknown outcome), buffered (a buffered batch refused), "
            "passivation, fenced", FAILURE_TAG_KEYS)

    @classmethod
    def get(cls) -> Metrics:
        """This process's metrics, made on first use."""
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


class Recorder:
    """One actor's view of the metrics: its tags bound once."""

    __slots__ = ("_failure_tags", "_m", "_queue_tags", "_unrecorded_events", "tags")

    def __init__(self, placement: str, writer: str, shard: str) -> None:
        self._m = Metrics.get()
        self.tags: dict[str, str] = {"placement": placement, "writer": writer,
                                     "shard": shard}
        self._failure_tags: dict[str, dict[str, str]] = {}
        self._queue_tags: dict[str, dict[str, str]] = {}
        self._unrecorded_events = 0

    def __reduce__(self) -> tuple[type[Recorder], tuple[str, str, str]]:
        # Crosses Ray as its tags: the metric objects are made where it is used.
        t = self.tags
        return Recorder, (t["placement"], t["writer"], t["shard"])

    def appended(self, events: int, seconds: float) -> None:
        """One append request served: ``events`` appended by it (0 for a retry found in
        the log), in ``seconds``."""
        if events:  # a counter refuses an increment of 0
            self._add_events(events)
        # The histogram's count is the calls' counter: one record less per request.
        self._m.append_latency.observe(seconds * 1000.0, self.tags)

    def _add_events(self, events: int) -> None:
        """Count ``events`` appended. Each record is a call into Ray's native code, and
        the requests of a coalesced call are answered in one step of the event loop (by
        their group commit): what they add is recorded once, by the loop's next step
        (at once outside a running loop)."""
        if not self._unrecorded_events:
            try:
                asyncio.get_running_loop().call_soon(self._record_events)
            except RuntimeError:  # no running loop
                self._m.append_events.inc(events, self.tags)
                return
        self._unrecorded_events += events

    def _record_events(self) -> None:
        events, self._unrecorded_events = self._unrecorded_events, 0
        if events:
            self._m.append_events.inc(events, self.tags)

    def committed(self, batches: int, events: int, seconds: float, queued: int) -> None:
        """One group commit of ``events`` (in ``batches``) took ``seconds``; ``queued``
        batches remain (``store.sqlite.group_commit.CommitObserver``)."""
        m, tags = self._m, self.tags
        m.commit_events.observe(float(events), tags)
        if events:  # a counter refuses an increment of 0
            m.committed_events.inc(events, tags)
        m.commit_latency.observe(seconds * 1000.0, tags)
        m.backlog.set(float(queued), self._queue("writer"))

    def commit_failed(self, batches: int, error: BaseException) -> None:
        """A group commit of ``batches`` failed (``store.sqlite.group_commit.CommitObserver``; the
        store's logger has reported it)."""
        self.failed("commit")

    def buffered(self, batches: int) -> None:
        """A session actor's buffered batches not yet committed."""
        self._m.backlog.set(float(batches), self._queue("buffered"))

    def conflict(self) -> None:
        self._m.conflicts.inc(1, self.tags)

    def activated(self, session_id: str) -> None:
        self._m.activations.inc(1, self.tags)
        log.debug("session %r activated on shard %s", session_id, self.tags["shard"])

    def passivated(self, session_id: str) -> None:
        self._m.passivations.inc(1, self.tags)
        log.debug("session %r passivated on shard %s", session_id, self.tags["shard"])

    def failed(self, kind: str, session_id: str | None = None,
               error: BaseException | None = None) -> None:
        """A write failure of ``kind`` (see ``Metrics.failures``)."""
        tags = self._failure_tags.get(kind)
        if tags is None:
            tags = self._failure_tags[kind] = {**self.tags, "kind": kind}
        self._m.failures.inc(1, tags)
        if session_id is not None:
            log.warning("session %r on shard %s: %s failure (%s)", session_id,
                        self.tags["shard"], kind,
                        "?" if error is None else type(error).__name__)

    def _queue(self, queue: str) -> dict[str, str]:
        tags = self._queue_tags.get(queue)
        if tags is None:
            tags = self._queue_tags[queue] = {**self.tags, "queue": queue}
        return tags


__all__ = ["NAMES", "Metrics", "Recorder", "log"]
