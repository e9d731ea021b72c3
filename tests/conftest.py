"""Shared fixtures: one local Ray for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """``ray.init(num_cpus=2)`` once per test session, shut down at the end."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    from surfacelog.actors.client import init_ray

    # A new local Ray on loopback, never a cluster another process left running.
    init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()
