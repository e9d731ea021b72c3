"""Litestream replica benchmark: the recovery point (replication lag, acknowledged events a
lost disk would lose) under a steady durable load, and the recovery time (restore time
per GB).

(a) Lag and loss. A ``SqliteEventStore`` opened as a replicated shard is
(``REPLICATED_STORE_OPTIONS``), with its ``LitestreamSupervisor`` running, takes durable
appends from ``--sessions`` sessions at ``--rate`` events/s in total (default 7,000/s,
the throughput of ``make run``'s default load on this machine, in one-turn batches of
``--batch`` events). Every ``--sample-s`` the benchmark notes the time ``t`` and how many
events were committed (acknowledged) by then, and restores the replica as it stands
(``litestream restore`` into a scratch file): the events committed by ``t`` that the
restored file lacks are what a disk lost at ``t`` would have lost, and the lag at ``t`` is
``t`` minus the commit time of the oldest of them (0 when none). The baseline, in the
same run, is the configured sync interval: the ratio lag/interval says how much of the
lag is the interval itself.

(b) Restore time. A store of about ``--restore-mb`` MB (sessions of 2,000 events) is
built, replicated once (a snapshot), and restored with ``litestream restore``; then the
restored file is verified (every session loaded through the full validation), as the
shard's writer does before it serves. Both are reported per GB, beside the baseline of
copying the same file (``shutil.copyfile``, then fsync) in the same run.

    python benchmarks/bench_replica.py [--seconds 20] [--rate 7000] [--restore-mb 256]
                                       [--sync-s 1.0] [--quick]

Prints the figures and returns them (``main``'s value) for the smoke test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from surfacelog.actors.replication import LitestreamSupervisor
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session import Session
from surfacelog.store import SqliteEventStore
from surfacelog.store.replica import (
    REPLICATED_STORE_OPTIONS,
    ReplicaPlan,
    litestream_binary,
    replica_url,
)
from surfacelog.store.verify import verify_store


class _Clock:
    def __init__(self) -> None:
        self.now = 1_760_000_000_000

    def __call__(self) -> int:
        self.now += 3
        return self.now


def _turn(session: Session, turn: int, events: int) -> None:
    """One closed turn of ``events`` events (turn/start, user/message, step, chunks,
    step/end, turn/end): the shape of the load run's turns."""
    session.append("turn/start", {"turn": turn})
    session.append("user/message", {
        "id": f"u{turn}", "role": "user", "source": {"kind": "user"},
        "content": [{"type": "text", "text": f"turn {turn}: summarise the tool output"}]},
        surface_op="append")
    session.append("step/start", {"turn": turn, "step": 1})
    for k in range(max(1, events - 5)):
        session.append("assistant/chunk", {"turn": turn, "step": 1, "chunk": {
            "type": "text-delta", "index": 0, "text": f"chunk {k} of the model's answer "}})
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def _count(path: Path) -> int:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
        return int(count)
    finally:
        conn.close()


