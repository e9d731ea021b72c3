"""DSH interop benchmark: importing a DeepSeek Harness session file (zstd frames,
packed chunk rows) into a SQLite store, beside merely decompressing it and
JSON-decoding each of its lines, in the same run, on the same file.

    python benchmarks/bench_interop.py [--events 1000000] [--rounds 3] [--quick]
                                       [--rss-events 250000]

The file is generated first (a valid log: turns of a user message, steps of streamed
chunks, an assistant message citing them, tool calls and results), written as DSH
writes it (header frame, then one frame per 1024-event batch, chunk runs packed).
Each measure runs in its own child process, so that its peak RSS is its own, and
reports wall and CPU time (``getrusage``: all its threads):

- ``decode``: zstd decompression frame by frame + ``msgspec.json.decode`` of every
  line (packed rows stay rows: this is what any reader of the file must do at least);
- ``read``: ``read_log`` alone (the same, plus packed rows expanded to events, all
  held in one list);
- ``validate``: ``LogStream`` + ``LogCheck``: the file streamed and validated
  through the core (packed rows checked as the events they stand for, not built),
  nothing stored, nothing held;
- ``import``: what ``surfacelog import DB FILE`` does: ``LogStream`` +
  ``import_stream`` (validated and stored block by block, one transaction) into a
  new store;
- ``floor``: the insert floor of one row per event: the same rows (encoded
  beforehand, not timed) inserted with raw ``sqlite3`` into a new file with the
  store's schema and PRAGMAs (WAL, ``synchronous=FULL``), one transaction, by
  ``executemany`` and (``multi``) by the store's own 64-row ``INSERT`` statements.

Prints seconds, events/s and peak RSS of each, the ratio decode/import (target:
>= 0.5, i.e. import at least half as fast as the bare decode) in wall and CPU time,
and import against the insert floor; then the peak RSS of an import of a
``--rss-events`` file, to show that it does not grow with the file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from surfacelog.schema.dsh import dsh_frames
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader

WORDS = ("the", " tool", " result", " surface", " session", " replace", " seq", " event",
         " log", " compaction", " message", " turn", " step", " model", " chunk")


def generate(events: int) -> Iterator[Event]:
    """``events`` events of a valid log, mostly streamed chunks (as a DSH session is)."""
    seq = 0
    time_ms = 1_760_000_000_000
    turn = 0

    def ev(etype: str, data: Any, **extra: Any) -> Event:
        nonlocal seq, time_ms
        time_ms += 1 + seq % 3
        event = Event(type=etype, seq=seq, time=time_ms, data=data, **extra)
        seq += 1
        return event

    while seq < events:
        turn += 1
        yield ev("turn/start", {"turn": turn})
        yield ev("user/message", {"id": f"u-{turn}", "role": "user",
                                  "source": {"kind": "user"},
                                  "content": [{"type": "text", "text": f"task {turn}"}]},
                 surface_op="append")
        for step in (1, 2):
            yield ev("step/start", {"turn": turn, "step": step})
            cited = []
            for k in range(120):
                cited.append(seq)
                yield ev("assistant/chunk", {"turn": turn, "step": step, "chunk": {
                    "type": "text-delta", "index": 0, "text": WORDS[k % len(WORDS)]}})
            call = f"c-{turn}"
            content: list[Any] = [{"type": "text", "text": "done"}]
            if step == 1:
                content.append({"type": "tool-call", "id": call, "name": "bash",
                                "arguments": '{"command":"ls"}'})
            yield ev("assistant/message", {
                "turn": turn, "step": step,
                "message": {"id": f"a-{turn}-{step}", "role": "assistant",
                            "source": {"kind": "model", "provider": "p", "model": "m"},
                            "content": content},
                "usage": {"inputTokens": 100, "outputTokens": 120}},
                source_event_seqs=tuple(cited), surface_op="append")
            if step == 1:
                logged = ev("tool/call", {"turn": turn, "step": step, "callId": call,
                                          "name": "bash", "arguments": '{"command":"ls"}'})
                yield logged
                yield ev("tool/result", {"turn": turn, "step": step, "message": {
                    "id": f"t-{turn}", "role": "user",
                    "source": {"kind": "tool", "callId": call},
                    "content": [{"type": "tool-result", "toolCallId": call,
                                 "content": [{"type": "text", "text": "a.txt"}]}]}},
                    source_event_seqs=(logged.seq,), surface_op="append")
            yield ev("step/end", {"turn": turn, "step": step})
        yield ev("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def write_file(path: Path, events: int) -> int:
    """Write the DSH zstd file; returns the number of events written."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
    header = SessionHeader(version=0, id="bench", created_at=1, delegation_depth=0)
    count = 0

    def counted() -> Iterator[Event]:
        nonlocal count
        for event in generate(events):
            count += 1
            yield event

    with path.open("wb") as out:  # streamed: the parent stays small
        for piece in dsh_frames(header, counted(), batch=1024):
            out.write(compressor.compress(piece))
    return count


