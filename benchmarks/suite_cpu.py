"""Where a test run's CPU goes, by kind of process (issue 23).

On two cores under ``make test``'s three workers the suite keeps both cores busy, so its
wall time is its CPU time over two: this says which processes spend it. It runs pytest
as a child (the arguments after ``--``; ``make test``'s worker count by default) and
samples that child's process tree every ``--interval`` seconds: each process is put in
a kind by its name and command line (a Ray worker stays a worker whatever actor it
hosts) and charged the CPU it spent since the previous sample.

Figures are shares of the sampled total, measured in the same run. What a process spends
after its last sample and before it ends is not seen: the run's rusage (every child
that was waited for) is printed beside the sampled total to bound it.

``--by-test N`` also names the N tests that started the most Ray workers (and raylets):
each process that runs tests loads ``ray_starts_by_test.py`` as a pytest plugin, which
charges each Ray process to the test running when it first appears.

    .venv/bin/python benchmarks/suite_cpu.py [--json OUT] [--by-test N] [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PLUGIN = "ray_starts_by_test"
STARTS_DIR_ENV = "SUITE_STARTS_DIR"
"""Where the plugin's processes write their counts."""
COUNTED = ("Ray worker", "Ray raylet")
"""The kinds the plugin counts by test."""

RAY_DAEMONS = {
    "gcs_server": "Ray GCS",
    "raylet": "Ray raylet",
}
"""Ray's native daemons, by process name."""

RAY_SCRIPTS = (
    ("dashboard/agent.py", "Ray dashboard agent"),
    ("runtime_env/agent", "Ray runtime-env agent"),
    ("log_monitor.py", "Ray log monitor"),
    ("autoscaler/_private/monitor.py", "Ray autoscaler monitor"),
    ("dashboard/dashboard.py", "Ray dashboard head"),
    ("default_worker.py", "Ray worker"),
)
"""Ray's Python processes, by a part of their command line."""

RAY_TITLES = {
    "ray::DashboardAgent": "Ray dashboard agent",
    "ray::RuntimeEnvAgent": "Ray runtime-env agent",
}
"""The titles Ray's agents give themselves once started (their command line then reads
``ray::...`` like a worker's), by their first word."""


def kind_of(name: str, cmdline: list[str]) -> str:
    """The kind of a process from its name and command line."""
    if name in RAY_DAEMONS:
        return RAY_DAEMONS[name]
    line = " ".join(cmdline)
    for part, kind in RAY_SCRIPTS:
        if part in line:
            return kind
    title = line.split(" ", 1)[0]
    if title in RAY_TITLES:
        return RAY_TITLES[title]
    if line.startswith("ray::") or name.startswith("ray::"):
        return "Ray worker"
    # Before pytest's: a child's arguments often name a file in pytest's temp dir.
    if "surfacelog.cli" in line or "bin/surfacelog" in line or "tests/support/" in line:
        return "surfacelog child (CLI, scenario)"
    if "pytest" in line or "execnet" in line or "import sys;exec(eval(" in line:
        return "pytest (tests in process)"
    if "chrom" in name:
        return "chromium"
    return "other child"


def kind_now(name: str, cmdline: list[str], was: str | None) -> str:
    """A process's kind as it reads now (``kind_of``), or ``was``, the kind it was given
    before, when its command line reads empty: a process in the middle of exec, or
    exiting with its memory released, says nothing of what it runs. Read again at every
    look, because a process first seen between fork and exec shows its parent's command
    line until it runs its own program."""
    if not cmdline and was is not None:
        return was
    return kind_of(name, cmdline)


@dataclass
class Tally:
    """CPU seconds and process starts by kind."""

    cpu: Counter[str] = field(default_factory=Counter)
    starts: Counter[str] = field(default_factory=Counter)
    seen: dict[tuple[int, float], tuple[str, float]] = field(default_factory=dict)

    def sample(self, root: psutil.Process) -> None:
        """Charge each process of ``root``'s tree (``root`` included) the CPU it spent
        since its previous sample; a process ended in between is skipped."""
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for proc in procs:
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    name, cmdline = proc.name(), proc.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self.observe(key, name, cmdline, times.user + times.system)

    def observe(self, key: tuple[int, float], name: str, cmdline: list[str],
                spent: float) -> None:
        """Process ``key`` (pid, start time) seen as ``name`` and ``cmdline`` having
        spent ``spent`` CPU seconds in all: charged what it spent since it was last
        seen. When its kind changed (see ``kind_now``), its start and all its CPU move
        to the kind it has now."""
        was, before = self.seen.get(key, (None, 0.0))
        kind = kind_now(name, cmdline, was)
        if was != kind:
            if was is not None:
                self.starts[was] -= 1
                self.cpu[was] -= before
            self.starts[kind] += 1
            before = 0.0
        self.cpu[kind] += spent - before
        self.seen[key] = (kind, spent)


