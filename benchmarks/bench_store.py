"""Store benchmark: events persisted per second through ``SqliteEventStore`` (encode +
insert + commit, durable appends) beside raw stdlib ``sqlite3.executemany`` of the same
pre-encoded rows in one transaction per batch, in the same run, on the same disk, with
the same schema and pragmas (WAL, ``synchronous=FULL``); then the load time of a
100k-event session beside the time to merely decode its events.

    python benchmarks/bench_store.py [--rounds 3] [--load-events 100000] [--quick]

Prints a table of events/s and the ratio store/raw per batch size, in wall time and in
CPU time (the process's, every thread: on a shared machine the wall ratio swings with
fsync latency; target of issue 11: >= 0.8 at batch sizes 16, 256 and 4096), then the
load figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from surfacelog.schema.events import Event
from surfacelog.schema.header import SESSION_FORMAT_VERSION, SessionHeader
from surfacelog.session import Session
from surfacelog.store import SqliteEventStore
from surfacelog.store.rows import Row, decode_rows, encode_batch
from surfacelog.store.sqlite.file_format import schema_sql
from surfacelog.store.sqlite.group_commit import INSERT_EVENTS, insert_rows
from surfacelog.store.sqlite.statements import SELECT_EVENTS

BATCH_SIZES = (1, 16, 256, 4096)
WORDS = ("the", "tool", "result", "surface", "session", "replace", "seq", "event", "log",
         "compaction", "message", "turn", "step", "model", "chunk", "write", "read")


class _Clock:
    def __init__(self) -> None:
        self.now = 1_760_000_000_000

    def __call__(self) -> int:
        self.now += 7
        return self.now


def _text(i: int, words: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(words))


def _turn(session: Session, turn: int) -> None:
    """One realistic DSH-like turn: a request, a streamed answer calling a tool, the
    tool's output, a final streamed answer (about 17 events, ~250 bytes each)."""
    def text(value: str) -> dict[str, Any]:
        return {"type": "text", "text": value}

    session.append("turn/start", {"turn": turn})
    session.append("user/message", {"id": f"u-{turn}", "role": "user",
                                    "source": {"kind": "user"},
                                    "content": [text(_text(turn, 18))]}, surface_op="append")
    for step in (1, 2):
        session.append("step/start", {"turn": turn, "step": step})
        chunks = [session.append("assistant/chunk", {
            "turn": turn, "step": step,
            "chunk": {"type": "text-delta", "index": 0, "text": _text(turn + k, 6)}}).seq
            for k in range(4)]
        call = f"call_{turn:05d}_{step}"
        content = [text(_text(turn + step, 30))]
        if step == 1:
            content.append({"type": "tool-call", "id": call, "name": "bash",
                            "arguments": '{"command":"grep -rn surface src/ | head -40"}'})
        session.append("assistant/message", {
            "turn": turn, "step": step,
            "message": {"id": f"a-{turn}-{step}", "role": "assistant",
                        "source": {"kind": "model", "provider": "deepseek",
                                   "model": "deepseek-v4"},
                        "content": content},
            "usage": {"inputTokens": 1200 + turn, "outputTokens": 80}},
            surface_op="append", source_event_seqs=chunks)
        if step == 1:
            call_seq = session.append("tool/call", {
                "turn": turn, "step": step, "callId": call, "name": "bash",
                "arguments": '{"command":"grep -rn surface src/ | head -40"}'}).seq
            session.append("tool/result", {
                "turn": turn, "step": step,
                "message": {"id": f"t-{call}", "role": "user",
                            "source": {"kind": "tool", "callId": call},
                            "content": [{"type": "tool-result", "toolCallId": call,
                                         "content": [text(_text(turn, 50))]}]}},
                surface_op="append", source_event_seqs=[call_seq])
        session.append("step/end", {"turn": turn, "step": step})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def make_session(min_events: int, session_id: str = "bench") -> Session:
    """A valid session of closed turns holding at least ``min_events`` events."""
    header = SessionHeader(version=SESSION_FORMAT_VERSION, id=session_id,
                           created_at=1_760_000_000_000)
    session = Session(header=header, clock=_Clock())
    turn = 0
    while len(session) < min_events:
        turn += 1
        _turn(session, turn)
    return session


def _fresh(directory: Path, name: str) -> Path:
    path = directory / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


class _Raw:
    """A raw stdlib connection with the store's schema and pragmas."""

    def __init__(self, path: Path, multi: bool) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.executescript(schema_sql())
        self.multi = multi

    def commit(self, rows: Sequence[Row]) -> None:
        """One transaction: ``executemany`` of the pre-encoded rows (or, with ``multi``,
        the store's multi-row INSERT statements)."""
        self.conn.execute("BEGIN IMMEDIATE")
        if self.multi:
            insert_rows(self.conn, rows)
        else:
            self.conn.executemany(INSERT_EVENTS, rows)
        self.conn.execute("COMMIT")


