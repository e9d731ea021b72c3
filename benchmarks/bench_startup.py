"""Start-up of the command line (issue 24, item 8): the wall time of ``surfacelog --help``,
``surfacelog fold SMALL`` and ``surfacelog fold --json SMALL`` run as a user runs them
(the console script, a fresh process each time), beside the bare interpreter
(``python -c pass``, the floor) measured in the same run, interleaved so that the
machine's noise falls on all of them alike.

    python benchmarks/bench_startup.py [--runs N] [--file LOG]

Prints, per command, the median and the range of its wall times, and the median's
ratio to the floor's. The figures are recorded in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SMALL_LOG = (b'{"type":"session","version":0,"id":"small","createdAt":1}\n'
             b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}\n'
             b'{"type":"user/message","seq":1,"time":1,"data":{"id":"u","role":"user",'
             b'"source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]},'
             b'"surfaceOp":"append"}\n'
             b'{"type":"turn/end","seq":2,"time":1,"data":{"turn":1,'
             b'"reason":{"kind":"completed"}}}\n')


def _timed(argv: list[str]) -> float:
    """Wall seconds of one run of ``argv``; raises when it fails."""
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each command")
    parser.add_argument("--file", type=Path, help="the log to fold (default: 3 events)")
    args = parser.parse_args()
    script = shutil.which("surfacelog", path=str(Path(sys.executable).parent))
    if script is None:
        sys.exit("no surfacelog console script beside this interpreter: make install")
    with tempfile.TemporaryDirectory() as scratch:
        log = args.file
        if log is None:
            log = Path(scratch) / "small.jsonl"
            log.write_bytes(SMALL_LOG)
        commands = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "surfacelog --help": [script, "--help"],
            "surfacelog fold FILE": [script, "fold", str(log)],
            "surfacelog fold --json FILE": [script, "fold", "--json", str(log)],
        }
        for argv in commands.values():  # warm the page cache and the .pyc files
            _timed(argv)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                times[name].append(_timed(argv))
    floor = statistics.median(times["python -c pass (floor)"])
    print(f"{'command':<30} {'median s':>9} {'range s':>13} {'x floor':>8}")
    for name, runs in times.items():
        median = statistics.median(runs)
        print(f"{name:<30} {median:>9.3f} {min(runs):>6.3f}-{max(runs):<6.3f} "
              f"{median / floor:>8.2f}")


if __name__ == "__main__":
    main()
