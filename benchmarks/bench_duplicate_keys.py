"""What refusing repeated JSON keys costs the JSONL reader (issue 27 item 8).

    python benchmarks/bench_duplicate_keys.py [--events 300000] [--rounds 5] [--quick]

A realistic log (``bench_surface.generate_log``) is written as JSONL, then read
(``read_log``) and imported into a new SQLite store (``LogStream`` +
``import_stream``, what ``surfacelog import`` does) with the check and without it
(``codec._may_repeat_keys_in`` replaced by a function that says no: no encoding, no
counting), alternating, ``--rounds`` times each, in this one process. Prints the CPU
time (``time.process_time``) of each, their medians and the ratio with/without; and,
over the log's lines in blocks of 4,096 (as the reader decodes them), what each step
of the fast check costs beside msgspec's decoding of the blocks, and what parsing them
again with ``object_pairs_hook`` (the exact check, the alternative) would cost. Last,
the gateway's side: a request body of a batch of 8 chunk events read by
``gateway.wire.decode`` and by the msgspec decoding it wraps, alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_surface import generate_log

from surfacelog.schema import codec
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import gc_paused, may_repeat_keys
from surfacelog.store.sqlite.file_format import side_files


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _read(path: Path) -> None:
    codec.read_log(path)


def _import(path: Path, workdir: Path, k: list[int]) -> None:
    from surfacelog.store import SqliteEventStore, import_stream

    k[0] += 1
    db = workdir / f"i{k[0]}.db"

    async def run() -> None:
        store = await SqliteEventStore.open(db, create=True)
        try:
            with codec.LogStream(path, runs=True) as stream:
                await import_stream(store, stream, path)
        finally:
            await store.close()

    asyncio.run(run())
    for file in (db, *side_files(db)):
        file.unlink()


def _block_steps(lines: Sequence[bytes]) -> dict[str, float]:
    """CPU seconds of each step over ``lines`` in blocks of 4,096 (best of 3), with the
    collector paused as the reader pauses it."""
    docs = [b"[" + b",".join(lines[k:k + 4096]) + b"]" for k in range(0, len(lines), 4096)]
    decoder = msgspec.json.Decoder(list[Event])
    encoder = msgspec.json.Encoder()

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        return dict(items)

    with gc_paused():
        decoded = [decoder.decode(doc) for doc in docs]
        canonical = [encoder.encode(events) for events in decoded]
        steps = {
            "decode": lambda: [decoder.decode(doc) for doc in docs],
            "encode": lambda: [encoder.encode(events) for events in decoded],
            "compare": lambda: [may_repeat_keys(doc, c) for doc, c in zip(docs, canonical,
                                                                          strict=True)],
            "object_pairs_hook": lambda: [json.loads(doc, object_pairs_hook=pairs)
                                          for doc in docs],
        }
        return {name: min(_cpu(fn) for _ in range(3)) for name, fn in steps.items()}


def _gateway_body(rounds: int, calls: int) -> dict[str, Any]:
    """Microseconds per read of an 8-event batch body: ``wire.decode`` (the check: the
    value encoded again and compared) against the decoding it wraps,
    ``msgspec.json.decode(body, type=AppendBatch)`` (what it did before the check),
    alternating ``rounds`` times, ``calls`` each."""
    from surfacelog.gateway import wire

    events = [{"type": "assistant/chunk", "data": {"text": "hello world " * 4, "index": k}}
              for k in range(8)]
    body = msgspec.json.encode({"events": events, "expectedSeq": 40})

    def per_call(read: Callable[[], object]) -> float:
        def all_calls() -> None:
            for _ in range(calls):  # nothing kept: no new objects for the collector
                read()
        return 1e6 * _cpu(all_calls) / calls

    on: list[float] = []
    off: list[float] = []
    for _ in range(rounds):
        off.append(per_call(lambda: msgspec.json.decode(body, type=wire.AppendBatch)))
        on.append(per_call(lambda: wire.decode(body, wire.AppendBatch)))
    ratio = statistics.median(on) / statistics.median(off)
    print(f"gateway {len(body)} B batch body: wire.decode {statistics.median(on):.2f} us, "
          f"msgspec's decoding alone {statistics.median(off):.2f} us; median ratio "
          f"{ratio:.2f}x")
    return {"checked_us": on, "unchecked_us": off, "ratio": ratio}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="30,000 events, 3 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.rounds = min(args.events, 30_000), min(args.rounds, 3)
    events, _ = generate_log(args.events)
    # Its temporary folder (the log and the import's stores) goes when the run ends.
    with tempfile.TemporaryDirectory(prefix="bench-dupkeys-") as tmp:
        workdir = Path(tmp)
        path = workdir / "log.jsonl"
        path.write_bytes(codec.encode_log(SessionHeader(version=0, id="bench", created_at=1),
                                          events))
        lines = path.read_bytes().split(b"\n")[1:-1]
        checked = codec._may_repeat_keys_in

        def unchecked(doc: bytes, decoded: list[Event]) -> bool:
            return False

        counter = [0]
        figures: dict[str, Any] = {"events": len(events), "bytes": path.stat().st_size}
        for name, fn in (("read", lambda: _read(path)),
                         ("import", lambda: _import(path, workdir, counter))):
            on: list[float] = []
            off: list[float] = []
            for _ in range(args.rounds):
                codec._may_repeat_keys_in = unchecked  # type: ignore[assignment]
                off.append(_cpu(fn))
                codec._may_repeat_keys_in = checked
                on.append(_cpu(fn))
            ratio = statistics.median(on) / statistics.median(off)
            figures[name] = {"checked_s": on, "unchecked_s": off, "ratio": ratio}
            print(f"{name:7s} {len(events):,} events: checked "
                  f"{', '.join(f'{t:.2f}' for t in on)} s CPU; unchecked "
                  f"{', '.join(f'{t:.2f}' for t in off)} s; median ratio {ratio:.3f}x")
        steps = _block_steps(lines)
        figures["block"] = steps
        decode = steps["decode"]
        print("its lines in blocks of 4,096, CPU (best of 3): " + ", ".join(
            f"{name} {t:.3f} s ({t / decode:.2f}x decode)" for name, t in steps.items()))
        figures["gateway"] = _gateway_body(args.rounds, 2_000 if args.quick else 20_000)
        return figures


if __name__ == "__main__":
    main()