def phase_decode(path: Path) -> int:
    """Decompress frame by frame and JSON-decode every line; returns the line count."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    decode = msgspec.json.Decoder().decode
    lines = 0
    pending = b""
    with path.open("rb") as handle:
        obj = dctx.decompressobj()
        while data := handle.read(1 << 16):
            while data:
                out = obj.decompress(data)
                data = obj.unused_data if obj.eof else b""
                if obj.eof:
                    obj = dctx.decompressobj()
                pending += out
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    decode(line)
                    lines += 1
    return lines


def phase_read(path: Path) -> int:
    """``read_log`` alone: decompress, decode, expand packed rows to events, all held
    (no validation, no store)."""
    from surfacelog.schema.codec import read_log

    return len(read_log(path).events)


def phase_validate(path: Path) -> int:
    """The file streamed (``LogStream``) and validated through the core
    (``LogCheck``): everything an import does but storing."""
    from surfacelog.schema.codec import LogStream
    from surfacelog.session import LogCheck

    check = LogCheck()
    with LogStream(path, runs=True) as stream:
        for batch in stream.records():
            check.feed(batch)
    return len(check)


def phase_import(path: Path, db: Path) -> int:
    """What ``surfacelog import DB FILE`` does: streamed, validated and stored block by
    block in one transaction into a new store."""
    from surfacelog.schema.codec import LogStream
    from surfacelog.store import SqliteEventStore, import_stream

    async def run() -> int:
        store = await SqliteEventStore.open(db, create=True)
        try:
            with LogStream(path, runs=True) as stream:
                return (await import_stream(store, stream, path)).events
        finally:
            await store.close()

    return asyncio.run(run())


def floor_rows(path: Path) -> list[Any]:
    """The ``events`` rows of the file's events, as the store encodes them."""
    from surfacelog.schema.codec import LogStream
    from surfacelog.store.rows import encode_batch

    rows: list[Any] = []
    with LogStream(path) as stream:
        for batch in stream.batches():
            rows.extend(encode_batch("bench", batch).rows)
    return rows


def phase_floor(rows: list[Any], db: Path, how: str) -> None:
    """Insert ``rows`` with raw ``sqlite3`` into a new file holding the store's schema
    and PRAGMAs, in one transaction: ``executemany`` or the store's multi-row INSERT."""
    import sqlite3

    from surfacelog.store.sqlite.file_format import check_or_initialise
    from surfacelog.store.sqlite.group_commit import INSERT_EVENTS, insert_rows

    for stale in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        stale.unlink(missing_ok=True)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        check_or_initialise(conn, str(db))
        conn.execute("BEGIN IMMEDIATE")
        if how == "executemany":
            conn.executemany(INSERT_EVENTS, rows)
        else:
            insert_rows(conn, rows)
        conn.execute("COMMIT")
    finally:
        conn.close()