def merge_starts(folder: Path) -> list[dict[str, Any]]:
    """The counts the plugin's processes wrote in ``folder``, summed by test: one dict
    per test (``test`` and a count per kind of ``COUNTED``), most Ray workers first."""
    by_test: dict[str, Counter[str]] = {}
    for path in sorted(folder.glob("starts-*.json")):
        for test, kind, n in json.loads(path.read_text(encoding="utf-8")):
            by_test.setdefault(test, Counter())[kind] += n
    rows = [{"test": test, **{kind: counts[kind] for kind in COUNTED}}
            for test, counts in by_test.items()]
    rows.sort(key=lambda r: (-r["Ray worker"], -r["Ray raylet"], r["test"]))
    return rows


def run(pytest_args: list[str], interval: float, by_test: int = 0) -> dict[str, Any]:
    """Run pytest with ``pytest_args`` under the sampler; its figures (with ``by_test``
    above 0, also the ``by_test`` tests that started the most Ray workers)."""
    if by_test <= 0:
        return _run(pytest_args, interval, {})
    with tempfile.TemporaryDirectory(prefix="suite-starts-") as folder:
        path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        result = _run(["-p", PLUGIN, *pytest_args], interval,
                      {STARTS_DIR_ENV: folder, "PYTHONPATH": path})
        rows = merge_starts(Path(folder))
    result["ray_starts_counted"] = {kind: sum(r[kind] for r in rows) for kind in COUNTED}
    result["by_test"] = rows[:by_test]
    return result


def _run(pytest_args: list[str], interval: float, extra_env: dict[str, str]
         ) -> dict[str, Any]:
    # As under make test: bytecode caches written, or every Ray worker compiles again.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra_env)
    before = psutil.Process().cpu_times()
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args], cwd=REPO,
                             env=env)
    root = psutil.Process(child.pid)
    tally = Tally()
    while child.poll() is None:
        tally.sample(root)
        time.sleep(interval)
    wall = time.monotonic() - started
    after = psutil.Process().cpu_times()
    waited = (after.children_user + after.children_system
              - before.children_user - before.children_system)
    total = sum(tally.cpu.values())
    # A kind only ever seen in a process before it ran its own program has nothing left.
    kinds = [{"kind": kind, "starts": tally.starts[kind], "cpu_s": round(cpu, 1),
              "share": round(cpu / total, 3) if total else 0.0}
             for kind, cpu in tally.cpu.most_common() if tally.starts[kind] > 0]
    return {"exit_code": child.returncode, "wall_s": round(wall, 1),
            "sampled_cpu_s": round(total, 1),
            "cores_busy": round(total / wall, 2) if wall else 0.0,
            "waited_children_cpu_s": round(waited, 1),
            "ray_clusters": tally.starts["Ray GCS"], "kinds": kinds}


def table(result: dict[str, Any]) -> str:
    """The figures as a Markdown table and a summary line."""
    lines = ["| kind | starts | CPU s | share |", "|---|---:|---:|---:|"]
    lines += [f"| {k['kind']} | {k['starts']} | {k['cpu_s']} | {k['share']:.1%} |"
              for k in result["kinds"]]
    lines.append(f"\nwall {result['wall_s']} s, sampled CPU {result['sampled_cpu_s']} s "
                 f"({result['cores_busy']} cores busy), rusage of waited children "
                 f"{result['waited_children_cpu_s']} s, {result['ray_clusters']} Ray "
                 f"clusters started, pytest exit {result['exit_code']}")
    if "by_test" in result:
        counted = result["ray_starts_counted"]
        lines += [f"\nRay processes started, by test ({counted['Ray worker']} workers and "
                  f"{counted['Ray raylet']} raylets seen in all; those of a test's child "
                  "processes included):\n",
                  "| test | Ray workers | raylets |", "|---|---:|---:|"]
        lines += [f"| {r['test']} | {r['Ray worker']} | {r['Ray raylet']} |"
                  for r in result["by_test"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.25,
                        help="seconds between samples of the process tree")
    parser.add_argument("--json", type=Path, help="also write the figures here (new file)")
    parser.add_argument("--by-test", type=int, default=0, metavar="N",
                        help="also name the N tests that started the most Ray workers")
    parser.add_argument("pytest_args", nargs="*", default=["-q", "-n", "3"],
                        help="pytest's arguments (after --)")
    args = parser.parse_args(argv)
    if args.json is not None and args.json.exists():
        parser.error(f"{args.json} exists; name a new file")
    if args.by_test < 0:
        parser.error(f"--by-test {args.by_test}: a number of tests, 0 or more")
    result = run(args.pytest_args, args.interval, args.by_test)
    print(table(result))
    if args.json is not None:
        with args.json.open("x", encoding="utf-8") as out:
            json.dump(result, out, indent=1)
    return result


if __name__ == "__main__":
    sys.exit(main()["exit_code"])
