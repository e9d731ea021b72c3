"""Replay and activation against the bare decode and the raw read (issue 11).

(a) ``surfacelog fold --json`` of a generated JSONL log (1M events; ``--quick``: 50k)
end to end, in process (``_fold_one`` + the JSON line it prints) and as a subprocess
(``python -m surfacelog.cli fold --json FILE``), against msgspec decoding the same file's
lines into plain Python objects with the garbage collector paused, in process and as a
subprocess doing that decode (so interpreter start-up is on both sides). Target: fold /
decode <= 1.2x.

(b) Activation of a stored session (``load`` through an open embedded SQLite store:
read, decoded, validated through the core, surface built and ``derive_messages()``
ready) at 2k and 100k events (``--quick``: 2k and 10k), against the raw read of its
rows with ``sqlite3`` over an open connection (the same SELECTs, ``fetchall``) in the
same run. Target: <= 1.5x.

Each measure alternates with its baseline, round by round, so that a busy machine slows
both alike; printed figures are medians over the rounds and ratios are medians of the
per-round ratios (each round's ratio is printed too). CPU-time ratios (this process and
its subprocesses, ``getrusage``) are printed beside the wall-time ones: on a machine
shared with other jobs they are far steadier.

    python benchmarks/bench_replay.py [--quick] [--events N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
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

from surfacelog.cli.commands.logs import _fold_one
from surfacelog.schema.codec import encode_json, encode_log
from surfacelog.schema.events import Event
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import MAX_LINE_BYTES, gc_paused
from surfacelog.store.activation import load
from surfacelog.store.sqlite import SqliteEventStore
from surfacelog.store.sqlite.statements import SELECT_EVENTS

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
    """What ``surfacelog fold --json FILE`` does for one file, in process: the fold and
    its JSON line with the collector paused until the session is dropped, as the
    command pauses it (``_fold_print``)."""
    with gc_paused():
        result, session = _fold_one(path, False, MAX_LINE_BYTES)
        encode_json(result)
        del session
    return result


def _timed(fn: Callable[[], object], cpu: list[float] | None = None) -> float:
    """Wall time of ``fn()``; its CPU time (this process and its finished children)
    appended to ``cpu``."""
    gc.collect()
    c0 = _cpu()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(_cpu() - c0)
    return wall


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _rounds(num: Sequence[float], den: Sequence[float]) -> list[float]:
    return [round(a / b, 2) for a, b in zip(num, den, strict=True)]


def _run(args: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)


def _ratio(num: Sequence[float], den: Sequence[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def bench_fold(path: Path, n: int, rounds: int, tmp: Path,
               subprocess_too: bool = True) -> dict[str, Any]:
    """(a): times per round of the bare decode and the fold of the ``n``-event log at
    ``path``, in process and as subprocesses."""
    result = fold_json(path)  # warm-up, and the fold must be ok
    if not result["ok"] or len(result["nodes"]) == 0:
        raise AssertionError(f"fold of the generated log failed: {result}")
    if bare_decode(path) != n:
        raise AssertionError("the bare decode does not see every event")
    decode_s: list[float] = []
    fold_s: list[float] = []
    sub_decode_s: list[float] = []
    sub_fold_s: list[float] = []
    script = tmp / "decode.py"
    script.write_text(_DECODE_SCRIPT)
    decode_cpu: list[float] = []
    fold_cpu: list[float] = []
    sub_decode_cpu: list[float] = []
    sub_fold_cpu: list[float] = []
    for _ in range(rounds):
        decode_s.append(_timed(lambda: bare_decode(path), decode_cpu))
        fold_s.append(_timed(lambda: fold_json(path), fold_cpu))
        if subprocess_too:
            sub_decode_s.append(_timed(lambda: _run([sys.executable, str(script), str(path)]),
                                       sub_decode_cpu))
            sub_fold_s.append(_timed(lambda: _run(
                [sys.executable, "-m", "surfacelog.cli", "fold", "--json", str(path)]),
                sub_fold_cpu))
    row: dict[str, Any] = {
        "events": n, "bytes": path.stat().st_size,
        "nodes": len(result["nodes"]), "replacements": len(result["replacements"]),
        "decode_s": statistics.median(decode_s), "fold_s": statistics.median(fold_s),
        "fold_over_decode": _ratio(fold_s, decode_s),
        "fold_over_decode_rounds": _rounds(fold_s, decode_s),
        "cpu_fold_over_decode": _ratio(fold_cpu, decode_cpu),
        "cpu_fold_over_decode_rounds": _rounds(fold_cpu, decode_cpu),
    }
    if subprocess_too:
        row.update({
            "sub_decode_s": statistics.median(sub_decode_s),
            "sub_fold_s": statistics.median(sub_fold_s),
            "sub_fold_over_decode": _ratio(sub_fold_s, sub_decode_s),
            "sub_fold_over_decode_rounds": _rounds(sub_fold_s, sub_decode_s),
            "cpu_sub_fold_over_decode": _ratio(sub_fold_cpu, sub_decode_cpu),
            "cpu_sub_fold_over_decode_rounds": _rounds(sub_fold_cpu, sub_decode_cpu),
        })
    return row


def raw_read(conn: sqlite3.Connection, session_id: str) -> int:
    """The baseline of (b): the session's rows as ``sqlite3`` returns them (the read a
    store does: header row and event rows in one transaction)."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT header, writer_epoch, next_seq FROM sessions WHERE id = ?",
                     (session_id,)).fetchone()
        rows = conn.execute(SELECT_EVENTS, (session_id, 0, -1)).fetchall()
    finally:
        conn.execute("COMMIT")
    return len(rows)


