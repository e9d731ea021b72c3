"""What one Ray worker process costs to start, in CPU (issue 23: the suite's floor).

Each actor the test suite starts is a worker process of its own, started for it and
ended with it. This starts a local Ray as the suite's fixture does (``init_ray``, two
CPUs, no dashboard), then ``--workers`` actors one after another, each a class with one
method: the CPU its process has used once it answered its first call. The baseline, each
measured just before a worker's, beside the same Ray: a fresh interpreter that only runs
``import ray`` (the CPU of the child, from its rusage). ``--address`` joins a running
Ray instead (the smoke test joins the suite's, one Ray fewer started).

    .venv/bin/python benchmarks/bench_worker_start.py [--workers N] [--address GCS]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from typing import Any

import psutil


def import_ray_cpu_s() -> float:
    """The CPU seconds of a fresh interpreter that imports ray and exits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import ray"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(count: int, address: str | None = None) -> tuple[list[float], list[float]]:
    """On a local Ray of this process's own (or the running one at ``address``),
    ``count`` times one after another: the CPU seconds of a fresh ``import ray``, then
    those of a new actor's process once its first call returned. Returns (imports,
    workers)."""
    import ray

    from surfacelog.actors.client import init_ray

    if address is None:
        init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    else:
        init_ray(address, log_to_driver=False, configure_logging=False)
    try:
        @ray.remote(num_cpus=0)
        class Probe:
            def pid(self) -> int:
                return os.getpid()

        imports, workers = [], []
        for _ in range(count):
            imports.append(import_ray_cpu_s())
            probe: Any = Probe.remote()  # type: ignore[attr-defined]
            times = psutil.Process(ray.get(probe.pid.remote())).cpu_times()
            workers.append(times.user + times.system)
            ray.kill(probe)
        return imports, workers
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8, help="actors started (and imports)")
    parser.add_argument("--address", help="join this running Ray (its GCS address) instead "
                        "of starting one")
    args = parser.parse_args(argv)
    baseline, workers = measure(args.workers, args.address)
    result = {
        "workers": args.workers,
        "worker_cpu_s": {"median": round(statistics.median(workers), 3),
                         "min": round(min(workers), 3), "max": round(max(workers), 3)},
        "import_ray_cpu_s": {"median": round(statistics.median(baseline), 3),
                             "min": round(min(baseline), 3), "max": round(max(baseline), 3)},
    }
    result["ratio"] = round(result["worker_cpu_s"]["median"]
                            / result["import_ray_cpu_s"]["median"], 2)
    w, b = result["worker_cpu_s"], result["import_ray_cpu_s"]
    print(f"| figure | median | range ({args.workers}) |\n|---|---:|---:|\n"
          f"| a Ray worker's CPU once it answered its first call | {w['median']} s | "
          f"{w['min']}-{w['max']} s |\n"
          f"| baseline: `python -c \"import ray\"` | {b['median']} s | "
          f"{b['min']}-{b['max']} s |\n"
          f"| ratio (medians) | {result['ratio']}x | |")
    return result


if __name__ == "__main__":
    main()