def cpu_seconds() -> float:
    """CPU time of this process so far, every thread (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(phase: str, path: Path, db: Path) -> dict[str, Any]:
    if phase == "floor":
        rows = floor_rows(path)
        result: dict[str, Any] = {"phase": phase, "count": len(rows)}
        for how in ("executemany", "multi"):
            start, cpu = time.perf_counter(), cpu_seconds()
            phase_floor(rows, db, how)
            key = "" if how == "executemany" else "multi_"
            result[f"{key}seconds"] = time.perf_counter() - start
            result[f"{key}cpu"] = cpu_seconds() - cpu
        result["peak_rss"] = peak_rss()
        return result
    start, cpu = time.perf_counter(), cpu_seconds()
    if phase == "decode":
        count = phase_decode(path)
    elif phase == "read":
        count = phase_read(path)
    elif phase == "validate":
        count = phase_validate(path)
    else:
        count = phase_import(path, db)
    return {"phase": phase, "seconds": time.perf_counter() - start,
            "cpu": cpu_seconds() - cpu, "count": count, "peak_rss": peak_rss()}


def peak_rss() -> int:
    """This process's peak resident set in bytes: ``VmHWM`` (its own address space;
    ``ru_maxrss`` would include the parent's peak, inherited across fork and exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_child(phase: str, path: Path, db: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--phase", phase, "--file", str(path),
                          "--db", str(db)], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


PHASES = ("decode", "read", "validate", "import", "floor")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rss-events", type=int, default=250_000,
                        help="also import a file of this many events once, for its peak "
                             "RSS (0: skip)")
    parser.add_argument("--quick", action="store_true",
                        help="20,000 events, 1 round, RSS at 5,000")
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        result = child(args.phase, args.file, args.db)
        print(json.dumps(result))
        return result
    events, rounds, rss_events = ((20_000, 1, 5_000) if args.quick
                                  else (args.events, args.rounds, args.rss_events))
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        path = Path(tmp) / "session.jsonl.zstd"
        written = write_file(path, events)
        size = path.stat().st_size
        print(f"file: {written:,} events, {size / 1e6:.1f} MB zstd")
        runs = []
        for k in range(rounds):  # alternate so the machine's load weighs on all alike
            db = Path(tmp) / f"import-{k}.db"
            run = {phase: run_child(phase, path, db) for phase in PHASES}
            imported, decode, floor = run["import"], run["decode"], run["floor"]
            ratios = {"ratio": decode["seconds"] / imported["seconds"],
                      "ratio_cpu": decode["cpu"] / max(imported["cpu"], 1e-9),
                      "floor_ratio": floor["seconds"] / imported["seconds"],
                      "floor_ratio_cpu": floor["cpu"] / max(imported["cpu"], 1e-9)}
            runs.append({**run, **ratios})
            print(f"round {k + 1}: " + "; ".join(
                f"{r['phase']} {r['seconds']:.2f} s (cpu {r['cpu']:.2f} s, "
                f"{written / r['seconds']:,.0f} events/s, peak RSS "
                f"{r['peak_rss'] / 1e6:.0f} MB)"
                for r in (decode, run["read"], run["validate"], imported)))
            print(f"  insert floor: executemany {floor['seconds']:.2f} s (cpu "
                  f"{floor['cpu']:.2f} s), multi-row {floor['multi_seconds']:.2f} s (cpu "
                  f"{floor['multi_cpu']:.2f} s)")
            print(f"  ratio decode/import {ratios['ratio']:.3f} (cpu "
                  f"{ratios['ratio_cpu']:.3f}); floor/import {ratios['floor_ratio']:.2f} "
                  f"(cpu {ratios['floor_ratio_cpu']:.2f})")
            for stale in Path(tmp).glob(f"import-{k}.db*"):
                stale.unlink()
        result: dict[str, Any] = {"events": written, "bytes": size, "runs": runs}
        if rss_events:
            small = Path(tmp) / "small.jsonl.zstd"
            small_written = write_file(small, rss_events)
            again = run_child("import", small, Path(tmp) / "small.db")
            result["rss"] = {"events": small_written, "peak_rss": again["peak_rss"]}
            print(f"import of {small_written:,} events: peak RSS "
                  f"{again['peak_rss'] / 1e6:.0f} MB (of {written:,}: "
                  f"{runs[-1]['import']['peak_rss'] / 1e6:.0f} MB)")
    return result


if __name__ == "__main__":
    main()
