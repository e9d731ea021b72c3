"""Pytest plugin for Google ADK's own session-service tests (``make test-sdk``).

Loaded with ``-p sdk_adk`` while pytest runs ADK's ``tests/unittests/sessions/`` files,
unchanged, from the cache (``.sdk-tests/google-adk-<version>/``: ADK's sdist ships no
tests, so they are there only when put there by hand). ``SURFACELOG_SDK_BACKEND`` says
which service those tests get:

- ``sdk``: ADK's own services (the control: nothing is swapped);
- ``embedded``: ``SurfacelogSessionService`` over a surfacelog SQLite file;
- ``ray``: ``SurfacelogSessionService(client=...)`` over a one-shard deployment on a
  local Ray, shut down at the end of the test.

In the test modules, ``get_session_service`` (ADK's helper that builds the service of a
``service_type``) and the service classes ``InMemorySessionService``,
``SqliteSessionService`` and ``DatabaseSessionService`` are replaced by factories of
ours; the same database argument (a path, a URL) gives the same surfacelog store. The
tests in ``EXEMPT`` test one of ADK's services' internals and are skipped for ours.
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

EXEMPT: dict[str, str] = {}
"""Upstream test name (without parameters) -> why it does not apply to a replacement."""

SWAPPED = ("InMemorySessionService", "SqliteSessionService", "DatabaseSessionService")


def pytest_report_header() -> str:
    return f"surfacelog sdk suite: ADK's session services are {BACKEND!r}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_exempt(items, EXEMPT, BACKEND)


class _Services:
    """The services one test builds, by the database argument it names."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: dict[str, Path] = {}
        self.clients: dict[str, Any] = {}

    def service(self, *args: Any, **kwargs: Any) -> Any:
        from surfacelog.integrations.adk import SurfacelogSessionService

        given = [a for a in (*args, *kwargs.values()) if isinstance(a, (str, Path))]
        key = str(given[0]) if given and ":memory:" not in str(given[0]) else None
        if key is None:
            key = f"fresh-{len(self.paths)}"
        path = self.paths.setdefault(key, self.root / f"adk-{len(self.paths)}.db")
        if BACKEND == "embedded":
            return SurfacelogSessionService(path=path)
        if key not in self.clients:
            from surfacelog.actors.client import connect

            self.clients[key] = connect(db=str(path), placement="packed", packs=1)
        return SurfacelogSessionService(client=self.clients[key])

    def shutdown(self) -> None:
        for client in self.clients.values():
            client.shutdown()
        self.clients.clear()


@pytest.fixture(scope="session")
def _sdk_ray() -> Iterator[None]:
    if BACKEND != "ray":
        yield
        return
    import ray
    from sdk_ray import start_ray

    start_ray()
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(autouse=True)
def _swap_session_service(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                          _sdk_ray: None) -> Iterator[None]:
    module = getattr(request, "module", None)
    if BACKEND == "sdk" or module is None:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="sdk-adk-") as root:
        services = _Services(Path(root))
        if hasattr(module, "get_session_service"):
            monkeypatch.setattr(module, "get_session_service", services.service)
        for name in SWAPPED:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, services.service)
        try:
            yield
        finally:
            services.shutdown()
