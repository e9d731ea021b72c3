"""``Client.shutdown`` on the shared local Ray: every actor is stopped, and a writer whose
close fails (its last commits did not make it: a full disk) is reported with the
sessions' write failures, never raised, so that a run still prints its report."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import Client
from surfacelog.actors.config import HostingConfig
from surfacelog.store.errors import CommitFailed

pytestmark = pytest.mark.usefixtures("ray_local")


@ray.remote(num_cpus=0)
class WriterOnAFullDisk:
    """What ``Client.shutdown`` asks of an owner writer: it passivates its sessions
    (one of whose writes failed) and then cannot commit its last batches as it closes."""

    async def shutdown(self) -> list[str]:
        return ["s1: CommitFailed: database or disk is full"]

    async def close(self) -> None:
        raise CommitFailed("group commit of 3 batch(es) failed: database or disk is full")

    async def ping(self) -> str:
        return "pong"


def test_a_writer_whose_close_fails_is_reported_and_every_actor_stopped(
        tmp_path: Path) -> None:
    config = HostingConfig.single(str(tmp_path / "full.db"), placement="packed",
                                  writer="owner", idle_timeout_s=None)
    name = config.shards.shards[0].name
    writer = WriterOnAFullDisk.remote()  # type: ignore[attr-defined]
    client = Client(config, {name: writer})
    failures = client.shutdown()
    assert failures == [
        "s1: CommitFailed: database or disk is full",
        f"(shard {name} close): CommitFailed: group commit of 3 batch(es) failed: "
        "database or disk is full"]
    # Killed (Ray's kill takes effect shortly after it returns).
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get(writer.ping.remote(), timeout=30)
        except RayActorError:
            break
        assert time.monotonic() < deadline, "the writer still answers"
        time.sleep(0.05)
