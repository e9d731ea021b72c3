"""``HostingConfig``: how a deployment hosts its sessions, spelled once.

Every process that reaches sessions (the client, the session actors, the load run's
drivers, compactor and pruner) is given the same ``HostingConfig``: the shards, the
placement of sessions on actors, the durability of appends, and the store's options. It
is a frozen msgspec struct, so it crosses Ray as one small picklable value.
"""

from __future__ import annotations

import gc
import hashlib
import os
from typing import Any

import msgspec

from surfacelog.actors.choices import Durability as Durability
from surfacelog.actors.choices import Placement as Placement
from surfacelog.actors.choices import Writer as Writer
from surfacelog.store.shardmap import Shard, ShardMap

NAMESPACE = "surfacelog"
"""The Ray namespace of every named actor of surfacelog."""

SESSION_RESOURCE = "surfacelog_sessions"
"""The Ray custom resource that nodes offer to host session actors away from the shards'
nodes (``HostingConfig.colocate=False``)."""


GC_YOUNG_THRESHOLD = 20_000
"""The threshold of the youngest generation of Python's cycle collector in the
processes of surfacelog's actors (the interpreter's default is 700).

An actor serving requests frees nearly all it allocates by reference counting, while
the sessions it holds keep every event's data alive. In the owner actor of a 55,000-event
run the collector ran about 2,100 times at 700, 13 of them full passes over every event
held (about 10% of the actor's CPU, one pass 140 ms and more by the end); at 20,000 it
ran 9 times and never in full (benchmarks/README.md, "Hosting cost"). Cycles are still
collected, later."""


def tune_gc() -> None:
    """Set this process's young-generation threshold to ``GC_YOUNG_THRESHOLD`` (an
    actor's ``__init__`` calls it: the setting is per process), leaving the older
    generations' as they are."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)


def db_key(path: str) -> str:
    """A short stable key for a database path (names the actors that serve it)."""
    return hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:10]


class HostingConfig(msgspec.Struct, frozen=True):
    """How sessions are hosted.

    - ``shards``: where sessions live (``ShardMap.single(db)`` for one file);
    - ``placement``: ``dedicated`` (one actor per session) or ``packed`` (``packs``
      actors per shard, each hosting the sessions whose id hashes to it);
    - ``durability``: ``durable`` acknowledges an append once committed, ``buffered``
      once queued for the journal (``flush()`` is the barrier);
    - ``idle_timeout_s``: a session without requests for that long is passivated
      (``None``: never);
    - ``store_options``: keyword arguments of ``SqliteEventStore.open`` for every shard;
    - ``writer``: who writes a shard's file. ``journal``: a journal actor per shard
      commits the batches session actors send it (two Ray calls per durable append, any
      placement). ``owner``: one packed actor per shard hosts all of the shard's
      sessions and owns the file's connection itself, as a Durable Object owns its
      SQLite (one Ray call per durable append; ``placement`` must be ``packed`` and
      ``packs`` is then 1 per shard: a file has one writer).
    - ``colocate``: where session actors run. ``True`` (default): on their shard's node
      (its resource), beside the writer, so the session-to-writer call of a durable
      append stays on one node. ``False``: on the nodes that offer ``SESSION_RESOURCE``
      (which the deployment gives to compute nodes and not to the shards' nodes), every
      session-to-writer call then crossing nodes; no session actor starts until such a
      node is up. Not with ``writer="owner"``, whose session actor is the writer.
    """

    shards: ShardMap
    placement: Placement = "dedicated"
    packs: int = 8
    durability: Durability = "durable"
    idle_timeout_s: float | None = 600.0
    store_options: dict[str, Any] = msgspec.field(default_factory=dict)
    writer: Writer = "journal"
    colocate: bool = True

    def __post_init__(self) -> None:
        if self.packs < 1:
            raise ValueError(f"packs must be at least 1, not {self.packs}")
        if self.writer == "owner" and self.placement != "packed":
            raise ValueError("writer 'owner' hosts a shard's sessions in one actor: "
                             "it needs placement 'packed'")
        if self.writer == "owner" and not self.colocate:
            raise ValueError("writer 'owner': the session actor is the shard's writer, "
                             "so it runs on the shard's node (colocate must be True)")

    @classmethod
    def single(cls, db: str | os.PathLike[str] = "surfacelog.db",
               **options: Any) -> HostingConfig:
        """One shard: the database file ``db``."""
        return cls(ShardMap.single(db), **options)

    def session_resources(self, shard: Shard) -> dict[str, float]:
        """Ray ``resources=`` of the session actors of ``shard`` (see ``colocate``): the
        shard's own pin, or a sliver of ``SESSION_RESOURCE``."""
        return shard.pin if self.colocate else {SESSION_RESOURCE: 0.001}

    def shard_key(self, shard: Shard) -> str:
        """The key that names ``shard``'s actors (its journal, packs, sessions)."""
        return db_key(shard.path)


__all__ = ["GC_YOUNG_THRESHOLD", "NAMESPACE", "SESSION_RESOURCE", "Durability", "HostingConfig",
           "Placement", "Writer", "db_key", "tune_gc"]
