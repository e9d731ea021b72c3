"""``Client.shutdown`` on the shared local Ray: every actor is stopped, and a writer whose
close fails (its last commits did not make it: a full disk) is reported with the
sessions' write failures, never raised, so that a run still prints its report."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayActorError

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.schema.errors import SurfacelogError
from surfacelog.store.errors import CommitFailed

from support.disks import small_disk

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


@ray.remote(num_cpus=0)
class WriterWhoseFlushFailed:
    """An owner writer whose shutdown found its own flush failing (``failure``), and
    whose close then refuses its last batches with ``close_error``."""

    def __init__(self, failure: str, close_error: str) -> None:
        self.failure = failure
        self.close_error = close_error

    async def shutdown(self) -> list[str]:
        return [self.failure]

    async def close(self) -> None:
        raise CommitFailed(self.close_error)


def test_a_close_refused_as_the_flush_was_is_listed_once(tmp_path: Path) -> None:
    """The close retries the batches the flush could not commit: the same error again is
    the same failure, listed once (the flush's line); another error is listed too."""
    config = HostingConfig.single(str(tmp_path / "full.db"), placement="packed",
                                  writer="owner", idle_timeout_s=None)
    name = config.shards.shards[0].name
    refused = "group commit of 3 batch(es) failed: database or disk is full"
    flush_line = f"(shard {name} flush): CommitFailed: {refused}"
    same = WriterWhoseFlushFailed.remote(flush_line, refused)  # type: ignore[attr-defined]
    assert Client(config, {name: same}).shutdown() == [flush_line]
    other = WriterWhoseFlushFailed.remote(  # type: ignore[attr-defined]
        flush_line, "group commit of 4 batch(es) failed: database or disk is full")
    assert Client(config, {name: other}).shutdown() == [
        flush_line, f"(shard {name} close): CommitFailed: group commit of 4 batch(es) "
        "failed: database or disk is full"]


@pytest.mark.parametrize("writer", ["journal", "owner"])
async def test_a_full_disk_is_listed_once_per_session_and_once_for_the_shard(
        tmp_path: Path, writer: str) -> None:
    """A shard on a 1 MB tmpfs fills up. Shutting the client down lists each session
    whose writes failed once, and the shard's writer failing to flush once, named by its
    shard: not once per session actor that found its journal failing, and not again for
    the writer's close, which refuses the same batches."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        config = HostingConfig.single(str(disk / "full.db"), placement="packed", packs=2,
                                      writer=writer, idle_timeout_s=None)  # type: ignore[arg-type]
        # The client's default resend window (30 s): with 2 s, an append (a session's
        # first also starts its actor) went unanswered on a loaded machine.
        client = connect(config=config)
        name = config.shards.shards[0].name
        text = [{"type": "text", "text": "x" * 30_000}]
        refused: set[str] = set()
        try:
            for k in range(200):
                sid = f"s{k % 6}"
                try:
                    await client.session(sid).append(
                        "user/message", {"id": f"u{k}", "role": "user",
                                         "source": {"kind": "user"}, "content": text},
                        surface_op="append")
                except SurfacelogError as exc:
                    assert "full" in str(exc), exc
                    refused.add(sid)
                if len(refused) == 6:
                    break
            assert refused, "the disk never filled"
        finally:
            failures = client.shutdown()
        assert len(failures) == len(set(failures)), failures
        shard_lines = [line for line in failures if line.startswith(f"(shard {name} ")]
        assert [line.split(":", 1)[0] for line in shard_lines] == \
            [f"(shard {name} flush)"], failures
        # The writer's own error, not Ray's wrapping of it (its traceback, colours).
        assert shard_lines[0].startswith(f"(shard {name} flush): CommitFailed: "), failures
        assert "full" in shard_lines[0] and "\x1b[" not in shard_lines[0]
        assert {line.split(":", 1)[0] for line in failures} - {f"(shard {name} flush)"} \
            <= {f"s{k}" for k in range(6)}
