"""A pytest plugin for ``suite_cpu.py --by-test``: which tests start Ray's processes.

Loaded in each process that runs tests (``-p ray_starts_by_test``, ``benchmarks/`` on
``PYTHONPATH``; under xdist each worker loads it too). A thread of that process lists
its descendants every ``INTERVAL_S`` and charges each Ray worker and raylet it sees for
the first time to the test running then (a process first seen before it ran its own
program keeps that test when its kind becomes known). A process that starts and ends
between two lists is not seen, so the counts are a lower bound. What a session-scoped
fixture starts (the suite's local Ray and its first workers) goes to the first test
that asked for it.

At the end each process writes its counts to ``$SUITE_STARTS_DIR/starts-<pid>.json``
(``suite_cpu.merge_starts`` sums them):
``[[nodeid, kind, count], ...]``. Only a process that ran tests writes one (xdist's
controlling process runs none, and its descendants are every worker's).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_cpu import COUNTED, STARTS_DIR_ENV, kind_now

INTERVAL_S = 0.25
"""Between two lists of a process's descendants. Each list reads every process of the
machine (psutil finds children by their parent): in a run of the suite with lists every
0.1 s, suite_cpu's pytest row was 249 s against 156 s in a run without the plugin the
same morning, while its Ray workers' row was 21% higher (one run each). A Ray worker
takes longer than this to start, and each test's phases are looked at besides."""
BETWEEN = "(between tests)"
"""Where a process seen while no test runs (a module fixture's teardown) is charged."""

class StartCounter:
    """Counts, by test and kind, the Ray processes first seen under ``root``."""

    def __init__(self, root: psutil.Process) -> None:
        self.root = root
        self.test = BETWEEN
        self.counts: Counter[tuple[str, str]] = Counter()
        self._known: dict[tuple[int, float], tuple[str, str]] = {}
        """Each process seen: the test it was first seen in, and its kind now."""
        self._stop = threading.Event()
        # The thread's lists and the hooks' (at each test's start and end) never overlap:
        # a process seen by both at once would be counted twice.
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def look(self) -> None:
        """One list of ``root``'s descendants: each process not seen before whose kind
        is counted is charged to the current test."""
        with self._lock:
            try:
                children = self.root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            self._charge(children)

    def _charge(self, children: list[psutil.Process]) -> None:
        for proc in children:
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    name, cmdline = proc.name(), proc.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self.observe(key, name, cmdline)

    def observe(self, key: tuple[int, float], name: str, cmdline: list[str]) -> None:
        """Process ``key`` (pid, start time) seen as ``name`` and ``cmdline``: counted,
        if its kind is, against the test it was first seen in. When its kind changed
        (see ``suite_cpu.kind_now``), its count moves with it."""
        test, was = self._known.get(key, (self.test, None))
        kind = kind_now(name, cmdline, was)
        if was == kind:
            return
        if was in COUNTED:
            self.counts[(test, was)] -= 1
        if kind in COUNTED:
            self.counts[(test, kind)] += 1
        self._known[key] = (test, kind)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="ray-starts-by-test")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self.look()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.look()

    def rows(self) -> list[list[Any]]:
        return [[test, kind, n] for (test, kind), n in sorted(self.counts.items()) if n]


_counter: StartCounter | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    global _counter
    if _counter is None:  # the first test of this process: it runs tests
        _counter = StartCounter(psutil.Process())
        _counter.start()
    _counter.look()  # what started before this test is charged to what ran then
    _counter.test = item.nodeid
    yield
    _counter.test = BETWEEN


def _look_after() -> Generator[None, None, None]:
    yield
    if _counter is not None:
        _counter.look()


# A look after each phase of a test: what its call started is seen before its teardown
# (a module fixture's, when it is the module's last test here) ends it.
pytest_runtest_setup = pytest.hookimpl(hookwrapper=True)(_look_after)
pytest_runtest_call = pytest.hookimpl(hookwrapper=True)(_look_after)
pytest_runtest_teardown = pytest.hookimpl(hookwrapper=True)(_look_after)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _counter is None:
        return
    _counter.stop()
    folder = os.environ.get(STARTS_DIR_ENV)
    if folder:
        path = Path(folder) / f"starts-{os.getpid()}.json"
        path.write_text(json.dumps(_counter.rows()), encoding="utf-8")

