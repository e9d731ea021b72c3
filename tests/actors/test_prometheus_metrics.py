"""The actors' metrics reach Ray's Prometheus export with no setup: a small durable
workload on the test session's local Ray (whose dashboard agent exports every node's
metrics on its metrics export port, loopback), then the endpoint scraped over HTTP.

Each run uses shards with names of its own, so that what other tests of the session
recorded is told apart by the ``shard`` tag.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path

import httpx
import pytest
import ray

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.actors.metrics import NAMES
from surfacelog.actors.protocol import Conflict
from surfacelog.store.errors import WriterFenced
from surfacelog.store.shardmap import Shard, ShardMap
from surfacelog.store.sqlite import SqliteEventStore

pytestmark = pytest.mark.usefixtures("ray_local")

SCRAPE_FOR_S = 120.0
"""How long the scrape waits for the agent to export what was recorded (Ray reports a
worker's metrics to its agent every few seconds)."""
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    """Prometheus text format: every labelled sample, by metric name."""
    out: Samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None:
            labels = dict(_LABEL.findall(match.group(2)))
            out.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return out


def total(samples: Samples, name: str, **tags: str) -> float:
    """The sum of ``name``'s samples whose labels include ``tags`` (over processes)."""
    return sum(value for labels, value in samples.get(name, [])
               if all(labels.get(k) == v for k, v in tags.items()))


async def scrape() -> Samples:
    """The metrics of this node's export port, as they are now."""
    ports = {node["MetricsExportPort"] for node in ray.nodes() if node["Alive"]}
    assert len(ports) == 1, ports
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.get(f"http://127.0.0.1:{ports.pop()}/metrics")
    reply.raise_for_status()
    return parse(reply.text)


def shard_map(tmp_path: Path, name: str) -> ShardMap:
    return ShardMap((Shard(name, str(tmp_path / f"{name}.db")),))


async def workload(client: Client, sessions: int, turns: int) -> int:
    """Turns of one event each, then a batch of three; returns the events appended."""
    appended = 0
    for k in range(sessions):
        handle = client.session(f"m-{k}")
        for t in range(turns):
            await handle.append("turn/start", {"turn": t + 1}, expected_seq=2 * t)
            await handle.append("turn/end", {"turn": t + 1, "reason": {"kind": "completed"}},
                                expected_seq=2 * t + 1)
            appended += 2
    return appended


async def test_metrics_are_scraped_from_rays_prometheus_export(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    owner_shard, journal_shard = f"own-{tag}", f"jnl-{tag}"
    owner = connect(config=HostingConfig(shard_map(tmp_path, owner_shard), placement="packed",
                                         packs=1, writer="owner"))
    journal = connect(config=HostingConfig(shard_map(tmp_path, journal_shard),
                                           placement="dedicated", writer="journal"))
    try:
        appended = {owner_shard: await workload(owner, 3, 4),
                    journal_shard: await workload(journal, 2, 3)}
        # A conflict: the seq is taken by other events.
        with pytest.raises(Conflict):
            await owner.session("m-0").append("turn/start", {"turn": 99}, expected_seq=0)
        # A passivation, then an activation again by the next request.
        assert await journal.session("m-0").passivate()
        await journal.session("m-0").surface()
        # A fenced writer (a write failure): another writer takes the session.
        store = await SqliteEventStore.open(journal.db)
        try:
            await store.open_session("m-1")
        finally:
            await store.close()
        with pytest.raises(WriterFenced):
            await journal.session("m-1").append("turn/start", {"turn": 9}, expected_seq=6)

        def ray_name(key: str, counter: bool = False) -> str:
            return f"ray_{NAMES[key]}" + ("_total" if counter else "")

        deadline = time.monotonic() + SCRAPE_FOR_S
        while True:
            samples = await scrape()
            found = {
                shard: {
                    "events": total(samples, ray_name("append_events", True), shard=shard),
                    "latency_count": total(samples, ray_name("append_latency") + "_count",
                                           shard=shard),
                    "commit_count": total(samples, ray_name("commit_events") + "_count",
                                          shard=shard),
                    "commit_events": total(samples, ray_name("committed_events", True),
                                           shard=shard),
                    "commit_latency": total(samples, ray_name("commit_latency") + "_count",
                                            shard=shard),
                    "activations": total(samples, ray_name("activations", True), shard=shard),
                    "passivations": total(samples, ray_name("passivations", True),
                                          shard=shard),
                    "conflicts": total(samples, ray_name("conflicts", True), shard=shard),
                    "fenced": total(samples, ray_name("failures", True), shard=shard,
                                    kind="fenced"),
                    "backlog_series": float(len([1 for labels, _ in samples.get(
                        ray_name("backlog"), []) if labels.get("shard") == shard])),
                }
                for shard in (owner_shard, journal_shard)
            }
            own, jnl = found[owner_shard], found[journal_shard]
            missing = [f"{s}: {k}" for s, f in found.items() for k, ok in (
                ("events", f["events"] >= appended[s]),
                ("calls (the latency's count)", f["latency_count"] >= appended[s]),
                ("commits", f["commit_count"] >= 1 and f["commit_latency"] >= 1),
                ("commit events", f["commit_events"] >= appended[s]),
                ("activations", f["activations"] >= 3), ("backlog", f["backlog_series"] >= 1),
            ) if not ok]
            missing += [k for k, ok in (
                ("conflicts", own["conflicts"] >= 1), ("passivations", jnl["passivations"] >= 1),
                ("fenced", jnl["fenced"] >= 1)) if not ok]
            ok = not missing
            if ok or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)
        assert ok, (missing, str(found))
        # The tags name the placement and the writer too.
        owner_tags = {(labels.get("placement"), labels.get("writer"))
                      for labels, _ in samples[ray_name("append_events", True)]
                      if labels.get("shard") in (owner_shard, journal_shard)}
        assert owner_tags == {("packed", "owner"), ("dedicated", "journal")}
    finally:
        owner.shutdown()
        journal.shutdown()

