"""Nodes a run on a cluster loses that its own chaos did not remove, read from Ray's node
table: a raylet killed from outside, a machine that went away.

``NodeWatch.observe`` takes one reading of the table (``ray.nodes()``) and is pure, so
it is tested without Ray; ``NodeWatch.run`` reads the table about twice a second until
the run ends. A node that was alive at one reading and dead at a later one, and that no
chaos kill of the run names (``expected``), is a ``NodeLoss``: when it was found, the
shards whose resource it offered, and when each of them was offered again by a live
node (the node's return, or another node taking the shard's resource).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from surfacelog.store.shardmap import ShardMap

INTERVAL_S: Final = 0.5
"""Between two readings of the node table: a loss is found within about this long of
Ray declaring the node dead (which itself takes the GCS's health checks)."""


@dataclass
class NodeLoss:
    """A node found dead that the run did not remove."""

    node_id: str
    """Ray's id of the node (hex)."""
    lost_at: float
    """When the watch found it dead (epoch seconds)."""
    shards: list[str]
    """The shards whose resource it offered."""
    back_at: dict[str, float] = field(default_factory=dict)
    """When each of its shards was offered again by a live node (epoch seconds)."""

    def unrecovered(self) -> list[str]:
        """Its shards no live node offered again."""
        return [shard for shard in self.shards if shard not in self.back_at]

    def describe(self, started_at: float) -> str:
        """One line: the node, when (seconds since ``started_at``), its shards and
        whether each came back (and after how long)."""
        parts = []
        for shard in self.shards:
            back = self.back_at.get(shard)
            parts.append(f"{shard} never offered again" if back is None else
                         f"{shard} offered again after {back - self.lost_at:.1f} s")
        held = "; ".join(parts) if parts else "no shard of the run"
        return (f"node {self.node_id[:12]} lost at {self.lost_at - started_at:.1f} s, "
                f"not by the run's chaos: {held}")


class NodeWatch:
    """Finds the nodes of the cluster that die without the run removing them.

    ``shards``: the run's shard map (a shard's node is the one offering the resource
    it is pinned by; a shard pinned by none is on no node in particular).
    ``expected``: the ids of the nodes the run's own chaos removed so far (read at each
    reading, so that a kill recorded before its node dies is never taken for a loss).
    """

    def __init__(self, shards: ShardMap, expected: Callable[[], Iterable[str]]) -> None:
        self._pins = {shard.name: set(shard.pin) for shard in shards.shards if shard.pin}
        self._expected = expected
        self._alive: set[str] = set()
        self._offers: dict[str, set[str]] = {}
        self.losses: list[NodeLoss] = []

    def observe(self, nodes: Iterable[Mapping[str, Any]], now: float) -> None:
        """Take one reading of Ray's node table (``ray.nodes()``'s entries: ``NodeID``,
        ``Alive``, ``Resources``) made at ``now`` (epoch seconds)."""
        expected = set(self._expected())
        for node in nodes:
            node_id = str(node["NodeID"])
            if node.get("Alive"):
                self._alive.add(node_id)
                self._offers[node_id] = set(node.get("Resources") or {})
            elif node_id in self._alive:
                self._alive.discard(node_id)
                if node_id not in expected:
                    offered = self._offers.get(node_id, set())
                    self.losses.append(NodeLoss(node_id, now, sorted(
                        name for name, pin in self._pins.items() if pin & offered)))
        offered_now = set().union(*(self._offers[n] for n in self._alive))
        for loss in self.losses:
            for shard in loss.unrecovered():
                if self._pins[shard] <= offered_now:
                    loss.back_at[shard] = now

    async def run(self, done: asyncio.Event,
                  read: Callable[[], list[dict[str, Any]]]) -> None:
        """Read the node table with ``read`` (``ray.nodes``, off the event loop) every
        ``INTERVAL_S`` until ``done`` is set, and once more then. Raises what ``read``
        raises (the GCS lost: the run reports it)."""
        loop = asyncio.get_running_loop()
        while True:
            self.observe(await loop.run_in_executor(None, read), time.time())
            if done.is_set():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), timeout=INTERVAL_S)


__all__ = ["INTERVAL_S", "NodeLoss", "NodeWatch"]
