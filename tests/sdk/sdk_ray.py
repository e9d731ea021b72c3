"""The Ray of an SDK suite's ``ray`` run: the cluster at ``SURFACELOG_SDK_RAY_ADDRESS``
when that is set (``run_suites.py --ray-address``: the suite's own test joins the Ray
its pytest worker already runs, instead of starting and stopping one more), else a new
local Ray of the run's own."""

from __future__ import annotations

import os

ADDRESS_ENV = "SURFACELOG_SDK_RAY_ADDRESS"


def start_ray() -> None:
    """Join ``SURFACELOG_SDK_RAY_ADDRESS``'s Ray, or start a local one (2 CPUs)."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from surfacelog.actors.client import init_ray

    address = os.environ.get(ADDRESS_ENV)
    if address:
        init_ray(address, log_to_driver=False, configure_logging=False)
    else:
        init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
