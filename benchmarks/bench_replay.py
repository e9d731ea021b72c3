"""Replay and activation against the bare decode and the raw read (issue 11).

(a) ``surfacelog fold --json`` of a generated JSONL log (1M events; ``--quick``: 50k)
end to end, in process (``_fold_one`` + the JSON line it prints) and as a subprocess
(``python -m surfacelog.cli fold --json FILE``), against msgspec decoding the same file's
lines into plain Python objects with the garbage collector paused, in process and as a
subprocess doing that decode (so interpreter start-up is on both sides). Target: fold /
decode <= 1.2x.

(b) Activation of a stored session (read from the embedded SQLite store, decoded,
validated through the core, surface built and ``derive_messages()`` ready) at 2k and
100k events (``--quick``: 2k and 10k), against the raw read of its rows with
``sqlite3`` (the same SELECT, ``fetchall``) in the same run. Target: <= 1.5x.

Each measure alternates with its baseline, round by round, so that a busy machine slows
both alike; printed figures are medians over the rounds and ratios are medians of the
per-round ratios.

    python benchmarks/bench_replay.py [--quick] [--events N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_surface import generate_log

from surfacelog.cli.commands import _fold_one
from surfacelog.schema.codec import encode_json, encode_log
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import MAX_LINE_BYTES
from surfacelog.store.activation import load
from surfacelog.store.rows import SELECT_EVENTS
from surfacelog.store.sqlite import SqliteEventStore

ROOT = Path(__file__).resolve().parent.parent

_DECODE_SCRIPT = """
import gc, sys, msgspec
gc.disable()
dec = msgspec.json.Decoder()
with open(sys.argv[1], "rb") as f:
    data = f.read()
values = [dec.decode(line) for line in data.splitlines() if line]
print(len(values))
"""


def bare_decode(path: Path) -> int:
    """The baseline: the file's lines decoded by msgspec into plain objects, GC paused."""
    dec = msgspec.json.Decoder()
    gc.disable()
    try:
        data = path.read_bytes()
        values = [dec.decode(line) for line in data.splitlines() if line]
    finally:
        gc.enable()
    return len(values)


def fold_json(path: Path) -> dict[str, Any]:
    """What ``surfacelog fold --json FILE`` does for one file, in process."""
    result, _ = _fold_one(path, False, MAX_LINE_BYTES)
    encode_json(result)
    return result


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _run(args: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)


