"""What a compactor's or pruner's pass over idle sessions costs (issue 25: the watchers).

    python benchmarks/bench_watchers.py [--sessions 200] [--passes 20] [--rounds 3] [--quick]

``--sessions`` sessions, each with one event, are held by the two packs of a local Ray
(``ray.init(num_cpus=2)``, packed placement, durable SQLite), none of them near the
watchers' thresholds: the state of most sessions of a run between their turns. Each
round times ``--passes`` passes of a ``CompactionActor`` and of a ``PrunerActor`` (their
classes, in this process) two ways, alternating: as a pass runs (``run_once``: each
actor asked once for all of its sessions, ``Client.held``) and as every pass ran before
(the baseline: ``_session_pass`` for every session, a request each). Prints, per pass,
the wall time and the CPU of this process and every process of its Ray (psutil), the
medians over the rounds, and the ratio of each to the baseline of the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psutil

from surfacelog.actors.client import Client, connect, init_ray
from surfacelog.actors.compactor import CompactionActor, PrunerActor, _Watcher

Pass = Callable[[], Awaitable[Any]]


def _cpu_s() -> float:
    """CPU seconds of this process and every process below it (its Ray's)."""
    total = 0.0
    me = psutil.Process()
    for proc in (me, *me.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except psutil.Error:  # ended between listing and reading: not counted
            continue
        total += times.user + times.system
    return total


async def _timed(run: Pass, passes: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per pass of ``passes`` runs of ``run``."""
    cpu, wall = _cpu_s(), time.perf_counter()
    for _ in range(passes):
        await run()
    return ((time.perf_counter() - wall) * 1000 / passes, (_cpu_s() - cpu) * 1000 / passes)


def _per_session(watcher: _Watcher, ids: list[str]) -> Pass:
    async def run() -> None:
        await asyncio.gather(*(watcher._session_pass(sid) for sid in ids))
    return run


async def measure(client: Client, sessions: int, passes: int, rounds: int
                  ) -> dict[str, dict[str, list[float]]]:
    """For each watcher kind, the per-pass figures of each round: ``held`` and
    ``per_session`` (wall ms, CPU ms)."""
    ids = [f"idle-{k}" for k in range(sessions)]
    await asyncio.gather(*(client.session(s).append("turn/start", {"turn": 1}) for s in ids))
    out: dict[str, dict[str, list[float]]] = {}
    for kind in (CompactionActor, PrunerActor):
        watcher = kind(client.config, compact_at=10**6, prune_over=10**6)
        watcher.manage(ids)
        await watcher.run_once()  # its client's lines and handles made
        figures: dict[str, list[float]] = {k: [] for k in (
            "held_wall", "held_cpu", "alone_wall", "alone_cpu")}
        for _ in range(rounds):
            wall, cpu = await _timed(watcher.run_once, passes)
            figures["held_wall"].append(wall)
            figures["held_cpu"].append(cpu)
            wall, cpu = await _timed(_per_session(watcher, ids), passes)
            figures["alone_wall"].append(wall)
            figures["alone_cpu"].append(cpu)
        stats = watcher.stats()
        if stats.errors or stats.committed or stats.prunes:
            raise RuntimeError(f"{kind.__name__}: idle sessions had work or failed: {stats}")
        out[kind.__name__] = figures
    return out


def report(figures: dict[str, dict[str, list[float]]], sessions: int) -> list[str]:
    lines = []
    for kind, f in figures.items():
        for what, unit in (("wall", "ms"), ("cpu", "ms CPU")):
            held, alone = f[f"held_{what}"], f[f"alone_{what}"]
            ratios = [h / a for h, a in zip(held, alone, strict=True) if a > 0]
            # CPU times tick in 10 ms: a tiny run may see none in a round.
            ratio = f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "n/a"
            lines.append(
                f"{kind}, {sessions} idle sessions, per pass: {statistics.median(held):.1f} "
                f"{unit} (rounds {min(held):.1f}-{max(held):.1f}) | a request per session "
                f"(same rounds): {statistics.median(alone):.1f} {unit} -> ratio {ratio}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.passes, args.rounds = 8, 2, 1
    init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    with tempfile.TemporaryDirectory() as folder:
        client = connect(db=os.path.join(folder, "watchers.db"), placement="packed",
                         packs=2)
        try:
            figures = asyncio.run(measure(client, args.sessions, args.passes, args.rounds))
        finally:
            client.shutdown()
    for line in report(figures, args.sessions):
        print(line)


if __name__ == "__main__":
    main()
