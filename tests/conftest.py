"""Shared fixtures: one local Ray per test process; how ``make test`` spreads the suite
over three workers (pytest-xdist), and which tests share one."""

from __future__ import annotations

import ast
import gc
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

SERIAL_GROUPS: dict[str, tuple[str, ...]] = {
    # Each kills nodes, raylets or disks of a cluster of several raylets
    # (ray.cluster_utils.Cluster, run --local-nodes, ray start) and waits for the
    # recovery within a deadline: two at once on this 2-core machine would stretch every
    # outage and recovery, so they run one after another on one worker while the other
    # workers take the rest of the suite. The multi-node tests that kill nothing
    # (test_run_shard_map.py, bench_cluster's smoke test) run wherever they fall.
    "multinode": (
        "tests/cluster/test_node_removed_and_added.py",
        "tests/cluster/test_colocation.py",
        "tests/cluster/test_disk_loss_restore.py",
        "tests/cluster/test_load_run_multinode.py",
        "tests/cluster/test_operator_path.py",
    ),
    # Each imports the OpenAI Agents SDK where a test uses it (about 1.4 s, more than
    # any other import of the suite): on one worker, it is imported once, not by each.
    "openai-agents": (
        "tests/integrations/test_openai_agents_session.py",
        "tests/benchmarks/test_bench_adapters.py",
        "tests/benchmarks/test_bench_sessions.py",
    ),
}
"""Modules whose tests run on one worker, one after another, by group name. Named by
path here, not by ``xdist_group`` marks: xdist's ``loadgroup`` finds those marks by
rewriting a test's node id on the worker, which pytest 9.2 no longer reads, and the
scheduler (in the controlling process) sees node ids only."""

# Ray's log monitor (one beside every local Ray and cluster head the suite starts, each
# inheriting this environment) looks for new log files in its session's folder ten times
# a second, and the folder of a worker's Ray gains hundreds of files over the suite. Once
# every 5 s is enough for tests that never forward a worker's output (log_to_driver is
# off throughout): over 20 s idle beside 20 actors it used 0.10 s of CPU against 0.26 s
# (one run each, 5 December 2026); the suite's log monitors used 18.3 s in all.
os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
os.environ.setdefault("LOG_NAME_UPDATE_INTERVAL_S", "5")
# Each node's dashboard agent reads every process of its node (psutil) every 5 s for the
# dashboard's node view, which no test reads: once a minute, an idle local Ray's agent
# used 3.0-3.3 ms of CPU per second against 5.3 (20-30 s each, 5 December 2026), on
# every node the suite starts (46 in a run).
os.environ.setdefault("REPORTER_UPDATE_INTERVAL_MS", "60000")
# Ray 2.60 records its processes' metrics through OpenTelemetry by default, and one
# clean-clone run (6 December 2026) lost a `surfacelog run` driver to a SIGSEGV in that
# recorder's export thread (TemporalMetricStorage::buildMetrics), 0.2 s after the actor
# started. Every Ray the suite starts takes Ray's other recorder (OpenCensus) instead;
# the actors record their metrics through `ray.util.metrics` either way, and
# tests/actors/test_prometheus_metrics.py still scrapes them from the export port.
# Ray reads the switch when it is imported, in the test process as in its workers:
# it is set here, before any test module imports ray (checked 6 December 2026: off in
# both the driver and a task).
os.environ.setdefault("RAY_enable_open_telemetry", "0")

_GROUP_OF = {module: group for group, modules in SERIAL_GROUPS.items() for module in modules}


def serial_group(nodeid: str) -> str | None:
    """The group of the test ``nodeid`` (``tests/x/test_y.py::test_z[...]``), if any."""
    return _GROUP_OF.get(nodeid.split("::", 1)[0])


def _is_shared_fixture(decorator: ast.expr) -> bool:
    return (isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.fixture"
            and any(k.arg == "scope" and isinstance(k.value, ast.Constant)
                    and k.value.value in ("module", "class") for k in decorator.keywords))


def modules_with_shared_fixtures(root: Path) -> set[str]:
    """The test modules under ``root`` (paths relative to ``root``'s parent, as in a node
    id) that define a module- or class-scoped fixture
    (``@pytest.fixture(scope="module")``, ``scope="class"``)."""
    found = set()
    for path in sorted(root.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(_is_shared_fixture(d) for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               for d in node.decorator_list):
            found.add(path.relative_to(root.parent).as_posix())
    return found


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n N``: each test its own unit of work (as ``--dist load``), but for the
    tests of one of ``SERIAL_GROUPS``, which go to one worker together, and the tests
    of a module with a module- or class-scoped fixture, which go to one worker together
    too: such a fixture is set up once per worker that runs one of its tests, and the
    gateway's (its uvicorn replicas and deployment) was set up on all three workers.
    Units are handed out largest first (xdist orders them by their number of tests),
    so a group does not end the run alone."""
    from xdist.scheduler import LoadScopeScheduling

    shared = modules_with_shared_fixtures(config.rootpath / "tests")

    class SerialGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return serial_group(nodeid) or (module if module in shared else nodeid)

    return SerialGroups(config, log)


TIMEOUT_S = 300
"""A test of the default run fails after this long (pytest-timeout, with every thread's
stack): the slowest takes under a minute on this 2-core machine, and none may take the
whole run's budget. A hang then ends as a failure, never as a CI run that never ends."""
SLOW_TIMEOUT_S = 1800
"""The same for a test marked slow (the soaks run for minutes)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's deadline (``TIMEOUT_S``, ``SLOW_TIMEOUT_S``) unless it names its own
    (``@pytest.mark.timeout``) or the command line does (``--timeout``)."""
    if config.getoption("timeout", None) is not None:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            slow = item.get_closest_marker("slow") is not None
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S if slow else TIMEOUT_S))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the tests are collected, what the process holds (its modules, Ray's, the
    collected items: about a million objects) is left out of the collector's full
    passes, which otherwise walk all of it again and again through the run. Over
    tests/store, tests/integrations and tests/session in one process: 2.0 s in full
    passes instead of 3.2, and 31.5-31.7 s of the process's CPU against 32.9-33.2
    (two runs each, 5 December 2026)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def temp_files_in_basetemp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test process's temp dir, and its children's, is its pytest basetemp (see
    ``support.paths.temp_files_under``): a browser's singleton socket or a Ray
    dashboard's ``pymp-*`` folder used to stay in /tmp after every run."""
    from support.paths import temp_files_under

    temp_files_under(tmp_path_factory.getbasetemp())


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Any]:
    """A new SQLite event store in the test's temp dir (``store.db``), closed after."""
    from surfacelog.store.sqlite import SqliteEventStore

    store = await SqliteEventStore.open(str(tmp_path / "store.db"))
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """``ray.init(num_cpus=2)`` once per test process (each xdist worker has its own),
    shut down at the end."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    from surfacelog.actors.client import init_ray

    # A new local Ray on loopback, never a cluster another process left running. Its
    # workers report their metrics at Ray's default interval (10 s): at 1 s an idle
    # local Ray used 1.56 s of CPU per 30 s against 1.01 s (measured one after the
    # other), every process reporting ten times as often all through the suite, while
    # only the metrics test waits for a report.
    init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
