"""The embedded store against the OpenAI Agents SDK's ``SQLiteSession`` on one session
(issue 11, item 3).

The workload of ``bench_adapters.py`` (reused, not repeated: one session, ``--items``
items added one at a time, a full read every ``--every``, then ``--reads`` full reads),
followed by what a framework does after a restart: reopen the session from its file and
read it all. Each reopen-and-read is timed on a fresh session object over the same file,
the subjects alternating, ``--reads`` times; the median is printed, and each as a ratio
of the SDK's in the same run (targets of issue 11: add <= 0.6x, read from disk <=
0.5x).

Google ADK's ``SqliteSessionService`` is not measured yet: ``google-adk`` (2.13) is
installed here, but this branch has no surfacelog ADK adapter to run the same workload
through (one is being built on another branch); left out, see benchmarks/README.md.

    python benchmarks/bench_sessions.py [--items 2000] [--every 100] [--reads 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_adapters import bench_openai, openai_items, report

from surfacelog.integrations.openai_agents import SurfacelogSession

_FILES = {"sdk": "sdk.db", "surfacelog": "surfacelog.db",
          "surfacelog-buffered": "buffered.db"}


async def _reopen_sdk(path: Path) -> list[Any]:
    from agents import SQLiteSession

    session = SQLiteSession("bench", path)
    try:
        return list(await session.get_items())
    finally:
        session.close()


async def _reopen_surfacelog(path: Path) -> list[Any]:
    session = SurfacelogSession("bench", path)
    try:
        return list(await session.get_items())
    finally:
        await session.close()


async def reopen_reads(root: Path, items: list[dict[str, Any]],
                       reads: int) -> dict[str, float]:
    """Median time (s) of opening each subject's session anew and reading it all."""
    opens: dict[str, Callable[[Path], Awaitable[list[Any]]]] = {
        "sdk": _reopen_sdk, "surfacelog": _reopen_surfacelog,
        "surfacelog-buffered": _reopen_surfacelog}
    times: dict[str, list[float]] = {name: [] for name in opens}
    order = list(opens)
    for _ in range(reads):
        for name in order:
            t0 = time.perf_counter()
            got = await opens[name](root / _FILES[name])
            times[name].append(time.perf_counter() - t0)
            if got != items:
                raise AssertionError(f"{name}: the read after reopening differs")
        order.reverse()
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        root = Path(tmp)
        figures = asyncio.run(bench_openai(args.items, args.every, args.reads, root))
        reopened = asyncio.run(reopen_reads(root, openai_items(args.items), args.reads))
    rows = report(figures, args.items)
    for name, row in rows.items():
        row["reopen_read_ms"] = reopened[name] * 1e3
        row["reopen_read_ratio"] = reopened[name] / reopened["sdk"]
    if args.json:
        print(json.dumps({"openai_agents": rows}, indent=2))
        return rows
    print(f"OpenAI Agents SDK SQLiteSession vs the embedded store: {args.items} items added "
          f"one at a time, full read every {args.every}, then reopen and read")
    print(f"{'session':<22}{'add ms':>9}{'read ms':>10}{'reopen ms':>11}{'add x':>8}"
          f"{'read x':>8}{'reopen x':>10}")
    for name, row in rows.items():
        print(f"{name:<22}{row['add_ms']:>9.3f}{row[f'read_at_{args.items}_ms']:>10.3f}"
              f"{row['reopen_read_ms']:>11.3f}{row['add_ratio']:>8.2f}"
              f"{row['read_ratio']:>8.2f}{row['reopen_read_ratio']:>10.2f}")
    return rows


if __name__ == "__main__":
    main()
