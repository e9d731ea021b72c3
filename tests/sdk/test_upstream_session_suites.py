"""The agent SDKs' own session tests, unchanged, against our adapters (embedded and over
Ray) beside the SDKs' own classes: ``tests/sdk/run_suites.py`` (what ``make test-sdk``
runs alone), run here as one test so that ``make test`` overlaps it with the rest."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from support import paths

HERE = Path(__file__).resolve().parent


def _counts(output: str, backend: str) -> tuple[int, int]:
    line = next(x for x in output.splitlines() if f"[{backend}]:" in x)
    passed = re.search(r"(\d+) passed", line)
    skipped = re.search(r"(\d+) skipped", line)
    assert passed is not None and "failed" not in line and "error" not in line, line
    return int(passed.group(1)), int(skipped.group(1)) if skipped else 0


@pytest.mark.usefixtures("ray_local")
def test_the_openai_agents_sdk_session_tests_pass_against_the_adapter() -> None:
    # The ray runs join this worker's Ray: one Ray fewer started and stopped.
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, str(HERE / "run_suites.py"), "--cache",
                           str(paths.REPO / ".sdk-tests"), "--ray-address", address],
                          capture_output=True, text=True, timeout=1200, cwd=paths.REPO)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    control, none_exempt = _counts(done.stdout, "sdk")
    assert control > 0 and none_exempt == 0
    for backend in ("embedded", "ray"):
        passed, exempt = _counts(done.stdout, backend)
        # Every upstream test ran against the adapter: passed, or exempt with a reason
        # (tests/sdk/sdk_openai_agents.py EXEMPT: they read SQLiteSession's internals).
        assert passed + exempt == control and exempt <= 20, (backend, passed, exempt)
