"""DSH interop benchmark: importing a DeepSeek Harness session file (zstd frames,
packed chunk rows) into a SQLite store, beside merely decompressing it and
JSON-decoding each of its lines, in the same run, on the same file.

    python benchmarks/bench_interop.py [--events 1000000] [--rounds 3] [--quick]

The file is generated first (a valid log: turns of a user message, steps of streamed
chunks, an assistant message citing them, tool calls and results), written as DSH
writes it (header frame, then one frame per 1024-event batch, chunk runs packed).
Each measure runs in its own child process, so that its peak RSS is its own:

- ``decode``: zstd decompression frame by frame + ``msgspec.json.decode`` of every
  line (packed rows stay rows: this is what any reader of the file must do at least);
- ``read``: ``read_log`` alone (the same, plus packed rows expanded to events);
- ``import``: ``read_log`` (decompress, decode, expand packed rows to events) +
  ``import_log`` (validation through the core, one transaction) into a new store.

Prints seconds, events/s and peak RSS of each, and the ratio decode/import (target:
>= 0.5, i.e. import at least half as fast as the bare decode).
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
    """``read_log`` alone: decompress, decode, expand packed rows to events (no
    validation, no store): where the import's time goes besides validation and SQLite."""
    from surfacelog.schema.codec import read_log

    return len(read_log(path).events)


def phase_import(path: Path, db: Path) -> int:
    from surfacelog.schema.codec import read_log
    from surfacelog.store import SqliteEventStore, import_log

    async def run() -> int:
        log = read_log(path)
        store = await SqliteEventStore.open(db, create=True)
        try:
            await import_log(store, log, path)
        finally:
            await store.close()
        return len(log.events)

    return asyncio.run(run())


def child(phase: str, path: Path, db: Path) -> dict[str, Any]:
    start = time.perf_counter()
    if phase == "decode":
        count = phase_decode(path)
    elif phase == "read":
        count = phase_read(path)
    else:
        count = phase_import(path, db)
    seconds = time.perf_counter() - start
    return {"phase": phase, "seconds": seconds, "count": count, "peak_rss": peak_rss()}


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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 events, 1 round")
    parser.add_argument("--phase", choices=["decode", "read", "import"], help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        result = child(args.phase, args.file, args.db)
        print(json.dumps(result))
        return result
    events, rounds = (20_000, 1) if args.quick else (args.events, args.rounds)
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        path = Path(tmp) / "session.jsonl.zstd"
        written = write_file(path, events)
        size = path.stat().st_size
        print(f"file: {written:,} events, {size / 1e6:.1f} MB zstd")
        runs = []
        for k in range(rounds):  # alternate so the machine's load weighs on both alike
            db = Path(tmp) / f"import-{k}.db"
            decode = run_child("decode", path, db)
            read = run_child("read", path, db)
            imported = run_child("import", path, db)
            ratio = decode["seconds"] / imported["seconds"]
            runs.append({"decode": decode, "read": read, "import": imported,
                         "ratio": ratio})
            print(f"round {k + 1}: " + "; ".join(
                f"{r['phase']} {r['seconds']:.2f} s ({written / r['seconds']:,.0f} "
                f"events/s, peak RSS {r['peak_rss'] / 1e6:.0f} MB)"
                for r in (decode, read, imported)) + f"; ratio decode/import {ratio:.3f}")
            db.unlink()
    return {"events": written, "bytes": size, "runs": runs}


if __name__ == "__main__":
    main()