async def paired_run(directory: Path, events: Sequence[Event], header: SessionHeader,
                     batch: int) -> dict[str, float]:
    """Events/s of raw ``executemany``, of durable ``SqliteEventStore.append`` (encode +
    insert + commit) and of raw multi-row INSERTs, interleaved batch by batch so that
    all three see the same disk (fsync latency on a shared machine drifts a lot)."""
    raw = _Raw(_fresh(directory, "raw.db"), multi=False)
    multi = _Raw(_fresh(directory, "multi.db"), multi=True)
    store = await SqliteEventStore.open(_fresh(directory, "store.db"))
    epoch = await store.create(header)
    spent = {"raw": 0.0, "store": 0.0, "multi": 0.0}
    cpu = {"raw": 0.0, "store": 0.0, "multi": 0.0}
    clock, cpu_clock = time.perf_counter, time.process_time  # CPU: every thread's
    for start in range(0, len(events), batch):
        chunk = events[start:start + batch]
        rows = encode_batch(header.id, chunk).rows  # pre-encoded for the raw runs
        t0, c0 = clock(), cpu_clock()
        raw.commit(rows)
        t1, c1 = clock(), cpu_clock()
        await store.append(header.id, chunk, epoch=epoch, durable=True)
        t2, c2 = clock(), cpu_clock()
        multi.commit(rows)
        t3, c3 = clock(), cpu_clock()
        spent["raw"] += t1 - t0
        spent["store"] += t2 - t1
        spent["multi"] += t3 - t2
        cpu["raw"] += c1 - c0
        cpu["store"] += c2 - c1
        cpu["multi"] += c3 - c2
    await store.close()
    raw.conn.close()
    multi.conn.close()
    rates = {name: len(events) / seconds for name, seconds in spent.items()}
    rates.update({f"cpu_{name}": len(events) / max(seconds, 1e-9)
                  for name, seconds in cpu.items()})
    return rates


def _timed(fn: Callable[[], Any], rounds: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(rounds):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def throughput(directory: Path, rounds: int, quick: bool) -> list[dict[str, Any]]:
    """Rates per batch size: the median of ``rounds`` paired runs each."""
    per_batch = {1: 400, 16: 6_400, 256: 51_200, 4096: 122_880}
    if quick:
        per_batch = {k: max(k, v // 10) for k, v in per_batch.items()}
    session = make_session(max(per_batch.values()))
    assert session.header is not None
    all_events = list(session.log)
    results = []
    for batch in BATCH_SIZES:
        events = all_events[:per_batch[batch]]
        runs = [asyncio.run(paired_run(directory, events, session.header, batch))
                for _ in range(rounds)]
        ratios = [r["store"] / r["raw"] for r in runs]
        cpu_ratios = [r["cpu_store"] / r["cpu_raw"] for r in runs]
        results.append({
            "batch": batch, "events": len(events),
            "raw": statistics.median(r["raw"] for r in runs),
            "store": statistics.median(r["store"] for r in runs),
            "multi": statistics.median(r["multi"] for r in runs),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "cpu_ratio": statistics.median(cpu_ratios), "cpu_ratio_min": min(cpu_ratios),
            "ratio_multi": statistics.median(r["store"] / r["multi"] for r in runs)})
    return results


async def _load_figures(path: Path, n: int) -> dict[str, float]:
    session = make_session(n, "big")
    assert session.header is not None
    events = list(session.log)
    store = await SqliteEventStore.open(path)
    await store.create(session.header, events)
    await store.close()

    conn = sqlite3.connect(path)
    fetch, rows = _timed(lambda: conn.execute(SELECT_EVENTS, ("big", 0, -1)).fetchall())
    conn.close()
    decode, decoded = _timed(lambda: decode_rows("big", rows, 0))
    assert decoded == events
    blob = b"[" + b",".join(msgspec.json.encode(e) for e in events) + b"]"
    decoder = msgspec.json.Decoder(list[Event])
    raw_decode, _ = _timed(lambda: decoder.decode(blob))
    validate, _ = _timed(lambda: Session(events, header=session.header), rounds=1)

    store = await SqliteEventStore.open(path)
    times: dict[str, list[float]] = {"load": [], "open_session": []}
    for _ in range(3):
        for name, call in (("load", store.load), ("open_session", store.open_session)):
            started = time.perf_counter()
            await call("big")
            times[name].append(time.perf_counter() - started)
    await store.close()
    return {"events": len(events), "open_session": min(times["open_session"]),
            "load": min(times["load"]), "fetch": fetch, "decode_rows": decode,
            "raw_decode": raw_decode, "validate": validate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load-events", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="fewer events (smoke run)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the database files go (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        print(f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}, "
              f"{os.cpu_count()} cpu, files in {directory}")
        print("\nthroughput (durable appends, synchronous=FULL; medians of "
              f"{args.rounds} runs, each interleaving the three writers batch by batch)")
        print(f"{'batch':>6} {'events':>8} {'raw ev/s':>11} {'store ev/s':>11} "
              f"{'store/raw':>9} {'(worst)':>8} {'multi-row ev/s':>15} {'store/multi':>11} "
              f"{'cpu store/raw':>13} {'(worst)':>8}")
        ok = True
        for r in throughput(directory, args.rounds, args.quick):
            print(f"{r['batch']:>6} {r['events']:>8} {r['raw']:>11,.0f} {r['store']:>11,.0f} "
                  f"{r['ratio']:>9.2f} {r['ratio_min']:>8.2f} {r['multi']:>15,.0f} "
                  f"{r['ratio_multi']:>11.2f} {r['cpu_ratio']:>13.2f} "
                  f"{r['cpu_ratio_min']:>8.2f}")
            if r["batch"] >= 16 and r["ratio"] < 0.8:
                ok = False
        n = args.load_events // 10 if args.quick else args.load_events
        f = asyncio.run(_load_figures(_fresh(directory, "load.db"), n))
        print(f"\nload of a {f['events']:,}-event session (ms, best of 3; open_session = "
              "load + epoch bump + seed marker commit)")
        for key in ("open_session", "load", "fetch", "decode_rows", "raw_decode",
                    "validate"):
            print(f"  {key:<13} {f[key] * 1000:8.1f}")
        print(f"  open_session / raw_decode = {f['open_session'] / f['raw_decode']:.1f}x")
        print("\ntarget store >= 0.8x raw (wall) at batch 16, 256 and 4096:",
              "met" if ok else "NOT met")
        print("(cpu store/raw: the same rates in CPU time of the process, every thread; "
              "the wall ratio is mostly fsync at small batches)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
