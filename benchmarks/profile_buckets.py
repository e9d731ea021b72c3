"""Where one process's Python time goes, from a py-spy profile: its samples by part.

    py-spy record --pid PID --gil --rate 250 --duration 8 --format raw --output owner.raw
    python benchmarks/profile_buckets.py owner.raw [more.raw ...]

py-spy (PyPI, not a dependency of the project) samples a running process from outside;
``--gil`` keeps the samples of the thread that holds the GIL, so the shares below are
of the process's Python time, its native threads' own work (Ray's core worker, SQLite
in C) not included. Each sample's stack goes to the first part whose rule matches (the
order of ``PARTS`` decides), the leaf frame deciding for the parts named by where the
time is spent. benchmarks/README.md ("Hosting cost") records what it gave for the owner
actor and a driver of ``surfacelog run``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Final

Rule = Callable[[str, str], bool]
"""``(stack, leaf)`` -> whether a sample belongs to a part (``stack``: its frames
joined by ``;``, root first)."""

PARTS: Final[tuple[tuple[str, Rule], ...]] = (
    # in_transaction on top: running BEGIN, COMMIT or ROLLBACK (its work is deeper).
    ("SQLite connection thread: BEGIN, COMMIT",
     lambda stack, leaf: "aiosqlite/core.py" in stack and leaf.startswith("in_transaction ")),
    ("SQLite connection thread: the rest", lambda stack, leaf: "aiosqlite/core.py" in stack),
    ("Ray metrics (recording)",
     lambda stack, leaf: "ray/util/metrics.py" in stack or "actors/metrics.py" in stack),
    ("Ray (de)serialization",
     lambda stack, leaf: "serialization.py" in stack or "cloudpickle" in stack),
    ("native code holding the GIL (Ray's Cython, no Python frame on top)",
     lambda stack, leaf: leaf == "" or leaf.startswith("Thread.run ")),
    ("Ray's tracing wrapper", lambda stack, leaf: "tracing_helper" in leaf),
    ("asyncio, threads, futures",
     lambda stack, leaf: any(m in leaf for m in ("asyncio/", "threading.py",
                                                  "concurrent/futures", "contextlib.py",
                                                  "_weakrefset.py"))),
    ("Ray's worker (Python)", lambda stack, leaf: "ray/" in leaf),
    ("wire encode/decode, coalescing",
     lambda stack, leaf: "actors/protocol.py" in leaf or "actors/coalesce.py" in leaf),
    ("msgspec, msgpack", lambda stack, leaf: "msgspec" in leaf or "msgpack" in leaf),
    ("store (event loop side)", lambda stack, leaf: "surfacelog/store/" in leaf),
    ("session core (schema, fold, surface)",
     lambda stack, leaf: "surfacelog/session/" in leaf or "surfacelog/schema/" in leaf),
    ("live session (runtime)", lambda stack, leaf: "surfacelog/runtime/" in leaf),
    ("actors (session actor, driver, client, script)",
     lambda stack, leaf: "surfacelog/actors/" in leaf),
)
OTHER: Final = "other"


def samples(lines: Iterable[str]) -> Iterable[tuple[str, int]]:
    """``(stack, count)`` of each line of py-spy's raw output (``frame;frame;... N``).
    Raises ``ValueError`` for a line that is not one."""
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            raise ValueError(f"line {number}: not py-spy raw output (stack then a count)")
        yield stack, int(count)


def part_of(stack: str) -> str:
    """The part (``PARTS``) a sample's stack belongs to, or ``OTHER``."""
    leaf = stack.rsplit(";", 1)[-1]
    for name, rule in PARTS:
        if rule(stack, leaf):
            return name
    return OTHER


def shares(lines: Iterable[str]) -> tuple[int, list[tuple[str, int]]]:
    """The samples in all, and each part's, the largest first."""
    counts: Counter[str] = Counter()
    for stack, count in samples(lines):
        counts[part_of(stack)] += count
    return sum(counts.values()), counts.most_common()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", nargs="+", help="py-spy record --format raw output files")
    args = parser.parse_args(argv)
    for path in args.raw:
        with open(path, encoding="utf-8") as f:
            try:
                total, parts = shares(f)
            except ValueError as exc:
                print(f"{path}: {exc}", file=sys.stderr)
                return 2
        print(f"{path}: {total} samples")
        for name, count in parts:
            print(f"  {100 * count / max(total, 1):5.1f}%  {count:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
