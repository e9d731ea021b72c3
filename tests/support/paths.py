"""Where things are, for tests in any folder: the repository, its benchmarks, the
support scripts, and the shared data beside the checkout (``../shared``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Final

SUPPORT: Final = Path(__file__).resolve().parent
TESTS: Final = SUPPORT.parent
REPO: Final = TESTS.parent
BENCHMARKS: Final = REPO / "benchmarks"
SHARED: Final = REPO.parent / "shared"


def ray_temp_root() -> Path:
    """The folder Ray keeps its sessions in on Linux (``ray`` below ``RAY_TMPDIR``, else
    ``TMPDIR``, else /tmp), whatever this process's temp dir is."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray"


def temp_files_under(base: Path) -> None:
    """From now on this process and every child it starts (Ray's workers and agents,
    browsers, CLI runs, scenario scripts) make their temp files under ``base``, which
    pytest removes in its turn, not in the machine's temp dir, where a child killed or
    ended without its cleanup leaves them for good. Ray keeps its own folder (its socket
    paths must stay short): ``RAY_TMPDIR`` is pinned to where it was."""
    os.environ["RAY_TMPDIR"] = str(ray_temp_root().parent)
    os.environ["TMPDIR"] = str(base)
    tempfile.tempdir = None  # gettempdir() caches its first answer