def _ratio(num: Sequence[float], den: Sequence[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def bench_fold(events: list[Event], rounds: int, tmp: Path,
               subprocess_too: bool = True) -> dict[str, Any]:
    """(a): times per round of the bare decode and the fold, in process and as
    subprocesses."""
    path = tmp / "log.jsonl"
    path.write_bytes(encode_log(None, events))
    result = fold_json(path)  # warm-up, and the fold must be ok
    if not result["ok"] or len(result["nodes"]) == 0:
        raise AssertionError(f"fold of the generated log failed: {result}")
    if bare_decode(path) != len(events):
        raise AssertionError("the bare decode does not see every event")
    decode_s: list[float] = []
    fold_s: list[float] = []
    sub_decode_s: list[float] = []
    sub_fold_s: list[float] = []
    script = tmp / "decode.py"
    script.write_text(_DECODE_SCRIPT)
    for _ in range(rounds):
        decode_s.append(_timed(lambda: bare_decode(path)))
        fold_s.append(_timed(lambda: fold_json(path)))
        if subprocess_too:
            sub_decode_s.append(_timed(lambda: _run([sys.executable, str(script), str(path)])))
            sub_fold_s.append(_timed(lambda: _run(
                [sys.executable, "-m", "surfacelog.cli", "fold", "--json", str(path)])))
    row: dict[str, Any] = {
        "events": len(events), "bytes": path.stat().st_size,
        "nodes": len(result["nodes"]), "replacements": len(result["replacements"]),
        "decode_s": statistics.median(decode_s), "fold_s": statistics.median(fold_s),
        "fold_over_decode": _ratio(fold_s, decode_s),
    }
    if subprocess_too:
        row.update({
            "sub_decode_s": statistics.median(sub_decode_s),
            "sub_fold_s": statistics.median(sub_fold_s),
            "sub_fold_over_decode": _ratio(sub_fold_s, sub_decode_s),
        })
    return row


def raw_read(db: Path, session_id: str) -> int:
    """The baseline of (b): the session's rows as ``sqlite3`` returns them."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("SELECT header, writer_epoch, next_seq FROM sessions WHERE id = ?",
                     (session_id,)).fetchone()
        rows = conn.execute(SELECT_EVENTS, (session_id, 0, -1)).fetchall()
    finally:
        conn.close()
    return len(rows)


async def _activate(db: Path, session_id: str) -> int:
    store = await SqliteEventStore.open(db, read_only=True)
    try:
        session = await load(store, session_id)
    finally:
        await store.close()
    return len(session.derive_messages()) + len(session.surface.nodes)


async def _store(db: Path, session_id: str, events: list[Event]) -> None:
    store = await SqliteEventStore.open(db, synchronous="NORMAL")
    try:
        header = SessionHeader(version=0, id=session_id, created_at=1)
        await store.create(header, events)
    finally:
        await store.close()


def activate(db: Path, session_id: str) -> int:
    """(b): the stored session loaded read-only (validated), surface and derived
    messages ready."""
    return asyncio.run(_activate(db, session_id))


def bench_activation(events: list[Event], sizes: Sequence[int], rounds: int,
                     tmp: Path) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        db = tmp / f"act{n}.db"
        sid = f"s{n}"
        asyncio.run(_store(db, sid, events[:n]))
        if raw_read(db, sid) != n:
            raise AssertionError("the raw read does not see every row")
        activate(db, sid)  # warm-up
        reps = max(1, 200_000 // n)  # short measures repeated, so timer noise is small
        raw_s: list[float] = []
        act_s: list[float] = []
        for _ in range(rounds):
            raw_s.append(_timed(lambda db=db, sid=sid, reps=reps: [  # type: ignore[misc]
                raw_read(db, sid) for _ in range(reps)]) / reps)
            act_s.append(_timed(lambda db=db, sid=sid, reps=reps: [  # type: ignore[misc]
                activate(db, sid) for _ in range(reps)]) / reps)
        out.append({"events": n, "raw_s": statistics.median(raw_s),
                    "activate_s": statistics.median(act_s),
                    "activate_over_raw": _ratio(act_s, raw_s)})
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--events", type=int, help="events of (a) (default 1M; quick 50k)")
    parser.add_argument("--sizes", help="sizes of (b), comma-separated")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; quick 1)")
    parser.add_argument("--no-subprocess", action="store_true",
                        help="skip the subprocess measures of (a)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    n = args.events or (50_000 if args.quick else 1_000_000)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [2_000, 10_000] if args.quick else [2_000, 100_000])
    rounds = args.rounds or (1 if args.quick else 3)
    events, _ = generate_log(max(n, *sizes))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        fold = bench_fold(events[:n], rounds, tmp, not args.no_subprocess)
        act = bench_activation(events, sizes, rounds, tmp)
    figures = {"fold": fold, "activation": act}
    if args.json:
        print(json.dumps(figures))
        return figures
    print(f"(a) fold --json of {fold['events']:,} events ({fold['bytes'] / 1e6:.0f} MB, "
          f"{fold['nodes']:,} nodes, {fold['replacements']:,} replacements), "
          f"{rounds} round(s)")
    print(f"  in process: decode {fold['decode_s']:.2f} s, fold {fold['fold_s']:.2f} s, "
          f"fold/decode {fold['fold_over_decode']:.2f}x (target <= 1.2x)")
    if "sub_fold_s" in fold:
        print(f"  subprocess: decode {fold['sub_decode_s']:.2f} s, fold "
              f"{fold['sub_fold_s']:.2f} s, fold/decode {fold['sub_fold_over_decode']:.2f}x")
    print("(b) activation (load + surface + derive_messages) vs raw sqlite3 read")
    for row in act:
        print(f"  {row['events']:>7,} events: raw {row['raw_s'] * 1e3:.1f} ms, activate "
              f"{row['activate_s'] * 1e3:.1f} ms, activate/raw "
              f"{row['activate_over_raw']:.2f}x (target <= 1.5x)")
    return figures


if __name__ == "__main__":
    main()