async def activate(store: SqliteEventStore, session_id: str) -> int:
    """(b): the stored session loaded (read, decoded, validated through the core), its
    surface and derived messages ready."""
    session = await load(store, session_id)
    return len(session.derive_messages()) + len(session.surface.nodes)


async def _store(db: Path, session_id: str, events: list[Event]) -> None:
    store = await SqliteEventStore.open(db, synchronous="NORMAL")
    try:
        header = SessionHeader(version=0, id=session_id, created_at=1)
        await store.create(header, events)
    finally:
        await store.close()


async def _bench_activation(db: Path, sid: str, n: int, rounds: int) -> dict[str, Any]:
    conn = sqlite3.connect(db, isolation_level=None)
    store = await SqliteEventStore.open(db, read_only=True)
    try:
        if raw_read(conn, sid) != n or await activate(store, sid) <= 0:
            raise AssertionError("the raw read does not see every row")
        reps = max(1, 100_000 // n)  # short measures repeated, so timer noise is small
        raw_s, act_s, raw_cpu, act_cpu = [], [], [], []
        for _ in range(rounds):
            gc.collect()
            w, c = time.perf_counter(), time.process_time()
            for _ in range(reps):
                raw_read(conn, sid)
            raw_s.append((time.perf_counter() - w) / reps)
            raw_cpu.append((time.process_time() - c) / reps)
            gc.collect()
            w, c = time.perf_counter(), time.process_time()
            for _ in range(reps):
                await activate(store, sid)
            act_s.append((time.perf_counter() - w) / reps)
            act_cpu.append((time.process_time() - c) / reps)
    finally:
        await store.close()
        conn.close()
    return {"events": n, "raw_s": statistics.median(raw_s),
            "activate_s": statistics.median(act_s),
            "activate_over_raw": _ratio(act_s, raw_s),
            "activate_over_raw_rounds": _rounds(act_s, raw_s),
            "cpu_activate_over_raw": _ratio(act_cpu, raw_cpu),
            "cpu_activate_over_raw_rounds": _rounds(act_cpu, raw_cpu)}


def bench_activation(events: list[Event], sizes: Sequence[int], rounds: int,
                     tmp: Path) -> list[dict[str, Any]]:
    """(b) at each size: activation and the raw read, wall and CPU time."""
    out = []
    for n in sizes:
        db = tmp / f"act{n}.db"
        sid = f"s{n}"
        asyncio.run(_store(db, sid, events[:n]))
        out.append(asyncio.run(_bench_activation(db, sid, n, rounds)))
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
        log = tmp / "log.jsonl"
        log.write_bytes(encode_log(None, events[:n]))
        # Only what (b) needs stays: a CLI process holds no other log while it folds,
        # and a million generated events' data would slow every collection of the fold.
        del events[max(sizes):]
        gc.collect()
        fold = bench_fold(log, n, rounds, tmp, not args.no_subprocess)
        act = bench_activation(events, sizes, rounds, tmp)
    figures = {"fold": fold, "activation": act}
    if args.json:
        print(json.dumps(figures))
        return figures
    print(f"(a) fold --json of {fold['events']:,} events ({fold['bytes'] / 1e6:.0f} MB, "
          f"{fold['nodes']:,} nodes, {fold['replacements']:,} replacements), "
          f"{rounds} round(s)")
    print(f"  in process: decode {fold['decode_s']:.2f} s, fold {fold['fold_s']:.2f} s, "
          f"fold/decode {fold['fold_over_decode']:.2f}x (target <= 1.2x), per round "
          f"{fold['fold_over_decode_rounds']}; CPU time fold/decode "
          f"{fold['cpu_fold_over_decode']:.2f}x, per round "
          f"{fold['cpu_fold_over_decode_rounds']}")
    if "sub_fold_s" in fold:
        print(f"  subprocess: decode {fold['sub_decode_s']:.2f} s, fold "
              f"{fold['sub_fold_s']:.2f} s, fold/decode {fold['sub_fold_over_decode']:.2f}x, "
              f"per round {fold['sub_fold_over_decode_rounds']}; CPU time "
              f"{fold['cpu_sub_fold_over_decode']:.2f}x, per round "
              f"{fold['cpu_sub_fold_over_decode_rounds']}")
    print("(b) activation (load through an open store + surface + derive_messages) vs "
          "the raw sqlite3 read of the same rows")
    for row in act:
        print(f"  {row['events']:>7,} events: raw {row['raw_s'] * 1e3:.1f} ms, activate "
              f"{row['activate_s'] * 1e3:.1f} ms, activate/raw "
              f"{row['activate_over_raw']:.2f}x (target <= 1.5x), per round "
              f"{row['activate_over_raw_rounds']}; CPU time "
              f"{row['cpu_activate_over_raw']:.2f}x, per round "
              f"{row['cpu_activate_over_raw_rounds']}")
    return figures


if __name__ == "__main__":
    main()
