"""Pytest plugin for the OpenAI Agents SDK's own session tests (``make test-sdk``).

Loaded with ``-p sdk_openai_agents`` while pytest runs the upstream files, unchanged,
from the release's sdist (``.sdk-tests/openai-agents-<version>/``). The environment
variable ``SURFACELOG_SDK_BACKEND`` says which class those tests get for
``SQLiteSession``:

- ``sdk``: the SDK's own ``SQLiteSession`` (the control: nothing is swapped);
- ``embedded``: ``SurfacelogSession`` over an embedded surfacelog SQLite store (the
  test's ``db_path``, or a file of its own in a temporary folder for ``:memory:``);
- ``ray``: ``SurfacelogSession`` over the ``SessionHandle`` of a ``Client`` on a local
  Ray (one deployment per database path the test names, a fresh one per ``:memory:``
  session), shut down at the end of the test.

The tests in ``EXEMPT`` test ``SQLiteSession``'s internals, not the ``Session``
protocol; they are skipped (reported as skipped, with the reason) for our class.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exempt import mark_exempt

BACKEND = os.environ.get("SURFACELOG_SDK_BACKEND", "sdk")
if BACKEND not in ("sdk", "embedded", "ray"):
    raise pytest.UsageError(f"SURFACELOG_SDK_BACKEND={BACKEND!r}: sdk, embedded or ray")

_PRIVATE = "reads SQLiteSession's private connection bookkeeping"
_CORRUPT = ("writes corrupt rows through SQLiteSession's private _locked_connection() "
            "(no such rows in an append-only log whose events are validated)")
_SCHEMA = ("reads or drops SQLiteSession's own tables (agent_sessions, agent_messages) "
           "in the database file")
_LOCK = "reads SQLiteSession's private per-file lock registry (_lock, _file_lock_counts)"
EXEMPT: dict[str, str] = {
    "test_sqlite_session_file_lock_is_shared_across_instances": _LOCK,
    "test_sqlite_session_failed_add_items_releases_write_lock": _SCHEMA,
    "test_sqlite_session_failed_clear_session_rolls_back": _SCHEMA,
    "test_sqlite_session_failed_pop_item_releases_write_lock": _SCHEMA,
    "test_sqlite_session_rollback_failure_evicts_connection": _PRIVATE,
    "test_sqlite_session_close_retries_quarantined_connection": _PRIVATE,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": _PRIVATE,
    "test_sqlite_session_close_closes_worker_thread_connections": _PRIVATE,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _PRIVATE,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _PRIVATE,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _PRIVATE,
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
}
"""Upstream test name (without parameters) -> why it does not apply to a replacement."""


def pytest_report_header() -> str:
    return f"surfacelog sdk suite: SQLiteSession is {BACKEND!r}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_exempt(items, EXEMPT, BACKEND)


class _Deployments:
    """One Ray deployment (``Client``) for the whole run; each test's sessions get ids of
    their own in it (the test's number, the database the test named, the session id),
    so tests stay apart as they do with a fresh SQLite file each, without paying for a
    deployment per test."""

    def __init__(self, root: Path) -> None:
        from surfacelog.actors.client import connect

        self.client = connect(db=str(root / "ray.db"), placement="packed", packs=1)
        self.test = 0
        self._databases: dict[str, int] = {}

    def next_test(self) -> None:
        self.test += 1
        self._databases.clear()

    def session(self, db_path: str, session_id: str) -> Any:
        """The handle of ``session_id`` in the database ``db_path`` of this test (each
        ``:memory:`` session is a database of its own, as in SQLite)."""
        key = db_path if db_path != ":memory:" else f":memory:{len(self._databases)}"
        database = self._databases.setdefault(key, len(self._databases))
        return self.client.session(f"t{self.test}-d{database}-{session_id}")

    def shutdown(self) -> None:
        self.client.shutdown()


def _swap_class(root: Path, deployments: _Deployments | None) -> type:
    from agents.memory.session_settings import SessionSettings

    from surfacelog.integrations.openai_agents import SurfacelogSession

    class Swapped(SurfacelogSession):
        """``SurfacelogSession`` with ``SQLiteSession``'s constructor."""

        def __init__(self, session_id: str, db_path: str | Path = ":memory:",
                     sessions_table: str = "agent_sessions",
                     messages_table: str = "agent_messages",
                     session_settings: SessionSettings | dict[str, Any] | None = None
                     ) -> None:
            path = str(db_path)
            if deployments is not None:
                handle = deployments.session(path, session_id)
                super().__init__(handle.session_id, handle=handle,
                                 session_settings=session_settings)
                self.session_id = session_id  # the id the test gave, as SQLiteSession's
                return
            if path == ":memory:":
                path = tempfile.mkstemp(suffix=".db", dir=root)[1]
                os.unlink(path)
            super().__init__(session_id, path, session_settings=session_settings)

    # It stands in for SQLiteSession under that name: errors that name the class (``f"{type(
    # self).__name__} is closed"``) name it as the SDK's tests expect.
    Swapped.__name__ = Swapped.__qualname__ = "SQLiteSession"
    return Swapped


@pytest.fixture(scope="session")
def _sdk_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Deployments | None]:
    """With ``ray``: a local Ray and the run's one deployment on it."""
    if BACKEND != "ray":
        yield None
        return
    import ray
    from sdk_ray import start_ray

    start_ray()
    deployments = _Deployments(tmp_path_factory.mktemp("sdk-ray"))
    try:
        yield deployments
    finally:
        deployments.shutdown()
        ray.shutdown()


@pytest.fixture(autouse=True)
def _swap_sqlite_session(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                         _sdk_ray: _Deployments | None) -> Iterator[None]:
    module = getattr(request, "module", None)
    if BACKEND == "sdk" or module is None or not hasattr(module, "SQLiteSession"):
        yield
        return
    if _sdk_ray is not None:
        _sdk_ray.next_test()
    with tempfile.TemporaryDirectory(prefix="sdk-session-") as root:
        monkeypatch.setattr(module, "SQLiteSession", _swap_class(Path(root), _sdk_ray))
        yield
