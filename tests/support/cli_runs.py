"""``surfacelog`` run as a child process, for tests whose run starts its own Ray (the
test process may already hold the suite's local Ray, and a process joins one cluster)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.paths import REPO


def cli(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "surfacelog.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def run_report(db: Path, *args: str, timeout_s: float = 300) -> dict[str, Any]:
    """The JSON report of a ``run --json`` on ``db``; asserts it exited 0 with exactly
    one JSON object on stdout and no traceback."""
    proc = cli("run", "--db", str(db), "--json", *args, timeout_s=timeout_s)
    context = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\n" \
              f"stderr:\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, context
    assert "Traceback" not in proc.stderr, context
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, context
    report: dict[str, Any] = json.loads(lines[0])
    return report
