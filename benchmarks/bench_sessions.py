"""The embedded store against the OpenAI Agents SDK's ``SQLiteSession`` and Google
ADK's ``SqliteSessionService`` on one session (issue 11).

For each framework, the workload of ``bench_adapters.py`` (reused, not repeated: one
session, ``--items`` items added one at a time, a full read every ``--every``, then
``--reads`` full reads) on the framework's own SQLite session and on surfacelog's
adapter (durable and buffered), followed by what a framework does after a restart:
reopen the session from its file and read it all. Each reopen-and-read is timed on a
fresh session object (OpenAI: ``SQLiteSession`` / ``SurfacelogSession``; ADK: a new
``SqliteSessionService`` / ``SurfacelogSessionService`` and ``get_session``) over the
same file, the subjects alternating, ``--reads`` times; the median is printed, and each
as a ratio of the framework's own in the same run (targets of issue 11: add <= 0.6x,
read from disk <= 0.5x). The frameworks are optional benchmark dependencies
(``openai-agents``, ``google-adk``); ``--only`` runs one.

    python benchmarks/bench_sessions.py [--items 2000] [--every 100] [--reads 5] [--json]
        [--only openai|adk]
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
from bench_adapters import bench_adk, bench_openai, openai_items, report

from surfacelog.integrations.openai_agents import SurfacelogSession

_FILES = {"sdk": "sdk.db", "surfacelog": "surfacelog.db",
          "surfacelog-buffered": "buffered.db"}
_ADK_FILES = {"sdk": "adk.db", "surfacelog": "adk-surfacelog.db",
              "surfacelog-buffered": "adk-buffered.db"}
"""The files ``bench_adapters.bench_adk`` writes."""


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


async def _reopen_adk(service: Any) -> list[Any]:
    """The benchmark session's events through an ADK session service, then close it."""
    try:
        got = await service.get_session(app_name="bench", user_id="u", session_id="s")
        assert got is not None
        return list(got.events)
    finally:
        await service.close()


async def _reopen_adk_sdk(path: Path) -> list[Any]:
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    return await _reopen_adk(SqliteSessionService(str(path)))


async def _reopen_adk_surfacelog(path: Path) -> list[Any]:
    from surfacelog.integrations.adk import SurfacelogSessionService

    return await _reopen_adk(SurfacelogSessionService(path=path))


Reopen = Callable[[Path], Awaitable[list[Any]]]


async def reopen_reads(root: Path, items: list[Any], reads: int,
                       opens: dict[str, Reopen] | None = None,
                       files: dict[str, str] | None = None) -> dict[str, float]:
    """Median time (s) of opening each subject's session anew and reading it all (the
    OpenAI subjects by default), each read checked against ``items``; under
    ``"cpu:" + name`` the median CPU time of the process (every thread) of the same."""
    if opens is None:
        opens = {"sdk": _reopen_sdk, "surfacelog": _reopen_surfacelog,
                 "surfacelog-buffered": _reopen_surfacelog}
    files = files or _FILES
    times: dict[str, list[float]] = {name: [] for name in opens}
    cpu: dict[str, list[float]] = {name: [] for name in opens}
    order = list(opens)
    for _ in range(reads):
        for name in order:
            t0, c0 = time.perf_counter(), time.process_time()
            got = await opens[name](root / files[name])
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            if got != items:
                raise AssertionError(f"{name}: the read after reopening differs")
        order.reverse()
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    medians.update({f"cpu:{name}": statistics.median(ts) for name, ts in cpu.items()})
    return medians


def _adk_key(events: list[Any]) -> list[Any]:
    """What an ADK read must give back: each event's id, author and content."""
    return [(e.id, e.author, e.content) for e in events]


async def adk_reopen_reads(root: Path, n: int, reads: int) -> dict[str, float]:
    """``reopen_reads`` for the ADK subjects of ``bench_adapters.bench_adk``: each
    reopened read must hold the ``n`` events appended, in order."""
    expected: list[Any] | None = None
    opens: dict[str, Reopen] = {}
    for name, reopen in (("sdk", _reopen_adk_sdk), ("surfacelog", _reopen_adk_surfacelog),
                         ("surfacelog-buffered", _reopen_adk_surfacelog)):
        async def keyed(path: Path, reopen: Reopen = reopen) -> list[Any]:
            return _adk_key(await reopen(path))
        opens[name] = keyed
        got = await keyed(root / _ADK_FILES[name])
        if len(got) != n or (expected is not None and got != expected):
            raise AssertionError(f"{name}: the read after reopening differs")
        expected = got
    assert expected is not None
    return await reopen_reads(root, expected, reads, opens, _ADK_FILES)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=["openai", "adk"], default=None,
                        help="run one framework's section only")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        root = Path(tmp)
        if args.only in (None, "openai"):
            rows = report(asyncio.run(bench_openai(args.items, args.every, args.reads,
                                                   root)), args.items)
            reopened = asyncio.run(reopen_reads(root, openai_items(args.items), args.reads))
            out["openai_agents"] = _with_reopen(rows, reopened)
        if args.only in (None, "adk"):
            rows = report(asyncio.run(bench_adk(args.items, args.every, args.reads, root)),
                          args.items)
            reopened = asyncio.run(adk_reopen_reads(root, args.items, args.reads))
            out["adk"] = _with_reopen(rows, reopened)
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    titles = {"openai_agents": "OpenAI Agents SDK SQLiteSession vs the embedded store",
              "adk": "Google ADK SqliteSessionService vs the embedded store"}
    for section, rows in out.items():
        print(f"{titles[section]}: {args.items} items added one at a time, full read "
              f"every {args.every}, then reopen and read")
        print(f"{'session':<22}{'add ms':>9}{'read ms':>10}{'reopen ms':>11}{'add x':>8}"
              f"{'read x':>8}{'reopen x':>10}{'reopen cpu x':>14}")
        for name, row in rows.items():
            print(f"{name:<22}{row['add_ms']:>9.3f}{row[f'read_at_{args.items}_ms']:>10.3f}"
                  f"{row['reopen_read_ms']:>11.3f}{row['add_ratio']:>8.2f}"
                  f"{row['read_ratio']:>8.2f}{row['reopen_read_ratio']:>10.2f}"
                  f"{row['reopen_read_cpu_ratio']:>14.2f}")
    return out


def _with_reopen(rows: dict[str, Any], reopened: dict[str, float]) -> dict[str, Any]:
    for name, row in rows.items():
        row["reopen_read_ms"] = reopened[name] * 1e3
        row["reopen_read_ratio"] = reopened[name] / reopened["sdk"]
        row["reopen_read_cpu_ms"] = reopened[f"cpu:{name}"] * 1e3
        row["reopen_read_cpu_ratio"] = reopened[f"cpu:{name}"] / max(reopened["cpu:sdk"],
                                                                     1e-9)
    return rows


if __name__ == "__main__":
    main()