def _restore(url: str, out: Path) -> None:
    for p in (out, out.with_name(out.name + "-wal"), out.with_name(out.name + "-shm")):
        p.unlink(missing_ok=True)
    subprocess.run([litestream_binary(), "restore", "-o", str(out), url], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def lag(folder: Path, seconds: float, rate: float, sessions: int, batch: int,
              sync_s: float, sample_s: float) -> dict[str, Any]:
    plan = ReplicaPlan("bench", str(folder / "lag.db"), str(folder / "lag-replica"), sync_s)
    store = await SqliteEventStore.open(plan.db, **REPLICATED_STORE_OPTIONS)
    supervisor = LitestreamSupervisor(plan)
    supervisor.start()
    commits: list[tuple[float, int]] = []  # (time, events committed by then)
    committed = 0
    stop = asyncio.Event()
    lives = []
    epochs: list[int] = []
    for k in range(sessions):
        session = Session(header=SessionHeader(version=SESSION_FORMAT_VERSION,
                                               id=f"lag-{k}", created_at=0),
                          clock=_Clock())
        epochs.append(await store.create(session.header, []))  # type: ignore[arg-type]
        lives.append(session)
    stored = [0] * sessions
    interval = batch * sessions / rate  # each session sends a batch this often

    async def writer(k: int) -> None:
        nonlocal committed
        session, turn = lives[k], 0
        next_at = time.monotonic() + interval * k / sessions
        while not stop.is_set():
            turn += 1
            _turn(session, turn, batch)
            events = list(session.log[stored[k]:])
            await store.append(session.header.id, events,  # type: ignore[union-attr]
                               epoch=epochs[k])
            stored[k] = len(session.log)
            committed += len(events)
            commits.append((time.monotonic(), committed))
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    tasks = [asyncio.ensure_future(writer(k)) for k in range(sessions)]
    try:
        return await _sample(plan, store, supervisor, tasks, stop, commits, folder, seconds,
                             sample_s, sync_s, lambda: committed)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await store.close()
        supervisor.stop()


async def _sample(plan: ReplicaPlan, store: SqliteEventStore,
                  supervisor: LitestreamSupervisor, tasks: list[asyncio.Future[None]],
                  stop: asyncio.Event, commits: list[tuple[float, int]], folder: Path,
                  seconds: float, sample_s: float, sync_s: float,
                  committed_now: Any) -> dict[str, Any]:
    samples: list[tuple[float, float]] = []  # (lag s, events lost)
    scratch = folder / "lag-restored.db"
    deadline = time.monotonic() + 30
    while not list((Path(plan.replica) / "ltx").rglob("*.ltx")):  # the first snapshot
        if time.monotonic() > deadline:
            raise RuntimeError("litestream wrote nothing to the replica within 30 s")
        await asyncio.sleep(0.05)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if any(task.done() for task in tasks):
            break  # a writer failed: raised by the gather below
        t = time.monotonic()
        acked = committed_now()
        await asyncio.to_thread(_restore, plan.url, scratch)
        held = await asyncio.to_thread(_count, scratch)
        lost = max(0, acked - held)
        if lost:
            # the commit that took the count past what the replica holds
            first_missing = next(at for at, total in commits if total > held)
            samples.append((t - first_missing, float(lost)))
        else:
            samples.append((0.0, 0.0))
        await asyncio.sleep(sample_s)
    stop.set()
    await asyncio.gather(*tasks)
    committed = committed_now()
    elapsed = commits[-1][0] - commits[0][0] if len(commits) > 1 else 1.0
    lags = [s[0] for s in samples]
    losses = [s[1] for s in samples]
    return {"samples": len(samples), "events_per_s": round(committed / elapsed),
            "lag_p50_s": round(_pct(lags, 0.5), 3), "lag_p99_s": round(_pct(lags, 0.99), 3),
            "lag_max_s": round(max(lags, default=0.0), 3),
            "lost_p50": round(_pct(losses, 0.5)), "lost_p99": round(_pct(losses, 0.99)),
            "lost_max": round(max(losses, default=0.0)), "sync_s": sync_s,
            "lag_p50_over_sync": round(_pct(lags, 0.5) / sync_s, 2),
            "restarts": supervisor.status().restarts}


async def restore_time(folder: Path, megabytes: int) -> dict[str, Any]:
    db = folder / "big.db"
    store = await SqliteEventStore.open(db, synchronous="NORMAL")
    k = 0
    while not db.exists() or db.stat().st_size < megabytes * 1_000_000:
        session = Session(header=SessionHeader(version=SESSION_FORMAT_VERSION,
                                               id=f"big-{k}", created_at=0), clock=_Clock())
        for turn in range(1, 201):
            _turn(session, turn, 10)
        await store.create(session.header, list(session.log))  # type: ignore[arg-type]
        k += 1
        if k % 20 == 0:
            await store.flush()
    await store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.stat().st_size
    plan = ReplicaPlan("big", str(db), str(folder / "big-replica"))
    plan.write_config()
    started = time.perf_counter()
    subprocess.run([litestream_binary(), "replicate", "-config", str(plan.config_path),
                    "-no-expand-env", "-once"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    snapshot_s = time.perf_counter() - started
    copy = folder / "copy.db"
    started = time.perf_counter()
    shutil.copyfile(db, copy)
    fd = os.open(copy, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    copy_s = time.perf_counter() - started
    copy.unlink()
    out = folder / "restored.db"
    started = time.perf_counter()
    await asyncio.to_thread(_restore, replica_url(plan.replica), out)
    restore_s = time.perf_counter() - started
    started = time.perf_counter()
    restored = await SqliteEventStore.open(out, read_only=True)
    try:
        checked, failures = await verify_store(restored)
    finally:
        await restored.close()
    verify_s = time.perf_counter() - started
    assert not failures and checked == k, (checked, k, failures[:1])
    gb = size / 1e9
    return {"bytes": size, "sessions": k, "snapshot_s": round(snapshot_s, 2),
            "copy_s": round(copy_s, 3), "restore_s": round(restore_s, 2),
            "verify_s": round(verify_s, 2),
            "restore_s_per_gb": round(restore_s / gb, 1),
            "verify_s_per_gb": round(verify_s / gb, 1),
            "restore_over_copy": round(restore_s / copy_s, 1)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=7000.0)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--batch", type=int, default=13)
    parser.add_argument("--sync-s", type=float, default=1.0)
    parser.add_argument("--sample-s", type=float, default=0.2)
    parser.add_argument("--restore-mb", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="a few seconds, small sizes")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rate, args.sessions, args.restore_mb = 3.0, 1000.0, 5, 2
    figures: dict[str, Any] = {"load_average": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="bench-replica-") as tmp:
        folder = Path(tmp)
        figures["lag"] = asyncio.run(lag(folder, args.seconds, args.rate, args.sessions,
                                         args.batch, args.sync_s, args.sample_s))
        a = figures["lag"]
        print(f"(a) {a['events_per_s']} events/s durable, sync interval {a['sync_s']} s, "
              f"{a['samples']} samples: lag p50 {a['lag_p50_s']} s, p99 {a['lag_p99_s']} s "
              f"(max {a['lag_max_s']}); lag p50/sync interval {a['lag_p50_over_sync']}x; "
              f"acknowledged events a disk loss would lose: p50 {a['lost_p50']}, "
              f"p99 {a['lost_p99']}, max {a['lost_max']}")
        figures["restore"] = asyncio.run(restore_time(folder, args.restore_mb))
        b = figures["restore"]
        print(f"(b) {b['bytes'] / 1e6:.0f} MB, {b['sessions']} sessions: litestream restore "
              f"{b['restore_s']} s ({b['restore_s_per_gb']} s/GB, {b['restore_over_copy']}x "
              f"a file copy of {b['copy_s']} s), verification {b['verify_s']} s "
              f"({b['verify_s_per_gb']} s/GB); first snapshot {b['snapshot_s']} s")
    print(f"load average {figures['load_average']}")
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
